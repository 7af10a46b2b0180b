"""Key/value caches of the LM runner: HF's growing DynamicCache, and a preallocated static one.

Both give the draft-and-verify loop the same three things: `length`, `crop(length)` (forget the last positions)
and `keep(prefix_length, extra_positions)` (keep an accepted root-to-node path of the last tree).

`StaticKVCache` writes every forward's keys/values into fixed buffers at explicit slots, so a forward of a given
number of new tokens always has the same tensor shapes and addresses: what a CUDA graph needs. Crop only moves
the length; keep copies the kept slots down inside the buffers. The buffers (a `StaticArena`) belong to the
model and are shared by its static caches, one generation at a time (a CUDA graph is bound to their addresses).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


@dataclass
class KVCache:
    """The target's key/value cache and the number of positions it covers (HF DynamicCache)."""

    hf_cache: DynamicCache = field(default_factory=DynamicCache)

    @property
    def length(self) -> int:
        return self.hf_cache.get_seq_length()

    def crop(self, length: int) -> None:
        """Keep the first `length` positions."""
        excess = self.length - length
        if excess < 0:
            raise ValueError(f"cannot crop a cache of {self.length} positions to {length}")
        if excess:
            self.hf_cache.crop(-excess)

    def prefix_tensors(self, length: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Copies of the keys and values of positions [0, length), per layer (a PrefixCache entry)."""
        layers = [layer for layer in self.hf_cache.layers if getattr(layer, "is_initialized", False)]
        return ([layer.keys[:, :, :length].clone() for layer in layers],
                [layer.values[:, :, :length].clone() for layer in layers])

    def load_prefix(self, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], length: int) -> None:
        """Fill this empty cache with the first `length` positions of per-layer keys and values."""
        if self.length:
            raise ValueError("load_prefix needs an empty cache")
        for layer, (k, v) in enumerate(zip(keys, values)):
            self.hf_cache.update(k[:, :, :length].clone(), v[:, :, :length].clone(), layer)

    def keep(self, prefix_length: int, extra_positions: Sequence[int]) -> None:
        """Keep positions [0, prefix_length) plus the given later positions, in that order."""
        extra = list(extra_positions)
        if extra == list(range(prefix_length, prefix_length + len(extra))):
            self.crop(prefix_length + len(extra))
            return
        index = None
        for layer in self.hf_cache.layers:
            if not getattr(layer, "is_initialized", False):
                continue
            if index is None or index.device != layer.keys.device:
                index = torch.tensor(list(range(prefix_length)) + extra, device=layer.keys.device)
            layer.keys = layer.keys.index_select(-2, index)
            layer.values = layer.values.index_select(-2, index)


MIN_BUFFER_SLOTS = 256


def buffer_slots(positions: int, minimum: int) -> int:
    """Slots for `positions` in a cache buffer that doubles when full: the power of two holding them, at least
    `minimum`."""
    return max(minimum, 1 << (positions - 1).bit_length())


class InPlaceLayer(DynamicLayer):
    """HF's DynamicLayer with its keys and values written into buffers that double when full, instead of a torch.cat
    of the whole layer per forward (a copy of every cached key and value per token). `keys` / `values` stay what HF
    expects, (B, KVH, length, D), as views of the buffers; a crop slices them; a tensor put there by other code (a
    reorder, a keep) is copied into new buffers at the next update. Readers that keep a layer's keys past the next
    forward must copy them (attention_rows)."""

    MIN_SLOTS = MIN_BUFFER_SLOTS

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.key_buffer = self.value_buffer = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        end = length + key_states.shape[-2]
        if not (self._in_buffer(self.keys, self.key_buffer, key_states, end)
                and self._in_buffer(self.values, self.value_buffer, value_states, end)):
            self.key_buffer = self._new_buffer(self.keys, key_states, length, end)
            self.value_buffer = self._new_buffer(self.values, value_states, length, end)
        self.key_buffer[..., length:end, :] = key_states
        self.value_buffer[..., length:end, :] = value_states
        self.keys = self.key_buffer[..., :end, :]
        self.values = self.value_buffer[..., :end, :]
        return self.keys, self.values

    @staticmethod
    def _in_buffer(held: torch.Tensor, buffer, new: torch.Tensor, end: int) -> bool:
        """`held` is the first positions of `buffer` (a view: a crop keeps that) and `buffer` has room up to `end`."""
        if buffer is None or buffer.shape[-2] < end or buffer.dtype != new.dtype or buffer.device != new.device:
            return False
        if held.numel() == 0:
            return held.dim() != 4 or held.shape[:2] == buffer.shape[:2]
        return (held.data_ptr() == buffer.data_ptr() and held.stride() == buffer.stride()
                and held.shape[:2] == buffer.shape[:2] and held.shape[-1] == buffer.shape[-1])

    def _new_buffer(self, held: torch.Tensor, new: torch.Tensor, length: int, end: int) -> torch.Tensor:
        buffer = new.new_empty((*new.shape[:2], buffer_slots(end, self.MIN_SLOTS), new.shape[-1]))
        if length:
            buffer[..., :length, :] = held
        return buffer


def in_place_cache() -> DynamicCache:
    """An HF DynamicCache of InPlaceLayers (the runners on HF's modules with the GGUF kernels' attention)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = InPlaceLayer
    return cache


def with_spare_slots(keys: torch.Tensor) -> torch.Tensor:
    """(B, KVH, length, D) keys that are the first positions of a contiguous (B, KVH, slots, D) buffer (an
    InPlaceLayer's) as that whole buffer, else `keys`: the GGUF kernels' attention reads only the keys its mask covers,
    so it takes the buffer as it is instead of a contiguous copy. (From the strides: a view's `_base` is not kept
    under inference_mode.)"""
    if keys.dim() != 4 or keys.is_contiguous() or keys.storage_offset() != 0:
        return keys
    batch, heads, length, dim = keys.shape
    stride = keys.stride()
    if stride[3] != 1 or stride[2] != dim or stride[1] % dim or stride[0] != heads * stride[1]:
        return keys
    slots = stride[1] // dim
    if slots < length or keys.untyped_storage().nbytes() < batch * stride[0] * keys.element_size():
        return keys
    return keys.as_strided((batch, heads, slots, dim), stride)


def keep_slots(buffers: list, length: int, prefix_length: int, extra_positions: Sequence[int]) -> int:
    """`keep` on per-layer slot buffers (1, kv_heads, slots, head_dim) holding `length` valid slots: copy the kept
    later slots down behind [0, prefix_length), in order; the new length."""
    extra = [int(p) for p in extra_positions]
    if any(p >= length or p < prefix_length for p in extra) or prefix_length > length:
        raise ValueError(f"cannot keep positions {extra} after {prefix_length} of a cache of {length}")
    moved = [(src, prefix_length + i) for i, src in enumerate(extra) if src != prefix_length + i]
    if moved and buffers:
        device = buffers[0].device
        source = torch.tensor([s for s, _ in moved], device=device)
        target = torch.tensor([t for _, t in moved], device=device)
        for buffer in buffers:                 # index_select copies first, so overlapping slots are safe
            buffer.index_copy_(2, target, buffer.index_select(2, source))
    return prefix_length + len(extra)


class GrowingKVCache:
    """One generation's keys/values in per-layer buffers (1, kv_heads, slots, head_dim) written in place, for the
    native forward: a token appends into spare slots instead of HF's torch.cat of the whole cache (a copy of every
    layer's keys and values per token). The buffers double when full. Slots past `length` hold stale rows of
    cropped drafts; the forward's mask never shows them, and the attention kernel skips keys a row cannot see.

    The native runner writes a forward's rows at [length, length + T) in every layer (`update`), then moves
    `length` on (`advance`)."""

    MIN_SLOTS = MIN_BUFFER_SLOTS

    def __init__(self):
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    @property
    def hf_cache(self):
        raise TypeError("the native runner's KV cache has no HF DynamicCache; ask lm.new_cache(dynamic=True)")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer: int):
        """Write (1, KVH, T, D) rows at [length, length + T) of `layer`; that layer's whole buffers."""
        end = self._length + key_states.shape[2]
        keys, values = self.room(layer, key_states.shape[2], key_states.shape[1], key_states.shape[3], key_states)
        keys[:, :, self._length:end] = key_states
        values[:, :, self._length:end] = value_states
        return keys, values

    def room(self, layer: int, count: int, kv_heads: int, head_dim: int, like: torch.Tensor):
        """`layer`'s whole buffers (1, kv_heads, slots, head_dim) of like's dtype, with slots for `count` rows at
        [length, length + count) (the native forward writes them there itself: gguf_kernels.rotary_store)."""
        end = self._length + count
        if layer == len(self.keys):
            slots = buffer_slots(end, self.MIN_SLOTS)
            self.keys.append(like.new_zeros((1, kv_heads, slots, head_dim)))
            self.values.append(like.new_zeros((1, kv_heads, slots, head_dim)))
        elif end > self.keys[layer].shape[2]:
            self.keys[layer] = self._grown(self.keys[layer], end)
            self.values[layer] = self._grown(self.values[layer], end)
        return self.keys[layer], self.values[layer]

    def rooms(self, layers: int, count: int, kv_heads: int, head_dim: int, like: torch.Tensor):
        """room() of layers 0..layers-1 as (keys, values) lists: the cache's own lists when every layer has room."""
        if len(self.keys) == layers and all(buffer.shape[2] >= self._length + count for buffer in self.keys):
            return list(self.keys), list(self.values)
        return layer_rooms(self, layers, count, kv_heads, head_dim, like)

    def _grown(self, buffer: torch.Tensor, needed: int) -> torch.Tensor:
        grown = buffer.new_zeros((*buffer.shape[:2], buffer_slots(needed, self.MIN_SLOTS), buffer.shape[3]))
        grown[:, :, : self._length] = buffer[:, :, : self._length]
        return grown

    def advance(self, num_new: int) -> None:
        """After a forward wrote `num_new` rows into every layer."""
        self._length += int(num_new)

    def crop(self, length: int) -> None:
        if length > self._length or length < 0:
            raise ValueError(f"cannot crop a cache of {self._length} positions to {length}")
        self._length = int(length)

    @torch.inference_mode()
    def keep(self, prefix_length: int, extra_positions: Sequence[int]) -> None:
        self._length = keep_slots(self.keys + self.values, self._length, prefix_length, extra_positions)

    def prefix_tensors(self, length: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return ([keys[:, :, :length].clone() for keys in self.keys],
                [values[:, :, :length].clone() for values in self.values])

    def load_prefix(self, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], length: int) -> None:
        if self._length:
            raise ValueError("load_prefix needs an empty cache")
        for layer, (k, v) in enumerate(zip(keys, values)):
            self.update(k[:, :, :length], v[:, :, :length], layer)
        self._length = int(length)


