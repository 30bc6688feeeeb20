import type { Client } from '@temporalio/client';
import type { FleetClient } from '../client';
import type { ControlPlaneConfig } from '../config';
import type { ApiToken } from './auth';
import type { DefinitionsStore } from './definitions/store';

export interface RestOptions {
  /** How often a server-sent event stream polls the task (default 500 ms). */
  ssePollMs?: number;
  /** Comment lines that keep idle event streams open through proxies (default 15 s). */
  sseKeepAliveMs?: number;
  /**
   * An event stream whose client does not read ends once this much is written but not taken
   * (default 1 MiB); while the socket has not drained, nothing more is queued for it.
   */
  sseMaxBufferedBytes?: number;
  /**
   * An event stream whose client takes nothing for this long while data waits for it (its socket
   * has not drained) is ended, polling included (default 60 s, at least twice sseKeepAliveMs).
   */
  sseMaxStallMs?: number;
  /** Request bodies above this are refused with 413 (default 256 KiB). */
  bodyLimitBytes?: number;
  /** Retry-After on 429 queue full (default 5 s). */
  queueFullRetryAfterSeconds?: number;
  /**
   * How long a submit waits for its pool to admit the task (default 30 s); past it the answer is
   * 202 with the task queued and not yet admitted (no control plane running, say).
   */
  admissionTimeoutMs?: number;
  /**
   * How long a read of a task waits for a control-plane worker to answer with its live view
   * before it answers with the task as recorded, marked `incomplete` (default 8 s).
   */
  liveViewTimeoutMs?: number;
  /** Signs list cursors; share it between replicas (default: random per process). */
  cursorKey?: Buffer;
  log?: (message: string, meta: Record<string, unknown>) => void;
}

export interface RestDeps {
  fleet: FleetClient;
  client: Client;
  config: ControlPlaneConfig;
  /** The API tokens, or where to read the current ones (watchedApiTokens). */
  tokens: readonly ApiToken[] | (() => readonly ApiToken[]);
  definitions: DefinitionsStore;
  options?: RestOptions;
}
