"""CUDA setup: which attention (SDPA) kernels multidraft lets torch use, and how to see which one ran.

Drafting methods live on multi-token forwards (a chain or a tree of drafted tokens scored at once), so the
attention kernel for a few query rows over a long cache matters more than for plain decoding. On an H100 with
torch 2.11, torch's default pick for those forwards, cuDNN's SDPA, made them several times slower than the
flash / memory-efficient kernels (benchmarks/results/2026-11-23-h100/). `configure_cuda` therefore turns cuDNN
SDPA off when a model is loaded on CUDA; set MULTIDRAFT_CUDNN_SDPA=1 to keep torch's choice. The switch is
process-wide (torch has no per-model setting), which is why it lives here and says so.
"""

from __future__ import annotations

import os

CUDNN_ENV = "MULTIDRAFT_CUDNN_SDPA"


def configure_cuda(device) -> None:
    """Called by the loader for a model on `device`; a no-op off CUDA."""
    import torch

    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        return
    keep_cudnn = os.environ.get(CUDNN_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    torch.backends.cuda.enable_cudnn_sdp(keep_cudnn)


def sdpa_backends() -> dict[str, bool]:
    """Which SDPA backends torch may pick from right now (process-wide flags)."""
    import torch

    cuda = torch.backends.cuda
    flags = {"flash": cuda.flash_sdp_enabled(), "mem_efficient": cuda.mem_efficient_sdp_enabled(),
             "math": cuda.math_sdp_enabled()}
    if hasattr(cuda, "cudnn_sdp_enabled"):
        flags["cudnn"] = cuda.cudnn_sdp_enabled()
    return flags


ATTENTION_KERNEL_MARKERS = ("flash", "fmha", "cudnn", "efficient", "attention", "sdpa", "softmax")


def attention_kernels(run) -> list[str]:
    """Names of the CUDA kernels that look like attention in a profile of `run()` (the SDPA backend in use)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    names = {event.key for event in prof.key_averages()}
    return sorted(name[:120] for name in names if any(m in name.lower() for m in ATTENTION_KERNEL_MARKERS))


def parse_device(device) -> str:
    """A device name torch accepts ("cpu", "cuda", "cuda:1"); None or "auto": cuda when torch sees a GPU, else cpu.
    Asking for a GPU torch cannot see is a clear error, not a traceback from `model.to`."""
    import torch

    from multidraft.errors import InvalidOptionError

    if device is None or str(device) == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise InvalidOptionError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise InvalidOptionError(f"device {device!r} asked for, but this torch sees no CUDA GPU "
                                     f"(torch {torch.__version__}); use --device cpu or install a CUDA build of torch")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise InvalidOptionError(f"device {device!r} does not exist: torch sees {torch.cuda.device_count()} "
                                     f"GPU(s), cuda:0..cuda:{torch.cuda.device_count() - 1}")
    elif parsed.type == "meta":
        raise InvalidOptionError("device 'meta' holds no weights; use cpu or cuda")
    return str(parsed)


def add_device_argument(parser) -> None:
    parser.add_argument("--device", default=None,
                        help="cpu, cuda or cuda:N (default: cuda when torch sees a GPU, else cpu)")
