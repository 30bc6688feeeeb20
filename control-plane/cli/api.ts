/**
 * The CLI's HTTP client for the REST facade: bearer token, JSON in and out, problem+json errors
 * turned into ApiError (its status decides the exit code), network failures into NetworkError.
 */
import { ExitCode, type CliIo } from './io';

export const DEFAULT_FLEET_URL = 'http://127.0.0.1:8080';

export interface FieldError {
  in: string;
  path: string;
  message: string;
}

export interface ProblemBody {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  errors?: FieldError[];
  reason?: string;
}

export class ApiError extends Error {
  override name = 'ApiError';
  constructor(
    readonly status: number,
    readonly problem: ProblemBody,
  ) {
    super(problem.detail ?? problem.title ?? `HTTP ${status}`);
  }
}

export class NetworkError extends Error {
  override name = 'NetworkError';
}

/** 401/403: auth; other 4xx: the request was wrong (usage); 429 and 5xx: the server side. */
export function exitCodeForStatus(status: number): ExitCode {
  if (status === 401 || status === 403) return ExitCode.auth;
  if (status === 429 || status >= 500) return ExitCode.server;
  if (status >= 400) return ExitCode.usage;
  return ExitCode.server;
}

export class FleetApi {
  readonly baseUrl: string;
  private readonly token: string | undefined;

  constructor(
    private readonly io: CliIo,
    baseUrl?: string,
  ) {
    this.baseUrl = (baseUrl ?? io.env.FLEET_URL ?? DEFAULT_FLEET_URL).replace(/\/+$/, '');
    this.token = io.env.FLEET_TOKEN;
  }

  headers(extra: Record<string, string> = {}): Record<string, string> {
    return { Accept: 'application/json', ...(this.token ? { Authorization: `Bearer ${this.token}` } : {}), ...extra };
  }

  /** The raw response (event streams); throws NetworkError when the server cannot be reached. */
  async raw(method: string, path: string, init: { headers?: Record<string, string>; signal?: AbortSignal } = {}) {
    try {
      return await this.io.fetch(`${this.baseUrl}${path}`, {
        method,
        headers: this.headers(init.headers),
        signal: init.signal,
      });
    } catch (err) {
      throw new NetworkError(`cannot reach ${this.baseUrl}: ${describeCause(err)}`, { cause: err });
    }
  }

  async request<T>(method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, body?: unknown): Promise<T> {
    let res: Response;
    try {
      res = await this.io.fetch(`${this.baseUrl}${path}`, {
        method,
        headers: this.headers(body === undefined ? {} : { 'Content-Type': 'application/json' }),
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new NetworkError(`cannot reach ${this.baseUrl}: ${describeCause(err)}`, { cause: err });
    }
    return (await readJson(res)) as T;
  }

  get = <T>(path: string): Promise<T> => this.request<T>('GET', path);
  post = <T>(path: string, body?: unknown): Promise<T> => this.request<T>('POST', path, body);
  put = <T>(path: string, body?: unknown): Promise<T> => this.request<T>('PUT', path, body);
  delete = <T>(path: string): Promise<T> => this.request<T>('DELETE', path);
}

/** The JSON body of a successful response; an ApiError for any other status. */
export async function readJson(res: Response): Promise<unknown> {
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = text === '' ? undefined : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (!res.ok) {
    const problem: ProblemBody =
      parsed && typeof parsed === 'object'
        ? (parsed as ProblemBody)
        : { status: res.status, detail: text.slice(0, 500) };
    throw new ApiError(res.status, problem);
  }
  return parsed;
}

function describeCause(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
  return cause?.code ?? cause?.message ?? (err as Error)?.message ?? String(err);
}

export const query = (params: Record<string, string | number | undefined>): string => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
};

export const seg = encodeURIComponent;
