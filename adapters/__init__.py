"""Strata behind the memory interfaces of agent frameworks, each an optional extra:
LangGraph (``strata-memory[langgraph]``), LangChain, LlamaIndex and the OpenAI Agents SDK.
Each adapter talks to a running Strata over HTTP (``STRATA_URL``, ``STRATA_API_KEY``);
nothing in ``strata/``, ``actors/`` or ``serve_app/`` imports them."""

__all__: list[str] = []
