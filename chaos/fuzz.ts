/**
 * Property-based REST fuzzing (fast-check): random methods, paths, ids, headers and bodies,
 * malformed on purpose. Nothing invalid may yield a 5xx or change state.
 */
import fc from 'fast-check';

export interface FuzzResult {
  sent: number;
  fiveXX: number;
  /** 2xx answers to POST /v1/tasks: the only requests allowed to create anything. */
  created: number;
  statuses: Record<string, number>;
  failures: string[];
}

const ids = fc.oneof(
  fc.constantFrom('', '..', '%2e%2e', 'a'.repeat(300), '💥', 'x y', 'task/../../etc', 'null', '-1', ' '),
  fc.string({ maxLength: 40 }).map(encodeURIComponent),
);
const paths = fc.oneof(
  ids.map((id) => `/v1/tasks/${id}`),
  ids.map((id) => `/v1/tasks/${id}/cancel`),
  ids.map((id) => `/v1/tasks/${id}/events`),
  fc.constant('/v1/tasks'),
  fc.string({ maxLength: 30 }).map((q) => `/v1/tasks?status=${encodeURIComponent(q)}&limit=${encodeURIComponent(q)}`),
  ids.map((id) => `/v1/hosts/${id}/drain`),
  fc.tuple(ids, ids).map(([h, d]) => `/v1/hosts/${h}/devices/${d}/undrain`),
  ids.map((id) => `/v1/workflow-definitions/${id}`),
  fc.constant('/v1/workflow-definitions'),
  fc.constant('/v1/devices'),
  fc.string({ maxLength: 50 }).map((p) => `/${encodeURIComponent(p)}`),
);
const bodies = fc.oneof(
  fc.json({ maxDepth: 3 }),
  fc.string({ maxLength: 200 }),
  fc
    .record({
      goal: fc.anything(),
      taskId: fc.anything(),
      constraints: fc.anything(),
      priority: fc.anything(),
      policy: fc.anything(),
    })
    .map((o) => JSON.stringify(o)),
  fc.record({ goal: fc.string(), definition: fc.string() }).map((o) => JSON.stringify(o)),
  fc.constant('{"goal": '),
  fc.constant('x'.repeat(300 * 1024)),
);

export async function fuzzRest(baseUrl: string, tokens: string[], runs: number, seed: number): Promise<FuzzResult> {
  const result: FuzzResult = { sent: 0, fiveXX: 0, created: 0, statuses: {}, failures: [] };
  const requests = fc.sample(
    fc.record({
      method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH'),
      path: paths,
      // Mostly a valid token, so requests get past authentication to validation.
      auth: fc.oneof(
        { arbitrary: fc.constant(`Bearer ${tokens[0]}`), weight: 6 },
        { arbitrary: fc.constantFrom(...tokens.slice(1).map((t) => `Bearer ${t}`)), weight: 1 },
        { arbitrary: fc.constant(undefined), weight: 1 },
        { arbitrary: fc.string({ maxLength: 60 }), weight: 1 },
      ),
      contentType: fc.constantFrom(
        'application/json',
        'text/plain',
        'application/x-www-form-urlencoded',
        'garbage/%%',
        undefined,
      ),
      body: bodies,
      idempotencyKey: fc.option(fc.string({ maxLength: 80 }), { nil: undefined }),
    }),
    { numRuns: runs, seed },
  );
  for (const r of requests) {
    const headers: Record<string, string> = {};
    if (r.auth !== undefined) headers.authorization = r.auth.replace(/[^\t\x20-\x7e]/g, '');
    if (r.contentType) headers['content-type'] = r.contentType;
    if (r.idempotencyKey) headers['idempotency-key'] = r.idempotencyKey.replace(/[^\t\x20-\x7e]/g, '');
    const withBody = r.method !== 'GET' && r.method !== 'DELETE';
    let status: number;
    try {
      const res = await fetch(`${baseUrl}${r.path}`, {
        method: r.method,
        headers,
        body: withBody ? r.body : undefined,
        signal: AbortSignal.timeout(15_000),
      });
      status = res.status;
      await res.body?.cancel().catch(() => undefined); // SSE streams stay open otherwise
    } catch (err) {
      result.failures.push(`${r.method} ${r.path.slice(0, 80)}: ${String(err)}`);
      continue;
    }
    result.sent++;
    result.statuses[status] = (result.statuses[status] ?? 0) + 1;
    if (status >= 500) {
      result.fiveXX++;
      result.failures.push(`${r.method} ${r.path.slice(0, 80)} -> ${status}`);
    }
    if (r.method === 'POST' && r.path === '/v1/tasks' && status >= 200 && status < 300) result.created++;
  }
  return result;
}
