// The client against a tiny local HTTP server standing in for Strata at the network boundary:
// retries and Retry-After, the bounds on them, Idempotency-Keys, timeouts, aborts, close()
// and the typed errors.
import assert from "node:assert/strict";
import { type IncomingHttpHeaders, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";

import {
  AbortedError,
  ClientError,
  Conflict,
  ConnectionError,
  Forbidden,
  HTTPError,
  InvalidInput,
  NotFound,
  RateLimited,
  ServerError,
  StrataClient,
  type StrataClientOptions,
  StrataError,
  TimeoutError,
  Unavailable,
  UpstreamError,
} from "../src/index.js";

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}
interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: unknown;
}
/** An answer for the n-th request (0-based), or "hang" to never answer. */
type Script = (n: number, seen: Seen) => Answer | "hang";

const servers: Array<() => void> = [];
after(() => servers.forEach((stop) => stop()));

async function fake(script: Script): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      const request = { method: req.method ?? "", url: req.url ?? "", headers: req.headers, body, at: Date.now() };
      seen.push(request);
      const answer = script(seen.length - 1, request);
      if (answer === "hang") return;
      const text = typeof answer.body === "string" ? answer.body : JSON.stringify(answer.body ?? {});
      res.writeHead(answer.status, { "content-type": "application/json", ...answer.headers });
      res.end(text);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push(() => server.close() && server.closeAllConnections());
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

function client(url: string, options: Partial<StrataClientOptions> = {}): StrataClient {
  return new StrataClient({ baseUrl: url, apiKey: "sk-strata-test", retry: { baseDelayMs: 5 }, ...options });
}

const OK_TURN = { session_id: "s1", turns: [], versions: { episodic: 1 }, replayed: false };
const busy = (retryAfter?: string): Answer => ({
  status: 429,
  headers: retryAfter === undefined ? {} : { "retry-after": retryAfter },
  body: { error: "RateLimited", message: "over the rate", retry_after_s: 1 },
});

test("a write sends a generated Idempotency-Key, the same on every retry, and the body once serialised", async () => {
  const { url, seen } = await fake((n) => (n < 2 ? busy("0") : { status: 201, body: OK_TURN }));
  const result = await client(url).recordTurn("s 1", { user: "hi", metadata: { a: 1 } });
  assert.deepEqual(result, OK_TURN);
  assert.equal(seen.length, 3);
  const keys = seen.map((s) => s.headers["idempotency-key"]);
  assert.match(String(keys[0]), /^[0-9a-f-]{36}$/);
  assert.ok(keys.every((k) => k === keys[0]));
  assert.ok(seen.every((s) => s.body === seen[0]?.body && s.url === "/v1/sessions/s%201/turns"));
  assert.equal(seen[0]?.headers.authorization, "Bearer sk-strata-test");
  assert.equal(seen[0]?.headers["content-type"], "application/json");
  const second = await client(url).recordTurn("s1", { user: "again" });
  assert.deepEqual(second, OK_TURN);
  assert.notEqual(seen[3]?.headers["idempotency-key"], keys[0]); // a new write, a new key
});

test("Retry-After is honoured: the retry comes no sooner than the server asked", async () => {
  const { url, seen } = await fake((n) =>
    n === 0
      ? { status: 503, headers: { "retry-after": "1" }, body: { error: "StoreUnavailable", message: "down" } }
      : { status: 200, body: { status: "ok" } },
  );
  const started = Date.now();
  assert.deepEqual(await client(url).health(), { status: "ok" });
  assert.equal(seen.length, 2);
  const gap = (seen[1]?.at ?? 0) - (seen[0]?.at ?? 0);
  assert.ok(gap >= 990, `retried after ${gap} ms`);
  assert.ok(Date.now() - started < 3000);
});

test("retries stop at maxAttempts with the last error, its attempts counted", async () => {
  const { url, seen } = await fake(() => ({
    status: 503,
    body: { error: "StoreUnavailable", message: "milvus down" },
  }));
  const error = await client(url, { retry: { maxAttempts: 3, baseDelayMs: 1 } })
    .getDocument("d1")
    .catch((e) => e);
  assert.ok(error instanceof Unavailable && error instanceof ServerError && error instanceof HTTPError);
  assert.equal(error.status, 503);
  assert.equal(error.message, "milvus down");
  assert.equal(error.code, "StoreUnavailable");
  assert.equal(error.attempts, 3);
  assert.equal(seen.length, 3);
});

