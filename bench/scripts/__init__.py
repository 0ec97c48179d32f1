"""Measurement scripts behind figures in the README (milvus-lite's behaviour, episodic search
cost). Each says in its docstring how to run it and which figure it produced; they are run by
hand, from the repository root, and are not part of ``strata bench``."""

__all__: list[str] = []
