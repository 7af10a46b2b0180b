"""A forward of N prompt rows on an empty cache (last row's logits), the kernels' stage clocks. Usage: PYTHONPATH=src python prefill_rows.py MODEL 1,8,16,64,128,256"""
import sys, time, torch, multidraft
from multidraft.models import gguf_kernels as g
torch.set_num_threads(2)
lm = multidraft.load_model(sys.argv[1], runner="auto")
print(lm.runner_object.__class__.__name__, g.isa())
for rows in [int(r) for r in sys.argv[2].split(",")]:
    best = None
    for rep in range(3):
        cache = lm.new_cache()
        ids = [(1000 + 7*i) % 40000 for i in range(rows)]
        g.stage_times(True)
        t = time.perf_counter()
        lm.forward(cache, ids, logits_rows=slice(-1, None))
        total = time.perf_counter() - t
        st = g.stage_times(False)
        if best is None or total < best[0]: best = (total, st)
    st = best[1]
    print(f"{rows} rows: {1e3*best[0]:.0f} ms, {1e3*best[0]/rows:.2f} ms/row; " + ", ".join(f"{k} {v/1e6:.0f}ms" for k, v in st.items()))