test("a wait past maxTotalWaitMs is not made: the error comes at once", async () => {
  const { url, seen } = await fake(() => busy("30"));
  const started = Date.now();
  const error = await client(url, { retry: { maxTotalWaitMs: 2000 } })
    .search({ query: "x" })
    .catch((e) => e);
  assert.ok(error instanceof RateLimited && error instanceof ClientError);
  assert.equal(error.retryAfterMs, 30_000);
  assert.equal(seen.length, 1);
  assert.ok(Date.now() - started < 1000);
});

test("the backoff without Retry-After is full jitter, growing per retry", async () => {
  const draws: number[] = [];
  const random = (): number => {
    draws.push(1);
    return 0.999;
  };
  const { url, seen } = await fake((n) => (n < 3 ? busy() : { status: 200, body: { sessions: [] } }));
  await client(url, { random, retry: { baseDelayMs: 40, maxDelayMs: 1000 } }).listSessions();
  const gaps = seen.slice(1).map((s, i) => s.at - (seen[i]?.at ?? 0));
  assert.equal(draws.length, 3);
  // Each wait at least its draw (0.999 of 40, 80, 160 ms): the cap doubles per retry.
  [40, 80, 160].forEach((cap, i) => assert.ok((gaps[i] ?? 0) >= cap * 0.999 - 2, `waits ${gaps}`));
});

test("a write without an Idempotency-Key is not retried; reads never send one and are retried", async () => {
  const { url, seen } = await fake(() => busy("0"));
  const noKeys = client(url, { idempotencyKeys: false });
  assert.ok((await noKeys.recordTurn("s1", { user: "x" }).catch((e) => e)) instanceof RateLimited);
  assert.equal(seen.length, 1);
  assert.equal(seen[0]?.headers["idempotency-key"], undefined);
  assert.ok(
    (await client(url)
      .recordTurn("s1", { user: "x" }, { idempotencyKey: false })
      .catch((e) => e)) instanceof RateLimited,
  );
  assert.equal(seen.length, 2);

  const reads = client(url, { retry: { maxAttempts: 2, baseDelayMs: 1 } });
  await reads.buildContext({ message: "m", session_id: "s1" }).catch(() => undefined);
  assert.equal(seen.length, 4);
  assert.ok(seen.slice(2).every((s) => s.headers["idempotency-key"] === undefined && s.method === "POST"));
  const given = await reads.recordTurn("s1", { user: "x" }, { idempotencyKey: "mine-1" }).catch((e) => e);
  assert.ok(given instanceof RateLimited);
  assert.deepEqual(
    seen.slice(4).map((s) => s.headers["idempotency-key"]),
    ["mine-1", "mine-1"],
  );
});

test("404 with Strata's body is NotFound, not retried; a non-JSON 404 (Serve's proxy starting) is retried", async () => {
  const { url, seen } = await fake((n) =>
    n === 0
      ? { status: 404, body: { error: "NotFound", message: "no document d1" } }
      : n === 1
        ? { status: 404, body: "Not Found" }
        : { status: 200, body: { doc_id: "d1" } },
  );
  const c = client(url, { retry: { baseDelayMs: 1, maxTotalWaitMs: 5000 } });
  const missing = await c.getDocument("d1").catch((e) => e);
  assert.ok(missing instanceof NotFound && missing.message === "no document d1");
  assert.equal(seen.length, 1);
  assert.deepEqual(await c.getDocument("d1", { include_text: true }), { doc_id: "d1" });
  assert.equal(seen[2]?.url, "/v1/documents/d1?include_text=true");
});

test("a 409 for an Idempotency-Key still being applied is retried after its Retry-After", async () => {
  const { url, seen } = await fake((n) =>
    n === 0
      ? {
          status: 409,
          headers: { "retry-after": "0" },
          body: { error: "Conflict", field: "Idempotency-Key", message: "being applied" },
        }
      : { status: 201, body: OK_TURN },
  );
  assert.deepEqual(await client(url).recordTurn("s1", { user: "x" }), OK_TURN);
  assert.equal(seen.length, 2);
});

