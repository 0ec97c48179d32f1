"""What every settings section shares: the frozen, closed base model and the checks of names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from strata.layers import RETRIEVAL_PATHS

__all__ = ["Section", "check_weights", "only_known"]


class Section(BaseModel):
    """One top-level key of ``configs/default.yaml``: immutable, and an unknown key is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def only_known(names: Iterable[str], known: Sequence[str], what: str) -> None:
    """Raise ``ValueError("<what> [...]; known: ...")`` for names not in ``known``."""
    unknown = set(names) - set(known)
    if unknown:
        raise ValueError(f"{what} {sorted(unknown)}; known: {', '.join(known)}")


def check_weights(weights: Mapping[str, float] | None) -> None:
    if weights is None:
        return
    only_known(weights, RETRIEVAL_PATHS, "unknown retrieval path(s)")
    if any(w < 0 for w in weights.values()) or not any(w > 0 for w in weights.values()):
        raise ValueError("fusion weights must be >= 0 and at least one > 0")
