"""
In-process A/B of the greedy step: the loop's accept (verification) and the forward, per step (median of 128-token
greedy generations on one code edit), for torch's argmax + isfinite(...).all() (old), numpy's argmax + aminmax (new)
and each change alone; 4 rounds, order flipped each round. Usage: PYTHONPATH=src python argmax_ab2.py
"""
import time, statistics, torch, sys
import multidraft
from multidraft import sampling
from multidraft.decoders import loop
from multidraft.eval.tasks import load_task
import multidraft.verify.greedy as vg, multidraft.models.runners.native as rn, multidraft.models.runners.base as rb
from multidraft.errors import NumericalError
new_check, new_argmax = sampling.check_finite, sampling.argmax_rows
def old_check(logits):
    if not torch.isfinite(logits).all():
        raise NumericalError("NaN or infinite")
def old_argmax(logits):
    return logits.argmax(-1).reshape(-1).tolist()
variants = {"old": (old_check, old_argmax), "new": (new_check, new_argmax),
            "newcheck": (new_check, old_argmax), "newargmax": (old_check, new_argmax)}
def use(which):
    check, arg = variants[which]
    for mod in (sampling, rn, rb): mod.check_finite = check
    vg.argmax_rows = arg
rec = []
orig = loop.Decoding.accept
def accept(self, fo, past, record_cost=True):
    t = time.perf_counter()
    out = orig(self, fo, past, record_cost)
    rec.append((t - self._step_started, fo.seconds, time.perf_counter() - t))
    return out
loop.Decoding.accept = accept
lm = multidraft.load_model("qwen2.5-coder-1.5b", threads=2)
p = lm.encode(load_task("code_edit", limit=1)[0].input)
res = {k: [] for k in variants}
for rnd in range(4):
    for which in (list(variants) if rnd % 2 else list(variants)[::-1]):
        use(which); rec.clear()
        multidraft.generate(lm, p, method="greedy", max_new_tokens=128)
        res[which].append(tuple(statistics.median(x[i] for x in rec) * 1e3 for i in range(3)))
for k, v in res.items():
    print(k, " | ".join(f"to-accept {a:.2f} fwd {b:.2f} accept {c:.2f}" for a, b, c in v))
