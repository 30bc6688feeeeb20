/** What every command handler gets: the IO, the API client, the output mode and its parsed options. */
import type { FleetApi } from './api';
import { UsageError, type CliIo, type ExitCode } from './io';

export type OptionValues = Record<string, string | boolean | Array<string | boolean> | undefined>;

export interface Ctx {
  io: CliIo;
  api: FleetApi;
  json: boolean;
  args: string[];
  values: OptionValues;
  usage: string;
  /** Prints the data as JSON with --json, else the human text. */
  print(human: string, data: unknown): void;
}

export type Handler = (ctx: Ctx) => Promise<ExitCode>;

export const str = (ctx: Ctx, name: string): string | undefined => {
  const v = ctx.values[name];
  return typeof v === 'string' ? v : undefined;
};

export const strs = (ctx: Ctx, name: string): string[] | undefined => {
  const v = ctx.values[name];
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : undefined;
};

export const flag = (ctx: Ctx, name: string): boolean => ctx.values[name] === true;

/** An integer option; anything else is a usage error naming the option. */
export function int(ctx: Ctx, name: string): number | undefined {
  const v = str(ctx, name);
  if (v === undefined) return undefined;
  if (!/^-?\d+$/.test(v.trim())) throw new UsageError(`--${name} must be an integer, got "${v}"`, ctx.usage);
  return Number(v);
}

export function arg(ctx: Ctx, index: number, what: string): string {
  const v = ctx.args[index];
  if (v === undefined) throw new UsageError(`missing ${what}`, ctx.usage);
  return v;
}
