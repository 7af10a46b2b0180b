"""A GGUF model's 1-row forward with and without the software prefetch of the Q4_K / Q5_K VNNI kernel's one-row calls
(gguf_kernels.set_one_row_prefetch), alternating in one process after 300 cached tokens (one_row_ab.alternate).

    PYTHONPATH=src:benchmarks/results/2026-12-07-zen4-one-row-prefetch \\
        python benchmarks/results/2026-12-07-zen4-q5k-one-row/q5_ab.py MODEL.gguf THREADS ROUNDS"""
import sys

from multidraft.models import gguf_kernels
from one_row_ab import alternate, report_choice

if __name__ == "__main__":
    alternate(int(sys.argv[2]), int(sys.argv[3]), gguf_kernels.set_one_row_prefetch, before=report_choice,
              model=sys.argv[1])
