"""Whole generations with the Q3_K matrices of a Q3_K_M GGUF in Q3_K_X8 and in Q6_K_X16 (what a1bf156 packed),
swapped in one process, the order flipped every round: 5 code edits x 128 tokens per method, layout and round, tok/s
(the same tokens either way: asserted). Usage: PYTHONPATH=src python q3_generate_ab.py MODEL.gguf ROUNDS METHODS"""
import sys, time, torch
import multidraft
from multidraft.eval.tasks import load_task
from multidraft.models import gguf_kernels as g
from multidraft.models.gguf_weights import BlockMatrix
from multidraft.models.native import _fused_layer
torch.set_num_threads(2)
lm = multidraft.load_model(sys.argv[1], runner="auto")
native = lm.runner_object.native
mats = [m for layer in native.layers for m, _ in (layer.q, layer.k, layer.v, layer.o, layer.gate, layer.up, layer.down)
        if isinstance(m, BlockMatrix) and m.packed_type == g.Q3_K_X8]
layouts = {"Q3_K_X8": [(m.packed, m.packed_type) for m in mats],
           "Q6_K_X16": [(g.repack(m.blocks, g.q6_k_layout()), g.q6_k_layout()) if g.q6_k_layout() != 14
                         else (None, None) for m in mats]}      # the path's Q6_K layout (plain where 14)
def use(name):
    for m, (p, t) in zip(mats, layouts[name]):
        m.packed, m.packed_type = p, t
    native._fused = [_fused_layer(layer, after) for layer, after in zip(native.layers, native._norms_after)]
    native._stack = g.RegisteredStack(*([item for pack in native._fused for item in pack[part]] for part in range(5)),
                                      native._kind_index)
prompts = [p.messages or p.prompt for p in load_task("code_edit", limit=5)]
multidraft.generate(lm, "def f(x):", method="greedy", max_new_tokens=8)
print(len(mats), "Q3_K matrices")
res, tokens_seen = {name: [] for name in layouts}, {}
for rnd in range(int(sys.argv[2])):
    for name in (list(layouts) if rnd % 2 == 0 else list(layouts)[::-1]):
        use(name)
        for method in sys.argv[3].split(","):
            tokens = seconds = 0
            for i, p in enumerate(prompts):
                t = time.perf_counter(); r = multidraft.generate(lm, p, method=method, max_new_tokens=128)
                seconds += time.perf_counter() - t; tokens += len(r.token_ids)
                assert tokens_seen.setdefault(i, r.token_ids) == r.token_ids, (name, method, i)
            res[name].append((method, tokens / seconds))
            print(rnd, name, method, round(tokens / seconds, 2), flush=True)
for name, v in res.items():
    for method in sys.argv[3].split(","):
        print(name, method, "tok/s per round:", [round(x, 2) for m, x in v if m == method])
