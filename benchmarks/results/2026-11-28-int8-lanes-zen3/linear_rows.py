"""Per-linear time of smollm2-135m's Q4_1 down_proj and o_proj (all 30 layers in turn: weights from memory, as in a
forward) at 1, 2, 4 and 8 input rows, and 8 rows as two calls of 4 and eight calls of 1; min of 40 rounds, 2 threads.
Run it in two checkouts, alternating, to compare kernels: PYTHONPATH=src python linear_rows.py LABEL"""

import sys
import time

import multidraft  # noqa: F401  (before torch: the OpenMP wait policy)
import torch

from multidraft.models import gguf_kernels, load_model

lm = load_model("smollm2-135m")
layers = lm.model.model.layers
matrices = [layer.mlp.down_proj.gguf_matrix for layer in layers] + [layer.self_attn.o_proj.gguf_matrix for layer in layers]
inputs = {width: torch.randn(8, width) for width in (576, 1536)}


def microseconds_per_linear(rows: int, split: int) -> float:
    start = time.perf_counter()
    for matrix in matrices:
        x = inputs[matrix.width][:rows]
        for part in (x.split(split) if split else (x,)):
            gguf_kernels.linear_q8(part, matrix.blocks, matrix.type_id, matrix.width)
    return (time.perf_counter() - start) / len(matrices) * 1e6


cases = [(1, 0), (2, 0), (4, 0), (8, 0), (8, 4), (8, 1)]
best = {case: float("inf") for case in cases}
for _ in range(40):
    for case in cases:
        best[case] = min(best[case], microseconds_per_linear(*case))
label = sys.argv[1] if len(sys.argv) > 1 else ""
print(label, " ".join(f"{rows}{'/' + str(split) if split else ''}:{value:.1f}" for (rows, split), value in best.items()))
