"""Many requests in one target forward: a shared KV arena cut into per-request regions, and the packed forward.

Layout. `KVArena` holds every layer's keys/values in preallocated slots (the static runner's StaticArena: it
speaks HF's Cache protocol, writing each new row at an explicit slot). Each request owns one contiguous
`RegionCache` of it, sized at admission (prompt + max_new_tokens + draft room), so the arena's size bounds the KV
memory of everything running. A region keeps its committed positions at slots [base, base + length); `keep`
moves an accepted tree path down inside the region (bookkeeping: rejected rows are simply overwritten later).

Packed forward. The rows of every request (a prefill chunk, or the last token plus its draft tree) are laid end
to end in one batch row: row j of request r is written at slot base_r + past_r + j, sits at position past_r +
depth(j), and its mask row lets it see slots [base_r, base_r + past_r) and its own ancestors (block-diagonal:
never another request's slots). Keys are read in slot order, so a row sees exactly the keys it sees alone, in the
same order. On the quantized runner (row-independent linears, attention per row over its visible keys in order)
a request's logits are therefore the same bits alone and in any batch; on eager / fast runners matrix shapes
change with the batch, which may change the last bits (see multidraft.engine).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from multidraft.errors import InvalidOptionError
from multidraft.models.kv_cache import (StaticArena, sliding_window, tree_depths, unserved_layer_kinds,
                                        visible_keys, windowed)

KV_ALIGN = 64          # the key range a forward reads is rounded up to this many slots (fewer distinct shapes)


class KVArena(StaticArena):
    """The shared slots, with first-fit allocation of contiguous regions."""

    def __init__(self, slots: int):
        super().__init__(slots, slack=0)
        self._free: list[tuple[int, int]] = [(0, self.slots)]     # (start, size), sorted, merged

    @property
    def free_slots(self) -> int:
        return sum(size for _, size in self._free)

    def allocate(self, size: int) -> Optional["RegionCache"]:
        """A region of `size` slots, or None while no free run is that long."""
        for index, (start, free) in enumerate(self._free):
            if free >= size:
                self._free[index:index + 1] = [(start + size, free - size)] if free > size else []
                return RegionCache(self, start, size)
        return None

    def release(self, region: "RegionCache") -> None:
        if region.released:
            return
        region.released = True
        runs = sorted(self._free + [(region.base, region.capacity)])
        merged: list[tuple[int, int]] = []
        for start, size in runs:
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + size)
            else:
                merged.append((start, size))
        self._free = merged


class RegionCache:
    """One request's KV: slots [base, base + length) of the arena, at most `capacity` of them."""

    def __init__(self, arena: KVArena, base: int, capacity: int):
        self.arena, self.base, self.capacity = arena, int(base), int(capacity)
        self.length = 0
        self.released = False

    @property
    def room(self) -> int:
        return self.capacity - self.length

    def crop(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of {self.length} positions to {length}")
        self.length = int(length)

    def prefix_tensors(self, length: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Copies of the keys and values of positions [0, length), per layer (a PrefixCache entry)."""
        span = slice(self.base, self.base + min(length, self.length))
        return ([k[:, :, span].clone() for k in self.arena.keys], [v[:, :, span].clone() for v in self.arena.values])

    @torch.inference_mode()
    def load_prefix(self, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], length: int) -> None:
        """Fill this empty region with the first `length` positions of per-layer keys and values."""
        if self.length or length > self.capacity:
            raise ValueError(f"load_prefix needs an empty region of at least {length} slots")
        arena = self.arena
        if not arena.keys:                    # the arena's buffers are made lazily, as its first forward would
            for k, v in zip(keys, values):
                arena.keys.append(k.new_zeros((*k.shape[:2], arena.slots, k.shape[-1])))
                arena.values.append(v.new_zeros((*v.shape[:2], arena.slots, v.shape[-1])))
        for buffer, source in zip(arena.keys + arena.values, list(keys) + list(values)):
            buffer[:, :, self.base:self.base + length] = source[:, :, :length]
        self.length = int(length)

    @torch.inference_mode()
    def keep(self, prefix_length: int, extra_positions: Sequence[int]) -> None:
        """Keep positions [0, prefix_length) and the given later ones, in that order (copies inside the region)."""
        extra = [int(p) for p in extra_positions]
        if prefix_length > self.length or any(p >= self.length or p < prefix_length for p in extra):
            raise ValueError(f"cannot keep positions {extra} after {prefix_length} of a cache of {self.length}")
        moved = [(src, prefix_length + i) for i, src in enumerate(extra) if src != prefix_length + i]
        if moved and self.arena.keys:
            device = self.arena.keys[0].device
            source = torch.tensor([self.base + s for s, _ in moved], device=device)
            target = torch.tensor([self.base + t for _, t in moved], device=device)
            for buffers in (self.arena.keys, self.arena.values):
                for buffer in buffers:         # index_select copies first, so overlapping slots are safe
                    buffer.index_copy_(2, target, buffer.index_select(2, source))
        self.length = prefix_length + len(extra)


@dataclass
class Segment:
    """One request's rows in a packed forward."""

    cache: RegionCache
    token_ids: list[int]
    parents: Optional[list[int]] = None    # a tree over the rows (-1: on the cache); None: a chain
    all_logits: bool = True                # False: only the last row's logits (a prefill chunk)
    hidden_layer: Optional[int] = None
    # LM.forward's general form instead of parents: (allowed (n, past + n) bool over the region's positions, the
    # rows' positions); a draft session's tree grown on cached tree nodes
    visible: Optional[tuple[torch.Tensor, list[int]]] = None


@dataclass
class SegmentOutput:
    """What LM.forward returns, for one segment (ForwardOutput's fields the loop and drafters read)."""

    logits: torch.Tensor
    hidden: Optional[torch.Tensor] = None
    attention: None = None
    seconds: float = 0.0


def unsupported_reason(lm) -> Optional[str]:
    """Why the packed forward cannot serve `lm` (None if it can): full causal attention, like the static runner,
    or Gemma3-style layers of full and sliding-window attention (each kind gets its own mask over the arena)."""
    from multidraft.models.static_runner import unsupported_reason as static_reason
    if sliding_window(lm.model) is not None:
        kinds = unserved_layer_kinds(lm.model)
        return f"its layers use {', '.join(kinds)}" if kinds else None
    return static_reason(lm.model)


def segment_positions(lm, segment: Segment) -> list[int]:
    """The position ids of a segment's rows (past + depth, or those `visible` gives); raises if the segment cannot
    run (no rows, no room left in its region, past the context): a caller packing many requests checks each first,
    so one request's bad forward fails that request only."""
    n, past = len(segment.token_ids), segment.cache.length
    if n == 0:
        raise ValueError("a segment needs at least one row")
    if n > segment.cache.room:
        raise InvalidOptionError(f"a forward of {n} rows does not fit its request's KV region "
                                 f"({segment.cache.room} slots left)")
    if segment.visible is None:
        positions = [past + d for d in (range(n) if segment.parents is None else tree_depths(segment.parents))]
    else:
        allowed, positions = segment.visible
        if segment.parents is not None or tuple(allowed.shape) != (n, past + n) or len(positions) != n:
            raise ValueError(f"visible needs a ({n}, {past + n}) mask and {n} positions, without parents")
        positions = [int(p) for p in positions]
    if max(positions) + 1 > lm.context_length:
        raise InvalidOptionError(f"the sequence would pass the context of {lm.name} ({lm.context_length})")
    return positions


@torch.inference_mode()
def packed_forward(lm, arena: KVArena, segments: Sequence[Segment], dense: bool = False) -> list[SegmentOutput]:
    """Run every segment's rows in one forward of `lm` over `arena`; each segment's cache grows by its rows.
    `dense`: the quantized runner may use its dense prefill GEMM for linears of many rows (only for a forward whose
    rows all belong to one request's prompt: GEMM bits depend on the rows beside them)."""
    started = time.perf_counter()
    if not segments:
        return []
    ids, positions, slots, row_ranges = [], [], [], []
    for segment in segments:
        n, past = len(segment.token_ids), segment.cache.length
        positions += segment_positions(lm, segment)
        start = len(ids)
        row_ranges.append((start, start + n))
        ids += [int(t) for t in segment.token_ids]
        slots += range(segment.cache.base + past, segment.cache.base + past + n)
    total = len(ids)
    kv_limit = min(arena.slots, -(-(max(slots) + 1) // KV_ALIGN) * KV_ALIGN)
    visible = torch.zeros(total, kv_limit, dtype=torch.bool)
    window = sliding_window(lm.model)
    in_window = torch.zeros_like(visible) if window is not None else None
    wanted: list[int] = []
    for segment, (first, last) in zip(segments, row_ranges):
        base, past, n = segment.cache.base, segment.cache.length, last - first
        allowed = (segment.visible[0].to(torch.bool) if segment.visible is not None
                   else visible_keys(segment.parents, past, n))
        visible[first:last, base: base + past + n] = allowed
        if in_window is not None:          # region slot i holds position i: the window as the request alone has it
            in_window[first:last, base: base + past + n] = windowed(allowed, torch.tensor(positions[first:last]),
                                                                   window)
        wanted += list(range(first, last)) if segment.all_logits else [last - 1]
    if in_window is not None:
        visible = {"full_attention": visible, "sliding_attention": in_window}
    layers = sorted({s.hidden_layer for s in segments if s.hidden_layer is not None})
    arena.write_index = torch.tensor(slots, device=lm.device)
    arena.kv_limit = kv_limit
    arena.seen = max(0, kv_limit - total)
    arena.valid_slots = kv_limit
    # No dense-GEMM prefill on the quantized runner unless asked: a row's bits must not depend on its neighbours.
    logits, hidden_by_layer = lm.runner_object.packed(arena, ids, positions, visible, wanted, layers, dense)
    seconds = time.perf_counter() - started
    results, offset = [], 0
    for segment, (first, last) in zip(segments, row_ranges):
        count = (last - first) if segment.all_logits else 1
        rows = logits[offset: offset + count]
        offset += count
        hidden = None
        if segment.hidden_layer is not None:
            hidden = hidden_by_layer[segment.hidden_layer][first:last]
        segment.cache.length += last - first
        results.append(SegmentOutput(rows, hidden, None, seconds))
    return results

