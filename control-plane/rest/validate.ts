/**
 * The validation middleware: parses params, query, headers and body with zod schemas, keeps the
 * parsed values for the handler (`parsed(res, schemas)`) and sends every problem, with its field
 * path, to the error handler as one 400.
 */
import type { RequestHandler, Response } from 'express';
import type { z } from 'zod';
import { HttpProblem, invalid, type FieldError } from './problem';

export interface RequestSchemas {
  params?: z.ZodType;
  query?: z.ZodType;
  headers?: z.ZodType;
  body?: z.ZodType;
}

export type Parsed<S extends RequestSchemas> = {
  [K in keyof S]: S[K] extends z.ZodType ? z.output<S[K]> : never;
};

const LOCATION = { params: 'path', query: 'query', headers: 'header', body: 'body' } as const;
const PARSED = Symbol('parsed');

export const issuePath = (path: readonly PropertyKey[]): string => path.map(String).join('.') || '(root)';

export function validate<S extends RequestSchemas>(schemas: S): RequestHandler {
  return (req, res, next) => {
    const errors: FieldError[] = [];
    const out: Record<string, unknown> = {};
    for (const key of ['params', 'query', 'headers', 'body'] as const) {
      const schema = schemas[key];
      if (!schema) continue;
      const value: unknown = req[key];
      if (key === 'body' && value === undefined) {
        const type = req.headers['content-type'];
        if (type && !req.is('application/json')) {
          throw new HttpProblem('unsupportedMediaType', `Content-Type ${type} is not supported: send application/json`);
        }
        errors.push({
          in: 'body',
          path: '(root)',
          message: 'a JSON body is required (Content-Type: application/json)',
        });
        continue;
      }
      const r = schema.safeParse(value);
      if (r.success) out[key] = r.data;
      else
        for (const i of r.error.issues) errors.push({ in: LOCATION[key], path: issuePath(i.path), message: i.message });
    }
    if (errors.length > 0) throw invalid(errors);
    (res.locals as Record<symbol, unknown>)[PARSED] = out;
    next();
  };
}

/** The values `validate(schemas)` parsed for this request. */
export function parsed<S extends RequestSchemas>(res: Response, _schemas: S): Parsed<S> {
  const v = (res.locals as Record<symbol, unknown>)[PARSED];
  if (!v) throw new Error('parsed() used on a route without validate()');
  return v as Parsed<S>;
}
