"""Cross-request prefix reuse: the keys/values of earlier generations, so a prompt that starts with what an earlier
request read (and wrote) skips that part of its prefill.

Why: in an agent loop every step's prompt holds the previous steps' prompt and answer (the file, the tests, the
conversation so far), so most of each prefill recomputes keys/values computed a step before. On a CPU a prefill
row costs about a third of a decode step, so a 800-token prompt costs seconds that no drafter can win back.

Exactness: reuse is allowed only where a position's keys/values are the same bits whether they were computed in a
prefill, in a verify forward, or in a one-token step: the quantized-q8 runner (8-bit activations in every linear,
batch-invariant kernels, no dense prefill GEMM). Elsewhere a reused prefix could change a near-tie token, so
`generate` refuses the option there. With the q8 runner a generation that reuses a prefix gives the same tokens,
bit for bit the same logits, as one that prefills the whole prompt.

A `PrefixCache` belongs to one model. It keeps whole sequences (prompt + output of earlier generations) with their
keys/values, least recently used evicted first within `max_mb`; a lookup reuses the longest common prefix with any
of them. PLD+ (rank_by="hidden") also needs the cached positions' hidden states: an entry keeps those of the layer
its generation captured, and a generation that needs another layer (or attention rows) prefills as usual.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from multidraft.errors import InvalidOptionError

DEFAULT_MAX_MB = 1024


@dataclass
class _Entry:
    tokens: torch.Tensor                       # (L,) int64: the positions the keys/values cover
    keys: list[torch.Tensor]                   # per layer (1, kv_heads, L, head_dim)
    values: list[torch.Tensor]
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)    # layer -> (L, d)

    @property
    def nbytes(self) -> int:
        tensors = self.keys + self.values + list(self.hidden.values())
        return sum(t.numel() * t.element_size() for t in tensors) + self.tokens.numel() * 8


@dataclass
class Reused:
    """What a lookup found: `length` positions of keys/values (already in the new cache) and, when asked for, the
    captured layer's hidden states of those positions."""

    length: int = 0
    hidden: Optional[torch.Tensor] = None


def reuse_refusal(lm) -> Optional[str]:
    """Why `lm` cannot reuse cached keys/values exactly, or None when it can."""
    capabilities = getattr(lm, "capabilities", None)
    if capabilities is not None and capabilities.prefix_reusable:
        return None
    return (f"prefix_cache needs a runner whose every forward is batch-invariant, prefill included (quantized-q8 or "
            f"native, with every matrix of the GGUF in Q4_K or Q6_K); {getattr(lm, 'name', 'this model')} runs on "
            f"{getattr(lm, 'runner', '')!r}, where a reused prefix could change a near-tie token: load it with "
            "runner='quantized-q8' or drop prefix_cache")


