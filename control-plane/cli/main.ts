/** The `fleet` executable: runs the CLI against the real process. */
import { run } from './run';

run(process.argv.slice(2), { fetch, stdout: process.stdout, stderr: process.stderr, env: process.env }).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err);
    process.exitCode = 5;
  },
);
