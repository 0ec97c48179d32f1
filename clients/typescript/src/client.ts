/**
 * {@link StrataClient}: one method per call of Strata's HTTP API (docs/api.md).
 *
 * What goes on the wire keeps the API's names (`session_id`, `top_k`), typed from the OpenAPI
 * document (src/schema.ts); the client's own options are camelCase (`timeoutMs`, `ifMatch`).
 */
import { StrataError } from "./errors.js";
import { type CallOptions, type Query, Transport } from "./http.js";
import { type RetryOptions, resolveRetry } from "./retry.js";
import type { components, paths } from "./schema.js";

type Schemas = components["schemas"];
/** The query parameters of `GET <path>`, as the OpenAPI document states them. */
type QueryOf<P extends keyof paths> = paths[P] extends { get: { parameters: { query?: infer Q } } }
  ? NonNullable<Q>
  : never;

export type TurnIn = Schemas["TurnIn"];
export type RecordTurnsResult = Schemas["RecordTurnsResult"];
export type ContextRequest = Schemas["ContextRequest"];
export type ContextResult = Schemas["ContextResult"];
export type SearchRequest = Schemas["SearchRequest"];
export type SearchResult = Schemas["SearchResult"];
export type SessionList = Schemas["SessionList"];
export type SessionTurns = Schemas["SessionTurns"];
export type ForgetResult = Schemas["ForgetResult"];
export type WorkingItemIn = Schemas["WorkingItemIn"];
export type WorkingState = Schemas["WorkingState"];
export type DocumentIn = Schemas["DocumentIn"];
export type DocumentOut = Schemas["DocumentOut"];
export type DocumentList = Schemas["DocumentList"];
export type DocumentDeleted = Schemas["DocumentDeleted"];
export type EntityOut = Schemas["EntityOut"];
export type SkillExtractIn = Schemas["SkillExtractIn"];
export type SkillOut = Schemas["SkillOut"];
export type SkillList = Schemas["SkillList"];
export type SkillPatch = Schemas["SkillPatch"];
export type SkillDeleted = Schemas["SkillDeleted"];
export type SkillHistory = Schemas["SkillHistory"];
export type SkillJobOut = Schemas["SkillJobOut"];
export type OutcomeIn = Schemas["OutcomeIn"];
export type InteractionIn = Schemas["InteractionIn"];
export type InteractionResult = Schemas["InteractionResult"];
export type AuditHistory = Schemas["AuditHistory"];
export type KeyCreateIn = Schemas["KeyCreateIn"];
export type KeyCreated = Schemas["KeyCreated"];
export type KeyInfo = Schemas["KeyInfo"];
export type KeyList = Schemas["KeyList"];
export type TenantForgotten = Schemas["TenantForgotten"];
export type Health = Schemas["Health"];
export type ScaleIn = Schemas["ScaleIn"];
export type LayerPlacement = Schemas["LayerPlacement"];

export type ExportQuery = QueryOf<"/v1/export">;

// The export format (strata/schema/export.py, docs/api.md): JSON Lines, told apart by `kind`.
// Fields at their default of null are left out of a line.

/** The first line of an export. */
export interface ExportHeader {
  kind: "header";
  format: "strata-export";
  version: number;
  strata_version: string;
  tenant: string;
  embedder: { provider: string; model: string; dim: number };
  created_at: string;
  layers: Array<"working" | "episodic" | "semantic" | "procedural">;
  vectors: boolean;
}
export interface TurnRecord {
  kind: "turn";
  session_id: string;
  turn_id: string;
  timestamp: string;
  user?: string;
  agent?: string;
  speaker?: string;
  metadata: Record<string, unknown>;
  expires_at?: string;
  vector?: number[];
}
export interface SummaryRecord {
  kind: "summary";
  session_id: string;
  summary_id: string;
  turn_ids: string[];
  summary: string;
  key_topics: string[];
  action_items: string[];
  user_preferences: string[];
  method: string;
  fallback_reason?: string;
}
export interface DocumentRecord {
  kind: "document";
  doc_id: string;
  title?: string;
  text: string;
  metadata: Record<string, unknown>;
  created_at?: string;
  updated_at?: string;
}
export interface SkillRecord {
  kind: "skill";
  skill: SkillOut;
  history: SkillHistory["versions"];
}
export interface WorkingItemRecord {
  kind: "working_item";
  session_id: string;
  role: string;
  content: string;
  importance: number;
  created_at: string;
  turn_id?: string;
  expires_at?: string;
}
/** The last line: how many records came before it (header and end line not counted). */
export interface ExportEnd {
  kind: "end";
  records: number;
}
export type ExportRecord = TurnRecord | SummaryRecord | DocumentRecord | SkillRecord | WorkingItemRecord;
/** One parsed line of an export. */
export type ExportLine = ExportHeader | ExportRecord | ExportEnd;

