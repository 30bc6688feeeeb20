/** Shared setup of the REST tests: tokens per role, an app over a per-test fleet, SSE parsing. */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Express } from 'express';
import request, { type Response } from 'supertest';
import type { FleetClient } from '../../control-plane/client';
import { createApp, type RestOptions } from '../../control-plane/rest/app';
import { sha256Hex, type ApiToken } from '../../control-plane/rest/auth';
import { JsonFileDefinitionsStore } from '../../control-plane/rest/definitions/store';
import { PROBLEM_BASE } from '../../control-plane/rest/problem';
import { startFleet, type Fleet, type FleetOptions } from '../helpers/fleet';

/** Plain tokens as their holders send them; the app only ever sees their sha256. */
export const TOKEN = {
  admin: 'tok-admin-7f3a9c',
  alice: 'tok-alice-12ab34',
  bob: 'tok-bob-56cd78',
  viewer: 'tok-viewer-9e0f1a',
} as const;
export type Who = keyof typeof TOKEN;

export const API_TOKENS: ApiToken[] = [
  { name: 'ops', role: 'admin', tokenSha256: sha256Hex(TOKEN.admin) },
  { name: 'alice', role: 'submitter', tokenSha256: sha256Hex(TOKEN.alice) },
  { name: 'bob', role: 'submitter', tokenSha256: sha256Hex(TOKEN.bob) },
  { name: 'val', role: 'viewer', tokenSha256: sha256Hex(TOKEN.viewer) },
];

export const auth = (who: Who): [string, string] => ['Authorization', `Bearer ${TOKEN[who]}`];

/** A request by method name (supertest's agent methods, without computed member access). */
export function call(app: Express, method: 'get' | 'post' | 'put' | 'delete', path: string): request.Test {
  const agent = request(app);
  if (method === 'delete') return agent.delete(path);
  return method === 'get' ? agent.get(path) : method === 'post' ? agent.post(path) : agent.put(path);
}

/** The same, with `who`'s bearer token. */
export const callAs = (app: Express, who: Who, method: 'get' | 'post' | 'put' | 'delete', path: string): request.Test =>
  call(app, method, path).set(...auth(who));

export interface RestFleet {
  f: Fleet;
  app: Express;
  definitions: JsonFileDefinitionsStore;
  /** Another app over the same fleet, e.g. with a wrapped FleetClient. */
  appWith(fleet: FleetClient, options?: RestOptions): Express;
  stop(): Promise<void>;
}

export const quietLog: RestOptions['log'] = () => undefined;

export async function startRestFleet(name: string, opts: FleetOptions = {}): Promise<RestFleet> {
  const f = await startFleet(name, opts);
  const definitions = new JsonFileDefinitionsStore(
    join(mkdtempSync(join(tmpdir(), 'fleet-defs-')), 'definitions.json'),
  );
  const appWith = (fleet: FleetClient, options: RestOptions = {}) =>
    createApp({
      fleet,
      client: f.client,
      config: f.config,
      tokens: API_TOKENS,
      definitions,
      options: { ssePollMs: 100, log: quietLog, ...options },
    });
  return { f, app: appWith(f.fleet), definitions, appWith, stop: () => f.stop() };
}

/** Asserts an RFC 9457 problem of the given type slug and status. */
export function assertProblem(res: Response, status: number, slug: string): void {
  assert.equal(res.status, status, `expected ${status} ${slug}, got ${res.status}: ${res.text}`);
  assert.match(String(res.headers['content-type']), /^application\/problem\+json/);
  assert.equal(res.body.type, `${PROBLEM_BASE}${slug}`);
  assert.equal(res.body.status, status);
  assert.equal(typeof res.body.title, 'string');
  assert.equal(typeof res.body.detail, 'string');
}

export interface SseEvent {
  id?: string;
  event: string;
  data: string;
}

export function parseSse(text: string): SseEvent[] {
  const out: SseEvent[] = [];
  for (const block of text.split(/\n\n/)) {
    const ev: Partial<SseEvent> & { data?: string } = {};
    for (const line of block.split('\n')) {
      const m = /^(id|event|data): ?(.*)$/.exec(line);
      if (!m) continue;
      if (m[1] === 'data') ev.data = ev.data === undefined ? m[2] : `${ev.data}\n${m[2]}`;
      else ev[m[1] as 'id' | 'event'] = m[2];
    }
    if (ev.data !== undefined) out.push({ id: ev.id, event: ev.event ?? 'message', data: ev.data });
  }
  return out;
}

/** superagent parser that keeps an event stream as text until the server ends it. */
export const textParser = (res: Response, cb: (err: Error | null, body: unknown) => void): void => {
  const stream = res as unknown as NodeJS.ReadableStream;
  let text = '';
  stream.setEncoding('utf8');
  stream.on('data', (c: string) => (text += c));
  stream.on('end', () => cb(null, text));
};

/** No lease id, credential, key or hash in a response body, by key or by value. */
export function assertNoSecrets(text: string, leaseIds: string[] = []): void {
  assert.doesNotMatch(text, /"(leaseId|tokenSha256|keys|hostKeys|sig|secret|credential)"/i);
  for (const id of leaseIds) assert.ok(!text.includes(id), `lease id ${id} leaked in ${text.slice(0, 200)}`);
}
