"""Per-parallel-region cost from the thread that ran the first regions (main) and from a second thread (thread,
thread2: torch.set_num_threads(2) inside it): 40 random Q4_K_X8 matrices, 8960 x 1536 (big) and 256 x 1536 (small), 1
row, min of 5 passes; 2 s of sleep before each so no pool is spinning. Usage: PYTHONPATH=src python .../thread_regions.py"""
import time, threading, torch, multidraft
from multidraft.models import gguf_kernels as g
torch.set_num_threads(2)
g.load()
gen = torch.Generator().manual_seed(0)
mats = [g.repack_q4_k_x8(g.random_blocks(12, 8960, 1536, gen)) for _ in range(40)]
small = [g.repack_q4_k_x8(g.random_blocks(12, 256, 1536, gen)) for _ in range(40)]
x = torch.randn(1, 1536)
def run(tag):
    time.sleep(2)
    if tag == "thread2": torch.set_num_threads(2)
    for name, ms in (("big", mats), ("small", small)):
        best = 1e9
        for rep in range(5):
            t = time.perf_counter()
            for w in ms: g.linear_q8_on(x, w, g.Q4_K_X8, 1536, "amx")
            best = min(best, (time.perf_counter() - t) / len(ms))
        print(tag, name, "%.1f us" % (best * 1e6))
for i in range(2):
    run("main")
    th = threading.Thread(target=run, args=("thread",)); th.start(); th.join()
    th = threading.Thread(target=run, args=("thread2",)); th.start(); th.join()
