"""The ``strata`` command, installed as ``strata_cli`` (console script ``strata_cli.main:main``).

- ``main``: the argument parser and one thin function per command
- ``stack``: starting, watching and stopping milvus-lite, Ray and Serve (``strata up`` / ``down``),
  composed of ``milvus_server``, ``ray_head``, ``processes``, ``ports``, ``private_files`` and
  ``stack_file`` (``stack.json``); ``errors``: its ``StackError``
- ``status``: ``strata status``
- ``bench_stack``: the stack ``strata bench`` measures, handed to :mod:`strata_bench`
- ``demo``: the scripted conversation of ``strata demo``
- ``importer``: ``strata import`` of files and folders as documents
- ``keys``: ``strata keys`` (API keys, straight on the store)

Import from the modules; the package itself exports nothing.
"""

__all__: list[str] = []
