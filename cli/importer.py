"""``strata import PATH…``: index files and folders as documents, with progress.

Each file becomes one document whose id is derived from its path (so
importing the same tree again re-indexes in place), whose title is its
first Markdown heading or its file name, and whose metadata records the
path. Documents are sent with ``wait=false`` and polled, so a multi-megabyte
file shows its progress and no HTTP request waits on the embedding; a job
that vanishes (its actor restarted) is sent again.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from strata.errors import NotFound, StrataError
from strata.ids import ID_CHARS
from strata_serve.client import StrataClient

__all__ = ["TEXT_SUFFIXES", "ImportReport", "collect_files", "doc_id_for", "import_paths"]

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".text", ".rst", ".adoc"})
_UNSAFE = re.compile(rf"[^{ID_CHARS}]+")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_POLL_S = 0.5
_RESENDS = 2


@dataclass
class ImportReport:
    indexed: list[str]
    failed: dict[str, str]
    children: int
    seconds: float


def collect_files(paths: Iterable[str | Path]) -> list[tuple[Path, Path]]:
    """``(file, root)`` pairs: named files as given, folders searched for text files.

    Raises:
        FileNotFoundError: a path does not exist.
    """
    found: list[tuple[Path, Path]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found.append((path, path.parent))
        elif path.is_dir():
            found += [(f, path) for f in sorted(path.rglob("*")) if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES]
        else:
            raise FileNotFoundError(f"{path} does not exist")
    return found


def doc_id_for(file: Path, root: Path) -> str:
    """A valid document id from the file's path under ``root`` (stable across imports)."""
    relative = file.resolve().relative_to(root.resolve()).as_posix() if root else file.name
    slug = _UNSAFE.sub("-", relative).strip("-._:") or "document"
    if len(slug) > 128:
        digest = hashlib.sha1(relative.encode(), usedforsecurity=False).hexdigest()[:10]
        slug = slug[: 128 - 11].rstrip("-._:") + "-" + digest
    return slug


def _title(file: Path, text: str) -> str:
    heading = _HEADING.search(text[:20000])
    return heading.group(1)[:500] if heading else file.name[:500]


def import_paths(
    client: StrataClient,
    paths: Iterable[str | Path],
    *,
    progress: Callable[[int, str], Callable[[int, int], None]] | None = None,
) -> ImportReport:
    """Index every file under ``paths``; one failing file does not stop the others.

    ``progress(n, name)`` is called as each file starts and returns a callback
    ``(children_done, children_total)`` for that file.
    """
    started = time.monotonic()
    files = collect_files(paths)
    report = ImportReport([], {}, 0, 0.0)
    for n, (file, root) in enumerate(files, start=1):
        doc_id = doc_id_for(file, root)
        update = progress(n, file.as_posix()) if progress else (lambda done, total: None)
        try:
            text = file.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as exc:
            report.failed[file.as_posix()] = f"not readable as UTF-8 text: {exc}"
            continue
        if not text.strip():
            report.failed[file.as_posix()] = "empty file"
            continue
        try:
            children = _index_one(client, doc_id, text, _title(file, text), {"path": file.as_posix()}, update)
        except StrataError as exc:
            report.failed[file.as_posix()] = exc.message
            continue
        report.indexed.append(doc_id)
        report.children += children
    report.seconds = time.monotonic() - started
    return report


def _index_one(
    client: StrataClient, doc_id: str, text: str, title: str, metadata: dict[str, str],
    update: Callable[[int, int], None],
) -> int:
    for _ in range(_RESENDS + 1):
        submitted = client.index_document(text, doc_id=doc_id, title=title, metadata=metadata, wait=False)
        while True:
            try:
                doc = client.get_document(doc_id)
            except NotFound:
                break  # the job vanished with its actor: send again
            if doc.progress is not None:
                update(doc.progress.children_done, doc.progress.children_total)
            if doc.status == "failed":
                raise StrataError(doc.error or "indexing failed")
            if doc.status == "ready" and doc.version > submitted.version:
                update(doc.children or 0, doc.children or 0)
                return doc.children or 0
            if doc.status == "ready" and doc.progress is None and doc.version == submitted.version:
                break  # ready at the old version with no job: the job vanished
            time.sleep(_POLL_S)
    raise StrataError(f"indexing {doc_id} did not finish after {_RESENDS + 1} tries")
