/**
 * The client's one error hierarchy. Every rejection of a {@link StrataClient} call is one of these:
 *
 * ```
 * StrataError                    base: message, and status/code/field when the server answered
 * ├── ConnectionError            no answer at all: refused, reset, DNS (fetch's TypeError is `cause`)
 * ├── TimeoutError               no answer within `timeoutMs`
 * ├── AbortedError               the caller's signal fired, or close() was called
 * └── HTTPError                  an answer with a status >= 400, in Strata's shape {error, message, ...}
 *     ├── ClientError            4xx: the request must change before it can succeed
 *     │   ├── Unauthorized           401  missing, unknown or revoked key
 *     │   ├── Forbidden              403  the key's scope does not allow the call
 *     │   ├── NotFound               404  no such session, turn, document, skill or job
 *     │   ├── Conflict               409  stale version (`currentVersion`), or the Idempotency-Key in use
 *     │   ├── PayloadTooLarge        413  body over serve.max_body_bytes
 *     │   ├── InvalidInput           422  a field to fix (`field`, `problems`)
 *     │   ├── PreconditionRequired   428  the change needs If-Match
 *     │   └── RateLimited            429  over the key's rate (`retryAfterMs`)
 *     └── ServerError            5xx
 *         ├── UpstreamError          502  the LLM or the embedding endpoint failed (`jobId` for a skill)
 *         ├── Unavailable            503  the store is unreachable or Serve is (re)starting (`retryAfterMs`)
 *         └── GatewayTimeout         504  over serve.request_timeout_s; a write still completes
 * ```
 *
 * `code` is the server's own name for the error (`"VersionConflict"`, `"EmbedderError"`, ...);
 * `body` is its whole JSON answer.
 */

/** What the server answered, as the errors carry it. */
export interface ErrorBody {
  error?: string;
  message?: string;
  field?: string;
  [key: string]: unknown;
}

/** Base of every error the client raises. */
export class StrataError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The request got no answer: the connection was refused, reset or never made. */
export class ConnectionError extends StrataError {}

/** The request got no answer within the client's `timeoutMs`. */
export class TimeoutError extends StrataError {}

/** The caller's `signal` aborted the call, or the client was closed. */
export class AbortedError extends StrataError {}

/** The server answered with a status of 400 or more. */
export class HTTPError extends StrataError {
  /** The HTTP status. */
  readonly status: number;
  /** The server's name for the error (`body.error`), e.g. `"VersionConflict"`. */
  readonly code: string;
  /** The field to fix, when the server named one. */
  readonly field: string | undefined;
  /** The answer's JSON body (or `{message}` with its text when it was not JSON). */
  readonly body: ErrorBody;
  /** How long the server asked to wait before a retry (`Retry-After`), if it did. */
  readonly retryAfterMs: number | undefined;
  /** How many attempts were made, retries included. */
  attempts = 1;

  constructor(status: number, body: ErrorBody, retryAfterMs?: number) {
    super(body.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = body.error ?? `HTTP${status}`;
    this.field = typeof body.field === "string" ? body.field : undefined;
    this.body = body;
    this.retryAfterMs = retryAfterMs;
  }
}

/** A 4xx answer: the request must change before it can succeed. */
export class ClientError extends HTTPError {}

/** 401: the key is missing, unknown or revoked. */
export class Unauthorized extends ClientError {}

/** 403: the key's scope does not allow the call. */
export class Forbidden extends ClientError {}

/** 404: no such session, turn, document, skill, entity or job. */
export class NotFound extends ClientError {}

/** 409: a stale `ifMatch` version (`currentVersion` says which is current), or the
 * request's Idempotency-Key is still being applied by its first request (`retryAfterMs`). */
export class Conflict extends ClientError {
  /** The current version, for a stale `ifMatch`. */
  get currentVersion(): number | undefined {
    const v = this.body.current_version;
    return typeof v === "number" ? v : undefined;
  }
}

/** 413: the body is over the server's `serve.max_body_bytes`. */
export class PayloadTooLarge extends ClientError {}

/** 422: an id, field or body to fix; `field` names it when one did, `problems` lists them. */
export class InvalidInput extends ClientError {
  get problems(): string[] {
    const p = this.body.problems;
    return Array.isArray(p) ? p.map(String) : [this.message];
  }
}

/** 428: the change needs `ifMatch`, the version it was made against. */
export class PreconditionRequired extends ClientError {}

/** 429: the key sent more than its rate; `retryAfterMs` says when to come back. */
export class RateLimited extends ClientError {}

/** A 5xx answer. */
export class ServerError extends HTTPError {}

/** 502: the LLM or the embedding endpoint failed; a skill extraction's `jobId` learns it later. */
export class UpstreamError extends ServerError {
  get jobId(): string | undefined {
    const j = this.body.job_id;
    return typeof j === "string" ? j : undefined;
  }
}

/** 503: the store cannot be reached, or Serve is starting; `retryAfterMs` says when to come back. */
export class Unavailable extends ServerError {}

/** 504: the request ran past the server's deadline. A write still completes: retry it with the
 * same Idempotency-Key to get its answer. */
export class GatewayTimeout extends ServerError {}

const BY_STATUS: Record<number, new (status: number, body: ErrorBody, retryAfterMs?: number) => HTTPError> = {
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  413: PayloadTooLarge,
  422: InvalidInput,
  428: PreconditionRequired,
  429: RateLimited,
  502: UpstreamError,
  503: Unavailable,
  504: GatewayTimeout,
};

/** The error for an answer's status and body: the status decides the class (the body's
 * `error` name is kept as `code`). */
export function errorFor(status: number, body: ErrorBody, retryAfterMs?: number): HTTPError {
  const Kind = BY_STATUS[status] ?? (status >= 500 ? ServerError : ClientError);
  return new Kind(status, body, retryAfterMs);
}
