"""In-process A/B: torch's argmax + isfinite(...).all() (old) against numpy's argmax + aminmax (new) in the greedy
verifier, the sampler and the finiteness checks; single-request greedy and pld on 3 code edits x 128 tokens, and
8 greedy requests of 64 tokens in one Engine; 4 rounds, order flipped each round."""
import time, torch
import multidraft
from multidraft import sampling
from multidraft.eval.tasks import load_task
import multidraft.verify.greedy as vg, multidraft.models.runners.native as rn, multidraft.models.runners.base as rb
import multidraft.engine.plan as ep
from multidraft.errors import NumericalError
new_check, new_argmax = sampling.check_finite, sampling.argmax_rows
def old_check(logits):
    if not torch.isfinite(logits).all():
        raise NumericalError("NaN or infinite")
def old_argmax(logits):
    return logits.argmax(-1).reshape(-1).tolist()
def use(which):
    check, arg = (old_check, old_argmax) if which == "old" else (new_check, new_argmax)
    for mod in (sampling, rn, rb, ep):
        mod.check_finite = check
    vg.argmax_rows = arg
    sampling.argmax_rows = arg
lm = multidraft.load_model("qwen2.5-coder-1.5b", threads=2)
items = load_task("code_edit", limit=8)
prompts = [lm.encode(it.input) for it in items]
ref = {}
res = {(w, k): [] for w in ("old", "new") for k in ("greedy", "pld", "engine")}
for rnd in range(5):
    for which in (("old", "new") if rnd % 2 else ("new", "old")):
        use(which)
        for method in ("greedy", "pld"):
            n, t = 0, 0.0
            for p in prompts[:3]:
                g = multidraft.generate(lm, p, method=method, max_new_tokens=128)
                assert ref.setdefault(tuple(p), g.token_ids) == g.token_ids
                n += len(g.token_ids); t += g.stats.total_time - g.stats.prefill_time
            if rnd: res[(which, method)].append(n / t)
        eng = multidraft.Engine(lm, max_num_seqs=8)
        ids = [eng.submit(multidraft.Request.build(p, "greedy", max_new_tokens=64)) for p in prompts]
        t0 = time.perf_counter()
        while eng.has_work():
            eng.step()
        dt = time.perf_counter() - t0
        if rnd: res[(which, "engine")].append(sum(len(eng.take(i).token_ids) for i in ids) / dt)
for k in ("greedy", "pld", "engine"):
    o, n = res[("old", k)], res[("new", k)]
    print(f"{k:7s} decode tok/s old {' '.join(f'{x:.2f}' for x in o)} | new {' '.join(f'{x:.2f}' for x in n)} | "
          f"median new/old {sorted(n)[len(n)//2] / sorted(o)[len(o)//2]:.3f}")
