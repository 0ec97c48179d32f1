"""One request's work across the layers, shared by the Serve orchestrator and the
in-cluster client: embed once, fan out to the layer actors concurrently,
fit the result to the budget.

The caller supplies ``embed`` (the Serve embedding deployment, or a local
embedder), the router supplies the layers' typed handles
(:mod:`strata_actors.handles`); nothing here waits on one
layer before asking another. :class:`Orchestration` is the one entry point,
composed of one part per job:

- :mod:`.base`: the shared state, and the helpers several parts use
- :mod:`.audit`: the tenant's audit history, appended to by every write
- :mod:`.writes`: turns, interactions, working items, documents, forgetting
- :mod:`.skills`: procedural memory
- :mod:`.reads`: a document, an entity, working memory; health and LLM usage
- :mod:`.context`: ``build_context``, fitted to the budget and refined by the LLM
- :mod:`.search`: ``search`` across layers, with working memory's term-overlap score
- :mod:`.export`: the whole tenant as export records, a page at a time
"""

from __future__ import annotations

from strata_actors.orchestration.base import Embed
from strata_actors.orchestration.context import ContextFlow
from strata_actors.orchestration.export import ExportFlow
from strata_actors.orchestration.search import SearchFlow
from strata_actors.orchestration.skills import SkillFlow
from strata_actors.orchestration.writes import SESSION_LAYERS, WriteFlow

__all__ = [
    "SESSION_LAYERS", "ContextFlow", "Embed", "ExportFlow", "Orchestration", "SearchFlow", "SkillFlow", "WriteFlow",
]


class Orchestration(WriteFlow, SkillFlow, SearchFlow, ContextFlow, ExportFlow):
    """Every operation of the memory API for any tenant, over the layer actors.

    Args:
        settings: the stack's settings (the same the layer actors were made with).
        embed: embeds stored texts (turns) into one row per text.
        embed_query: embeds queries (a search, a context call, a task looking for skills).
        router: finds each (layer, tenant)'s actor; a new one over ``settings`` by default.
        llm: condenses a context that does not fit; by default the one ``settings.llm`` names.
    """
