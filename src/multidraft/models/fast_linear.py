"""The fast runner's CPU linears (fp32, AVX2+FMA): a small batch-invariant kernel for 1-16 rows, oneDNN beyond.

Why: on an AVX2-only AMD CPU, MKL's sgemm (what `F.linear` calls) is ~5-8x slower for 8 input rows than for
one on the 1.5B's layer shapes: its small-M path re-packs the weight on every call and does not reach the
speed of its own 1-row gemv. A verify forward of 8 tokens then costs ~3x a 1-token forward instead of about the
same (the weights stream from memory once either way). The kernel reads every weight row once and uses it for
all input rows while it is in L1/L2, on torch's OpenMP threads; it is the fastest path up to 16 rows, and oneDNN's
GEMM (no weight copy) beyond, where it beats MKL (benchmarks/reports/fast_path.md, sections 1, 8 and 9).

The kernel is *batch-invariant*: each output element is computed with the same operations in the same order
whatever the number of rows it is given (tested up to 32), so a token's linears give the same bits in a 1-token
forward and in a verify forward of up to 16 tokens (attention and forwards past 16 rows still round differently).

The C++ source is built once per torch version with the system's C++ compiler (kernel_build.py) into
$MULTIDRAFT_HOME/kernels; any failure (no compiler, no AVX2, a build error) gives one warning and the stock path.
"""

from __future__ import annotations

import contextlib
import os
import threading
import types
from typing import Optional

import torch

from multidraft.models import kernel_build

# Up to this many rows the kernel is the fastest path; beyond it oneDNN's GEMM is. One linear at idle, 2 threads
# (fast_path.md §9): 8960x1536 kernel vs oneDNN 2.11 vs 2.56 ms at 1 row, 3.11 vs 4.60 at 8, 4.58 vs 6.09 at 16;
# MKL's `F.linear` lost to oneDNN at every size from 16 to 300 rows (§8).
MAX_ROWS = 16

KERNEL_SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <immintrin.h>
#include <cmath>

namespace {

// Fixed reduction order of the 8 lanes, so an output never depends on how many rows ran beside it.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x1));
  return _mm_cvtss_f32(s);
}

// MG input rows x NR weight rows held in registers; the weight vectors are loaded once per k step for all MG rows.
// (The lane sums go through `sums`: summing straight from `acc` made GCC keep `acc` on the stack, storing all
// accumulators on every k step, which halved the speed.)
// PREFETCH: how far ahead (floats) the first group of input rows asks for the weights. Without it the core computes
// on what has arrived and then waits for the next lines, instead of streaming while it computes (measured at idle,
// 2 threads: 8960x1536 at 8 rows 3.11 vs 3.94 ms).
constexpr int64_t PREFETCH = 2048;

template <int MG, int NR, bool FIRST>
inline void block(const float* __restrict x, const float* __restrict w, float* __restrict out,
                  int64_t K, int64_t N, int64_t n0) {
  __m256 acc[MG][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MG; ++i)
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_setzero_ps();
  const int64_t K8 = K & ~int64_t(7);
  for (int64_t k = 0; k < K8; k += 8) {
    if (FIRST && (k & 15) == 0) {     // one prefetch per 64-byte line; later groups find the weights in L1/L2
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) _mm_prefetch((const char*)(w + (n0 + r) * K + k + PREFETCH), _MM_HINT_T0);
    }
    __m256 wv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) wv[r] = _mm256_loadu_ps(w + (n0 + r) * K + k);
#pragma GCC unroll 8
    for (int i = 0; i < MG; ++i) {
      __m256 xv = _mm256_loadu_ps(x + i * K + k);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  float sums[MG][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MG; ++i)
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) sums[i][r] = hsum(acc[i][r]);
  for (int i = 0; i < MG; ++i)
    for (int r = 0; r < NR; ++r) {
      float s = sums[i][r];
      const float* wr = w + (n0 + r) * K;
      const float* xr = x + i * K;
      for (int64_t k = K8; k < K; ++k) s = std::fma(xr[k], wr[k], s);
      out[i * N + n0 + r] = s;
    }
}

template <int MG, bool FIRST>
void rows(const float* x, const float* w, float* out, int64_t K, int64_t N, int64_t b, int64_t e) {
  constexpr int NR = MG <= 2 ? 4 : 2;   // 8-12 accumulators: within AVX2's 16 registers
  int64_t n = b;
  for (; n + NR <= e; n += NR) block<MG, NR, FIRST>(x, w, out, K, N, n);
  for (; n < e; ++n) block<MG, 1, FIRST>(x, w, out, K, N, n);
}

template <bool FIRST>
void rows_any(int mg, const float* x, const float* w, float* out, int64_t K, int64_t N, int64_t b, int64_t e) {
  switch (mg) {
    case 1: rows<1, FIRST>(x, w, out, K, N, b, e); break;
    case 2: rows<2, FIRST>(x, w, out, K, N, b, e); break;
    case 3: rows<3, FIRST>(x, w, out, K, N, b, e); break;
    case 4: rows<4, FIRST>(x, w, out, K, N, b, e); break;
    case 5: rows<5, FIRST>(x, w, out, K, N, b, e); break;
    default: rows<6, FIRST>(x, w, out, K, N, b, e); break;
  }
}

