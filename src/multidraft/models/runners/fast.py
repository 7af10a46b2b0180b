"""The fast runner: CPU fp32 linears through fast_linear.py's kernel (1-16 rows) and oneDNN beyond; on CUDA, SDPA
without the cuDNN backend (models/device.py). "auto" picks it where it was measured faster: a CPU whose best ISA is
AVX2, in fp32, and CUDA."""

from __future__ import annotations

import warnings

import torch

from multidraft.models import fast_linear
from multidraft.models.device import configure_cuda
from multidraft.models.runners.base import Runner
from multidraft.models.runners.eager import EagerRunner


class FastRunner(Runner):
    name = "fast"

    def __init__(self, lm):
        super().__init__(lm)
        self.cpu_kernel = False

    def activate(self, progress: bool, requested: str) -> Runner:
        lm = self.lm
        device = lm.device.type
        if device == "cuda":
            # torch's default cuDNN SDPA backend made every multi-token forward ~3x slower on an H100 (gpu.md): the
            # loader's one switch (off unless MULTIDRAFT_CUDNN_SDPA asks for it).
            configure_cuda(lm.device)
            return self
        why_not = None
        if device != "cpu":
            why_not = f"no fast path on {device}"
        elif lm.dtype != torch.float32:
            why_not = f"the fast CPU kernel is fp32 only (this model is {str(lm.dtype).removeprefix('torch.')})"
        elif requested == "auto" and str(torch.backends.cpu.get_cpu_capability()) != "AVX2":
            return EagerRunner(lm)     # measured only on AVX2-only CPUs; elsewhere MKL/oneDNN are left alone
        else:
            why_not = fast_linear.kernel_unavailable_reason()
        if why_not is None and fast_linear.load_kernel(progress=progress) is None:
            why_not = fast_linear.kernel_unavailable_reason()
        if why_not is not None:
            if requested == "fast" or fast_linear.build_failure():     # "auto" says so too when the build failed
                warnings.warn(f"multidraft: runner {requested!r} cannot be fast here: {why_not}; using the eager "
                              "runner", RuntimeWarning, stacklevel=4)
            return EagerRunner(lm)
        fast_linear.install(lm.model)
        self.cpu_kernel = True
        return self

    def deactivate(self) -> None:
        fast_linear.uninstall(self.lm.model)

    def kernels(self, prefill: bool = False):
        if self.cpu_kernel and self.lm.device.type == "cpu":
            return fast_linear.active()
        return super().kernels(prefill)
