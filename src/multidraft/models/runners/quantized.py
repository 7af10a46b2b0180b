"""The quantized runner: HF's modules over the GGUF's own blocks with fp32 activations (models/quantized.py).
Batch- and thread-invariant (a prefill of more than PREFILL_GEMM_ROWS rows takes a dense GEMM: the same one in
every method's prefill, but not reusable from a prefix cache)."""

from __future__ import annotations

import torch

from multidraft.models import quantized
from multidraft.models.kv_cache import KVCache, in_place_cache
from multidraft.models.runners.base import Capabilities, Runner


CPU = torch.device("cpu")


class QuantizedRunner(Runner):
    name = "quantized"
    quantized = True
    activations = "fp32"
    capabilities = Capabilities(batch_invariant=True, thread_invariant=True)

    def activate(self, progress: bool, requested: str) -> Runner:
        if requested != "auto":
            quantized.set_activations(self.lm.model, self.activations)
        return self

    def device(self):
        """The GGUF kernels run on the CPU. (Said, not found: finding the first parameter starts a generator over
        the module tree, 2.5 us warm but ~60 us a forward in a loop of smollm2 forwards, whose weights evict it.)"""
        return CPU

    def new_cache(self):
        """HF's cache with its layers written in place (kv_cache.InPlaceLayer): no copy of the cache per token."""
        return KVCache(in_place_cache())

    def kernels(self, prefill: bool = False):
        return quantized.prefill_gemm() if prefill else super().kernels(prefill)