test("typed errors carry the server's message, name, field and details", async () => {
  const answers: Answer[] = [
    {
      status: 422,
      body: { error: "InvalidInput", message: "limit: too big", field: "limit", problems: ["limit: too big"] },
    },
    { status: 409, headers: { etag: '"7"' }, body: { error: "VersionConflict", message: "stale", current_version: 7 } },
    { status: 403, body: { error: "Forbidden", message: "read-only key" } },
    { status: 502, body: { error: "LLMError", message: "the LLM failed", job_id: "job-1" } },
    { status: 500, body: "<html>oops</html>" },
  ];
  const { url } = await fake((n) => answers[n] ?? { status: 200 });
  const c = client(url);
  const invalid = await c.listSessions({ limit: 100000 }).catch((e) => e);
  assert.ok(invalid instanceof InvalidInput);
  assert.equal(invalid.field, "limit");
  assert.deepEqual(invalid.problems, ["limit: too big"]);
  const stale = await c.deleteSkill("k1", { ifMatch: 6 }).catch((e) => e);
  assert.ok(stale instanceof Conflict && stale.currentVersion === 7 && stale.code === "VersionConflict");
  assert.ok((await c.recordOutcome("k1", { success: true }).catch((e) => e)) instanceof Forbidden);
  const llm = await c.extractSkill({ task: "t", trace: ["a"] }).catch((e) => e);
  assert.ok(llm instanceof UpstreamError && llm.jobId === "job-1" && llm.name === "UpstreamError");
  const internal = await c.health().catch((e) => e);
  assert.ok(internal instanceof ServerError && internal.status === 500 && internal.message === "<html>oops</html>");
  assert.ok(internal instanceof StrataError && internal instanceof Error);
});

test("If-Match is sent quoted; a query drops undefined values", async () => {
  const { url, seen } = await fake(() => ({ status: 200, body: {} }));
  const c = client(url);
  await c.updateSkill("k/1", { steps: ["a"] }, { ifMatch: 3 });
  await c.listTurns("s1", { newest_first: true, limit: 5, after: undefined });
  await c.scaleLayer("episodic", { shards: 4 });
  assert.equal(seen[0]?.headers["if-match"], '"3"');
  assert.equal(seen[0]?.method, "PATCH");
  assert.equal(seen[0]?.url, "/v1/skills/k%2F1");
  assert.equal(seen[1]?.url, "/v1/sessions/s1/turns?newest_first=true&limit=5");
  assert.equal(seen[2]?.url, "/v1/admin/layers/episodic:scale");
  assert.equal(seen[2]?.body, '{"shards":4}');
});

test("a call with no answer within timeoutMs rejects with TimeoutError, and is not retried", async () => {
  const { url, seen } = await fake(() => "hang");
  const started = Date.now();
  const error = await client(url, { timeoutMs: 150 })
    .health()
    .catch((e) => e);
  assert.ok(error instanceof TimeoutError, String(error));
  assert.ok(Date.now() - started < 1000);
  assert.equal(seen.length, 1);
  const perCall = await client(url)
    .health({ timeoutMs: 100 })
    .catch((e) => e);
  assert.ok(perCall instanceof TimeoutError);
});

test("the caller's signal aborts a call in flight and one waiting to retry", async () => {
  const { url } = await fake((n) => (n === 0 ? "hang" : busy("10")));
  const c = client(url);
  const controller = new AbortController();
  const pending = c.health({ signal: controller.signal });
  setTimeout(() => controller.abort(), 50);
  assert.ok((await pending.catch((e) => e)) instanceof AbortedError);

  const waiting = new AbortController();
  const started = Date.now();
  const retrying = c.health({ signal: waiting.signal });
  setTimeout(() => waiting.abort(), 200);
  assert.ok((await retrying.catch((e) => e)) instanceof AbortedError);
  assert.ok(Date.now() - started < 2000);
  const already = await c.health({ signal: AbortSignal.abort() }).catch((e) => e);
  assert.ok(already instanceof AbortedError);
});

test("close() aborts the calls in flight and refuses new ones", async () => {
  const { url } = await fake(() => "hang");
  const c = client(url);
  const pending = c.listDocuments();
  await new Promise((r) => setTimeout(r, 50));
  c.close();
  assert.ok((await pending.catch((e) => e)) instanceof AbortedError);
  assert.ok((await c.health().catch((e) => e)) instanceof AbortedError);
});

test("no server at all: ConnectionError, retried like a 503 for a read", async () => {
  const { url } = await fake(() => ({ status: 200 }));
  servers.pop()?.(); // stop it: the port refuses connections now
  await new Promise((r) => setTimeout(r, 50));
  const error = await client(url, { retry: { maxAttempts: 2, baseDelayMs: 1 } })
    .health()
    .catch((e) => e);
  assert.ok(error instanceof ConnectionError, String(error));
  assert.match(error.message, /no answer from GET/);
});

test("options are checked", () => {
  assert.throws(() => new StrataClient({ baseUrl: "", apiKey: "k" }), TypeError);
  assert.throws(() => new StrataClient({ baseUrl: "http://x", apiKey: "" }), TypeError);
  assert.throws(() => new StrataClient({ baseUrl: "http://x", apiKey: "k", retry: { maxAttempts: 0 } }), RangeError);
});
