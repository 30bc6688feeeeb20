/**
 * Bearer API tokens with roles. Tokens are configured by their sha256 (hex) only; the plain token
 * is shown to its holder once and never stored. Roles: admin (everything), submitter (submits,
 * reads and cancels its own tasks, reads the fleet), viewer (reads everything, changes nothing).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import type { RequestHandler, Response } from 'express';
import { z } from 'zod';
import { HttpProblem } from './problem';

export const ROLES = ['admin', 'submitter', 'viewer'] as const;
export const RoleSchema = z.enum(ROLES);
export type Role = z.infer<typeof RoleSchema>;

export const ApiTokenSchema = z.strictObject({
  /** The principal: recorded as the owner of the tasks it submits. */
  name: z.string().trim().min(1).max(200),
  role: RoleSchema,
  tokenSha256: z
    .string()
    .regex(/^[0-9a-fA-F]{64}$/, 'a sha256 digest in hex (64 characters)')
    .transform((h) => h.toLowerCase()),
});
export type ApiToken = z.infer<typeof ApiTokenSchema>;

/** The tokens file: a list of entries, or `{ "tokens": [...] }`. */
export const ApiTokensSchema = z.array(ApiTokenSchema).superRefine((tokens, ctx) => {
  const seen = new Set<string>();
  tokens.forEach((t, i) => {
    if (seen.has(t.tokenSha256)) ctx.addIssue({ code: 'custom', path: [i, 'tokenSha256'], message: 'duplicate token' });
    seen.add(t.tokenSha256);
  });
});

export class TokensConfigError extends Error {
  override name = 'TokensConfigError';
}

export const sha256Hex = (token: string): string => createHash('sha256').update(token, 'utf8').digest('hex');

export function parseApiTokens(raw: unknown): ApiToken[] {
  const list = raw && typeof raw === 'object' && !Array.isArray(raw) && 'tokens' in raw ? raw.tokens : raw;
  const r = ApiTokensSchema.safeParse(list);
  if (!r.success) {
    const lines = r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
    throw new TokensConfigError(`invalid API tokens:\n  ${lines.join('\n  ')}`);
  }
  return r.data;
}

/** FLEET_API_TOKENS names the JSON file; without it the facade refuses to start (no anonymous API). */
export function loadApiTokens(path: string | undefined): ApiToken[] {
  if (!path) throw new TokensConfigError('FLEET_API_TOKENS is not set: it must name the API tokens JSON file');
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new TokensConfigError(`cannot read FLEET_API_TOKENS ${path}: ${(err as Error).message}`);
  }
  return parseApiTokens(raw);
}

export interface Principal {
  name: string;
  role: Role;
}

const PRINCIPAL = Symbol('principal');

/**
 * The tokens file, read again when it changed (checked at most once a second): a token added or
 * removed takes effect without a restart. A file that no longer parses keeps the tokens it had,
 * and `onError` says why.
 */
export function watchedApiTokens(path: string, onError: (err: Error) => void): () => readonly ApiToken[] {
  let tokens = loadApiTokens(path);
  let stamp = fileStamp(path);
  let checkedAt = Date.now();
  return () => {
    if (Date.now() - checkedAt < 1_000) return tokens;
    checkedAt = Date.now();
    const now = fileStamp(path);
    if (now === stamp) return tokens;
    stamp = now;
    try {
      tokens = loadApiTokens(path);
    } catch (err) {
      onError(err as Error);
    }
    return tokens;
  };
}

function fileStamp(path: string): string {
  try {
    const s = statSync(path);
    return `${s.mtimeMs}:${s.size}:${s.ino}`;
  } catch {
    return 'missing';
  }
}

export function authenticate(source: readonly ApiToken[] | (() => readonly ApiToken[])): RequestHandler {
  const digests = new WeakMap<readonly ApiToken[], Array<{ digest: Buffer; name: string; role: Role }>>();
  const entriesOf = (tokens: readonly ApiToken[]) => {
    let e = digests.get(tokens);
    if (!e) {
      e = tokens.map((t) => ({ digest: Buffer.from(t.tokenSha256, 'hex'), name: t.name, role: t.role }));
      digests.set(tokens, e);
    }
    return e;
  };
  return (req, res, next) => {
    const entries = entriesOf(typeof source === 'function' ? source() : source);
    const header = req.get('authorization');
    if (!header) throw new HttpProblem('unauthorized', 'missing bearer token (Authorization: Bearer <token>)');
    const m = /^Bearer[ ]+([^\s]+)[ ]*$/i.exec(header);
    if (!m) throw new HttpProblem('unauthorized', 'the Authorization header must be "Bearer <token>"');
    const digest = createHash('sha256').update(m[1], 'utf8').digest();
    // Compare against every entry in constant time, without stopping at the first match.
    let found: (typeof entries)[number] | undefined;
    for (const e of entries) if (timingSafeEqual(e.digest, digest) && !found) found = e;
    if (!found) throw new HttpProblem('unauthorized', 'unknown API token');
    (res.locals as Record<symbol, unknown>)[PRINCIPAL] = { name: found.name, role: found.role } satisfies Principal;
    next();
  };
}

export function principalOf(res: Response): Principal {
  const p = (res.locals as Record<symbol, unknown>)[PRINCIPAL] as Principal | undefined;
  if (!p) throw new HttpProblem('unauthorized', 'not authenticated');
  return p;
}

export function requireRole(...roles: Role[]): RequestHandler {
  return (_req, res, next) => {
    const p = principalOf(res);
    if (!roles.includes(p.role)) {
      throw new HttpProblem('forbidden', `role "${p.role}" may not do this (needs: ${roles.join(' or ')})`);
    }
    next();
  };
}

/** A submitter acts only on its own tasks; admin and viewer (read-only routes) see every task. */
export function assertMayAccessTask(p: Principal, owner: string | undefined, taskId: string): void {
  if (p.role === 'submitter' && owner !== p.name) {
    throw new HttpProblem('forbidden', `task ${taskId} belongs to another owner`);
  }
}