/** The format's name and the version this client reads. */
const EXPORT_FORMAT = "strata-export";
const EXPORT_VERSION = 1;
const RECORD_KINDS = new Set(["turn", "summary", "document", "skill", "working_item"]);

export type ListTurnsQuery = QueryOf<"/v1/sessions/{session_id}/turns">;
export type PageQuery = QueryOf<"/v1/sessions">;
export type FindSkillsQuery = QueryOf<"/v1/skills">;
export type AuditQuery = QueryOf<"/v1/audit">;

/** A versioned write's options: `ifMatch` is the version it was made against (409 when stale). */
export interface WriteOptions extends CallOptions {
  ifMatch?: number;
}

export interface StrataClientOptions {
  /** The stack's URL, e.g. `http://127.0.0.1:8000`. */
  baseUrl: string;
  /** The key (`sk-strata-...`); it decides the tenant. */
  apiKey: string;
  /** Per attempt. Default 45,000: past the server's own 30 s deadline (which answers 504) and
   * its proxy's 40 s, so a slow call gets the server's answer rather than the client's guess. */
  timeoutMs?: number;
  /** Retries of 429 and 503 (see {@link RetryOptions}); `false` turns them off. */
  retry?: RetryOptions | false;
  /** Send a generated Idempotency-Key with every write (default true), so a write can be
   * retried without being applied twice. Without one, a write is never retried. */
  idempotencyKeys?: boolean;
  /** The `fetch` to send with (default: the global one). */
  fetch?: typeof fetch;
  /** Headers sent with every call besides the client's own. */
  headers?: Record<string, string>;
  /** The jitter's random source, in [0, 1) (default Math.random); for tests. */
  random?: () => number;
}

const seg = encodeURIComponent;

/**
 * A client of one Strata stack, as one key.
 *
 * ```ts
 * const strata = new StrataClient({ baseUrl: "http://127.0.0.1:8000", apiKey: process.env.STRATA_API_KEY! });
 * await strata.recordTurn("s1", { user: "I am allergic to peanuts." });
 * const context = await strata.buildContext({ message: "What should I avoid?", session_id: "s1" });
 * strata.close();
 * ```
 *
 * Every method rejects with a {@link StrataError} subclass (src/errors.ts). Reads, and writes
 * with an Idempotency-Key (sent by default), are retried on 429 and 503 with full-jitter backoff,
 * waiting at least the server's `Retry-After`.
 */
export class StrataClient {
  private readonly transport: Transport;

  constructor(options: StrataClientOptions) {
    if (!options.baseUrl) throw new TypeError("baseUrl is required");
    if (!options.apiKey) throw new TypeError("apiKey is required");
    const fetcher = options.fetch ?? globalThis.fetch;
    if (typeof fetcher !== "function") throw new TypeError("no fetch: pass one as options.fetch (Node 18+ has it)");
    this.transport = new Transport({
      baseUrl: options.baseUrl,
      apiKey: options.apiKey,
      timeoutMs: options.timeoutMs ?? 45_000,
      retry: resolveRetry(options.retry),
      idempotencyKeys: options.idempotencyKeys ?? true,
      fetch: fetcher.bind(globalThis),
      headers: options.headers ?? {},
      random: options.random ?? Math.random,
    });
  }

