"""jieba, Strata's Chinese word segmenter: loaded once per process, its cache kept private.

jieba parses its dictionary into a cache file and, in every later process, loads that file
with ``marshal`` if it exists, whoever wrote it. Left to itself it keeps the file in the shared
temporary directory (``/tmp/jieba.cache``): any account of the machine could put a file there
first, and every Strata process that reads Chinese would load it (a dictionary that segments
text as its author likes, or data built to break ``marshal``, which is not safe against it).
The cache is kept in ``<tmp>/strata-<uid>/jieba`` instead (:func:`strata.private_dirs.user_temp_dir`);
where that cannot be made this user's, in a new private directory of this process's.
"""

from __future__ import annotations

import logging
import tempfile
from functools import lru_cache
from typing import Any

from strata.private_dirs import user_temp_dir

__all__ = ["jieba", "jieba_posseg"]

_log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def jieba() -> Any:
    """The ``jieba`` module, its dictionary cache in a directory only this user can write."""
    import jieba as module

    module.setLogLevel(logging.WARNING)  # it announces its dictionary load on stderr
    try:
        module.dt.tmp_dir = str(user_temp_dir("jieba"))
    except PermissionError as exc:
        module.dt.tmp_dir = tempfile.mkdtemp(prefix="strata-jieba-")
        _log.warning("jieba's dictionary cache kept in %s for this process only: %s", module.dt.tmp_dir, exc)
    return module


@lru_cache(maxsize=1)
def jieba_posseg() -> Any:
    """``jieba.posseg`` (part-of-speech tags), over the tokenizer of :func:`jieba`."""
    jieba()
    from jieba import posseg

    return posseg
