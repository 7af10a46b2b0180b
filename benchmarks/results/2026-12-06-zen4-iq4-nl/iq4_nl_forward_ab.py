"""One process, one model (runner auto): the 1- and 8-row forward with its IQ4_NL linears on their own kernels (18-byte
blocks; packed in sixteens where the path packs the 32-value formats) and as the Q8_0 blocks of the same values (34
bytes; what 4697186 ran), swapped back and forth (5 rounds, min of 15 forwards after 300 cached tokens each), and the
bytes of those linears either way. UNFUSED=1: every layer step by step (4697186 could not fuse a layer whose q / k
and v take different activation blocks). usage: PYTHONPATH=src python iq4_nl_forward_ab.py MODEL.gguf"""
import os
import sys
import time

import numpy as np
import torch

import multidraft
from multidraft.models import gguf_convert
from multidraft.models import gguf_kernels as g
from multidraft.models.gguf_weights import BlockMatrix
from multidraft.models.native import _fused_layer


def as_q8_0(raw: np.ndarray) -> np.ndarray:
    """IQ4_NL blocks -> the Q8_0 blocks of the same values (d, table[index]), as gguf_convert made them at 4697186."""
    rows = raw.shape[0]
    b = np.ascontiguousarray(raw).reshape(-1, 18)
    out = np.empty((b.shape[0], 34), np.uint8)
    out[:, :2] = b[:, :2]
    out[:, 2:18] = gguf_convert.IQ4_NL_TABLE[b[:, 2:] & 0x0F].view(np.uint8)
    out[:, 18:] = gguf_convert.IQ4_NL_TABLE[b[:, 2:] >> 4].view(np.uint8)
    return out.reshape(rows, -1)


lm = multidraft.load_model(sys.argv[1], runner="auto")
ro = lm.runner_object
print("layers fused:", (getattr(ro, "native", None) or ro).fuse)
mats, seen = [], set()
def visit(obj, depth=0):
    if id(obj) in seen or depth > 6:
        return
    seen.add(id(obj))
    if isinstance(obj, BlockMatrix):
        if obj.type_id == 20 and obj.name != "token_embd.weight":      # the linears (the embedding: row lookups)
            mats.append(obj)
    elif isinstance(obj, (list, tuple)):
        for v in obj: visit(v, depth + 1)
    elif isinstance(obj, dict):
        for v in obj.values(): visit(v, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (torch.Tensor, type)):
        for v in vars(obj).values(): visit(v, depth + 1)
visit(lm)
packs = (g.packs_x16_32 if hasattr(g, "packs_x16_32") else g.packs_32)()     # packs_32 on trees before ee46dfb
def arm(blocks, type_id):
    """(blocks, type_id, packed, packed_type) of one matrix as the path would pack it."""
    if packs and blocks.shape[0] % 16 == 0:
        return blocks, type_id, g.repack_x16_32(blocks, type_id), g.X16_32[type_id]
    return blocks, type_id, None, None
layouts = {"IQ4_NL": [arm(m.blocks, 20) for m in mats],
           "Q8_0": [arm(torch.from_numpy(as_q8_0(m.blocks.numpy())), 8) for m in mats]}
for name, arms in layouts.items():
    size = sum((a[2] if a[2] is not None else a[0]).numel() for a in arms)
    print(f"{name}: {len(arms)} matrices, {size / 2**20:.0f} MiB read by the 8-bit kernels")
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
for r in range(int(os.environ.get("ROUNDS", "5"))):
    for name, arms in layouts.items():
        for m, (blocks, type_id, p, t) in zip(mats, arms):
            m.blocks, m.type_id, m.packed, m.packed_type = blocks, type_id, p, t
        ro = lm.runner_object
        native = getattr(ro, "native", None) or ro
        native._fused = [_fused_layer(layer, after) for layer, after in zip(native.layers, native._norms_after)]
        native.fuse = native.fuse_stack = not os.environ.get("UNFUSED") and all(p is not None for p in native._fused)
        if native.fuse:                                 # every layer in one kernel op (else layer by layer)
            native._stack = g.RegisteredStack(*([item for pack in native._fused for item in pack[part]]
                                                for part in range(5)), native._kind_index)
        print(r, name, " ".join(f"{rows}: {timed(rows):.1f} ms" for rows in (1, 8)), flush=True)
