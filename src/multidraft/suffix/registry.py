"""The server's suffix stores: one shared by every request, or (isolation) one per API key.

Isolation is only as good as the identity it is keyed by: the server passes the API key a request authenticated
with (ServerConfig refuses isolation with fewer than two keys), never a bearer string nobody checked.

With isolation a request drafts only from its own key's earlier text, so one client's prompts and outputs never
appear in drafts for another's (drafts are verified, so they could not change an output, but their acceptance
rate would leak information). Keys are kept as SHA-256 digests, never in the clear; at most `max_keys` stores are
kept, the least recently used is dropped first.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Optional

from multidraft.errors import InvalidOptionError
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

    def __len__(self) -> int:
        return len(self._stores)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
