/**
 * RFC 9457 problem details: every error response of the REST facade is one of these, with a
 * stable `type` URI per class, sent by the one error-handling middleware (`errorHandler`).
 */
import { WorkflowNotFoundError } from '@temporalio/client';
import type { ErrorRequestHandler, RequestHandler } from 'express';
import { z } from 'zod';
import { QueueFullError, TaskNotFoundError, TaskRejectedError, ValidationError } from '../client';
import { HostNotAnsweringError } from '../hosts';

export const PROBLEM_BASE = 'https://fleet.example/problems/';
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** Every problem class the facade emits: its `type` slug, HTTP status and title never change. */
export const Problems = {
  validation: { status: 400, title: 'Invalid request' },
  taskRejected: { status: 400, title: 'Task rejected at admission' },
  unauthorized: { status: 401, title: 'Authentication required' },
  forbidden: { status: 403, title: 'Forbidden' },
  notFound: { status: 404, title: 'Not found' },
  conflict: { status: 409, title: 'Conflict' },
  idempotencyConflict: { status: 409, title: 'Idempotency key reused with a different request' },
  taskEnded: { status: 409, title: 'Task already ended' },
  payloadTooLarge: { status: 413, title: 'Request body too large' },
  unsupportedMediaType: { status: 415, title: 'Unsupported media type' },
  queueFull: { status: 429, title: 'Queue full' },
  internal: { status: 500, title: 'Internal error' },
  unavailable: { status: 503, title: 'Temporal unavailable' },
} as const;
export type ProblemKind = keyof typeof Problems;

const SLUGS: Record<ProblemKind, string> = {
  validation: 'validation',
  taskRejected: 'task-rejected',
  unauthorized: 'unauthorized',
  forbidden: 'forbidden',
  notFound: 'not-found',
  conflict: 'conflict',
  idempotencyConflict: 'idempotency-conflict',
  taskEnded: 'task-ended',
  payloadTooLarge: 'payload-too-large',
  unsupportedMediaType: 'unsupported-media-type',
  queueFull: 'queue-full',
  internal: 'internal',
  unavailable: 'unavailable',
};
export const problemType = (kind: ProblemKind): string => `${PROBLEM_BASE}${SLUGS[kind]}`;

export const FieldErrorSchema = z.object({
  in: z.enum(['body', 'query', 'path', 'header']),
  path: z.string(),
  message: z.string(),
});
export type FieldError = z.infer<typeof FieldErrorSchema>;

export const ProblemSchema = z.object({
  type: z.string(),
  title: z.string(),
  status: z.number().int(),
  detail: z.string().optional(),
  instance: z.string().optional(),
  errors: z.array(FieldErrorSchema).optional(),
  reason: z.string().optional(),
});
export type Problem = z.infer<typeof ProblemSchema>;

export class HttpProblem extends Error {
  override name = 'HttpProblem';
  constructor(
    readonly kind: ProblemKind,
    readonly detail: string,
    readonly extra: { errors?: FieldError[]; reason?: string; headers?: Record<string, string> } = {},
  ) {
    super(detail);
  }
  get status(): number {
    return Problems[this.kind].status;
  }
}

export const invalid = (errors: FieldError[], detail?: string): HttpProblem =>
  new HttpProblem('validation', detail ?? errors.map((e) => `${e.in} ${e.path}: ${e.message}`).join('; '), {
    errors,
  });

/** Errors of body-parser (express.json) carry a `type` and an HTTP status. */
interface BodyParserError extends Error {
  type?: string;
  status?: number;
  limit?: number;
}

const GRPC_UNAVAILABLE = 14;
const GRPC_DEADLINE_EXCEEDED = 4;

/** The gRPC status codes along an error's cause chain (the SDK wraps the service error). */
export function grpcCodes(err: unknown): number[] {
  const codes: number[] = [];
  for (let e: unknown = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'number') codes.push(code);
  }
  return codes;
}

