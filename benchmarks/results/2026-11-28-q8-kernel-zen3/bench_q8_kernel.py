"""Micro benchmark of the 8-bit-activation matvec (linear_q8) alone: this tree's kernel against the kernel of other
commits, built side by side into separately named torch libraries, timed interleaved (A B A B ...) in one process.

    PYTHONPATH=src:. python benchmarks/results/2026-11-28-q8-kernel-zen3/bench_q8_kernel.py --against 414a319 d3b1da2

Each timing cycles through copies of the matrix that together exceed the last-level cache (--stream-mb), so the
weights stream from memory as in a forward. Shapes: qwen2.5-coder-1.5b's MLP matrices (Q4_K gate/up: 8960 outputs x 1536 inputs; Q6_K down: 1536 x 8960) and its
Q6_K output head (151936 x 1536). Random blocks (the kernels' speed does not depend on the values).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import time

import numpy as np
import torch

from multidraft.models import fast_linear, gguf_kernels
from tests.tiny_gguf import random_blocks

CPU_TIME = False
KERNELS = "src/multidraft/models/kernels"
SHAPES = {"Q4_K 8960x1536": ("Q4_K", 12, 8960, 1536), "Q6_K 1536x8960": ("Q6_K", 14, 1536, 8960),
          "Q6_K 151936x1536": ("Q6_K", 14, 151936, 1536),
          "Q4_K 256x1536 (in L2)": ("Q4_K", 12, 256, 1536), "Q6_K 128x2048 (in L2)": ("Q6_K", 14, 128, 2048)}


def _source_at(rev: str) -> str:
    """gguf_kernels.cpp at commit `rev` with its local includes expanded (as gguf_kernels.source() does)."""
    def show(name: str) -> str:
        return subprocess.run(["git", "show", f"{rev}:{KERNELS}/{name}"], check=True, capture_output=True,
                              text=True).stdout

    def expand(name: str) -> str:
        return re.sub(r'^#include "([\w.]+)"$', lambda m: expand(m.group(1)), show(name), flags=re.M)
    return expand("gguf_kernels.cpp")


def _build(rev: str):
    """The linear_q8 op of commit `rev`, as torch.ops.multidraft_gguf_<rev>.linear_q8."""
    library = f"multidraft_gguf_{rev}"
    text = re.sub(r"TORCH_LIBRARY(_IMPL)?\(multidraft_gguf,", lambda m: f"TORCH_LIBRARY{m.group(1) or ''}({library},",
                  _source_at(rev))
    key = hashlib.sha256((text + torch.__version__).encode()).hexdigest()[:12]
    fast_linear.compile_library(f"q8bench_{rev}", text, f"/tmp/q8bench/{rev}-{key}", f"kernel of {rev}", True)
    return getattr(torch.ops, library).linear_q8


def _time(op, x, copies, type_id, width, iters):
    op(x, copies[0], type_id, width)
    clock = time.process_time if CPU_TIME else time.perf_counter
    started = clock()
    for i in range(iters):
        op(x, copies[i % len(copies)], type_id, width)
    return (clock() - started) / iters * 1e3


# SmolLM2-135M's formats (no kernel before this tree has them in 8 bits): its MLP's Q4_1 and its Q8_0 output head.
SMOLLM_SHAPES = {"Q4_1 1536x576": ("Q4_1", 3, 1536, 576), "Q8_0 49152x576": ("Q8_0", 8, 49152, 576)}


def _formats32(args) -> None:
    """This tree's linear_q8 against its own fp32-activation linear on SmolLM2's formats, interleaved."""
    variants = {"fp32 activations": torch.ops.multidraft_gguf.linear, "q8": torch.ops.multidraft_gguf.linear_q8}
    rng = np.random.default_rng(1)
    print("shape | rows | threads | " + " | ".join(variants) + " | q8 / fp32")
    for shape, (type_name, type_id, outputs, width) in SMOLLM_SHAPES.items():
        blocks = torch.from_numpy(random_blocks(type_name, outputs, width, rng))
        copies = [blocks] + [blocks.clone() for _ in range(-(-args.stream_mb * 2**20 // blocks.numel()) - 1)]
        for rows in args.rows:
            x = torch.randn(rows, width, generator=torch.Generator().manual_seed(rows))
            for threads in args.threads:
                torch.set_num_threads(threads)
                iters = max(3, int(args.ms / max(_time(variants["q8"], x, copies, type_id, width, 3), 1e-3)))
                best = {name: float("inf") for name in variants}
                for _ in range(args.rounds):
                    for name, op in variants.items():
                        best[name] = min(best[name], _time(op, x, copies, type_id, width, iters))
                print(f"{shape} | {rows} | {threads} | " + " | ".join(f"{best[n]:.3f}" for n in variants)
                      + f" | {best['q8'] / best['fp32 activations']:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", nargs="*", default=["414a319"], help="commits whose kernel to time beside")
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES)[:2], choices=list(SHAPES))
    parser.add_argument("--rows", nargs="*", type=int, default=[1, 8])
    parser.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (A B A B ...); the min is shown")
    parser.add_argument("--ms", type=float, default=150.0, help="about this long per timed sample")
    parser.add_argument("--stream-mb", type=int, default=128, help="weights cycled per timing (above the LLC)")
    parser.add_argument("--cpu-time", action="store_true", help="process CPU time, not wall time (1 thread, busy "
                        "machine: leaves out time-slicing by other processes; not for reported figures)")
    parser.add_argument("--formats32", action="store_true", help="SmolLM2's 32-value formats: q8 vs fp32 activations")
    args = parser.parse_args()
    global CPU_TIME
    CPU_TIME = args.cpu_time
    assert gguf_kernels.load(progress=True), gguf_kernels.unavailable_reason()
    print(f"isa={gguf_kernels.isa()}; ms per call, min of {args.rounds} interleaved rounds")
    if args.formats32:
        return _formats32(args)
    variants = {rev: _build(rev) for rev in args.against}
    variants["this tree"] = torch.ops.multidraft_gguf.linear_q8
    rng = np.random.default_rng(0)
    print("shape | rows | threads | " + " | ".join(variants) + " | this tree / first")
    for shape in args.shapes:
        type_name, type_id, outputs, width = SHAPES[shape]
        blocks = torch.from_numpy(random_blocks(type_name, outputs, width, rng))
        # Copies that together exceed the last-level cache (32 MiB here), so that each call streams its weights
        # from memory as a model's forward does ("in L2" shapes: one copy, the kernel's compute alone).
        count = 1 if "in L2" in shape else -(-args.stream_mb * 2**20 // blocks.numel())
        copies = [blocks] + [blocks.clone() for _ in range(count - 1)]
        for rows in args.rows:
            x = torch.randn(rows, width, generator=torch.Generator().manual_seed(rows))
            reference = None
            for op in variants.values():             # every variant computes the same function (same bits here)
                got = op(x, blocks, type_id, width)
                reference = got if reference is None else reference
                scale = reference.abs().max()          # the old kernel's epilogue differs in the last bits only
                assert ((got - reference).abs().max() <= 1e-4 * scale), "the kernels compute different functions"
            for threads in args.threads:
                torch.set_num_threads(threads)
                first = _time(variants["this tree"], x, copies, type_id, width, 3)
                iters = max(3, int(args.ms / max(first, 1e-3)))
                best = {name: float("inf") for name in variants}
                for _ in range(args.rounds):
                    for name, op in variants.items():
                        best[name] = min(best[name], _time(op, x, copies, type_id, width, iters))
                first_name = next(iter(variants))
                print(f"{shape} | {rows} | {threads} | " + " | ".join(f"{best[n]:.3f}" for n in variants)
                      + f" | {best['this tree'] / best[first_name]:.3f}", flush=True)


if __name__ == "__main__":
    main()
