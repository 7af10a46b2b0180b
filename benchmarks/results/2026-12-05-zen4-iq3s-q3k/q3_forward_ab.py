"""One process, one model (runner auto): the 1- and 8-row forward with its Q3_K or IQ3_S matrices in their own
layouts (Q3_K_X8; IQ4_XS_X8 with IQ3_S's table) and with the same matrices as the path packs Q6_K (q6_k_layout():
Q6_K_X16 on avx512-vnni, plain Q6_K on avx2: what a1bf156 ran), swapped back and forth (5 rounds, min of 15 forwards
after 300 cached tokens each). usage: PYTHONPATH=src python q3_forward_ab.py MODEL.gguf"""
import sys
import time

import torch

import multidraft
from multidraft.models import gguf_kernels as g
from multidraft.models.gguf_weights import BlockMatrix
from multidraft.models.native import _fused_layer

lm = multidraft.load_model(sys.argv[1], runner="auto")
mats, seen = [], set()
def visit(obj, depth=0):
    if id(obj) in seen or depth > 6:
        return
    seen.add(id(obj))
    if isinstance(obj, BlockMatrix):
        if obj.source_type in (11, 21) and obj.packed is not None:
            mats.append(obj)
    elif isinstance(obj, (list, tuple)):
        for v in obj: visit(v, depth + 1)
    elif isinstance(obj, dict):
        for v in obj.values(): visit(v, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (torch.Tensor, type)):
        for v in vars(obj).values(): visit(v, depth + 1)
visit(lm)
layouts = {"own": [(m.packed, m.packed_type) for m in mats],
           "Q6_K": [(g.repack(m.blocks, g.q6_k_layout()), g.q6_k_layout()) if g.q6_k_layout() != 14
                         else (None, None) for m in mats]}      # the path's Q6_K layout (plain where 14)
print(len(mats), "matrices")
def timed(rows):
    cache = lm.new_cache()
    with torch.inference_mode():
        lm.forward(cache, list(range(100, 400)))
        best = 1e9
        for i in range(15):
            start = time.perf_counter()
            lm.forward(cache, list(range(500 + 8 * i, 500 + 8 * i + rows)))
            best = min(best, time.perf_counter() - start)
            cache.crop(300)
    return best * 1e3
for r in range(5):
    for name, packs in layouts.items():
        for m, (p, t) in zip(mats, packs):
            m.packed, m.packed_type = p, t
        ro = lm.runner_object
        native = getattr(ro, "native", None) or ro
        native._fused = [_fused_layer(layer, after) for layer, after in zip(native.layers, native._norms_after)]
        native._stack = g.RegisteredStack(*([item for pack in native._fused for item in pack[part]]
                                            for part in range(5)), native._kind_index)
        print(r, name, " ".join(f"{rows}: {timed(rows):.1f} ms" for rows in (1, 8)), flush=True)
