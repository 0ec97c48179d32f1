"""Settings of where the stack runs: the Milvus store, Ray, Serve and the layer actors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from strata.config.validation import Section

__all__ = ["MAX_SHARDS", "ActorSettings", "AutoscaleSettings", "MilvusSettings", "RaySettings", "ServeSettings"]

#: The most shards a layer may have, at start (``actors.<layer>_shards``) or scaled (``strata scale``).
MAX_SHARDS = 1024


class MilvusSettings(Section):
    """Where embeddings live. ``uri`` unset means the embedded milvus-lite server."""

    uri: str | None = None
    #: For a server at ``uri``. The embedded store requires the data dir's ``milvus-token``,
    #: which ``strata up`` makes and ships to the actors (``strata.store.layout.store_token``).
    token: str = ""
    db_name: str = ""
    host: str = "127.0.0.1"
    #: The embedded server's port. Unless set explicitly, ``strata up`` picks a free port on
    #: the first start of a data dir and keeps it while the stack runs (``stack.json``).
    port: int = Field(default=19540, ge=1, le=65535)
    timeout_s: float = Field(default=5.0, gt=0)
    collection_prefix: str = Field(default="strata", pattern=r"^[A-Za-z][A-Za-z0-9_]{0,30}$")
    #: Index type of the ``vec`` field of new collections. Strata searches the vectors its
    #: actors hold in memory, never Milvus, so the index is only built, never used: FLAT
    #: builds nothing. milvus-lite's AUTOINDEX builds HNSW per segment; at 100,000 rows it
    #: doubled the server's CPU and added 40% to its memory (README, "Storage").
    vector_index: Literal["FLAT", "AUTOINDEX", "HNSW"] = "FLAT"
    #: A delete's rows are erased from Milvus's files (milvus-lite keeps them in its write-ahead
    #: log and segments until rewritten) at most this long after it, plus one erasure's run
    #: (``strata.store.erasure``); deletes within it share one erasure. 0: right after each.
    erase_after_s: float = Field(default=10.0, ge=0)
    #: Let a server at ``uri`` be used without a token. A server without authorization lets
    #: anyone who reaches its port read and write every tenant's memory and the API keys.
    allow_no_token: bool = False

    @model_validator(mode="after")
    def _server_needs_a_token(self) -> MilvusSettings:
        if self.uri and not self.token and not self.allow_no_token:
            raise ValueError(
                f"milvus.uri names a Milvus server ({self.uri}) but milvus.token is empty: set STRATA_MILVUS__TOKEN"
                " to its 'user:password' or API key (and run the server with authorization enabled), or set"
                " milvus.allow_no_token: true if nothing but Strata can reach that server"
            )
        return self

    @property
    def address(self) -> str:
        return self.uri or f"http://{self.host}:{self.port}"


class RaySettings(Section):
    #: GCS address of an existing cluster; unset means the embedded head on ``gcs_port``.
    address: str | None = None
    #: With ``address`` set: the cluster's Ray auth token (a file), sent with RAY_AUTH_MODE=token.
    #: Unset: RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH from the environment, if either is there.
    #: The embedded head always uses the data dir's ``ray-auth-token``.
    auth_token_file: Path | None = None
    #: The embedded head's GCS port. Unless set explicitly, ``strata up`` picks a free port
    #: on the first start of a data dir and keeps it while the stack runs (``stack.json``).
    gcs_port: int = Field(default=6390, ge=1, le=65535)
    num_cpus: int = Field(default=2, ge=1)
    object_store_memory_mb: int = Field(default=512, ge=128)
    namespace: str = "strata"


class ServeSettings(Section):
    host: str = "127.0.0.1"
    #: The HTTP port. Left at the default and taken by another program, ``strata up`` serves
    #: on a free port instead, prints its URL and records it in ``stack.json``.
    port: int = Field(default=8000, ge=1, le=65535)
    request_timeout_s: float = Field(default=30.0, gt=0)
    embedding_max_batch_size: int = Field(default=32, ge=1)
    embedding_batch_wait_timeout_s: float = Field(default=0.005, ge=0)
    #: Start the embedded stack's Ray with RAY_SERVE_THROUGHPUT_OPTIMIZED=1: the ingress's own
    #: code and its router run on the replica's event loop, where HAProxy's requests arrive
    #: (not on a second loop in another thread, one hand-over each way per request); calls
    #: between deployments go over gRPC; GC is frozen after start-up (logs as without it).
    #: On: with HAProxy, 8 clients calling /v1/context for 30 s, back to back while other work
    #: ran, made 66.6 calls/s at 22.9 ms of stack CPU per call, against 61.0 at 23.6 without
    #: (docs/benchmarks.md). Behind Serve's Python proxy it measured within noise. Each replica's
    #: inter-deployment gRPC server listens on every interface with this on or off (Ray 2.60
    #: starts it in every replica), behind Ray's token auth. An environment that sets the
    #: variable itself wins.
    throughput_optimized: bool = True
    #: Serve HTTP through HAProxy instead of Serve's Python proxy (RAY_SERVE_ENABLE_HA_PROXY=1
    #: where ``strata up`` starts Ray): requests reach the ingress replica's own port, and a
    #: context call costs about a quarter less CPU (docs/benchmarks.md). ``strata up`` runs it
    #: through ``strata-haproxy`` (its stats page and metrics on loopback, the client's address
    #: forwarded) with its files in the head's owner-only temp dir; off, the Python proxy serves.
    haproxy: bool = True
    #: Where a query (one text) is embedded: in the ingress replica's own process, or by the
    #: embedding deployment (batched with other callers'). A batch of turns always goes to
    #: the deployment. Measured per /v1/context call: the deployment's process spent
    #: 19 ms of CPU on a 6 ms embedding (docs/benchmarks.md). "orchestrator", the name from
    #: when a separate orchestrator deployment did the embedding, still means "ingress".
    query_embedding: Literal["ingress", "deployment"] = "ingress"

    @field_validator("query_embedding", mode="before")
    @classmethod
    def _old_query_embedding_name(cls, value: Any) -> Any:
        return "ingress" if value == "orchestrator" else value
    #: 413 above this. 128 MiB admits a 20 M-char document of 4-byte UTF-8 (80 MB), or of CJK as \uXXXX JSON (120 MB).
    max_body_bytes: int = Field(default=128 * 2**20, ge=1024)
    #: A write sent with an Idempotency-Key keeps its answer this long: its retries get it back.
    idempotency_ttl_s: float = Field(default=86_400.0, gt=0, le=30 * 86_400)
    #: Each process (API replica, layer shard) counts its usage per tenant and hour in memory
    #: (calls per route, tokens) and writes its counts to the store this often (an API replica
    #: also when it stops): a crash loses at most this long.
    usage_flush_s: float = Field(default=5.0, gt=0, le=3600)
    #: While a write sent with an Idempotency-Key runs, its key is claimed (shared by the API
    #: replicas, ``auth.limit_shards``): the same key sent meanwhile waits up to
    #: ``idempotency_wait_s`` for the first answer, then gets 409 with Retry-After. A claim whose
    #: replica died is let go after ``idempotency_claim_s``: longer than a write takes.
    idempotency_wait_s: float = Field(default=10.0, ge=0)
    idempotency_claim_s: float = Field(default=120.0, gt=0)
    #: Browser origins (``https://host[:port]``, or ``null``) whose pages may call ``/mcp``
    #: besides loopback ones (``http://localhost:6274``): a request whose ``Origin`` is neither
    #: is refused with 403 (the MCP transport's DNS-rebinding rule). Clients that are not
    #: browsers send no ``Origin`` and are not affected.
    mcp_allowed_origins: list[str] = Field(default_factory=list)

    @field_validator("mcp_allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        from strata.access.origins import OriginCheck  # here: strata.access's modules import this one

        OriginCheck(value)  # raises ValueError for an entry that is not an origin
        return value


class AutoscaleSettings(Section):
    """The directory's policy that grows and shrinks each layer's shards by their load
    (docs/scaling.md, "Autoscaling policy"). A layer never goes below its first count
    (``actors.<layer>_shards``) nor above ``max_shards``; one change at a time, of one shard.

    Off by default: on one machine another shard is another process on the same cores (and
    ~50-90 MiB, and its tenants' cold loads), not more capacity. Turn it on where a grown shard
    can land on a node that the Ray autoscaler adds (``cluster.yaml`` does).
    """

    enabled: bool = False
    #: How often the directory reads every shard's load (:mod:`strata_actors.load`).
    interval_s: float = Field(default=5.0, gt=0)
    #: A layer is hot while its shards' mean busy fraction (CPU seconds per second of each
    #: shard's process) is at least ``grow_busy`` or their mean calls in flight at least
    #: ``grow_queue``; it grows by one shard once it has been hot for ``grow_window_s``.
    grow_busy: float = Field(default=0.7, gt=0)
    grow_queue: float = Field(default=8.0, gt=0)
    grow_window_s: float = Field(default=30.0, gt=0)
    #: It is cold while both are at most these; it shrinks by one (its highest shard) once
    #: it has been cold for ``shrink_window_s``.
    shrink_busy: float = Field(default=0.2, ge=0)
    shrink_queue: float = Field(default=1.0, ge=0)
    shrink_window_s: float = Field(default=300.0, gt=0)
    max_shards: int = Field(default=16, ge=1, le=MAX_SHARDS)
    #: A shard the policy (or ``strata scale``) adds must be running within this, or the change
    #: is given up and the shard stopped (no node had room, and the Ray autoscaler added none).
    start_timeout_s: float = Field(default=300.0, gt=0)

    @model_validator(mode="after")
    def _hysteresis(self) -> AutoscaleSettings:
        if self.shrink_busy >= self.grow_busy or self.shrink_queue >= self.grow_queue:
            raise ValueError("autoscale: shrink_busy and shrink_queue must be below grow_busy and grow_queue"
                             " (else a layer could grow and shrink on the same load)")
        return self


class ActorSettings(Section):
    """How tenants map to layer actors (see README, "Tenants and actors")."""

    #: Actors per layer at first start; the count then lives in the placement directory
    #: (``strata scale``, docs/scaling.md), and a tenant on shard ``owner_shard(tenant, shards)``.
    working_shards: int = Field(default=2, ge=1, le=MAX_SHARDS)
    episodic_shards: int = Field(default=2, ge=1, le=MAX_SHARDS)
    semantic_shards: int = Field(default=2, ge=1, le=MAX_SHARDS)
    procedural_shards: int = Field(default=2, ge=1, le=MAX_SHARDS)
    #: Tenants whose in-memory state is evicted after this long without a call.
    idle_evict_s: float = Field(default=900.0, gt=0)
    #: Tenants one shard keeps in memory at most: loading one more evicts the least
    #: recently used (one not called in the last ``resident_grace_s``). Bounds a shard's
    #: memory whatever the number of tenants (README, "Tenants and actors").
    max_resident_tenants: int = Field(default=256, ge=1)
    resident_grace_s: float = Field(default=5.0, ge=0)
    max_restarts: int = Field(default=-1, ge=-1)
    #: CPUs each layer shard reserves from Ray. The embedded stack (``ray.num_cpus`` 2) holds the
    #: api (0.25) and embedding (0.5) replicas and 4 layers x 2 shards at 0.1 with 0.45 to spare
    #: (four more shards by ``strata scale``). On a cluster, 1: then a grown shard that fits no
    #: node is demand that the Ray autoscaler meets with a node, and a node whose shards all left
    #: counts as idle (``cluster.yaml``). A node must still keep a whole CPU for an embedding
    #: replica (serve.yaml: 1): on nodes of one or two CPUs, shards spread over all of them can
    #: leave none, so set 0 there: the shards then ask only a token of memory (placement still
    #: spreads them, but they never add a node).
    #: 0 by default: on one machine a reservation only caps how many shards can start (a scale
    #: past what is left waits for a node that never comes, and so did the test suite's many
    #: stacks on one 2-CPU Ray); a cluster sets 1.
    shard_num_cpus: float = Field(default=0.0, ge=0)
    autoscale: AutoscaleSettings = AutoscaleSettings()
