/**
 * One call over `fetch`: the timeout, the retries, the Idempotency-Key, and the answer turned
 * into its JSON or into a typed error. The client's methods only say what to send.
 */
import {
  AbortedError,
  ConnectionError,
  type ErrorBody,
  HTTPError,
  StrataError,
  TimeoutError,
  Unavailable,
  errorFor,
} from "./errors.js";
import { type ResolvedRetry, backoffMs, parseRetryAfter } from "./retry.js";

export type Query = Record<string, string | number | boolean | string[] | null | undefined>;

/** Per call: what a method's last argument may carry. */
export interface CallOptions {
  /** Aborts this call (and its retries and waits). */
  signal?: AbortSignal;
  /** This call's timeout per attempt, instead of the client's `timeoutMs`. */
  timeoutMs?: number;
  /** The write's Idempotency-Key instead of a generated one (1-255 visible ASCII characters);
   * `false` sends none, and the write is then not retried. */
  idempotencyKey?: string | false;
}

export interface Request {
  method: "GET" | "POST" | "PATCH" | "DELETE";
  path: string;
  query?: Query;
  body?: unknown;
  ifMatch?: number;
  /** A read sent as a POST (`/v1/context`, `/v1/search`): retried without an Idempotency-Key,
   * which the server would not keep anyway. GETs are reads without saying so. */
  read?: boolean;
  /** Answer with the `Response` once its status is OK, its body unread ({@link Transport.lines}). */
  stream?: boolean;
}

export interface TransportOptions {
  baseUrl: string;
  apiKey: string;
  timeoutMs: number;
  retry: ResolvedRetry;
  idempotencyKeys: boolean;
  fetch: typeof fetch;
  headers: Record<string, string>;
  random: () => number;
}

/** A 404 whose body is not Strata's JSON comes from Serve's proxy while the application's
 * routes are not (back) up: retried as a 503. */
const NOT_SERVED = "Strata's routes are not served yet (Serve is starting or recovering): retry in a moment";

export class Transport {
  private readonly options: TransportOptions;
  private readonly base: string;
  /** What close() aborts: each call's controller. */
  private readonly live = new Set<AbortController>();
  private closed = false;

  constructor(options: TransportOptions) {
    this.options = options;
    this.base = options.baseUrl.replace(/\/+$/, "");
  }

  close(): void {
    this.closed = true;
    for (const controller of this.live) controller.abort(new AbortedError("the client was closed"));
    this.live.clear();
  }

