// The client against the running stack named by STRATA_URL and STRATA_API_KEY (a tenant key;
// `strata up` prints one). Each run works in sessions and documents of its own, and forgets them.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Conflict, Forbidden, InvalidInput, NotFound, StrataClient, Unauthorized } from "../src/index.js";

const url = process.env.STRATA_URL ?? "";
const apiKey = process.env.STRATA_API_KEY ?? "";
/** An admin key of the same stack, for the admin calls; without one that test says it is skipped. */
const adminKey = process.env.STRATA_ADMIN_KEY ?? "";
const run = `ts-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
let strata: StrataClient;

before(() => {
  // Fail, never skip: `npm test` is how CI proves the client against a live stack.
  assert.ok(url && apiKey, "set STRATA_URL and STRATA_API_KEY to a running Strata stack");
  strata = new StrataClient({ baseUrl: url, apiKey });
});
after(() => strata?.close());

test("live: the stack answers and the key is good", async () => {
  assert.equal((await strata.health()).status, "ok");
  const wrong = new StrataClient({ baseUrl: url, apiKey: "sk-strata-not-a-key" });
  const error = await wrong.listSessions().catch((e) => e);
  assert.ok(error instanceof Unauthorized, String(error));
  assert.ok(error.message.length > 0);
});

test("live: record turns, read them back, build context and search", async () => {
  const session = `${run}-chat`;
  const first = await strata.recordTurn(session, {
    user: "Remember this: I am allergic to peanuts.",
    agent: "Noted: no peanuts.",
    turn_id: "t1",
  });
  assert.equal(first.session_id, session);
  assert.equal(first.turns.length, 1);
  assert.ok((first.versions.episodic ?? 0) >= 1);
  const batch = await strata.recordTurns(session, [
    { user: "My sister Ana lives in Lisbon.", agent: "Lisbon, got it.", turn_id: "t2" },
    { user: "I prefer trains to planes.", turn_id: "t3" },
  ]);
  assert.equal(batch.turns.length, 2);

  const turns = await strata.listTurns(session, { limit: 10 });
  assert.deepEqual(
    turns.turns.map((t) => t.turn_id),
    ["t1", "t2", "t3"],
  );
  const latest = await strata.listTurns(session, { newest_first: true, limit: 1 });
  assert.deepEqual(
    latest.turns.map((t) => t.turn_id),
    ["t3"],
  );

  const context = await strata.buildContext({ message: "What should I avoid eating?", session_id: session });
  assert.match(context.context, /peanut/i);
  assert.ok(context.token_count > 0);

  const found = await strata.search({ query: "peanuts allergy", session_id: session, top_k: 3 });
  assert.ok(found.hits.length > 0);
  assert.match(found.hits[0]?.text ?? "", /peanut/i);

  const sessions = await strata.listSessions({ limit: 1000 });
  assert.ok(sessions.sessions.some((s) => s.session_id === session));
});

test("live: a write retried with its Idempotency-Key is answered once", async () => {
  const session = `${run}-idem`;
  const key = `${run}-turn-1`;
  const once = await strata.recordTurn(session, { user: "only once" }, { idempotencyKey: key });
  const again = await strata.recordTurn(session, { user: "only once" }, { idempotencyKey: key });
  assert.deepEqual(again, once);
  assert.equal((await strata.listTurns(session)).turns.length, 1);
  const other = await strata.recordTurn(session, { user: "another text" }, { idempotencyKey: key }).catch((e) => e);
  assert.ok(other instanceof InvalidInput, String(other)); // the same key with another request
});

test("live: forget a turn and a session", async () => {
  const session = `${run}-forget`;
  await strata.recordTurns(session, [
    { user: "keep me", turn_id: "a" },
    { user: "drop me", turn_id: "b" },
  ]);
  await strata.forgetTurn(session, "b");
  assert.deepEqual(
    (await strata.listTurns(session)).turns.map((t) => t.turn_id),
    ["a"],
  );
  await strata.forgetSession(session);
  const gone = await strata.listTurns(session).catch((e) => e);
  assert.ok(gone instanceof NotFound, String(gone));
});

test("live: working memory", async () => {
  const session = `${run}-working`;
  const state = await strata.addWorkingItems(session, [{ role: "user", content: "the build is red" }], {
    task: "fix the build",
  });
  assert.ok(state.items.some((i) => i.content === "the build is red"));
  const read = await strata.getWorking(session);
  assert.equal(read.version, state.version);
  const stale = await strata
    .addWorkingItems(session, [{ role: "tool", content: "x" }], { ifMatch: state.version + 100 })
    .catch((e) => e);
  assert.ok(stale instanceof Conflict, String(stale));
});

test("live: documents: index, get, list, search, delete", async () => {
  const docId = `${run}-doc`;
  const doc = await strata.indexDocument({
    doc_id: docId,
    title: "Runbook",
    text: "# Deploys\n\nThe staging cluster is called Heron. Deploys to Heron need a green build.",
  });
  assert.equal(doc.doc_id, docId);
  assert.equal(doc.status, "ready");
  const read = await strata.getDocument(docId, { include_text: true });
  assert.match(read.text ?? "", /Heron/);
  const page = await strata.listDocuments({ limit: 1000 });
  assert.ok(page.documents.some((d) => d.doc_id === docId));
  const hits = await strata.search({ query: "staging cluster name", layers: ["semantic"], doc_ids: [docId] });
  assert.match(hits.hits[0]?.text ?? "", /Heron/);
  const stale = await strata.deleteDocument(docId, { ifMatch: doc.version + 5 }).catch((e) => e);
  assert.ok(stale instanceof Conflict && stale.currentVersion === doc.version, String(stale));
  await strata.deleteDocument(docId, { ifMatch: doc.version });
  assert.ok((await strata.getDocument(docId).catch((e) => e)) instanceof NotFound);
});

test("live: skills: extract, find, count a use, edit, history, delete", async () => {
  const task = `deploy the ${run} service`;
  const skill = await strata.extractSkill({
    task,
    trace: ["run the tests", { tool: "docker", command: "docker build -t app ." }, "kubectl apply -f deploy.yaml"],
    outcome: "deployed",
  });
  assert.ok(skill.skill_id);
  const found = await strata.findSkills({ task, top_k: 3 });
  assert.ok(found.skills.some((s) => s.skill_id === skill.skill_id));
  const used = await strata.recordOutcome(skill.skill_id, { success: true });
  assert.equal(used.uses, 1);
  const edited = await strata.updateSkill(
    skill.skill_id,
    { common_pitfalls: ["forgetting the tests"] },
    { ifMatch: used.version },
  );
  assert.deepEqual(edited.common_pitfalls, ["forgetting the tests"]);
  const history = await strata.skillHistory(skill.skill_id);
  assert.ok(history.versions.length >= 2);
  await strata.deleteSkill(skill.skill_id);
  assert.ok((await strata.getSkill(skill.skill_id).catch((e) => e)) instanceof NotFound);
});

test("live: export streams the tenant: a header, this run's turns, an end line with the count", async () => {
  const session = `${run}-export`;
  await strata.recordTurns(session, [
    { user: "The heron nests by the weir.", turn_id: "t1" },
    { user: "The kettle is on the stove.", turn_id: "t2" },
  ]);
  const kinds: string[] = [];
  const turns: string[] = [];
  let records = 0;
  for await (const line of strata.export({ layers: ["episodic"] })) {
    kinds.push(line.kind);
    if (line.kind === "turn" && line.session_id === session) turns.push(line.turn_id);
    if (line.kind === "end") records = line.records;
  }
  assert.equal(kinds[0], "header");
  assert.equal(kinds.at(-1), "end");
  assert.equal(records, kinds.length - 2);
  assert.deepEqual(turns, ["t1", "t2"]);
  await strata.forgetSession(session);
});

test("live: a bad field is an InvalidInput with the server's message", async () => {
  const error = await strata.listSessions({ limit: 100_000 }).catch((e) => e);
  assert.ok(error instanceof InvalidInput, String(error));
  assert.match(error.message, /limit/);
  assert.equal(error.status, 422);
});

test(
  "live: admin: a tenant's keys made, scoped, listed, revoked, and the tenant forgotten",
  { skip: adminKey ? false : "set STRATA_ADMIN_KEY to an admin key of the stack to run it" },
  async () => {
    const admin = new StrataClient({ baseUrl: url, apiKey: adminKey });
    const tenant = `${run}-tenant`;
    try {
      const writer = await admin.createKey({ tenant, name: "writer" });
      const reader = await admin.createKey({ tenant, read_only: true });
      const sessionKey = await admin.createKey({ tenant, session_id: "only-this" });
      assert.ok(writer.key.startsWith("sk-strata-") && writer.tenant === tenant);
      const listed = await admin.listKeys({ tenant });
      assert.deepEqual(
        new Set(listed.keys.map((k) => k.key_id)),
        new Set([writer.key_id, reader.key_id, sessionKey.key_id]),
      );

      const asWriter = new StrataClient({ baseUrl: url, apiKey: writer.key });
      const asReader = new StrataClient({ baseUrl: url, apiKey: reader.key });
      const asSession = new StrataClient({ baseUrl: url, apiKey: sessionKey.key });
      await asWriter.recordTurn("s1", { user: "written by the writer" });
      assert.ok((await asReader.recordTurn("s1", { user: "no" }).catch((e) => e)) instanceof Forbidden);
      assert.equal((await asReader.listTurns("s1")).turns.length, 1);
      assert.ok((await asSession.listSessions().catch((e) => e)) instanceof Forbidden);
      assert.ok((await asSession.listTurns("s1").catch((e) => e)) instanceof Forbidden);
      assert.ok((await asWriter.createKey({ tenant }).catch((e) => e)) instanceof Forbidden);

      const revoked = await admin.revokeKey(reader.key_id);
      assert.ok(revoked.revoked_at);
      const forgotten = await admin.forgetTenant(tenant);
      assert.equal(forgotten.tenant, tenant);
      assert.ok(forgotten.keys_revoked.includes(writer.key_id));
    } finally {
      admin.close();
    }
  },
);
