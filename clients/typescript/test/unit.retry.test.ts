// The backoff arithmetic and Retry-After parsing, without a network.
import assert from "node:assert/strict";
import { test } from "node:test";

import { RETRY_DEFAULTS, backoffMs, parseRetryAfter } from "../src/index.js";
import { resolveRetry } from "../src/retry.js";

test("full jitter: the n-th retry waits within [0, min(maxDelayMs, baseDelayMs * 2^(n-1))]", () => {
  const policy = resolveRetry({ baseDelayMs: 100, maxDelayMs: 1000 });
  assert.equal(
    backoffMs(1, policy, undefined, () => 0.999999),
    99.9999,
  );
  assert.equal(
    backoffMs(3, policy, undefined, () => 0.5),
    200,
  );
  assert.equal(
    backoffMs(10, policy, undefined, () => 0.5),
    500,
  ); // capped at maxDelayMs
  assert.equal(
    backoffMs(2, policy, undefined, () => 0),
    0,
  );
  for (let i = 0; i < 200; i++) {
    const wait = backoffMs(4, policy);
    assert.ok(wait >= 0 && wait <= 800, String(wait));
  }
});

test("the jittered wait comes after Retry-After, even past maxDelayMs", () => {
  const policy = resolveRetry({ baseDelayMs: 100, maxDelayMs: 1000 });
  assert.equal(
    backoffMs(1, policy, 3000, () => 0.5),
    3050,
  );
  assert.equal(
    backoffMs(5, policy, 10, () => 0.5),
    510,
  );
  assert.equal(
    backoffMs(2, policy, 1000, () => 0),
    1000,
  );
});

test("Retry-After as seconds, as an HTTP date, and unreadable", () => {
  assert.equal(parseRetryAfter("2"), 2000);
  assert.equal(parseRetryAfter(" 0 "), 0);
  assert.equal(parseRetryAfter("1.5"), 1500);
  const now = Date.parse("2026-12-07T00:00:00Z");
  assert.equal(parseRetryAfter("Mon, 07 Dec 2026 00:00:03 GMT", now), 3000);
  assert.equal(parseRetryAfter("Sun, 06 Dec 2026 00:00:00 GMT", now), 0);
  assert.equal(parseRetryAfter("soon"), undefined);
  assert.equal(parseRetryAfter(null), undefined);
  assert.equal(parseRetryAfter("-1"), undefined);
});

test("retry options: defaults, false for none, and nonsense refused", () => {
  assert.deepEqual(resolveRetry(undefined), RETRY_DEFAULTS);
  assert.equal(resolveRetry(false).maxAttempts, 1);
  assert.equal(resolveRetry({ maxAttempts: undefined }).maxAttempts, RETRY_DEFAULTS.maxAttempts);
  assert.throws(() => resolveRetry({ maxAttempts: 0 }), RangeError);
  assert.throws(() => resolveRetry({ baseDelayMs: -1 }), RangeError);
  assert.throws(() => resolveRetry({ maxTotalWaitMs: Number.NaN }), RangeError);
});
