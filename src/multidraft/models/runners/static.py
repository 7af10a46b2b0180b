"""The static runner: a preallocated KV cache in fixed shape buckets, replayed as CUDA graphs on CUDA
(models/static_runner.py); on CPU over what "auto" picks (the fast kernel where it applies). Before use it checks
its logits against the eager cache on a few tokens; any failure: one warning and the eager runner (fast on CUDA)."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Optional

import torch

from multidraft.models import static_runner
from multidraft.models.kv_cache import KVCache, StaticKVCache
from multidraft.models.runners.base import Runner
from multidraft.models.runners.eager import EagerRunner
from multidraft.models.runners.fast import FastRunner


class StaticRunner(Runner):
    name = "static"

    def __init__(self, lm):
        super().__init__(lm)
        self.under: Runner = EagerRunner(lm)
        self._static: Optional[static_runner.StaticRunner] = None

    @property
    def static(self):
        return self._static

    def activate(self, progress: bool, requested: str) -> Runner:
        lm = self.lm
        device = lm.device.type
        why_not = static_runner.unsupported_reason(lm.model)
        if why_not is None and device not in ("cpu", "cuda"):
            why_not = f"no static runner on {device}"
        if why_not is None:
            self.under = FastRunner(lm).activate(progress, "auto")   # underneath: the CPU kernel, cuDNN SDPA off
            self._static = static_runner.StaticRunner(lm.model, min(lm.context_length, lm.static_capacity))
            lm._runner = self                     # the check's forwards run on this runner
            try:
                why_not = self._check()
                if why_not is None and device == "cuda":
                    self._static.capture(progress)
                    self.capabilities = dataclasses.replace(self.capabilities, cuda_graphs=True)
                    why_not = self._check()
            except Exception as error:            # capture or an odd architecture: say it in one line, go eager
                why_not = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        if why_not is None:
            return self
        warnings.warn(f"multidraft: the static runner cannot serve {lm.name}: {why_not}; using the eager runner",
                      RuntimeWarning, stacklevel=4)
        self.deactivate()
        return FastRunner(lm).activate(False, "fast") if device == "cuda" else EagerRunner(lm)

    def deactivate(self) -> None:
        self.under.deactivate()

    def kernels(self, prefill: bool = False):
        return self.under.kernels(prefill)

    @torch.inference_mode()
    def _check(self) -> Optional[str]:
        """Compare static (and graph) logits with the eager cache on a short prefill, one step and a 2-node tree."""
        lm = self.lm
        ids = [i % lm.vocab_size for i in (1, 5, 9, 3, 7)]
        eager, static = KVCache(), lm.new_cache()
        if not isinstance(static, StaticKVCache):
            return "its cache buffers are in use"
        pairs = []
        for step, parents in ((ids, None), ([2], None), ([4, 6], [-1, -1])):
            pairs.append((lm.forward(eager, step, parents=parents).logits,
                          lm.forward(static, step, parents=parents).logits))
        tolerance = 1e-3 if lm.dtype == torch.float32 else 0.1     # relative to the largest logit; 16-bit rounds
        for expected, got in pairs:
            error = float((expected - got).abs().max() / (expected.abs().max() + 1e-6))
            if not bool(torch.isfinite(got).all()) or not error <= tolerance:
                return f"its static-cache logits differ from eager ones (relative error {error:.2g})"
        return None
