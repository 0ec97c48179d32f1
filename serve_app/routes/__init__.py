"""The API's routes, one module per group: each a class of route methods on the module's own
``router``, which :class:`strata_serve.api.Api` inherits and :mod:`strata_serve.api` includes
in its app (``@serve.ingress`` serves the routes of the ingress class and of its bases).

- :mod:`.turns`: recording turns and interactions, listing sessions and turns, forgetting them
- :mod:`.context`: the context to put in front of an LLM, and search
- :mod:`.working`: a session's working memory
- :mod:`.documents`: documents, and the entities of their graph
- :mod:`.skills`: skills, and the background skill-extraction jobs
- :mod:`.admin`: API keys, and forgetting a whole tenant (an admin key only)
- :mod:`.audit`: the tenant's audit history
- :mod:`.export`: the tenant's whole memory as JSON Lines
- :mod:`.common`: what they share: the replica's state they use, id path parameters, If-Match
"""

__all__: list[str] = []
