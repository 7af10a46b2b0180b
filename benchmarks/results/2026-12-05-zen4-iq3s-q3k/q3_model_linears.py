"""The Q3_K matrices of a Q3_K_M GGUF, each layer's in turn (from memory), at 1 / 4 / 8 / 16 rows: as Q6_K packed
the way this CPU's path packs Q6_K (q6_k_layout(): Q6_K_X16 on avx512-vnni) against Q3_K_X8, per shape, us per
linear, min of 7 passes, the layouts alternating each pass. Threads 2.
usage: PYTHONPATH=src python q3_model_linears.py MODEL.gguf"""
import collections
import sys
import time

import torch

from multidraft.models import gguf_kernels as g
from multidraft.models.gguf_weights import GGUFWeights

g.load(progress=False)
torch.set_num_threads(2)
weights = GGUFWeights(sys.argv[1], 28)
by_shape = collections.defaultdict(lambda: {"Q6_K": [], "Q3_K_X8": []})
for name, tensor in weights._tensors.items():
    if tensor.tensor_type.name != "Q3_K":
        continue
    m = weights.matrix(name)
    by_shape[(m.rows, m.width)]["Q6_K"].append((g.repack(m.blocks, g.q6_k_layout()), g.q6_k_layout()))
    by_shape[(m.rows, m.width)]["Q3_K_X8"].append((g.repack_q6_k_q3_k_x8(m.blocks), g.Q3_K_X8))
for (rows_out, width), layouts in sorted(by_shape.items()):
    for rows in (1, 4, 8, 16):
        x = torch.randn(rows, width)
        best = {name: 1e9 for name in layouts}
        for _ in range(7):
            for name, mats in layouts.items():
                start = time.perf_counter()
                for blocks, t in mats:
                    g.linear_q8(x, blocks, t, width)
                best[name] = min(best[name], (time.perf_counter() - start) / len(mats))
        print(f"{rows_out} x {width} ({len(layouts['Q6_K'])} matrices) {rows} rows:",
              ", ".join(f"{n} {us * 1e6:.0f}" for n, us in best.items()), flush=True)

# gate and up of each layer through linear_q8_many (one parallel region for both), as the forward calls them
if "many" in sys.argv[2:]:
    gates = [n for n in weights._tensors if n.endswith("ffn_gate.weight")]
    pairs = {"Q6_K": [], "Q3_K_X8": []}
    for gate in gates:
        up = gate.replace("ffn_gate", "ffn_up")
        ms = [weights.matrix(gate), weights.matrix(up)]
        pairs["Q6_K"].append([g.repack(m.blocks, g.q6_k_layout()) for m in ms])
        pairs["Q3_K_X8"].append([g.repack_q6_k_q3_k_x8(m.blocks) for m in ms])
    types = {"Q6_K": g.q6_k_layout(), "Q3_K_X8": g.Q3_K_X8}
    for rows in (1, 4, 8):
        x = torch.randn(rows, 1536)
        best = {name: 1e9 for name in pairs}
        for _ in range(7):
            for name, layers in pairs.items():
                start = time.perf_counter()
                for mats in layers:
                    g.linear_q8_many(x, mats, [types[name]] * 2, 1536, [None, None])
                best[name] = min(best[name], (time.perf_counter() - start) / len(layers))
        print(f"gate + up, many, {rows} rows:", ", ".join(f"{n} {us * 1e6:.0f}" for n, us in best.items()), flush=True)