class _LayerView:
    """What attention-row hooks read of a cache layer (`.keys`): a copy of the valid slots, since the static
    buffers are overwritten in place by later forwards."""

    def __init__(self, arena: "StaticArena", layer: int):
        self._arena, self._layer = arena, layer

    @property
    def keys(self) -> torch.Tensor:
        return self._arena.keys[self._layer][:, :, : self._arena.valid_slots].clone()


class StaticArena:
    """Preallocated keys/values of every layer, (1, kv_heads, slots, head_dim) each, allocated at the first forward.

    It also speaks the part of HF's Cache protocol that decoder layers use (`update`, `get_seq_length`): before a
    forward the runner sets `write_index` (the slot of each new row) and `kv_limit` (how many slots attention
    reads; the mask hides the ones not in use)."""

    def __init__(self, capacity: int, slack: int):
        self.capacity = int(capacity)          # positions a generation may use
        self.slots = int(capacity) + int(slack)  # + room for a bucket's padded rows and for capture warm-up
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.write_index: Optional[torch.Tensor] = None
        self.kv_limit = self.slots
        self.valid_slots = 0                   # past + new rows of the forward in flight (for attention hooks)
        self.seen = 0
        self._owner = None                     # weakref to the StaticKVCache using the buffers now

    def room(self, layer: int, count: int, kv_heads: int, head_dim: int, like: torch.Tensor):
        """`layer`'s whole buffers (1, kv_heads, slots, head_dim) of like's dtype (GrowingKVCache.room's protocol:
        the native forward writes the rows at write_index itself); `count` is unused: the slots are fixed."""
        self._allocate(layer, like, kv_heads, head_dim, head_dim)
        return self.keys[layer], self.values[layer]

    def rooms(self, layers: int, count: int, kv_heads: int, head_dim: int, like: torch.Tensor):
        """room() of layers 0..layers-1 as (keys, values) lists."""
        return layer_rooms(self, layers, count, kv_heads, head_dim, like)

    def _allocate(self, layer: int, like: torch.Tensor, kv_heads: int, key_dim: int, value_dim: int) -> None:
        """Lazy: a layer's buffers at its first forward, shapes and dtype from the model's own projections."""
        if layer == len(self.keys):
            self.keys.append(like.new_zeros((1, kv_heads, self.slots, key_dim)))
            self.values.append(like.new_zeros((1, kv_heads, self.slots, value_dim)))

    # ----- HF Cache protocol -----
    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self._allocate(layer_idx, key_states, key_states.shape[1], key_states.shape[-1], value_states.shape[-1])
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        keys.index_copy_(2, self.write_index, key_states)
        values.index_copy_(2, self.write_index, value_states)
        return keys[:, :, : self.kv_limit], values[:, :, : self.kv_limit]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen

    @property
    def layers(self):
        return [_LayerView(self, i) for i in range(len(self.keys))]

    @property
    def is_compileable(self) -> bool:
        return True

    # ----- ownership -----
    def claim(self, cache: "StaticKVCache") -> bool:
        """Give the buffers to `cache` unless another live cache holds them."""
        owner = self._owner() if self._owner is not None else None
        if owner is not None and owner is not cache and owner.dynamic is None:
            return False
        self._owner = weakref.ref(cache)
        return True