  async send<T>(request: Request, call: CallOptions = {}): Promise<T> {
    if (this.closed) throw new AbortedError("the client was closed");
    const { retry } = this.options;
    const write = request.method !== "GET" && !request.read;
    const key = write ? this.idempotencyKey(call.idempotencyKey) : undefined;
    // A write is retried only when the server can tell a retry from a new write.
    const retriable = !write || key !== undefined;
    const headers: Record<string, string> = {
      ...this.options.headers,
      Authorization: `Bearer ${this.options.apiKey}`,
      Accept: "application/json",
    };
    if (key !== undefined) headers["Idempotency-Key"] = key;
    if (request.ifMatch !== undefined) headers["If-Match"] = `"${request.ifMatch}"`;
    let body: string | undefined;
    if (request.body !== undefined) {
      body = JSON.stringify(request.body); // once: a retry must send the same bytes
      headers["Content-Type"] = "application/json";
    }
    const url = this.url(request.path, request.query);

    const controller = new AbortController();
    this.live.add(controller);
    const onAbort = (): void =>
      controller.abort(new AbortedError("the call was aborted", { cause: call.signal?.reason }));
    if (call.signal?.aborted) onAbort();
    call.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      let waitedMs = 0;
      for (let attempt = 1; ; attempt++) {
        let failure: StrataError;
        try {
          return (await this.attempt(url, request, headers, body, controller, call)) as T;
        } catch (error) {
          if (!(error instanceof StrataError)) throw error;
          failure = error;
        }
        if (failure instanceof HTTPError) failure.attempts = attempt;
        const delay = retriable && attempt < retry.maxAttempts ? this.delayFor(failure, attempt, key) : undefined;
        if (delay === undefined || waitedMs + delay > retry.maxTotalWaitMs) throw failure;
        await sleep(delay, controller.signal);
        waitedMs += delay;
      }
    } finally {
      call.signal?.removeEventListener("abort", onAbort);
      this.live.delete(controller);
    }
  }

  /** How long to wait before retrying after `failure`, or undefined when it is not retried. */
  private delayFor(failure: StrataError, attempt: number, key: string | undefined): number | undefined {
    const { retry, random } = this.options;
    if (failure instanceof ConnectionError) return backoffMs(attempt, retry, undefined, random);
    if (!(failure instanceof HTTPError)) return undefined; // a timeout or an abort is the caller's bound
    const inFlight = failure.status === 409 && key !== undefined && failure.retryAfterMs !== undefined;
    // Serve's proxy's 404 before the routes are up is an Unavailable, retried as a 503 is.
    const status = failure instanceof Unavailable ? 503 : failure.status;
    if (!retry.statuses.includes(status) && !inFlight) return undefined;
    return backoffMs(attempt, retry, failure.retryAfterMs, random);
  }

  /**
   * A GET answered in JSON Lines, a line at a time as its body arrives (`GET /v1/export`): the
   * request is retried as a read until its answer starts; then `timeoutMs` bounds each wait
   * for more of the body, not the whole (which may take minutes). Breaking out of the loop,
   * an abort of `call.signal` or close() stop the body's download.
   */
  async *lines(request: Request, call: CallOptions = {}): AsyncGenerator<string> {
    const controller = new AbortController();
    this.live.add(controller);
    const onAbort = (): void =>
      controller.abort(new AbortedError("the call was aborted", { cause: call.signal?.reason }));
    if (call.signal?.aborted) onAbort();
    call.signal?.addEventListener("abort", onAbort, { once: true });
    let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
    let finished = false;
    const cancel = (): void => void reader?.cancel(controller.signal.reason).catch(() => undefined);
    try {
      const response = await this.send<Response>({ ...request, stream: true }, { ...call, signal: controller.signal });
      if (response.body === null) return;
      reader = response.body.getReader();
      controller.signal.addEventListener("abort", cancel, { once: true });
      const timeoutMs = call.timeoutMs ?? this.options.timeoutMs;
      const where = `${request.method} ${request.path}`;
      const decoder = new TextDecoder();
      let rest = "";
      for (;;) {
        const timer = setTimeout(
          () => controller.abort(new TimeoutError(`nothing more of ${where} within ${timeoutMs} ms`)),
          timeoutMs,
        );
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (error) {
          const reason: unknown = controller.signal.reason;
          if (controller.signal.aborted && reason instanceof StrataError) throw reason;
          throw new ConnectionError(`${where} broke off: ${describe(error)}`, { cause: error });
        } finally {
          clearTimeout(timer);
        }
        // A cancelled read ends as if the body had: the abort's reason is the answer.
        if (controller.signal.aborted) throw controller.signal.reason;
        if (chunk.done) break;
        rest += decoder.decode(chunk.value, { stream: true });
        const lines = rest.split("\n");
        rest = lines.pop() ?? "";
        yield* lines;
      }
      finished = true;
      rest += decoder.decode();
      if (rest) yield rest;
    } finally {
      if (!finished) cancel(); // the caller stopped early, or it failed: no download left running
      controller.signal.removeEventListener("abort", cancel);
      call.signal?.removeEventListener("abort", onAbort);
      this.live.delete(controller);
    }
  }

  private async attempt(
    url: string,
    request: Request,
    headers: Record<string, string>,
    body: string | undefined,
    outer: AbortController,
    call: CallOptions,
  ): Promise<unknown> {
    const method = request.method;
    const timeoutMs = call.timeoutMs ?? this.options.timeoutMs;
    // One controller per attempt, so a timed-out attempt does not abort the next.
    const controller = new AbortController();
    const onOuter = (): void => controller.abort(outer.signal.reason);
    if (outer.signal.aborted) throw outer.signal.reason;
    outer.signal.addEventListener("abort", onOuter, { once: true });
    const timer = setTimeout(
      () => controller.abort(new TimeoutError(`no answer from ${method} ${url} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    try {
      let response: Response;
      let text: string;
      try {
        response = await this.options.fetch(url, { method, headers, body, signal: controller.signal });
        // A stream's body is read by its caller: its download must outlive this attempt's timer.
        if (request.stream && response.ok) return response;
        text = await response.text();
      } catch (error) {
        const reason: unknown = controller.signal.reason;
        if (controller.signal.aborted && reason instanceof StrataError) throw reason;
        throw new ConnectionError(`no answer from ${method} ${url}: ${describe(error)}`, { cause: error });
      }
      if (!response.ok) throw failureOf(response, text);
      try {
        return text === "" ? undefined : JSON.parse(text);
      } catch (error) {
        throw new StrataError(`${method} ${url} answered ${response.status} with a body that is not JSON`, {
          cause: error,
        });
      }
    } finally {
      clearTimeout(timer);
      outer.signal.removeEventListener("abort", onOuter);
    }
  }

  private url(path: string, query: Query | undefined): string {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query ?? {})) {
      if (Array.isArray(value)) for (const item of value) params.append(name, item);
      else if (value !== undefined && value !== null) params.set(name, String(value));
    }
    const search = params.toString();
    return `${this.base}${path}${search ? `?${search}` : ""}`;
  }

  private idempotencyKey(given: string | false | undefined): string | undefined {
    if (given === false) return undefined;
    if (given !== undefined) return given;
    return this.options.idempotencyKeys ? newKey() : undefined;
  }
}

function failureOf(response: Response, text: string): HTTPError {
  const retryAfterMs = parseRetryAfter(response.headers.get("retry-after"));
  let body: ErrorBody | undefined;
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) body = parsed as ErrorBody;
  } catch {
    body = undefined;
  }
  if (body === undefined) {
    if (response.status === 404) return new Unavailable(404, { error: "NotServed", message: NOT_SERVED }, 1000);
    body = { message: text.slice(0, 500) || `HTTP ${response.status}` };
  }
  return errorFor(response.status, body, retryAfterMs);
}

/** Waits `ms`, or rejects with the signal's reason once it aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** A random UUID v4 for an Idempotency-Key: Web Crypto where there is one (browsers, Node 19+,
 * Node 18 with it exposed), else Math.random, which is enough for a key that only needs to
 * differ from this tenant's other keys within a day. */
export function newKey(): string {
  const crypto = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (crypto?.randomUUID) return crypto.randomUUID();
  return "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx".replace(/[xy]/g, (c) => {
    const r = Math.floor(Math.random() * 16);
    return (c === "x" ? r : (r & 0x3) | 0x8).toString(16);
  });
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}
