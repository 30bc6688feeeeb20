/**
 * The REST facade: `createApp(deps)` builds the express app without listening (rest-main.ts
 * listens; tests drive the app with supertest).
 */
import express, { type Express } from 'express';
import { authenticate } from './auth';
import type { RestDeps } from './context';
import { metricsRoute } from '../metrics';
import { definitionsRouter } from './definitions/router';
import { devicesRouter, hostsRouter } from './fleet/router';
import { healthRouter } from './health/router';
import { buildOpenApiDocument } from './openapi';
import { errorHandler, notFoundRoute } from './problem';
import { redactingReplacer } from './redact';
import { tasksRouter } from './tasks/router';

export type { RestDeps, RestOptions } from './context';

export const DEFAULT_BODY_LIMIT_BYTES = 256 * 1024;

export function createApp(deps: RestDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('json replacer', redactingReplacer);
  app.set('query parser', 'simple');

  // Served as is, not through the redacting JSON replacer: the document holds no secrets, and the
  // replacer would strip schema properties named like one (EnrollHostBody's `keys`).
  const openapi = JSON.stringify(buildOpenApiDocument());
  app.use(healthRouter(deps));
  app.get('/metrics', metricsRoute(deps)); // Prometheus text format, unauthenticated (see ../metrics.ts)
  app.get('/openapi.json', (_req, res) => {
    res.type('application/json').send(openapi);
  });

  const v1 = express.Router();
  v1.use(authenticate(deps.tokens));
  v1.use(
    express.json({
      limit: deps.options?.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES,
      type: ['application/json', 'application/*+json'],
      strict: true,
    }),
  );
  v1.use('/tasks', tasksRouter(deps));
  v1.use('/hosts', hostsRouter(deps));
  v1.use('/devices', devicesRouter(deps));
  v1.use('/workflow-definitions', definitionsRouter(deps));
  app.use('/v1', v1);

  app.use(notFoundRoute);
  const log = deps.options?.log ?? ((message, meta) => console.error(message, meta));
  app.use(errorHandler(log, { queueFullRetryAfterSeconds: deps.options?.queueFullRetryAfterSeconds }));
  return app;
}
