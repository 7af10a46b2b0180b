"""One linear layer of Qwen2.5-1.5B's shapes (8960x1536, 1536x8960, 1536x1536, 256x1536), M = 1..16 rows:
F.linear vs oneDNN vs the fast runner's AVX2 kernel; best of --reps, and each M's cost relative to M = 1.

    multidraft bench micro kernels --threads 1
    multidraft bench micro kernels --threads 2 --cpu-time

The same figures as `multidraft bench forward-cost --linear` (eval/forward_cost.py times them), under the name
this group gives them. The GGUF-block kernels of the quantized runners are timed inside whole forwards by
`multidraft bench micro forward-cost --isa all`.
"""

from __future__ import annotations

from multidraft.eval.bench_args import THREADS_HELP, add_threads_argument, apply_threads


def add_arguments(parser) -> None:
    add_threads_argument(parser, THREADS_HELP)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--cpu-time", action="store_true",
                        help="process CPU time instead of wall time (meaningful with --threads 1 on a busy machine)")


def run(args) -> int:
    from multidraft.eval.forward_cost import linear_curve
    linear_curve(apply_threads(args.threads), args.reps, args.cpu_time)
    return 0