  /** Aborts every call in flight (they reject with AbortedError) and refuses new ones. */
  close(): void {
    this.transport.close();
  }

  // -- turns and sessions -------------------------------------------------------------

  /** Records one turn in episodic and working memory (201). */
  recordTurn(sessionId: string, turn: TurnIn, options: WriteOptions = {}): Promise<RecordTurnsResult> {
    const path = `/v1/sessions/${seg(sessionId)}/turns`;
    return this.transport.send({ method: "POST", path, body: turn, ifMatch: options.ifMatch }, options);
  }

  /** Records up to 1,000 turns at once (importing history). */
  recordTurns(sessionId: string, turns: TurnIn[], options: WriteOptions = {}): Promise<RecordTurnsResult> {
    const path = `/v1/sessions/${seg(sessionId)}/turns/batch`;
    return this.transport.send({ method: "POST", path, body: { turns }, ifMatch: options.ifMatch }, options);
  }

  /** The session's turns in time order (`newest_first` for the latest first), a page at a time. */
  listTurns(sessionId: string, query: ListTurnsQuery = {}, options: CallOptions = {}): Promise<SessionTurns> {
    return this.get(`/v1/sessions/${seg(sessionId)}/turns`, query, options);
  }

  /** The tenant's sessions by id with their turn counts (403 for a session key). */
  listSessions(query: PageQuery = {}, options: CallOptions = {}): Promise<SessionList> {
    return this.get("/v1/sessions", query, options);
  }

  /** Forgets the session in every store: turns, vectors, summaries, working items. */
  forgetSession(sessionId: string, options: CallOptions = {}): Promise<ForgetResult> {
    return this.transport.send({ method: "DELETE", path: `/v1/sessions/${seg(sessionId)}` }, options);
  }

  /** Forgets one turn, the summaries that cover it and its working-memory copies. */
  forgetTurn(sessionId: string, turnId: string, options: CallOptions = {}): Promise<ForgetResult> {
    const path = `/v1/sessions/${seg(sessionId)}/turns/${seg(turnId)}`;
    return this.transport.send({ method: "DELETE", path }, options);
  }

  /** Records a turn and, for a successful coding/debugging/deployment task, queues a skill job. */
  postInteraction(interaction: InteractionIn, options: CallOptions = {}): Promise<InteractionResult> {
    return this.transport.send({ method: "POST", path: "/v1/interactions", body: interaction }, options);
  }

  // -- context and search (reads, though POSTs) ---------------------------------------

  /** The context for a message within a token budget, from every layer the task reads. */
  buildContext(request: ContextRequest, options: CallOptions = {}): Promise<ContextResult> {
    return this.transport.send({ method: "POST", path: "/v1/context", body: request, read: true }, options);
  }

  /** Hybrid search over the layers; each hit with its score, relevance and per-path ranks. */
  search(request: SearchRequest, options: CallOptions = {}): Promise<SearchResult> {
    return this.transport.send({ method: "POST", path: "/v1/search", body: request, read: true }, options);
  }

  // -- working memory -----------------------------------------------------------------

  getWorking(sessionId: string, options: CallOptions = {}): Promise<WorkingState> {
    return this.get(`/v1/sessions/${seg(sessionId)}/working`, {}, options);
  }

  addWorkingItems(
    sessionId: string,
    items: WorkingItemIn[],
    options: WriteOptions & { task?: string } = {},
  ): Promise<WorkingState> {
    const path = `/v1/sessions/${seg(sessionId)}/working/items`;
    const body = options.task === undefined ? { items } : { items, task: options.task };
    return this.transport.send({ method: "POST", path, body, ifMatch: options.ifMatch }, options);
  }

  // -- documents ------------------------------------------------------------------------

