"""The quantized-q8 runner: the quantized runner with llama.cpp's 8-bit activations on every matrix
whose format has that kernel (gguf_kernels.Q8_TYPES, and Q3_K / IQ3_S through their Q6_K blocks)
(models/quantized.py). No dense GEMM in its prefills, so a prefix's cached keys/values are the bits of a fresh
prefill: reusable, when every matrix has the 8-bit kernel."""

from __future__ import annotations

import dataclasses

import torch

from multidraft.models.runners.base import Runner
from multidraft.models.runners.quantized import QuantizedRunner


class QuantizedQ8Runner(QuantizedRunner):
    name = "quantized-q8"
    activations = "q8"

    def activate(self, progress: bool, requested: str) -> Runner:
        super().activate(progress, requested)
        linears = [m for m in self.lm.model.modules()
                   if isinstance(m, torch.nn.Linear) and getattr(m, "gguf_matrix", None) is not None]
        every_q8 = all(m.gguf_matrix.has_q8_kernel for m in linears)
        self.capabilities = dataclasses.replace(self.capabilities, prefix_reusable=every_q8)
        return self