at::Tensor small_m_linear(const at::Tensor& x_in, const at::Tensor& w_in) {
  TORCH_CHECK(x_in.scalar_type() == at::kFloat && w_in.scalar_type() == at::kFloat, "small_m_linear: fp32 only");
  TORCH_CHECK(w_in.dim() == 2 && x_in.size(-1) == w_in.size(1), "small_m_linear: shape mismatch");
  auto x = x_in.contiguous();
  auto w = w_in.contiguous();
  const int64_t K = w.size(1), N = w.size(0), M = x.numel() / K;
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  auto out = at::empty(sizes, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const int64_t grain = std::max<int64_t>(64, ((N + threads - 1) / threads + 3) & ~int64_t(3));
  // Weight rows in chunks that stay in L1/L2 while every group of 6 input rows uses them: one pass over memory.
  const int64_t chunk = std::max<int64_t>(4, (int64_t(16384) / K) & ~int64_t(3));
  // Input rows in groups of at most 6, of balanced sizes (8 rows: 4 + 4, not 6 + 2).
  const int64_t groups = (M + 5) / 6;
  // at::parallel_for runs on torch's OpenMP threads only when this file is built with -fopenmp (see _build_or_find).
  at::parallel_for(0, N, grain, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; c += chunk) {
      const int64_t ce = std::min(e, c + chunk);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t m0 = g * M / groups, m1 = (g + 1) * M / groups;
        if (g == 0) rows_any<true>((int)(m1 - m0), xp + m0 * K, wp, op + m0 * N, K, N, c, ce);
        else rows_any<false>((int)(m1 - m0), xp + m0 * K, wp, op + m0 * N, K, N, c, ce);
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(multidraft_fast, m) { m.def("small_m_linear(Tensor x, Tensor w) -> Tensor"); }
TORCH_LIBRARY_IMPL(multidraft_fast, CPU, m) { m.impl("small_m_linear", &small_m_linear); }
"""

_lock = threading.Lock()
_kernel = None            # the op once loaded
_failure: Optional[str] = None
_active = threading.local()


def cpu_build_unavailable_reason() -> Optional[str]:
    """Why no AVX2 kernel can be built and run here (None: one can); shared by both CPU kernels."""
    capability = str(torch.backends.cpu.get_cpu_capability())
    if capability not in ("AVX2", "AVX512"):
        return f"this CPU has no AVX2 (torch reports {capability})"
    if os.environ.get("MULTIDRAFT_NO_KERNEL_BUILD"):
        return "MULTIDRAFT_NO_KERNEL_BUILD is set"
    return None


def kernel_unavailable_reason() -> Optional[str]:
    """Why the kernel cannot run here (None: it can), without building it."""
    return cpu_build_unavailable_reason() or _failure


def build_failure() -> Optional[str]:
    """Why the build failed in this process (None: it did not fail, or was not tried)."""
    return _failure


def build_dir() -> str:
    return kernel_build.cache_folder("small_m_linear", KERNEL_SOURCE)


def load_kernel(progress: bool = True):
    """The compiled op, building it on first use; None where it cannot be built (`kernel_unavailable_reason()`
    says why; the runner turns that into one warning line)."""
    global _kernel, _failure
    with _lock:
        if _kernel is not None or kernel_unavailable_reason():
            return _kernel
        try:
            _kernel = _build_or_find(progress)
        except Exception as error:           # no compiler, no ninja, a build error: keep the stock path
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            _failure = f"the fast CPU kernel could not be built ({first_line})"
            return None
        return _kernel


def _build_or_find(progress: bool):
    if hasattr(torch.ops.multidraft_fast, "small_m_linear"):   # the library is loaded in this process already
        return torch.ops.multidraft_fast.small_m_linear
    kernel_build.load_library("multidraft_small_m_linear", KERNEL_SOURCE, build_dir(), "fast CPU linear kernel",
                              progress)
    return torch.ops.multidraft_fast.small_m_linear


@contextlib.contextmanager
def active():
    """Inside this block (this thread only), installed linears take the fast kernel; outside, the stock one.
    The runner enters it around its own forwards, so HF generate() peers in a benchmark stay stock."""
    depth = getattr(_active, "depth", 0)
    _active.depth = depth + 1
    try:
        yield
    finally:
        _active.depth = depth


ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _fast_forward(self, x: torch.Tensor) -> torch.Tensor:
    weight = self.weight
    if (getattr(_active, "depth", 0) and x.dtype == torch.float32 and x.device.type == "cpu"
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
        if x.numel() // max(1, x.shape[-1]) <= MAX_ROWS:
            out = _kernel(x, weight)
            if self.bias is not None:
                out.add_(self.bias)
            return out
        if ONEDNN:
            return torch.ops.mkldnn._linear_pointwise(x, weight, self.bias, "none", [], "")
    return torch.nn.functional.linear(x, weight, self.bias)


def install(model: torch.nn.Module) -> int:
    """Route every fp32 CPU nn.Linear of `model` through the kernel (inside `active()`); returns how many."""
    if _kernel is None:
        raise RuntimeError("load_kernel() first")
    count = 0
    for module in model.modules():
        if (isinstance(module, torch.nn.Linear) and module.weight.dtype == torch.float32
                and module.weight.device.type == "cpu" and "forward" not in module.__dict__):
            module.forward = types.MethodType(_fast_forward, module)
            count += 1
    return count


def uninstall(model: torch.nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.__dict__.get("forward") is not None:
            if getattr(module.__dict__["forward"], "__func__", None) is _fast_forward:
                del module.forward
