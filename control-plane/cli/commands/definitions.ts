/** `fleet definitions [NAME]` and `fleet definitions add FILE.json [--replace]`. */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { DefinitionList, StoredDefinition } from '../../rest/definitions/schemas';
import { ApiError, seg } from '../api';
import { arg, flag, type Ctx } from '../context';
import { table } from '../format';
import { ExitCode, UsageError } from '../io';

const definitionText = (d: StoredDefinition): string =>
  `${d.name} (updated ${d.updatedAt} by ${d.updatedBy})\n` +
  table(
    ['STEP', 'COMMAND', 'TIMEOUT MS'],
    d.steps.map((s) => [s.name, JSON.stringify(s.command), s.timeoutMs]),
  );

export async function definitions(ctx: Ctx): Promise<ExitCode> {
  if (ctx.args[1] === 'add') return add(ctx);
  const name = ctx.args[1];
  if (name !== undefined) {
    const d = await ctx.api.get<StoredDefinition>(`/v1/workflow-definitions/${seg(name)}`);
    ctx.print(definitionText(d), d);
    return ExitCode.ok;
  }
  const list = await ctx.api.get<DefinitionList>('/v1/workflow-definitions');
  ctx.print(
    list.items.length === 0
      ? 'no workflow definitions\n'
      : table(
          ['NAME', 'STEPS', 'UPDATED', 'BY'],
          list.items.map((d) => [d.name, d.steps.length, d.updatedAt, d.updatedBy]),
        ),
    list,
  );
  return ExitCode.ok;
}

async function add(ctx: Ctx): Promise<ExitCode> {
  const file = resolve(ctx.io.cwd ?? process.cwd(), arg(ctx, 2, 'definition file'));
  let def: { name?: unknown; steps?: unknown };
  try {
    def = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new UsageError(`cannot read ${file}: ${(err as Error).message}`);
  }
  if (!def || typeof def !== 'object' || typeof def.name !== 'string') {
    throw new UsageError(`${file} must hold a JSON object { "name": ..., "steps": [...] }`);
  }
  const name = def.name;
  const d = flag(ctx, 'replace')
    ? await ctx.api.put<StoredDefinition>(`/v1/workflow-definitions/${seg(name)}`, { steps: def.steps })
    : await ctx.api.post<StoredDefinition>('/v1/workflow-definitions', def).catch((err: unknown) => {
        // The API's hint names its own PUT; on the command line that is --replace.
        if (err instanceof ApiError && err.status === 409)
          throw new ApiError(409, {
            ...err.problem,
            detail: `definition ${name} already exists; pass --replace to replace it`,
          });
        throw err;
      });
  ctx.print(`definition ${d.name} saved (${d.steps.length} steps)\n`, d);
  return ExitCode.ok;
}
