/**
 * When to retry and how long to wait: full-jitter exponential backoff, bounded in attempts
 * and in total wait, and never shorter than the server's `Retry-After`.
 */

/** How the client retries 429 and 503 (and a 409 for an Idempotency-Key still being applied). */
export interface RetryOptions {
  /** Attempts in all, the first included; 1 turns retries off. Default 4. */
  maxAttempts?: number;
  /** The first backoff's cap: the n-th retry waits a random time in [0, baseDelayMs * 2^(n-1)],
   * after the server's Retry-After when it sent one. Default 250. */
  baseDelayMs?: number;
  /** The cap of one backoff without Retry-After. Default 8,000. */
  maxDelayMs?: number;
  /** The most the client waits between attempts over one call; a wait that would pass it
   * is not made, and the last error is thrown at once. Default 30,000. */
  maxTotalWaitMs?: number;
  /** Statuses retried (with Retry-After honoured). Default [429, 503]. */
  statuses?: readonly number[];
}

export type ResolvedRetry = Required<RetryOptions>;

export const RETRY_DEFAULTS: ResolvedRetry = Object.freeze({
  maxAttempts: 4,
  baseDelayMs: 250,
  maxDelayMs: 8_000,
  maxTotalWaitMs: 30_000,
  statuses: Object.freeze([429, 503]),
});

/** The defaults with `options` over them, checked. */
export function resolveRetry(options: RetryOptions | false | undefined): ResolvedRetry {
  if (options === false) return { ...RETRY_DEFAULTS, maxAttempts: 1 };
  const resolved = { ...RETRY_DEFAULTS, ...definedOnly(options ?? {}) };
  for (const name of ["maxAttempts", "baseDelayMs", "maxDelayMs", "maxTotalWaitMs"] as const) {
    if (!Number.isFinite(resolved[name]) || resolved[name] < 0) {
      throw new RangeError(`retry.${name} must be a finite number >= 0, not ${resolved[name]}`);
    }
  }
  if (resolved.maxAttempts < 1) throw new RangeError("retry.maxAttempts must be at least 1");
  return resolved;
}

/**
 * The wait before retry number `retry` (1 for the first): a uniform draw from
 * [0, min(maxDelayMs, baseDelayMs * 2^(retry-1))] ("full jitter"), after the server's
 * Retry-After when it sent one: never sooner than it asked, and the callers it refused
 * together do not all come back at the same instant.
 */
export function backoffMs(
  retry: number,
  policy: ResolvedRetry,
  retryAfterMs?: number,
  random: () => number = Math.random,
): number {
  const cap = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.max(0, retry - 1));
  return (retryAfterMs ?? 0) + random() * cap;
}

/**
 * `Retry-After` in milliseconds: delta-seconds (`"3"`) or an HTTP date; undefined when absent
 * or unreadable, 0 for a date in the past.
 */
export function parseRetryAfter(value: string | null | undefined, nowMs: number = Date.now()): number | undefined {
  if (value == null) return undefined;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1000);
  if (!/[a-z]/i.test(text)) return undefined; // "-1" would parse as a date (year -1)
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

function definedOnly<T extends object>(options: T): Partial<T> {
  return Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as Partial<T>;
}