  /** Indexes a document, or re-indexes it by `doc_id`. With `wait: false` the server answers
   * at once (202) and indexes in the background: poll {@link getDocument} for its `status`. */
  indexDocument(document: DocumentIn, options: WriteOptions & { wait?: boolean } = {}): Promise<DocumentOut> {
    const query = options.wait === undefined ? undefined : { wait: options.wait };
    return this.transport.send(
      { method: "POST", path: "/v1/documents", query, body: document, ifMatch: options.ifMatch },
      options,
    );
  }

  getDocument(
    docId: string,
    query: QueryOf<"/v1/documents/{doc_id}"> = {},
    options: CallOptions = {},
  ): Promise<DocumentOut> {
    return this.get(`/v1/documents/${seg(docId)}`, query, options);
  }

  listDocuments(query: QueryOf<"/v1/documents"> = {}, options: CallOptions = {}): Promise<DocumentList> {
    return this.get("/v1/documents", query, options);
  }

  /** Removes the document: passages, chunks, vectors, BM25 entries, graph edges. */
  deleteDocument(docId: string, options: WriteOptions = {}): Promise<DocumentDeleted> {
    const path = `/v1/documents/${seg(docId)}`;
    return this.transport.send({ method: "DELETE", path, ifMatch: options.ifMatch }, options);
  }

  /** What the knowledge graph of the tenant's documents knows of an entity. */
  entity(name: string, options: CallOptions = {}): Promise<EntityOut> {
    return this.get("/v1/entities", { name }, options);
  }

  // -- skills ---------------------------------------------------------------------------

  /** Learns a skill from a trace (201), or merges it into a near-duplicate (`merged: true`). */
  extractSkill(request: SkillExtractIn, options: CallOptions = {}): Promise<SkillOut> {
    return this.transport.send({ method: "POST", path: "/v1/skills:extract", body: request }, options);
  }

  /** Skills for a `task`, best first; without one, every skill by id a page at a time. */
  findSkills(query: FindSkillsQuery = {}, options: CallOptions = {}): Promise<SkillList> {
    return this.get("/v1/skills", query, options);
  }

  getSkill(skillId: string, options: CallOptions = {}): Promise<SkillOut> {
    return this.get(`/v1/skills/${seg(skillId)}`, {}, options);
  }

  /** Counts one use of the skill. */
  recordOutcome(skillId: string, outcome: OutcomeIn, options: WriteOptions = {}): Promise<SkillOut> {
    const path = `/v1/skills/${seg(skillId)}/outcomes`;
    return this.transport.send({ method: "POST", path, body: outcome, ifMatch: options.ifMatch }, options);
  }

  /** Edits the skill's content fields; `ifMatch` is required by the server (428 without). */
  updateSkill(skillId: string, changes: SkillPatch, options: WriteOptions & { ifMatch: number }): Promise<SkillOut> {
    const path = `/v1/skills/${seg(skillId)}`;
    return this.transport.send({ method: "PATCH", path, body: changes, ifMatch: options.ifMatch }, options);
  }

  deleteSkill(skillId: string, options: WriteOptions = {}): Promise<SkillDeleted> {
    const path = `/v1/skills/${seg(skillId)}`;
    return this.transport.send({ method: "DELETE", path, ifMatch: options.ifMatch }, options);
  }

  skillHistory(skillId: string, options: CallOptions = {}): Promise<SkillHistory> {
    return this.get(`/v1/skills/${seg(skillId)}/history`, {}, options);
  }

  /** A background extraction's state: pending, running, done (with `skill_id`) or failed. */
  skillJob(jobId: string, options: CallOptions = {}): Promise<SkillJobOut> {
    return this.get(`/v1/skill-jobs/${seg(jobId)}`, {}, options);
  }

  // -- export ---------------------------------------------------------------------------

