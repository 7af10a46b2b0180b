"""The native runner: the quantized-q8 model run by models/native.py's forward (no HF module in the loop), for the
architectures it supports; elsewhere it falls back to quantized-q8 (the same arithmetic on HF's modules)."""

from __future__ import annotations

import warnings

import torch

from multidraft.models import gguf_kernels, native
from multidraft.models.attention_rows import AttentionQueries
from multidraft.models.kv_cache import GrowingKVCache, visible_keys
from multidraft.models.runners.base import ForwardOutput, Runner
from multidraft.models.runners.quantized_q8 import QuantizedQ8Runner
from multidraft.sampling import check_finite


class NativeRunner(QuantizedQ8Runner):
    name = "native"

    def __init__(self, lm):
        super().__init__(lm)
        self.native: native.NativeForward = None

    def activate(self, progress: bool, requested: str) -> Runner:
        below = "auto" if requested == "auto" else "quantized-q8"      # auto: the activations the model has
        why_not = native.unsupported_reason(self.lm.model)
        if why_not is not None:
            if requested == self.name:
                warnings.warn(f"multidraft: the native runner cannot serve {self.lm.name}: {why_not}; using "
                              "quantized-q8 (the same arithmetic on HF's modules)", RuntimeWarning, stacklevel=4)
            return QuantizedQ8Runner(self.lm).activate(progress, below)
        super().activate(progress, below)
        self.native = native.NativeForward(self.lm.model)
        return self

    def new_cache(self):
        """Keys and values written in place (no torch.cat of the whole cache per token)."""
        return GrowingKVCache() if self.native is not None else super().new_cache()

    def forward(self, cache, model_inputs, position_ids, parents, visible, logits_rows, hidden_layer,
                attention_heads):
        """LM.forward on the native forward: the same captures, read from the forward itself."""
        lm = self.lm
        positions = position_ids[0]
        past, num_new = cache.length, positions.shape[0]
        allowed = visible[0].to(torch.bool) if visible is not None else visible_keys(parents, past, num_new)
        lm._check_hidden_layer(hidden_layer)
        by_layer, order = lm._heads_by_layer(attention_heads)
        ids, embeds = model_inputs.get("input_ids"), model_inputs.get("inputs_embeds")
        growing = isinstance(cache, GrowingKVCache)
        out = self.native.run(cache if growing else cache.hf_cache, None if ids is None else ids[0],
                              None if embeds is None else embeds[0], positions, allowed, logits_rows,
                              () if hidden_layer is None else (hidden_layer,), by_layer, prefill=past == 0,
                              watch=lm.forward_watch)
        if growing:
            cache.advance(num_new)
        if not gguf_kernels.all_finite(out.logits):       # one pass over the vocabulary; the error as everywhere
            check_finite(out.logits)
        result = ForwardOutput(logits=out.logits, hidden=out.hidden.get(hidden_layer))
        if order:
            triples = [out.queries[layer][by_layer[layer].index(head)] for layer, head in order]
            result.attention = AttentionQueries(*map(list, zip(*triples)))
        return result

    def packed(self, arena, ids, positions, visible, wanted, layers, dense):
        output = self.native.run(arena, torch.tensor(ids), None, torch.tensor(positions), visible,
                                 torch.tensor(wanted), layers, prefill=dense, watch=self.lm.forward_watch)
        return output.logits, output.hidden