class StaticKVCache:
    """A generation's view of the model's StaticArena: its length, and the slots [0, length) it has written.

    If a forward would go past the arena's capacity the runner moves the valid prefix into a DynamicCache
    (`spill`) and goes on eagerly with it: `dynamic` is then set and every call goes there."""

    def __init__(self, arena: StaticArena):
        self.arena = arena
        self._length = 0
        self.dynamic: Optional[KVCache] = None

    @property
    def length(self) -> int:
        return self.dynamic.length if self.dynamic is not None else self._length

    @length.setter
    def length(self, value: int) -> None:
        self._length = int(value)

    @property
    def hf_cache(self):
        if self.dynamic is None:
            raise TypeError("a static KV cache has no HF DynamicCache; ask lm.new_cache(dynamic=True)")
        return self.dynamic.hf_cache

    def crop(self, length: int) -> None:
        if self.dynamic is not None:
            return self.dynamic.crop(length)
        if length > self._length or length < 0:
            raise ValueError(f"cannot crop a cache of {self._length} positions to {length}")
        self._length = int(length)

    @torch.inference_mode()
    def keep(self, prefix_length: int, extra_positions: Sequence[int]) -> None:
        if self.dynamic is not None:
            return self.dynamic.keep(prefix_length, extra_positions)
        self._length = keep_slots(self.arena.keys + self.arena.values, self._length, prefix_length, extra_positions)

    @torch.inference_mode()
    def spill(self) -> KVCache:
        """Move the valid prefix into a DynamicCache (for a sequence beyond the arena); later calls go there."""
        if self.dynamic is None:
            dynamic = KVCache(DynamicCache())
            for layer, (keys, values) in enumerate(zip(self.arena.keys, self.arena.values)):
                dynamic.hf_cache.update(keys[:, :, : self._length].clone(), values[:, :, : self._length].clone(), layer)
            self.dynamic = dynamic
        return self.dynamic


