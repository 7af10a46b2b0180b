"""The data cache: `<MULTIDRAFT_HOME>/data/<name>/` holds one pulled data set.

An entry is written into a temporary folder and renamed into place with its `manifest.json` already
inside, so a folder that exists is complete; an interrupted pull leaves nothing but a verified
download (which the next pull reuses) or nothing at all.
"""

import json
import time
from pathlib import Path

from multidraft import paths
from multidraft.data import extract, fetch
from multidraft.data.registry import DATASETS, get
from multidraft.errors import CorruptCacheError, DataNotFoundError
from multidraft.fsutil import atomic_path, recover

MANIFEST = "manifest.json"
LAYOUT_VERSION = 1


def data_root() -> Path:
    return paths.subdir("data")


def _entry(name: str) -> Path:
    entry = data_root() / name
    recover(entry)          # a re-pull killed between its two renames left the old entry aside: put it back
    return entry


def is_pulled(name: str) -> bool:
    get(name)
    return (_entry(name) / MANIFEST).is_file()


def path(name: str) -> Path:
    """The folder of a pulled data set; raises DataNotFoundError if it has not been pulled."""
    get(name)
    entry = _entry(name)
    if not (entry / MANIFEST).is_file():
        raise DataNotFoundError(f"data set {name!r} is not in the cache ({entry}); run `multidraft data pull {name}`")
    return entry


def manifest(name: str) -> dict:
    try:
        return json.loads((path(name) / MANIFEST).read_text())
    except json.JSONDecodeError as exc:
        raise CorruptCacheError(
            f"{_entry(name) / MANIFEST} is unreadable ({exc}); run `multidraft data pull {name} --force`") from None


def pull(name: str, progress: bool = True, force: bool = False) -> Path:
    """Download, verify and unpack one data set into the cache; a no-op if it is already there."""
    dataset = get(name)
    entry = _entry(name)
    if (entry / MANIFEST).is_file() and not force:
        return entry
    log = print if progress else (lambda *a, **k: None)
    started = time.time()
    artifact_path = fetch.fetch(dataset.artifact, data_root(), log=log) if dataset.artifact else None
    extractor = getattr(extract, dataset.extractor)
    log(f"unpacking {name}")
    with atomic_path(entry) as tmp:
        tmp.mkdir()
        facts = extractor(artifact_path, tmp, dataset.options, log=log)
        record = {
            "name": name,
            "layout_version": LAYOUT_VERSION,
            "description": dataset.description,
            "kind": dataset.kind,
            "artifact": None if dataset.artifact is None else {
                "package": dataset.artifact.package, "version": dataset.artifact.version,
                "filename": dataset.artifact.filename, "sha256": dataset.artifact.sha256},
            "facts": facts,
            "pulled_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        # Written last: its presence marks the entry complete.
        (tmp / MANIFEST).write_text(json.dumps(record, indent=1))
    log(f"{name}: ready in {time.time() - started:.1f}s at {entry}")
    return entry


def names() -> list[str]:
    return list(DATASETS)
