"""Attention rows of chosen heads, captured without the eager kernel.

HF returns attention weights only from eager attention, which is slower on every layer (about 8% of a step on
the Qwen 0.5B). PLD+(a) needs one row of a few heads per step, so instead of asking for weights we keep, on the
chosen layers only, each chosen head's post-RoPE queries and a reference to the layer's keys (the cache tensor
after this forward; copied where the cache writes in place, kv_cache.InPlaceLayer). `AttentionQueries.weights` then
computes softmax(q k^T * scale) for one query row over the keys it may see: the same probabilities eager
attention returns for that row, at the cost of one small matrix-vector product per head.

Supported: decoder layers whose attention module has `q_proj`, `head_dim`, `layer_idx`, takes
`position_embeddings=(cos, sin)` and lives in a module with `apply_rotary_pos_emb` (Llama, Qwen2/3, Mistral and
the many models built like them). Anything else gets a clear error that says to load the model with eager
attention, which the runner then uses directly.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Sequence

import torch

from multidraft.errors import InvalidOptionError


@dataclass
class AttentionQueries:
    """Per captured head: queries (T, d) of this forward's new tokens and the keys (S, d) they attend to."""

    queries: list[torch.Tensor]
    keys: list[torch.Tensor]
    scaling: list[float]

    @property
    def num_keys(self) -> int:
        return min(int(keys.shape[0]) for keys in self.keys)

    def weights(self, row: int, columns: Sequence[int]) -> torch.Tensor:
        """(num_heads, len(columns)): query `row`'s attention probabilities over key positions `columns`.

        `columns` must be exactly the keys that row may see (its past and its ancestors), as the softmax is
        taken over them; for those keys this equals the eager kernel's row (the others get weight 0 there).
        """
        columns = list(columns)
        contiguous = columns == list(range(len(columns)))     # a chain draft: a view, no copy
        index = None if contiguous else torch.as_tensor(columns, dtype=torch.long)
        rows: list = [None] * len(self.queries)
        by_keys: dict[int, list[int]] = {}                      # heads sharing a KV head share one product
        for head, keys in enumerate(self.keys):
            by_keys.setdefault(id(keys), []).append(head)
        for heads in by_keys.values():
            keys = self.keys[heads[0]]
            seen = keys[: len(columns)] if contiguous else keys.index_select(0, index.to(keys.device))
            queries = torch.stack([self.queries[h][row].float() * self.scaling[h] for h in heads])
            probabilities = torch.softmax(queries @ seen.float().T, dim=-1)
            for head, probs in zip(heads, probabilities):
                rows[head] = probs
        return torch.stack(rows).cpu()

    def select_rows(self, rows: Sequence[int]) -> "AttentionQueries":
        return AttentionQueries([q[list(rows)] for q in self.queries], self.keys, self.scaling)


def install_query_hooks(decoder_layers, heads_by_layer: dict[int, list[int]], per_layer: dict) -> list:
    """Forward hooks on the chosen layers' attention modules that store (queries of the chosen heads, keys)."""
    hooks = []
    for layer, heads in heads_by_layer.items():
        module = decoder_layers[layer].self_attn
        rope = _rotary_function(module)

        def keep_queries(attn, args, kwargs, _output, layer=layer, heads=heads, rope=rope):
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            cos, sin = kwargs["position_embeddings"]
            cache = kwargs.get("past_key_values")
            if cache is None:
                raise InvalidOptionError("capturing attention rows needs the KV cache; load the model with "
                                         "attn_implementation='eager' instead")
            shape = (*hidden.shape[:-1], -1, attn.head_dim)
            queries = attn.q_proj(hidden).view(shape)
            if getattr(attn, "q_norm", None) is not None:       # Qwen3-style per-head norm before RoPE
                queries = attn.q_norm(queries)
            queries = queries.transpose(1, 2)[:, heads]          # (1, h, T, d)
            queries, _ = rope(queries, queries, cos, sin)
            keys = cache.layers[attn.layer_idx].keys[0]          # (kv_heads, S, d), post-RoPE
            if getattr(cache.layers[attn.layer_idx], "key_buffer", None) is not None:   # written in place later
                keys = keys.clone(memory_format=torch.contiguous_format)
            groups = attn.config.num_attention_heads // keys.shape[0]
            shared = {kv: keys[kv] for kv in {head // groups for head in heads}}   # one object per KV head
            per_layer[layer] = [(queries[0, i], shared[head // groups], float(attn.scaling))
                                for i, head in enumerate(heads)]
        hooks.append(module.register_forward_hook(on_this_thread(keep_queries), with_kwargs=True))
    return hooks


def on_this_thread(hook):
    """`hook` firing only for forwards on the thread that installed it: a request that takes turns with the engine's
    batch (engine/solo.py) keeps its capture hooks on the layers while it waits, and the batch's forwards, run by the
    engine's thread meanwhile, must not feed them."""
    owner = threading.get_ident()

    def hook_on_owner_thread(*args, **kwargs):
        if threading.get_ident() == owner:
            return hook(*args, **kwargs)
        return None
    return hook_on_owner_thread


def _rotary_function(module):
    missing = [name for name in ("q_proj", "head_dim", "layer_idx", "scaling") if not hasattr(module, name)]
    rope = getattr(sys.modules.get(type(module).__module__), "apply_rotary_pos_emb", None)
    if missing or rope is None:
        raise InvalidOptionError(
            f"cannot capture attention rows of {type(module).__name__} with hooks (it lacks "
            f"{', '.join(missing) or 'apply_rotary_pos_emb'}); load the model with attn_implementation='eager'")
    return rope