def layer_rooms(cache, layers: int, count: int, kv_heads: int, head_dim: int, like: torch.Tensor):
    """cache.room() of layers 0..layers-1 as (keys, values) lists."""
    buffers = [cache.room(layer, count, kv_heads, head_dim, like) for layer in range(layers)]
    return [keys for keys, _ in buffers], [values for _, values in buffers]


# ----------------------------------------------------------------------------------------------------------------
# Masks
# ----------------------------------------------------------------------------------------------------------------

def visible_keys(parents: Optional[Sequence[int]], past_length: int, num_new: int) -> torch.Tensor:
    """(T, past_length + T) bool on the host: each new row sees the cache, its ancestors (parents None: a chain,
    every row before it) and itself."""
    if parents is None:             # key s <= past + t: one numpy comparison (a forward per token builds one)
        return torch.from_numpy(np.arange(past_length + num_new)[None, :] <=
                                past_length + np.arange(num_new)[:, None])
    allowed = torch.ones(num_new, past_length + num_new, dtype=torch.bool)
    allowed[:, past_length:] = tree_ancestors(parents)
    return allowed


def tree_attention_mask(parents: Sequence[int], past_length: int, dtype: torch.dtype, device) -> torch.Tensor:
    """(1, 1, T, past_length + T) additive mask: each node sees the cache, its ancestors and itself."""
    return additive_mask(visible_keys(parents, past_length, len(parents)), dtype, device)


