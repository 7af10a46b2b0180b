"""The quantized runner's CPU kernels (kernels/gguf_kernels.cpp): linears over GGUF blocks and attention, both
batch-invariant, built once with the system's C++ compiler like the fast runner's kernel (fast_linear.py).

Ops (torch.ops.multidraft_gguf):
- linear(x (..., K) fp32, blocks (N, row_bytes) uint8, type, K) -> (..., N): x @ W^T with W the blocks' values;
- linear_q8(x, blocks, type, K): the same with x quantized per row and 256 values to int8 (llama.cpp's arithmetic;
  Q4_K and Q6_K, K a multiple of 256);
- dequantize(blocks, type, K, ids) -> (len(ids), K) fp32: chosen rows of W (embedding lookups, prefill GEMM);
- attention(q (H, T, D), k (KVH, S, D), v, visible (T, S) bool, scaling) -> (T, H, D).
"""

from __future__ import annotations

import hashlib
import sys
import threading
from importlib import resources
from typing import Optional

import torch

from multidraft.models import fast_linear

# GGUF tensor types the kernel reads as they are (ggml's numbering); others are expanded to F32 at load.
NATIVE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 12: "Q4_K", 13: "Q5_K",
                14: "Q6_K", 30: "BF16"}

# Types with an 8-bit-activation kernel (runner "quantized-q8").
Q8_TYPES = {12: "Q4_K", 14: "Q6_K"}

_lock = threading.Lock()
_loaded = False
_failure: Optional[str] = None


def source() -> str:
    return resources.files("multidraft.models").joinpath("kernels/gguf_kernels.cpp").read_text()


def unavailable_reason() -> Optional[str]:
    """Why the kernels cannot run here (None: they can, or have not been tried yet)."""
    return fast_linear.cpu_build_unavailable_reason() or _failure


def load(progress: bool = True) -> bool:
    """Build (once) and load the ops; False where they cannot run (`unavailable_reason()` says why)."""
    global _loaded, _failure
    with _lock:
        if _loaded:
            return True
        if unavailable_reason():
            return False
        if hasattr(torch.ops.multidraft_gguf, "linear"):
            _loaded = True
            return True
        text = source()
        from multidraft.paths import subdir
        key = hashlib.sha256((text + torch.__version__ + sys.prefix).encode()).hexdigest()[:12]
        try:
            fast_linear.compile_library("multidraft_gguf_kernels", text, str(subdir("kernels") / f"gguf-{key}"),
                                        "quantized CPU kernels", progress)
        except Exception as error:       # no compiler, no ninja, a build error: the caller falls back
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            _failure = f"the quantized CPU kernels could not be built ({first_line})"
            return False
        _loaded = True
        return True


def linear(x: torch.Tensor, blocks: torch.Tensor, type_id: int, width: int) -> torch.Tensor:
    return torch.ops.multidraft_gguf.linear(x, blocks, type_id, width)


def linear_q8(x: torch.Tensor, blocks: torch.Tensor, type_id: int, width: int) -> torch.Tensor:
    return torch.ops.multidraft_gguf.linear_q8(x, blocks, type_id, width)


def dequantize(blocks: torch.Tensor, type_id: int, width: int, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
    if rows is None:
        rows = torch.arange(blocks.shape[0])
    return torch.ops.multidraft_gguf.dequantize(blocks, type_id, width, rows)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scaling: float) -> torch.Tensor:
    return torch.ops.multidraft_gguf.attention(q, k, v, visible, float(scaling))
