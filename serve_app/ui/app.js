// The Strata memory inspector: one page over the REST API, with the key a person pastes.
//
// Memory content is hostile input. Every piece of it reaches the page as a text node
// (textContent / createTextNode), never as HTML; the page's Content-Security-Policy refuses
// inline script as a second line. The key lives in sessionStorage (this tab only), is sent
// only as an Authorization header to this origin, and never appears in a URL.
"use strict";

(() => {
  const KEY_SLOT = "strata.inspector.key";
  // The API is served beside /ui/: "../v1/..." from the page, under any route prefix.
  const API_ROOT = new URL("../", document.baseURI);
  const PATHS = [["dense", "dense"], ["lexical", "BM25"], ["graph", "graph"]];
  const PAGE = 50;

  const $ = (id) => document.getElementById(id);
  let key = sessionStorage.getItem(KEY_SLOT) || "";
  let writesRefused = null; // the API's message once a write was answered 403
  let openSession = null;

  // -- building the page from data, as text only ------------------------------------------

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (name === "class") node.className = value;
      else if (name === "data") Object.assign(node.dataset, value);
      else if (name === "on") for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
      else node.setAttribute(name, value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function fill(node, ...children) {
    node.replaceChildren();
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  function table(node, headings, rows) {
    fill(node,
      el("thead", null, el("tr", null, headings.map((h) => el("th", null, h)))),
      el("tbody", null, rows));
  }

  const when = (iso) => (iso ? new Date(iso).toLocaleString() : "—");
  const percent = (rate) => (rate === null || rate === undefined ? "not used yet" : `${Math.round(rate * 100)} %`);

  function show(node, visible) {
    node.hidden = !visible;
  }

  function say(message) {
    fill($("notice"), message);
    show($("notice"), Boolean(message));
  }

  function fail(error) {
    const status = error.status ? `${error.status}: ` : "";
    const retry = error.retryAfter ? ` (retry after ${error.retryAfter} s)` : "";
    fill($("error"), status + error.message + retry);
    show($("error"), true);
  }

  function clearError() {
    fill($("error"));
    show($("error"), false);
  }

  // -- the API ---------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message, retryAfter) {
      super(message);
      this.status = status;
      this.retryAfter = retryAfter;
    }
  }

  async function api(method, path, body) {
    const headers = { Authorization: `Bearer ${key}`, Accept: "application/json" };
    const init = { method, headers, cache: "no-store", credentials: "omit", redirect: "error" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(new URL(path, API_ROOT), init);
    } catch (err) {
      throw new ApiError(0, `the API does not answer (${err.message})`);
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!response.ok) {
      const message = data && typeof data.message === "string" ? data.message : text.slice(0, 500) || response.statusText;
      throw new ApiError(response.status, message, response.headers.get("Retry-After"));
    }
    return data;
  }

  const seg = (id) => encodeURIComponent(id);
  const query = (params) => {
    const q = new URLSearchParams();
    for (const [name, value] of Object.entries(params)) if (value !== null && value !== undefined && value !== "") q.set(name, value);
    const s = q.toString();
    return s ? `?${s}` : "";
  };

  // Run an action, showing the API's message when it fails.
  async function guarded(action) {
    clearError();
    try {
      await action();
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      fail(err);
      if (err.status === 401) disconnect(false);
    }
  }

  // -- forgetting, after an inline confirmation ---------------------------------------------

  // A forget asks first. A key that may not write gets the API's 403 message, and the page
  // shows itself read-only from then on.
  function forgetButton(what, label, path, reload, forgotten) {
    if (writesRefused !== null) return el("span", { class: "note", title: writesRefused }, "read-only");
    const cell = el("span", { class: "forget" });
    const ask = el("button", { type: "button", class: "danger", data: { forget: what } }, "Forget");
    ask.addEventListener("click", () => {
      fill(cell,
        el("span", null, `Forget ${label}? This cannot be undone. `),
        el("button", { type: "button", class: "danger", data: { confirm: what }, on: { click: () => guarded(async () => {
          try {
            await api("DELETE", path);
          } catch (err) {
            if (err instanceof ApiError && err.status === 403) {
              writesRefused = err.message;
              fill($("status"), `Read-only: ${err.message}`);
              await reload();
            }
            throw err;
          }
          forgotten();
          say(`Forgot ${label}.`);
          await reload();
        }) } }, "Yes, forget"),
        " ",
        el("button", { type: "button", data: { cancel: what }, on: { click: () => fill(cell, ask) } }, "Cancel"));
    });
    cell.append(ask);
    return cell;
  }

  // -- sessions, turns, working memory -----------------------------------------------------

  const pages = {}; // per list: the next_after of its last page (null: no more)

  async function loadSessions(more) {
    const after = more ? pages.sessions : null;
    const page = await api("GET", `v1/sessions${query({ after, limit: PAGE })}`);
    pages.sessions = page.next_after || null;
    const rows = page.sessions.map((s) =>
      el("tr", { data: { session: s.session_id } },
        el("td", null, el("button", { type: "button", class: "link", data: { open: s.session_id },
          on: { click: () => guarded(() => openSessionDetail(s.session_id)) } }, s.session_id)),
        el("td", { class: "num" }, s.turns),
        el("td", null, when(s.first_at)),
        el("td", null, when(s.last_at)),
        el("td", null, forgetButton("session", `session ${s.session_id}`, `v1/sessions/${seg(s.session_id)}`,
          () => loadSessions(false), () => openSession === s.session_id && show($("session-detail"), false)))));
    const body = $("session-list").querySelector("tbody");
    if (more && body) body.append(...rows);
    else table($("session-list"), ["Session", "Turns", "First", "Last", ""], rows);
    if (!more && rows.length === 0) fill($("session-list"), el("caption", null, "No sessions in this tenant."));
    show($("sessions-more"), pages.sessions !== null);
    const ids = [...$("session-list").querySelectorAll("tr[data-session]")].map((r) => r.dataset.session);
    fill($("session-ids"), ids.map((id) => el("option", { value: id })));
  }

  function turnItem(t) {
    const who = [t.speaker, t.role].filter(Boolean).join(" · ");
    return el("li", { data: { turn: t.turn_id } },
      el("div", { class: "meta" }, `${when(t.timestamp)} · ${t.turn_id}${who ? ` · ${who}` : ""}`),
      el("pre", { class: "text" }, t.text ?? [t.user, t.agent].filter(Boolean).join("\n")));
  }

  async function loadTurns(sessionId, more) {
    const after = more ? pages.turns : null;
    let page;
    try {
      page = await api("GET", `v1/sessions/${seg(sessionId)}/turns${query({ after, limit: PAGE })}`);
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404)) throw err;
      page = { turns: [], next_after: null }; // no turns: its working memory may still hold items
    }
    pages.turns = page.next_after || null;
    const items = page.turns.map(turnItem);
    if (more) $("turn-list").append(...items);
    else fill($("turn-list"), items.length ? items : el("li", { class: "note" }, "No turns."));
    show($("turns-more"), pages.turns !== null);
  }

  async function loadWorking(sessionId) {
    const state = await api("GET", `v1/sessions/${seg(sessionId)}/working`);
    fill($("working-summary"),
      `${state.items.length} items, ${state.total_tokens} of ${state.max_tokens} tokens (version ${state.version})`);
    table($("working-list"), ["Role", "Content", "Importance", "Tokens", "Summarized", "Added"],
      state.items.map((item) => el("tr", { data: { item: item.id } },
        el("td", null, item.role),
        el("td", null, el("pre", { class: "text" }, item.content)),
        el("td", { class: "num", title: (item.reasons || []).join("; ") }, item.importance.toFixed(2)),
        el("td", { class: "num" }, item.tokens),
        el("td", null, item.summarized ? "yes" : "no"),
        el("td", null, when(item.created_at)))));
  }

  async function openSessionDetail(sessionId) {
    openSession = sessionId;
    fill($("session-title"), `Session ${sessionId}`);
    $("search-session").value = sessionId;
    show($("session-detail"), true);
    await loadTurns(sessionId, false);
    await loadWorking(sessionId);
  }

  // -- documents ---------------------------------------------------------------------------

  async function loadDocuments(more) {
    const after = more ? pages.documents : null;
    const page = await api("GET", `v1/documents${query({ after, limit: PAGE })}`);
    pages.documents = page.next_after || null;
    const rows = page.documents.map((d) =>
      el("tr", { data: { document: d.doc_id } },
        el("td", null, el("button", { type: "button", class: "link", data: { open: d.doc_id },
          on: { click: () => guarded(() => openDocument(d.doc_id)) } }, d.doc_id)),
        el("td", null, d.title ?? ""),
        el("td", null, d.status),
        el("td", { class: "num" }, d.chars ?? ""),
        el("td", { class: "num" }, d.children ?? ""),
        el("td", { class: "num" }, d.version),
        el("td", null, forgetButton("document", `document ${d.doc_id}`, `v1/documents/${seg(d.doc_id)}`,
          () => loadDocuments(false), () => show($("document-detail"), false)))));
    const body = $("document-list").querySelector("tbody");
    if (more && body) body.append(...rows);
    else table($("document-list"), ["Document", "Title", "Status", "Characters", "Chunks", "Version", ""], rows);
    if (!more && rows.length === 0) fill($("document-list"), el("caption", null, "No documents in this tenant."));
    show($("documents-more"), pages.documents !== null);
  }

  function facts(node, pairs) {
    fill(node, pairs.filter(([, v]) => v !== null && v !== undefined && v !== "")
      .flatMap(([k, v]) => [el("dt", null, k), el("dd", null, typeof v === "object" ? JSON.stringify(v) : v)]));
  }

  async function openDocument(docId) {
    const d = await api("GET", `v1/documents/${seg(docId)}?include_text=true`);
    fill($("document-title"), d.title ? `${d.title} (${d.doc_id})` : d.doc_id);
    facts($("document-facts"), [
      ["Status", d.status], ["Version", d.version], ["Chunking", d.strategy], ["Characters", d.chars],
      ["Passages", d.parents], ["Chunks", d.children], ["Created", d.created_at && when(d.created_at)],
      ["Updated", d.updated_at && when(d.updated_at)], ["Expires", d.expires_at && when(d.expires_at)],
      ["Error", d.error], ["Metadata", Object.keys(d.metadata || {}).length ? d.metadata : null],
    ]);
    fill($("document-chunks"), "The API does not list a document's chunks; the full text follows. "
      + "A search shows the passages it finds, with their place in the document.");
    fill($("document-text"), d.text ?? "");
    show($("document-detail"), true);
  }

  // -- skills ------------------------------------------------------------------------------

  async function loadSkills(more) {
    const after = more ? pages.skills : null;
    const page = await api("GET", `v1/skills${query({ after, limit: PAGE })}`);
    pages.skills = page.next_after || null;
    const rows = page.skills.map((s) =>
      el("tr", { data: { skill: s.skill_id } },
        el("td", null, el("button", { type: "button", class: "link", data: { open: s.skill_id },
          on: { click: () => guarded(() => openSkill(s.skill_id)) } }, s.skill_name)),
        el("td", { class: "num", data: { rate: s.skill_id } }, percent(s.success_rate)),
        el("td", { class: "num" }, `${s.successes} / ${s.uses}`),
        el("td", { class: "num" }, s.confidence.toFixed(2)),
        el("td", null, when(s.updated_at)),
        el("td", null, forgetButton("skill", `skill ${s.skill_name}`, `v1/skills/${seg(s.skill_id)}`,
          () => loadSkills(false), () => show($("skill-detail"), false)))));
    const body = $("skill-list").querySelector("tbody");
    if (more && body) body.append(...rows);
    else table($("skill-list"), ["Skill", "Success rate", "Successes / uses", "Confidence", "Updated", ""], rows);
    if (!more && rows.length === 0) fill($("skill-list"), el("caption", null, "No skills in this tenant."));
    show($("skills-more"), pages.skills !== null);
  }

  function list(title, items) {
    if (!items || items.length === 0) return null;
    return el("div", null, el("h5", null, title), el("ol", null, items.map((i) => el("li", null, i))));
  }

  async function openSkill(skillId) {
    const [s, history] = await Promise.all([
      api("GET", `v1/skills/${seg(skillId)}`),
      api("GET", `v1/skills/${seg(skillId)}/history`),
    ]);
    fill($("skill-title"), `${s.skill_name} (${s.skill_id}, version ${s.version})`);
    fill($("skill-body"),
      el("p", null, s.description),
      el("p", null, `Success rate ${percent(s.success_rate)}: ${s.successes} of ${s.uses} uses; confidence ${s.confidence.toFixed(2)}`),
      list("When", s.trigger_conditions), list("Steps", s.steps), list("Pitfalls", s.common_pitfalls),
      list("Success criteria", s.success_criteria), list("Learned from", s.tasks));
    table($("skill-history"), ["Version", "At", "Key", "Change", "Uses", "Successes", "Outcome"],
      history.versions.map((v) => el("tr", null,
        el("td", { class: "num" }, v.version),
        el("td", null, when(v.at)),
        el("td", null, v.by || "—"),
        el("td", null, v.change),
        el("td", { class: "num" }, v.uses),
        el("td", { class: "num" }, v.successes),
        el("td", null, v.outcome ? `${v.outcome.success ? "success" : "failure"}${v.outcome.notes ? `: ${v.outcome.notes}` : ""}` : ""))));
    show($("skill-detail"), true);
  }

  // -- audit -------------------------------------------------------------------------------

  let auditAfter = null;

  async function loadAudit(more) {
    const after = more ? auditAfter : null;  // the cursor: paging by time skips entries that share one
    const page = await api("GET", `v1/audit${query({ after, limit: 100 })}`);
    const rows = page.entries.map((e) => el("tr", { data: { audit: e.record_id } },
      el("td", null, when(e.at)),
      el("td", null, e.key_id || "in-cluster"),
      el("td", null, e.op),
      el("td", null, e.layer),
      el("td", null, e.record_id),
      el("td", { class: "num" }, e.version ?? "")));
    auditAfter = page.next_after;
    const body = $("audit-list").querySelector("tbody");
    if (more && body) body.append(...rows);
    else table($("audit-list"), ["At", "Key", "Operation", "Layer", "Record", "Version"], rows);
    if (!more && rows.length === 0) fill($("audit-list"), el("caption", null, "No changes recorded yet."));
    show($("audit-more"), page.next_after !== null);
  }

  // -- usage -------------------------------------------------------------------------------

  async function loadUsage() {
    const usage = await api("GET", "v1/usage");  // the last 24 hours (whole hours)
    fill($("usage-window"), `From ${when(usage.since)} to ${when(usage.until)}; counts of other processes show within seconds.`);
    const items = Object.entries(usage.items || {}).flatMap(([layer, counts]) =>
      Object.entries(counts).map(([what, n]) => el("tr", { data: { usage: `${layer}.${what}` } },
        el("td", null, layer), el("td", null, what), el("td", { class: "num" }, n))));
    table($("usage-items"), ["Layer", "What", "Count"], items);
    table($("usage-tokens"), ["Tokens", "Count"], [["embedding", "embedding"], ["llm_in", "LLM in"], ["llm_out", "LLM out"]]
      .map(([name, label]) => el("tr", { data: { token: name } }, el("td", null, label), el("td", { class: "num" }, usage.tokens[name]))));
    const calls = Object.entries(usage.calls).map(([route, n]) => el("tr", { data: { route } },
      el("td", null, route), el("td", { class: "num" }, n)));
    table($("usage-calls"), ["Route", "Calls"], calls);
    if (calls.length === 0) fill($("usage-calls"), el("caption", null, "No calls in the window yet."));
  }

  // -- search and context ------------------------------------------------------------------

  function ranks(hit) {
    const found = hit.ranks || {};
    const known = PATHS.map(([path, label]) =>
      el("span", { class: found[path] ? "rank" : "rank none", data: { path } }, `${label} ${found[path] ? `#${found[path]}` : "—"}`));
    const other = Object.keys(found).filter((p) => !PATHS.some(([path]) => path === p))
      .map((p) => el("span", { class: "rank", data: { path: p } }, `${p} #${found[p]}`));
    return el("span", { class: "ranks" }, known, other);
  }

  function hitItem(hit) {
    const where = hit.source
      ? `${hit.source.title || hit.source.doc_id}, characters ${hit.source.start}–${hit.source.end}`
      : hit.session_id ? `session ${hit.session_id}` : "";
    return el("li", { class: "hit", data: { hit: hit.id } },
      el("div", { class: "meta" }, `${hit.layer} · ${hit.kind} · score ${hit.score.toFixed(3)}${hit.relevance == null ? "" : ` · relevance ${hit.relevance.toFixed(2)}`}${where ? ` · ${where}` : ""}`, " ", ranks(hit)),
      el("pre", { class: "text" }, hit.text));
  }

  async function runSearch() {
    const text = $("query").value.trim();
    if (!text) return;
    const sessionId = $("search-session").value.trim() || null;
    const budget = $("max-tokens").value ? Number($("max-tokens").value) : null;
    const taskType = $("task-type").value.trim() || "general";
    fill($("hit-list"));
    fill($("hits-summary"), "Searching…");
    const search = { query: text, top_k: 10 };
    if (sessionId) search.session_id = sessionId;
    const found = await api("POST", "v1/search", search);
    fill($("hits-summary"), found.hits.length
      ? `${found.hits.length} hits; the rank each retrieval path gave each hit (— : that path did not find it).`
      : "No hits.",
      Object.keys(found.missing || {}).length ? ` Left out: ${Object.entries(found.missing).map(([l, why]) => `${l} (${why})`).join(", ")}.` : "");
    fill($("hit-list"), found.hits.map(hitItem));
    await showContext(text, sessionId, taskType, budget);
  }

  async function showContext(text, sessionId, taskType, budget) {
    fill($("context-sections"));
    fill($("context-text"));
    if (!sessionId) {
      fill($("context-summary"), "Pick a session to see the context /v1/context would build for it.");
      return;
    }
    const request = { message: text, session_id: sessionId, task_type: taskType };
    if (budget) request.max_tokens = budget;
    const ctx = await api("POST", "v1/context", request);
    fill($("context-summary"),
      `${ctx.token_count} tokens used of a budget of ${ctx.max_tokens} (task type ${ctx.task_type}${ctx.refined ? ", refined by the LLM" : ""})`,
      Object.keys(ctx.missing || {}).length ? `; left out: ${Object.entries(ctx.missing).map(([l, why]) => `${l} (${why})`).join(", ")}` : "");
    table($("context-sections"), ["Layer", "Items", "Tokens", "Budget"],
      ctx.sections.map((s) => el("tr", { data: { layer: s.layer } },
        el("td", null, s.layer),
        el("td", { class: "num" }, s.items.length),
        el("td", { class: "num" }, s.tokens),
        el("td", { class: "num" }, ctx.budgets && ctx.budgets[s.layer] !== undefined ? ctx.budgets[s.layer] : "—"))));
    fill($("context-text"), ctx.context);
  }

  // -- tabs and the key --------------------------------------------------------------------

  const loaders = {
    sessions: () => loadSessions(false),
    documents: () => loadDocuments(false),
    skills: () => loadSkills(false),
    audit: () => loadAudit(false),
    search: async () => {},
    usage: loadUsage,
  };

  function selectTab(name) {
    for (const button of $("tabs").querySelectorAll("button")) button.setAttribute("aria-pressed", String(button.dataset.tab === name));
    for (const panel of document.querySelectorAll(".panel")) show(panel, panel.id === name);
    say("");
    return guarded(loaders[name]);
  }

  function connected(on) {
    show($("tabs"), on);
    show($("disconnect"), on);
    $("key").value = "";
    if (!on) for (const panel of document.querySelectorAll(".panel")) show(panel, false);
  }

  function disconnect(clearMessages) {
    key = "";
    sessionStorage.removeItem(KEY_SLOT);
    writesRefused = null;
    openSession = null;
    // Nothing of the last tenant stays on the page.
    for (const id of ["session-list", "turn-list", "working-list", "working-summary", "document-list", "document-facts",
      "document-text", "skill-list", "skill-body", "skill-history", "audit-list", "hit-list", "hits-summary",
      "context-summary", "context-sections", "context-text", "session-ids", "usage-window", "usage-items", "usage-tokens",
      "usage-calls"]) fill($(id));
    for (const id of ["session-detail", "document-detail", "skill-detail"]) show($(id), false);
    $("search-session").value = "";
    $("session-id").value = "";
    connected(false);
    fill($("status"), "Paste a key of the tenant to inspect.");
    if (clearMessages) {
      clearError();
      say("");
    }
  }

  async function connect(event) {
    event.preventDefault();
    const pasted = $("key").value.trim();
    if (!pasted) return;
    disconnect(true);
    key = pasted;
    sessionStorage.setItem(KEY_SLOT, key);
    start();
  }

  function start() {
    connected(true);
    fill($("status"), `Key …${key.slice(-4)}. Forget buttons work if the key may write.`);
    selectTab("sessions");
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("key-form").addEventListener("submit", connect);
    $("disconnect").addEventListener("click", () => disconnect(true));
    for (const button of $("tabs").querySelectorAll("button")) button.addEventListener("click", () => selectTab(button.dataset.tab));
    $("sessions-more").addEventListener("click", () => guarded(() => loadSessions(true)));
    $("session-open-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const sessionId = $("session-id").value.trim();
      if (sessionId) guarded(() => openSessionDetail(sessionId));
    });
    $("turns-more").addEventListener("click", () => guarded(() => loadTurns(openSession, true)));
    $("documents-more").addEventListener("click", () => guarded(() => loadDocuments(true)));
    $("skills-more").addEventListener("click", () => guarded(() => loadSkills(true)));
    $("audit-more").addEventListener("click", () => guarded(() => loadAudit(true)));
    $("search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      guarded(runSearch);
    });
    if (key) start();
  });
})();
