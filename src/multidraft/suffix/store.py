"""`SuffixStore`: the global store of earlier prompts and outputs that `method="suffix"` drafts from.

- Bounded: at most `max_tokens` tokens are kept. When an added document passes the bound, the oldest documents
  are dropped (oldest-first) down to `low_water` x max_tokens and the automaton is rebuilt from the rest, so the
  O(kept) rebuild happens once per (1 - low_water) x max_tokens new tokens, not on every request.
- Tied to one tokenizer: the first model that uses it (or `SuffixStore(lm=...)`) sets its vocabulary fingerprint;
  another tokenizer is a TokenizerMismatchError, never garbage drafts.
- Saved atomically to a versioned .npz (tokens, document lengths, a JSON header); loading checks it all.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections import deque
from pathlib import Path
from typing import Iterable, Optional

import numpy as np

from multidraft import validation
from multidraft.errors import CorruptCacheError, InvalidOptionError, TokenizerMismatchError
from multidraft.fsutil import atomic_path
from multidraft.suffix.automaton import MAX_TOKEN_ID, SEPARATOR, SuffixAutomaton
from multidraft.tokenizer_identity import model_vocab_fingerprint

FORMAT = "multidraft-suffix-store"
VERSION = 1
DEFAULT_MAX_TOKENS = 200_000
DEFAULT_LOW_WATER = 0.75


class SuffixStore:
    """Earlier token sequences (documents) in one suffix automaton, bounded in tokens, for one tokenizer."""

    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS, lm=None, low_water: float = DEFAULT_LOW_WATER):
        self.max_tokens = validation.positive_int("max_tokens", max_tokens)
        self.low_water = validation.number("low_water", low_water, above=0, maximum=1)
        self.fingerprint: Optional[str] = None
        self.documents: deque = deque()             # array-like int32 token lists, oldest first
        self.num_tokens = 0
        self.largest_id = -1                        # of the kept documents: checked against a model's vocabulary
        self.evicted_documents = 0
        self.automaton = SuffixAutomaton()
        self.version = 0                            # bumps on every change; drafters re-match when it moves
        self._lock = threading.RLock()
        if lm is not None:
            self.bind(lm)

    # ----- identity -----
    def bind(self, lm) -> None:
        """Tie the store to `lm`'s tokenizer, or check that it already is; every kept id must be in its vocabulary
        (documents added without `lm` are checked here, before they could become drafts the model cannot read)."""
        if isinstance(lm, (str, bytes, os.PathLike)) or not hasattr(lm, "name"):   # replays bind stand-ins too
            raise InvalidOptionError(f"a suffix store binds to a model from multidraft.load_model(...), got "
                                     f"{type(lm).__name__}")
        fingerprint = model_vocab_fingerprint(lm)
        with self._lock:
            if self.fingerprint is None:
                self.fingerprint = fingerprint
            elif self.fingerprint != fingerprint:
                raise TokenizerMismatchError(
                    f"this suffix store holds tokens of another tokenizer ({self.fingerprint}) than {lm.name}'s "
                    f"({fingerprint}); use a store made with this model (SuffixStore(lm=...)) or an empty one")
            _check_ids(self.largest_id, lm)

    # ----- contents -----
    def add(self, tokens: Iterable[int], lm=None) -> None:
        """Add one document (a prompt with its output, say). A document longer than max_tokens keeps its tail."""
        if lm is not None:
            self.bind(lm)
        try:
            document = np.asarray(list(tokens))
        except (TypeError, ValueError, OverflowError):      # not iterable, ragged, past int64
            document = None
        if document is not None and document.size == 0:
            return
        if (document is None or document.dtype.kind not in "iu" or document.ndim != 1 or document.min() < 0
                or document.max() > MAX_TOKEN_ID):
            raise InvalidOptionError(f"a suffix-store document must be a list of token ids (integers in "
                                     f"0..{MAX_TOKEN_ID}), got {tokens!r:.60}")
        if lm is not None:
            _check_ids(int(document.max()), lm)
        document = document[-self.max_tokens:].astype(np.int32)
        with self._lock:
            self.documents.append(document)
            self.num_tokens += len(document)
            self.largest_id = max(self.largest_id, int(document.max()))
            if self.num_tokens > self.max_tokens:
                self._evict()
            else:
                extend = self.automaton.extend
                for token in document.tolist():
                    extend(token)
                extend(SEPARATOR)
            self.version += 1

    def _evict(self) -> None:
        target = int(self.max_tokens * self.low_water)
        while self.documents and self.num_tokens > target and len(self.documents) > 1:
            self.num_tokens -= len(self.documents.popleft())
            self.evicted_documents += 1
        if self.num_tokens > self.max_tokens:            # one document alone over the bound (cannot happen: tail)
            self.documents[0] = self.documents[0][-self.max_tokens:]
            self.num_tokens = len(self.documents[0])
        self.automaton = self._build(self.documents)
        self.largest_id = max((int(d.max()) for d in self.documents if d.size), default=-1)

    @staticmethod
    def _build(documents) -> SuffixAutomaton:
        automaton = SuffixAutomaton()
        extend = automaton.extend
        for document in documents:
            for token in document.tolist():
                extend(token)
            extend(SEPARATOR)
        return automaton

    def clear(self) -> None:
        with self._lock:
            self.documents.clear()
            self.num_tokens = 0
            self.largest_id = -1
            self.automaton = SuffixAutomaton()
            self.version += 1

    @property
    def num_documents(self) -> int:
        return len(self.documents)

    def memory_bytes(self) -> int:
        """Bytes held by the automaton and the kept token arrays (an estimate from container sizes)."""
        return self.automaton.memory_bytes() + sum(d.nbytes for d in self.documents)

    def describe(self) -> dict:
        return {"tokens": self.num_tokens, "documents": self.num_documents, "max_tokens": self.max_tokens,
                "memory_bytes": self.memory_bytes(), "evicted_documents": self.evicted_documents,
                "fingerprint": self.fingerprint}

    # ----- files -----
    def save(self, path) -> Path:
        """Write the store to `path` (.npz) atomically: a crash leaves the old file or none, never half of one."""
        path = Path(path)
        with self._lock:
            documents = list(self.documents)
            header = {"format": FORMAT, "version": VERSION, "fingerprint": self.fingerprint,
                      "max_tokens": self.max_tokens, "low_water": self.low_water}
        tokens = np.concatenate(documents) if documents else np.empty(0, dtype=np.int32)
        lengths = np.array([len(d) for d in documents], dtype=np.int64)
        buffer = io.BytesIO()
        np.savez(buffer, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), tokens=tokens,
                 lengths=lengths)
        with atomic_path(path) as tmp:
            tmp.write_bytes(buffer.getvalue())
        return path

    @classmethod
    def load(cls, path, lm=None, max_tokens: Optional[int] = None) -> "SuffixStore":
        """Read a saved store. With `lm`, check that it was made with that model's tokenizer."""
        path = Path(path)
        if not path.is_file():
            raise CorruptCacheError(f"no suffix store at {path}")
        try:
            with np.load(path, allow_pickle=False) as data:
                header = json.loads(bytes(data["header"]).decode())
                tokens = np.asarray(data["tokens"])
                lengths = np.asarray(data["lengths"])
        except Exception as exc:           # zip, npy or JSON damage: all mean the same to the user
            raise CorruptCacheError(f"{path} is not a readable suffix store ({type(exc).__name__}: {exc}); "
                                    "delete it or save the store again") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise CorruptCacheError(f"{path} is not a multidraft suffix store")
        if header.get("version") != VERSION:
            raise CorruptCacheError(f"{path} is a suffix store of format version {header.get('version')!r}; this "
                                    f"multidraft reads version {VERSION}: save it again with this version")
        if (tokens.dtype.kind not in "iu" or lengths.dtype.kind not in "iu" or tokens.ndim != 1 or lengths.ndim != 1
                or int(lengths.sum()) != tokens.size or (lengths < 0).any()
                or (tokens.size and (tokens.min() < 0 or tokens.max() > MAX_TOKEN_ID))):
            raise CorruptCacheError(f"{path}: the suffix store's token arrays are inconsistent; delete it")
        try:
            store = cls(int(header.get("max_tokens", DEFAULT_MAX_TOKENS)),
                        low_water=float(header.get("low_water", DEFAULT_LOW_WATER)))
        except (TypeError, ValueError, OverflowError):     # InvalidOptionError included: the file's values are bad
            raise CorruptCacheError(f"{path}: the suffix store's header holds a bad max_tokens or low_water; delete "
                                    "it or save the store again") from None
        if max_tokens is not None:
            store = cls(max_tokens, low_water=store.low_water)
        store.fingerprint = header.get("fingerprint")
        start = 0
        for length in lengths.tolist():
            store.add(tokens[start:start + length])
            start += length
        if lm is not None:
            try:
                store.bind(lm)
            except TokenizerMismatchError as exc:
                raise TokenizerMismatchError(f"{path}: {exc}") from None
        return store


def _check_ids(largest_id: int, lm) -> None:
    if largest_id >= getattr(lm, "vocab_size", MAX_TOKEN_ID + 1):      # a replay's stand-in has no weights
        raise TokenizerMismatchError(f"this suffix store holds token id {largest_id}, beyond {lm.name}'s vocabulary "
                                     f"(ids 0..{lm.vocab_size - 1}): its documents are another model's token ids; use "
                                     "a store filled with this model's ids, or an empty one")