  /**
   * The key's tenant exported (`GET /v1/export`), one parsed line at a time as it streams: the
   * header, each record, the end line. Memory holds one line, whatever the tenant's size.
   *
   * ```ts
   * for await (const line of strata.export({ layers: ["episodic"] })) if (line.kind === "turn") save(line);
   * ```
   *
   * Rejects with a {@link StrataError} for a header of another format or version, a line that is
   * not JSON or of an unknown kind, or a stream that ends before its end line (cut short).
   */
  async *export(query: ExportQuery = {}, options: CallOptions = {}): AsyncGenerator<ExportLine> {
    let number = 0;
    let records = 0;
    let ended = false;
    for await (const text of this.transport.lines(
      { method: "GET", path: "/v1/export", query: query as Query },
      options,
    )) {
      number++;
      if (text.trim() === "") continue;
      let line: ExportLine;
      try {
        line = JSON.parse(text) as ExportLine;
      } catch (error) {
        throw new StrataError(`export line ${number} is not JSON`, { cause: error });
      }
      if (number === 1) {
        const header = line as Partial<ExportHeader>;
        if (header.kind !== "header" || header.format !== EXPORT_FORMAT)
          throw new StrataError(`line 1 is not a ${EXPORT_FORMAT} header: not a Strata export`);
        if (header.version !== EXPORT_VERSION)
          throw new StrataError(
            `this export is ${EXPORT_FORMAT} version ${String(header.version)}; this client reads version ${EXPORT_VERSION} only`,
          );
      } else if (ended) {
        throw new StrataError(`export line ${number} follows the end line`);
      } else if (line.kind === "end") {
        if (line.records !== records)
          throw new StrataError(`the export's end line counts ${line.records} records, ${records} came`);
        ended = true;
      } else if (RECORD_KINDS.has(line.kind)) {
        records++;
      } else {
        throw new StrataError(`export line ${number} is of an unknown kind ${JSON.stringify(line.kind)}`);
      }
      yield line;
    }
    if (!ended) throw new StrataError(`the export ended after ${records} records without its end line: cut short`);
  }

  // -- audit, health, admin -------------------------------------------------------------

  /** The tenant's audit history, oldest first, a page at a time. */
  audit(query: AuditQuery = {}, options: CallOptions = {}): Promise<AuditHistory> {
    return this.get("/v1/audit", query, options);
  }

  /** `{status: "ok"}`; with an admin key, also Ray, Milvus and each layer. */
  health(options: CallOptions = {}): Promise<Health> {
    return this.get("/healthz", {}, options);
  }

  /** Admin key: a new key for a tenant (its secret is shown this once). */
  createKey(request: KeyCreateIn, options: CallOptions = {}): Promise<KeyCreated> {
    return this.transport.send({ method: "POST", path: "/v1/admin/keys", body: request }, options);
  }

  /** Admin key: every key by id, with tenant, scopes and dates; never a secret. */
  listKeys(query: QueryOf<"/v1/admin/keys"> = {}, options: CallOptions = {}): Promise<KeyList> {
    return this.get("/v1/admin/keys", query, options);
  }

  /** Admin key: a new key with the same scopes; the old one is revoked. */
  rotateKey(keyId: string, options: CallOptions = {}): Promise<KeyCreated> {
    return this.transport.send({ method: "POST", path: `/v1/admin/keys/${seg(keyId)}:rotate` }, options);
  }

  /** Admin key: revokes the key. */
  revokeKey(keyId: string, options: CallOptions = {}): Promise<KeyInfo> {
    return this.transport.send({ method: "DELETE", path: `/v1/admin/keys/${seg(keyId)}` }, options);
  }

  /** Admin key: revokes the tenant's keys, then forgets everything every layer holds for it. */
  forgetTenant(tenant: string, options: CallOptions = {}): Promise<TenantForgotten> {
    return this.transport.send({ method: "DELETE", path: `/v1/admin/tenants/${seg(tenant)}` }, options);
  }

  /** Admin key: grows or shrinks a layer's shards on the running stack (docs/scaling.md). */
  scaleLayer(layer: string, request: ScaleIn, options: CallOptions = {}): Promise<LayerPlacement> {
    return this.transport.send(
      { method: "POST", path: `/v1/admin/layers/${seg(layer)}:scale`, body: request },
      options,
    );
  }

  private get<T>(path: string, query: object, options: CallOptions): Promise<T> {
    return this.transport.send({ method: "GET", path, query: query as Query }, options);
  }
}
