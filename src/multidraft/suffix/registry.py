"""The server's suffix stores: one shared by every request, or (isolation) one per API key.

Isolation is only as good as the identity it is keyed by: the server passes the API key a request authenticated
with (ServerConfig refuses isolation with fewer than two keys), never a bearer string nobody checked.

With isolation a request drafts only from its own key's earlier text, so one client's prompts and outputs never
appear in drafts for another's (drafts are verified, so they could not change an output, but their acceptance
rate would leak information). Keys are kept as SHA-256 digests, never in the clear; at most `max_keys` stores are
kept, the least recently used is dropped first.

Persistence (`multidraft serve --suffix-store-path DIR`): `save(DIR)` writes each store as DIR/<name>.npz (name:
"anonymous", or the key's digest), each atomically (SuffixStore.save), so a crash leaves every file whole, old or
new; `load(DIR, lm)` reads them back at start and refuses a damaged or foreign file with a clear error, before any
request is served. The files hold the served prompts and outputs: the folder is as private as the requests are.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Optional

from multidraft.errors import InvalidOptionError
from multidraft.fsutil import check_output_folder, remove_stale_partials
from multidraft.suffix.store import SuffixStore

ANONYMOUS = "anonymous"


class StoreRegistry:
    def __init__(self, max_tokens: int, isolation: bool = False, max_keys: int = 64):
        if not isinstance(max_keys, int) or max_keys < 1:
            raise InvalidOptionError(f"max_keys must be an integer >= 1, got {max_keys!r}")
        self.max_tokens = max_tokens
        self.isolation = bool(isolation)
        self.max_keys = max_keys
        self._stores: "OrderedDict[str, SuffixStore]" = OrderedDict()
        self._lock = threading.Lock()
        SuffixStore(max_tokens)                        # validate max_tokens now, not at the first request

    def for_key(self, api_key: Optional[str]) -> SuffixStore:
        """The store a request with this API key drafts from and adds to. The caller passes an authenticated
        identity (the server: the key the request proved it holds), or None: the shared store."""
        name = _digest(api_key) if self.isolation and api_key else ANONYMOUS
        with self._lock:
            store = self._stores.get(name)
            if store is None:
                store = self._stores[name] = SuffixStore(self.max_tokens)
                while len(self._stores) > self.max_keys:
                    self._stores.popitem(last=False)
            self._stores.move_to_end(name)
            return store

    def memory_bytes(self) -> int:
        with self._lock:
            return sum(store.memory_bytes() for store in self._stores.values())

    def num_tokens(self) -> int:
        with self._lock:
            return sum(store.num_tokens for store in self._stores.values())

    def version(self) -> tuple:
        """Changes whenever a store is added to or changed (what a periodic save compares)."""
        with self._lock:
            return tuple((name, store.version) for name, store in self._stores.items())

    # ----- files
    def save(self, folder) -> list[Path]:
        """Write every store to folder/<name>.npz, each atomically. Returns the paths written."""
        with self._lock:
            stores = list(self._stores.items())
        return [store.save(Path(folder) / f"{name}{SUFFIX}") for name, store in stores]

    def load(self, folder, lm) -> int:
        """Read the stores saved in `folder` (none yet: nothing to read) for `lm`'s tokenizer; returns how many.
        Without isolation only the shared store is read; with it, the per-key ones, newest first up to max_keys.
        A damaged file, or one of another tokenizer, raises CorruptCacheError / TokenizerMismatchError."""
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise InvalidOptionError(f"the suffix store path {folder} is a file; give a folder (the server keeps "
                                     "one file per store in it)")
        check_output_folder(folder, "the suffix store path")   # the saves at shutdown must land: fail now if not
        remove_stale_partials(folder, f"*{SUFFIX}")     # what a save killed mid-write left (a live one's stays)
        wanted = _KEY_FILE if self.isolation else re.compile(re.escape(ANONYMOUS + SUFFIX))
        files = sorted((f for f in folder.iterdir() if f.is_file() and wanted.fullmatch(f.name)),
                       key=lambda f: f.stat().st_mtime)[-self.max_keys:]
        loaded = {f.name[: -len(SUFFIX)]: SuffixStore.load(f, lm=lm, max_tokens=self.max_tokens) for f in files}
        with self._lock:
            self._stores.update(loaded)
        return len(loaded)

    def __len__(self) -> int:
        return len(self._stores)


SUFFIX = ".npz"
_KEY_FILE = re.compile(r"[0-9a-f]{64}\.npz")


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