export function isTemporalUnreachable(err: unknown): boolean {
  return grpcCodes(err).some((c) => c === GRPC_UNAVAILABLE || c === GRPC_DEADLINE_EXCEEDED);
}

/** Maps anything thrown by a handler to a problem; unknown errors become a 500 that reveals nothing. */
export function toProblem(err: unknown, opts: { queueFullRetryAfterSeconds?: number } = {}): HttpProblem {
  if (err instanceof HttpProblem) return err;
  if (err instanceof ValidationError) {
    return invalid(err.issues.map((i) => ({ in: 'body', path: i.path, message: i.message })));
  }
  if (err instanceof QueueFullError) {
    return new HttpProblem('queueFull', err.message, {
      headers: { 'Retry-After': String(opts.queueFullRetryAfterSeconds ?? 5) },
    });
  }
  if (err instanceof TaskRejectedError) return new HttpProblem('taskRejected', err.message, { reason: err.reason });
  if (err instanceof TaskNotFoundError) return new HttpProblem('notFound', err.message);
  if (err instanceof WorkflowNotFoundError) return new HttpProblem('notFound', 'not found');
  const bp = err as BodyParserError;
  if (bp && typeof bp.type === 'string' && typeof bp.status === 'number') {
    switch (bp.type) {
      case 'entity.parse.failed':
        return invalid([{ in: 'body', path: '(root)', message: `malformed JSON: ${bp.message}` }]);
      case 'entity.too.large':
        return new HttpProblem('payloadTooLarge', `the request body exceeds the limit of ${bp.limit ?? '?'} bytes`);
      case 'encoding.unsupported':
      case 'charset.unsupported':
        return new HttpProblem('unsupportedMediaType', bp.message);
      default:
        if (bp.status >= 400 && bp.status < 500) {
          return invalid([{ in: 'body', path: '(root)', message: bp.message }]);
        }
    }
  }
  if (err instanceof HostNotAnsweringError) {
    return new HttpProblem('unavailable', err.message, { headers: { 'Retry-After': '5' } });
  }
  if (isTemporalUnreachable(err)) {
    return new HttpProblem('unavailable', 'Temporal did not answer in time; try again', {
      headers: { 'Retry-After': '2' },
    });
  }
  return new HttpProblem('internal', 'an unexpected error occurred; it was logged');
}

export function problemBody(p: HttpProblem, instance?: string): Problem {
  return {
    type: problemType(p.kind),
    title: Problems[p.kind].title,
    status: p.status,
    detail: p.detail,
    ...(instance ? { instance } : {}),
    ...(p.extra.errors ? { errors: p.extra.errors } : {}),
    ...(p.extra.reason ? { reason: p.extra.reason } : {}),
  };
}

export interface ErrorLog {
  (message: string, meta: Record<string, unknown>): void;
}

/** The one error-handling middleware. */
export function errorHandler(log: ErrorLog, opts: { queueFullRetryAfterSeconds?: number } = {}): ErrorRequestHandler {
  return (err, req, res, _next) => {
    const p = toProblem(err, opts);
    if (p.kind === 'internal' || p.kind === 'unavailable') {
      log('request failed', { method: req.method, path: req.originalUrl, error: String((err as Error)?.stack ?? err) });
    }
    if (res.headersSent) {
      // A stream already started (server-sent events): nothing left to do but close it.
      res.end();
      return;
    }
    for (const [k, v] of Object.entries(p.extra.headers ?? {})) res.setHeader(k, v);
    if (p.kind === 'unauthorized') res.setHeader('WWW-Authenticate', 'Bearer realm="fleet"');
    res.status(p.status).type(PROBLEM_CONTENT_TYPE).json(problemBody(p, req.originalUrl));
  };
}

export const notFoundRoute: RequestHandler = (req) => {
  throw new HttpProblem('notFound', `no route for ${req.method} ${req.path}`);
};
