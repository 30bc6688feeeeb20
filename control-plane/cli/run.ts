/**
 * `fleet <command>`: the command line over the REST facade (FLEET_URL, FLEET_TOKEN).
 * `run(argv, io)` parses, dispatches and maps every error to an exit code; main.ts wires it to
 * the process, tests call it directly.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ApiError, FleetApi, exitCodeForStatus } from './api';
import { definitions } from './commands/definitions';
import { devices, drain, hosts } from './commands/fleet';
import { cancel, get, list, submit } from './commands/tasks';
import type { Ctx, Handler, OptionValues } from './context';
import { ExitCode, UsageError, type CliIo } from './io';

type Options = NonNullable<ParseArgsConfig['options']>;

interface Command {
  usage: string;
  options: Options;
  handler: Handler;
}

const s = { type: 'string' } as const;
const b = { type: 'boolean' } as const;

const COMMANDS: Record<string, Command> = {
  submit: {
    usage:
      'fleet submit (--goal G | --definition NAME) [--driver-type T] [--tag X]... [--host H] [--device D]\n' +
      '             [--priority N] [--pool P] [--task-id ID] [--max-attempts N]\n' +
      '             [--max-queue-wait-ms MS] [--wait]',
    options: {
      goal: s,
      definition: s,
      'driver-type': s,
      tag: { type: 'string', multiple: true },
      host: s,
      device: s,
      priority: s,
      pool: s,
      'task-id': s,
      'max-attempts': s,
      'max-queue-wait-ms': s,
      wait: b,
    },
    handler: submit,
  },
  get: { usage: 'fleet get TASK_ID [--wait]', options: { wait: b }, handler: get },
  list: {
    usage: 'fleet list [--status S] [--pool P] [--host H] [--device D] [--owner O] [--limit N]',
    options: { status: s, pool: s, host: s, device: s, owner: s, limit: s },
    handler: list,
  },
  cancel: { usage: 'fleet cancel TASK_ID', options: {}, handler: cancel },
  devices: {
    usage: 'fleet devices [--pool P] [--host H] [--driver-type T]',
    options: { pool: s, host: s, 'driver-type': s },
    handler: devices,
  },
  hosts: {
    usage:
      'fleet hosts [--pool P]\nfleet hosts remove HOST_ID   (an offline host; its devices leave the pools)\n' +
      'fleet hosts add HOST_ID [--pool P] [--out FILE] [--force] [--rotate]\n' +
      '  --force overwrites FILE; --rotate replaces the keys of an enrolled host (offline until it restarts with them)',
    options: { pool: s, out: s, force: b, rotate: b },
    handler: hosts,
  },
  drain: { usage: 'fleet drain HOST_ID [DEVICE_ID]', options: {}, handler: drain(true) },
  undrain: { usage: 'fleet undrain HOST_ID [DEVICE_ID]', options: {}, handler: drain(false) },
  definitions: {
    usage: 'fleet definitions [NAME]\nfleet definitions add FILE.json [--replace]',
    options: { replace: b },
    handler: definitions,
  },
};

const GLOBAL: Options = { json: b, url: s, help: { type: 'boolean', short: 'h' } };

export const USAGE =
  'usage:\n' +
  Object.values(COMMANDS)
    .map((c) => c.usage.replace(/^/gm, '  '))
    .join('\n') +
  '\n\nglobal options: --json (machine-readable output), --url URL (default $FLEET_URL or http://127.0.0.1:8080)\n' +
  'environment: FLEET_URL, FLEET_TOKEN (bearer token)\n' +
  'exit codes: 0 ok/done, 1 task failed, 2 usage, validation or a refused request (not found, conflict, e.g. the task already ended), 3 task cancelled, 4 auth, 5 server or network\n';

export async function run(argv: string[], io: CliIo): Promise<ExitCode> {
  const name = argv[0];
  const command = name === undefined ? undefined : COMMANDS[name];
  if (!command) {
    if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
      io.stdout.write(USAGE);
      return name === undefined ? ExitCode.usage : ExitCode.ok;
    }
    io.stderr.write(`fleet: unknown command "${name}"\n${USAGE}`);
    return ExitCode.usage;
  }
  let json = argv.includes('--json');
  try {
    let parsed: { values: OptionValues; positionals: string[] };
    try {
      parsed = parseArgs({
        args: argv,
        options: { ...GLOBAL, ...command.options },
        allowPositionals: true,
        strict: true,
      });
    } catch (err) {
      throw new UsageError((err as Error).message, command.usage);
    }
    if (parsed.values.help === true) {
      io.stdout.write(`usage:\n${command.usage.replace(/^/gm, '  ')}\n`);
      return ExitCode.ok;
    }
    json = parsed.values.json === true;
    const url = typeof parsed.values.url === 'string' ? parsed.values.url : undefined;
    const ctx: Ctx = {
      io,
      api: new FleetApi(io, url),
      json,
      args: parsed.positionals,
      values: parsed.values,
      usage: command.usage,
      print: (human, data) => io.stdout.write(json ? `${JSON.stringify(data, null, 2)}\n` : human),
    };
    return await command.handler(ctx);
  } catch (err) {
    return reportError(io, json, err);
  }
}

function reportError(io: CliIo, json: boolean, err: unknown): ExitCode {
  if (err instanceof UsageError) {
    io.stderr.write(
      json
        ? `${JSON.stringify({ error: 'usage', detail: err.message })}\n`
        : `fleet: ${err.message}\n${err.usage ? `usage:\n${err.usage.replace(/^/gm, '  ')}\n` : ''}`,
    );
    return ExitCode.usage;
  }
  if (err instanceof ApiError) {
    const p = err.problem;
    if (json) io.stderr.write(`${JSON.stringify({ status: err.status, ...p })}\n`);
    else {
      const errors = p.errors ?? [];
      // A validation problem's detail lists the field errors that follow: say them once.
      const repeats = errors.length > 0 && errors.every((e) => (p.detail ?? '').includes(e.message));
      const lines = [
        `fleet: ${p.title ?? 'request failed'} (HTTP ${err.status})${repeats ? '' : `: ${p.detail ?? ''}`}`,
      ];
      for (const e of errors) lines.push(`  ${e.in} ${e.path}: ${e.message}`);
      if (p.reason) lines.push(`  reason: ${p.reason}`);
      io.stderr.write(`${lines.join('\n')}\n`);
    }
    return exitCodeForStatus(err.status);
  }
  // NetworkError (server unreachable) and anything unexpected.
  const message = err instanceof Error ? err.message : String(err);
  io.stderr.write(json ? `${JSON.stringify({ error: 'server', detail: message })}\n` : `fleet: ${message}\n`);
  return ExitCode.server;
}
