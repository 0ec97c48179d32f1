"""``python -m strata_bench.semantic``: see :mod:`strata_bench.semantic`."""

from strata_bench.semantic.command import main

__all__: list[str] = []

raise SystemExit(main())
