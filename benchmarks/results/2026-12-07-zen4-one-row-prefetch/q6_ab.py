"""Experiment, not landed: Q6_K's one-row kernel (x16_vnni_rows) with and without its software prefetch, Q4_K's
left to the hardware (as landed), alternating in one process (one_row_ab.alternate). Needs a build of
q6_one_row.patch (a worktree of 02c9fdf with it applied):

    PYTHONPATH=src:benchmarks/results/2026-12-07-zen4-one-row-prefetch python .../q6_ab.py THREADS ROUNDS"""
import sys

import torch

from multidraft.models import gguf_kernels
from one_row_ab import alternate

if __name__ == "__main__":
    alternate(int(sys.argv[1]), int(sys.argv[2]), lambda on: torch.ops.multidraft_gguf.set_one_row_prefetch_q6(on),
              label="q6 prefetch", before=lambda lm: gguf_kernels.set_one_row_prefetch(False))
