"""The operator's files (`--ngram`, `--heads`) on every replica of `serve --ray`, on whichever node it runs.

The deployment records each file by path, size and SHA-256 where it starts. A replica uses the file at the same path
when its node has it with the same digest (one machine, a shared file system, or a copy put there by the operator);
otherwise it fetches the bytes, in chunks, from a `FileHolder` actor pinned to the node that started the deployment
(`multidraft serve --ray` keeps it there while it runs), writes them under the cache (`shipped/`, atomically) and
checks the digest. Every replica therefore serves the same bytes, or stops at start with the file's name. Models
(`--model`, `--draft`, `--rescorer`) are not shipped: each node loads them from its own cache (`models pull`).

A request still names only what the operator chose: the holder serves the digests it was given, nothing else.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Optional

from multidraft.errors import MultidraftError
from multidraft.fsutil import atomic_path, sha256_file

SHIPPED_KINDS = ("ngram", "heads")       # artifact kinds whose values are files (rescorers are models)
CHUNK_BYTES = 32 << 20


class ShippingError(MultidraftError):
    """An operator's file is not on a replica's node and cannot be fetched, or arrived damaged."""


@dataclasses.dataclass(frozen=True)
class ShippedFile:
    path: str           # where the operator's file is, on the node that started the deployment
    size: int
    sha256: str


def describe(path: str) -> ShippedFile:
    resolved = Path(path).expanduser().resolve()
    return ShippedFile(str(resolved), resolved.stat().st_size, sha256_file(resolved))


def describe_artifacts(artifacts: dict) -> dict[str, dict[str, ShippedFile]]:
    """kind -> {name: ShippedFile} for the file-valued kinds of a config's artifacts mapping."""
    return {kind: {name: describe(path) for name, path in named.items()}
            for kind, named in artifacts.items() if kind in SHIPPED_KINDS and named}


class FileHolder:
    """Serves chunks of the files it was given, by digest (a Ray actor on the operator's node)."""

    def __init__(self, files: list[ShippedFile]):
        self.files = {f.sha256: f for f in files}

    def read(self, sha256: str, offset: int, size: int) -> bytes:
        shipped = self.files.get(sha256)
        if shipped is None:
            raise ShippingError("no such file is shipped with this deployment")
        with open(shipped.path, "rb") as handle:
            handle.seek(offset)
            return handle.read(min(size, CHUNK_BYTES))


def _matches(path: Path, shipped: ShippedFile) -> bool:
    return path.is_file() and path.stat().st_size == shipped.size and sha256_file(path) == shipped.sha256


def local_copy(shipped: ShippedFile, read: Optional[Callable[[str, int, int], bytes]], cache: Path) -> str:
    """A path on this node holding exactly `shipped`'s bytes: its own path when it is there and the same, else a
    copy under `cache` fetched with `read(sha256, offset, size)` (None: nothing to fetch from)."""
    own = Path(shipped.path)
    if _matches(own, shipped):
        return str(own)
    copy = cache / f"{shipped.sha256[:16]}-{own.name}"
    if _matches(copy, shipped):
        return str(copy)
    if read is None:
        raise ShippingError(f"{shipped.path} is not on this node (or differs: its SHA-256 must be {shipped.sha256}); "
                            f"copy it there, use a shared file system, or start with `multidraft serve --ray`, "
                            f"which ships it")
    with atomic_path(copy) as target:
        with open(target, "wb") as handle:
            offset = 0
            while offset < shipped.size:
                chunk = read(shipped.sha256, offset, CHUNK_BYTES)
                if not chunk:
                    raise ShippingError(f"{shipped.path} ended early while it was fetched ({offset} of "
                                        f"{shipped.size} bytes); was it changed on the operator's node?")
                handle.write(chunk)
                offset += len(chunk)
        if sha256_file(target) != shipped.sha256:
            raise ShippingError(f"{shipped.path} arrived with another SHA-256 than when the deployment started; "
                                f"was it changed on the operator's node?")
    return str(copy)


def localize(artifacts: dict, shipped: dict[str, dict[str, ShippedFile]], read, cache: Path) -> dict:
    """`artifacts` with each shipped file's value replaced by its path on this node."""
    out = {kind: dict(named) for kind, named in artifacts.items()}
    for kind, named in shipped.items():
        for name, item in named.items():
            out[kind][name] = local_copy(item, read, cache)
    return out
