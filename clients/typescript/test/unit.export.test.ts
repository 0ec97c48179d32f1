// export(): GET /v1/export read as it streams, against a local server standing in for Strata:
// parsed lines in order however the body is cut; a stream cut short or of another version
// rejected; a 503 before the body retried, a 403 raised; a stalled stream timed out or closed;
// a loop broken early stops the download.
import assert from "node:assert/strict";
import { type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";

import { AbortedError, type ExportLine, Forbidden, StrataClient, StrataError, TimeoutError } from "../src/index.js";

const HEADER = {
  kind: "header",
  format: "strata-export",
  version: 1,
  strata_version: "0.1.0",
  tenant: "acme",
  embedder: { provider: "onnx-minilm", model: "all-MiniLM-L6-v2", dim: 384 },
  created_at: "2026-03-01T12:00:00Z",
  layers: ["episodic"],
  vectors: false,
};
const TURNS = [0, 1, 2].map((n) => ({
  kind: "turn",
  session_id: "s",
  turn_id: `t${n}`,
  timestamp: "2026-03-01T12:00:00Z",
  user: `turn ${n} ${"x".repeat(5000)}`,
  metadata: {},
}));
const WHOLE = [HEADER, ...TURNS, { kind: "end", records: TURNS.length }].map((line) => JSON.stringify(line) + "\n");

/** The n-th request's answer: a status and the body's chunks, sent 5 ms apart; "stall" sends the
 * first chunk and then nothing. */
type Script = (n: number) => { status: number; chunks: string[]; stall?: boolean };

const servers: Array<() => void> = [];
after(() => servers.forEach((stop) => stop()));

async function fake(script: Script): Promise<{ url: string; urls: string[]; closed: Promise<void> }> {
  const urls: string[] = [];
  let onClose: () => void = () => undefined;
  const closed = new Promise<void>((resolve) => (onClose = resolve));
  const server = createServer(async (req, res: ServerResponse) => {
    urls.push(req.url ?? "");
    const { status, chunks, stall } = script(urls.length - 1);
    res.on("close", onClose);
    res.writeHead(status, { "content-type": status < 400 ? "application/x-ndjson" : "application/json" });
    for (const [i, chunk] of chunks.entries()) {
      res.write(chunk);
      if (stall) return; // never ends
      await new Promise((r) => setTimeout(r, i < 20 ? 5 : 0));
    }
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push(() => server.close() && server.closeAllConnections());
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, urls, closed };
}

/** The body cut every 1,000 characters, across lines, as a network would. */
function chunks(lines: string[]): string[] {
  const body = lines.join("");
  return Array.from({ length: Math.ceil(body.length / 1000) }, (_, i) => body.slice(i * 1000, (i + 1) * 1000));
}

function client(url: string, timeoutMs = 2000): StrataClient {
  return new StrataClient({ baseUrl: url, apiKey: "sk-strata-test", retry: { baseDelayMs: 5 }, timeoutMs });
}

async function collect(lines: AsyncIterable<ExportLine>): Promise<ExportLine[]> {
  const out: ExportLine[] = [];
  for await (const line of lines) out.push(line);
  return out;
}

test("export() yields the header, each record and the end line, however the body is cut", async () => {
  const { url, urls } = await fake(() => ({ status: 200, chunks: chunks(WHOLE) }));
  const lines = await collect(client(url).export({ layers: ["episodic", "working"] }));
  assert.deepEqual(lines, [HEADER, ...TURNS, { kind: "end", records: 3 }]);
  assert.equal(urls[0], "/v1/export?layers=episodic&layers=working");
});

test("an export cut short, of another version or with a line that is not JSON is rejected", async () => {
  const cases: Array<[string[], RegExp]> = [
    [WHOLE.slice(0, -1), /without its end line: cut short/],
    [[WHOLE[0]!.replace('"version":1', '"version":9')], /version 9/],
    [[WHOLE[0]!, '{"kind": "turn", "sess\n'], /line 2 is not JSON/],
  ];
  for (const [lines, message] of cases) {
    const { url } = await fake(() => ({ status: 200, chunks: chunks(lines) }));
    const error = await collect(client(url).export()).catch((e) => e);
    assert.ok(error instanceof StrataError, String(error));
    assert.match(error.message, message);
  }
});

test("a 503 before the body is retried; a 403 is raised as Forbidden", async () => {
  const busy = JSON.stringify({ error: "StoreUnavailable", message: "busy", retry_after_s: 0 });
  const { url, urls } = await fake((n) => (n === 0 ? { status: 503, chunks: [busy] } : { status: 200, chunks: WHOLE }));
  assert.equal((await collect(client(url).export())).length, WHOLE.length);
  assert.equal(urls.length, 2);
  const refused = JSON.stringify({ error: "Forbidden", message: "a session key may not export" });
  const forbidden = await fake(() => ({ status: 403, chunks: [refused] }));
  assert.ok((await collect(client(forbidden.url).export()).catch((e) => e)) instanceof Forbidden);
});

test("a stream that stalls times out; close() aborts one; a loop broken early stops the download", async () => {
  const stalled = await fake(() => ({ status: 200, chunks: WHOLE, stall: true }));
  const error = await collect(client(stalled.url, 200).export()).catch((e) => e);
  assert.ok(error instanceof TimeoutError, String(error));

  const c = client(stalled.url, 10_000);
  const pending = collect(c.export());
  await new Promise((r) => setTimeout(r, 100));
  c.close();
  assert.ok((await pending.catch((e) => e)) instanceof AbortedError);

  // The server sends the header and two turns and then holds the response open: only the client can end it.
  const open = await fake(() => ({ status: 200, chunks: [WHOLE.slice(0, 3).join("")], stall: true }));
  for await (const line of client(open.url, 10_000).export()) if (line.kind === "turn") break;
  await open.closed; // the server saw the connection go
});