class PrefixCache:
    """Keys/values of earlier generations of one model, reused by later prompts that start the same way.

        cache = multidraft.PrefixCache(max_mb=512)
        multidraft.generate(lm, prompt, method="suffix", prefix_cache=cache)
    """

    def __init__(self, max_mb: float = DEFAULT_MAX_MB):
        if isinstance(max_mb, bool) or not isinstance(max_mb, (int, float)) or not 0 < max_mb < float("inf"):
            raise InvalidOptionError(f"max_mb must be a positive number of megabytes, got {max_mb!r}")
        self.max_bytes = int(max_mb * 2 ** 20)
        self._entries: "OrderedDict[int, _Entry]" = OrderedDict()
        self._next_id = 0
        self._lock = threading.Lock()
        self._model = None
        self.reused_tokens = 0        # positions reused over all lookups

    # ----- binding -----
    def check(self, lm) -> None:
        """Refuse a model this cache cannot serve exactly, or a second model (its keys/values mean nothing there)."""
        refusal = reuse_refusal(lm)
        if refusal is not None:
            raise InvalidOptionError(refusal)
        with self._lock:
            if self._model is None:
                self._model = lm
            elif self._model is not lm:
                raise InvalidOptionError("this PrefixCache holds another model's keys/values: use one PrefixCache "
                                         "per loaded model")

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(entry.nbytes for entry in self._entries.values())

    @property
    def num_tokens(self) -> int:
        with self._lock:
            return sum(int(entry.tokens.numel()) for entry in self._entries.values())

    # ----- lookup and store -----
    def restore(self, cache, prompt_ids: Sequence[int], limit: int, hidden_layer: Optional[int] = None) -> Reused:
        """Copy into the empty `cache` (a KVCache or an engine region) the keys/values of the longest cached prefix of prompt_ids[:limit] (an entry
        without `hidden_layer`'s states does not count when that layer is asked for)."""
        if limit <= 0 or cache.length != 0:
            return Reused()
        prompt = torch.as_tensor(list(prompt_ids[:limit]), dtype=torch.long)
        with self._lock:
            best_id, best = None, 0
            for entry_id, entry in self._entries.items():
                if hidden_layer is not None and hidden_layer not in entry.hidden:
                    continue
                length = _common_prefix(entry.tokens, prompt)
                if length > best:
                    best_id, best = entry_id, length
            if best_id is None:
                return Reused()
            entry = self._entries[best_id]
            self._entries.move_to_end(best_id)
            cache.load_prefix(entry.keys, entry.values, best)
            self.reused_tokens += best
            hidden = entry.hidden[hidden_layer][:best] if hidden_layer is not None else None
        return Reused(best, hidden)

    def remember(self, token_ids: Sequence[int], cache, hidden: Optional[dict[int, torch.Tensor]] = None) -> None:
        """Keep the keys/values of a finished generation: `cache` covers token_ids[:cache.length]. An entry that
        this one extends is dropped (its positions are all here)."""
        length = min(cache.length, len(token_ids))
        if length <= 0:
            return
        keys, values = cache.prefix_tensors(length)
        if not keys:
            return
        if hidden and any(h.shape[0] < length for h in hidden.values()):
            hidden = None                     # incomplete capture: keep the keys/values only
        entry = _Entry(tokens=torch.as_tensor(list(token_ids[:length]), dtype=torch.long), keys=keys, values=values,
                       hidden={k: v[:length].contiguous() for k, v in (hidden or {}).items()})
        if entry.nbytes > self.max_bytes:
            return
        with self._lock:
            for entry_id, old in list(self._entries.items()):
                if old.tokens.numel() <= length and _common_prefix(old.tokens, entry.tokens) == old.tokens.numel() \
                        and set(old.hidden) <= set(entry.hidden):
                    del self._entries[entry_id]
            self._entries[self._next_id] = entry
            self._next_id += 1
            total = sum(e.nbytes for e in self._entries.values())
            while total > self.max_bytes and len(self._entries) > 1:
                _, evicted = self._entries.popitem(last=False)
                total -= evicted.nbytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def check_prefix_cache(prefix_cache, lm) -> None:
    """A caller's prefix_cache argument: a PrefixCache that can serve `lm` exactly, or a clear error."""
    if not isinstance(prefix_cache, PrefixCache):
        raise InvalidOptionError(f"prefix_cache must be a multidraft.PrefixCache, got {type(prefix_cache).__name__}")
    prefix_cache.check(lm)


def begin_reuse(prefix_cache: Optional[PrefixCache], cache, prefill_ids: Sequence[int], capture: dict,
                stats) -> tuple[Reused, Optional["HiddenRecorder"]]:
    """A generation's start, for the loop and the engine alike: the reused prefix (already in the empty `cache`) and
    the recorder of its hidden states for its own entry; (nothing, None) without a cache or when the generation
    captures attention rows (not kept for cached positions: it prefills as usual and leaves no entry)."""
    if prefix_cache is None or capture.get("attention_heads"):
        return Reused(), None
    layer = capture.get("hidden_layer")
    reused = prefix_cache.restore(cache, prefill_ids, len(prefill_ids), layer)
    stats.prefix_reused_tokens += reused.length
    return reused, HiddenRecorder(layer)


class HiddenRecorder:
    """The captured layer's hidden states of every cached position of one generation, for its prefix-cache entry
    (PLD+ ranks by them, so a later prompt reusing these positions needs them too)."""

    def __init__(self, layer: Optional[int]):
        self.layer = layer
        self.parts: list[torch.Tensor] = []

    def add(self, hidden: Optional[torch.Tensor], rows: Optional[list[int]] = None) -> None:
        if self.layer is None:
            return
        if hidden is None:
            self.layer = None                 # a gap: this generation's entry keeps keys/values only
            return
        self.parts.append(hidden if rows is None else hidden[rows])

    def states(self) -> Optional[dict[int, torch.Tensor]]:
        return {self.layer: torch.cat(self.parts)} if self.layer is not None and self.parts else None


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(a.numel(), b.numel())
    if n == 0:
        return 0
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if differ.numel() else n