def tree_ancestors(parents: Sequence[int]) -> torch.Tensor:
    """(N, N) bool on the host: [i, j] = node j is node i or one of its ancestors (parents[i] < i, -1 = root)."""
    num_nodes = len(parents)
    allowed = torch.zeros(num_nodes, num_nodes, dtype=torch.bool)
    for node, parent in enumerate(parents):
        if parent >= 0:
            allowed[node] = allowed[parent]
        allowed[node, node] = True
    return allowed


def text_config(model):
    """The config of a model's text decoder (a multimodal config's text part)."""
    return model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config


def unserved_layer_kinds(model) -> list[str]:
    """The kinds of attention layer in a model's config other than full and sliding-window ones (the two kinds our
    masks serve), sorted."""
    return sorted(set(getattr(text_config(model), "layer_types", None) or ()) -
                  {"full_attention", "sliding_attention"})


def sliding_window(model) -> Optional[int]:
    """The window of a model whose layers include sliding-window attention ones (Gemma3), else None."""
    config = text_config(model)
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        return int(config.sliding_window)
    return None


def windowed(allowed: torch.Tensor, positions: torch.Tensor, window: int) -> torch.Tensor:
    """A sliding-window layer's (T, S) view of `allowed`: row t also stops seeing the keys in slots at or before
    positions[t] - window, HF's rule (kv_idx > q_idx - window) with the query at its position. The keys a cut can
    reach are committed ones, whose slot is their position (a draft spans far less than a window), so a tree node
    sees exactly the keys greedy sees at its position; HF itself would cut by the row's slot."""
    slots = torch.arange(allowed.shape[1], device=allowed.device)
    return allowed & (slots[None, :] > positions.to(allowed.device)[:, None] - window)


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
    """(1, 1, T, K) additive attention mask on `device` from a (T, K) bool matrix of what each row may see."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask.to(device)[None, None]


def tree_depths(parents: Sequence[int]) -> list[int]:
    """Depth of each node, 0 for nodes whose parent is -1."""
    depths: list[int] = []
    for parent in parents:
        depths.append(0 if parent < 0 else depths[parent] + 1)
    return depths


def ancestor_matrix(parents: torch.Tensor) -> torch.Tensor:
    """(N, N) bool on parents' device: [i, j] = node j is node i or one of its ancestors (parents[i] < i, -1 = root).

    Built on the device without a host sync: reachability by repeated squaring of (self | parent) edges."""
    num_nodes = parents.shape[0]
    nodes = torch.arange(num_nodes, device=parents.device)
    reach = torch.zeros(num_nodes, num_nodes, device=parents.device)
    reach[nodes, nodes] = 1.0
    has_parent = parents >= 0
    reach[nodes, parents.clamp(min=0)] += has_parent.float()
    steps = 1
    while steps < num_nodes:               # after k squarings: every ancestor within 2^k generations
        reach = (reach @ reach).clamp_(max=1.0)
        steps *= 2
    return reach > 0


def static_mask(past: int, first_row: int, bucket: int, num_rows: int, kv_limit: int, dtype, device,
                ancestors: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(1, 1, bucket, kv_limit) additive mask for rows first_row .. first_row + bucket of a forward whose node j
    sits in slot past + j. Real rows (< num_rows) see slots [0, past) and, for a chain, every earlier node; for a
    tree, their ancestors (`ancestors`, from ancestor_matrix). Padding rows see [0, past) and their own slot."""
    columns = torch.arange(kv_limit, device=device)
    row_slots = past + first_row + torch.arange(bucket, device=device)
    if ancestors is None:
        allowed = columns[None, :] <= row_slots[:, None]
    else:
        allowed = (columns < past)[None, :].repeat(bucket, 1)
        real = min(bucket, num_rows - first_row)
        allowed[:real, past: past + ancestors.shape[1]] = ancestors[first_row: first_row + real]
        allowed[real:] |= columns[None, :] == row_slots[real:, None]
    return additive_mask(allowed, dtype, device)
