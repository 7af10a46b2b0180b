"""8 greedy requests of 64 tokens in one Engine (code-edit prompts): per decode step, the step's seconds against
the packed forward's; then a cProfile of the decode steps."""
import sys, time, cProfile, pstats
import multidraft
from multidraft.eval.tasks import load_task
from multidraft.models import packed
lm = multidraft.load_model("qwen2.5-coder-1.5b", threads=2)
items = load_task("code_edit", limit=8)
prompts = [lm.encode(it.input) for it in items]
print("prompt lengths", [len(p) for p in prompts])
fwd = []
orig = lm.__class__
def run(profile=False):
    eng = multidraft.Engine(lm, max_num_seqs=8)
    ids = [eng.submit(multidraft.Request.build(p, sys.argv[1] if len(sys.argv) > 1 else "greedy", max_new_tokens=64)) for p in prompts]
    steps = []
    prof = cProfile.Profile()
    while eng.has_work():
        run_ = eng.scheduler.running
        decoding = len(run_) == 8 and all(e.decoding_started for e in run_) and not eng.scheduler.waiting
        t = time.perf_counter()
        if decoding and profile: prof.enable()
        eng.step()
        if decoding and profile: prof.disable()
        steps.append((decoding, time.perf_counter() - t))
    gens = [eng.take(i) for i in ids]
    dec = [s for d, s in steps if d]
    print(f"steps {len(steps)}, decode-only steps {len(dec)}: median {sorted(dec)[len(dec)//2]*1e3:.1f} ms, total {sum(s for _, s in steps):.2f} s, tokens {sum(len(g.token_ids) for g in gens)}")
    if profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
run(); run(profile=True)
