"""`import multidraft`, `load_model("qwen2.5-coder-1.5b")` and a first forward, wall seconds (run it from a tree's
checkout with PYTHONPATH=TREE/src; alternate trees, the VM's noise is ~10%)."""
import time

start = time.perf_counter()
import multidraft  # noqa: E402

imported = time.perf_counter()
lm = multidraft.load_model("qwen2.5-coder-1.5b")
loaded = time.perf_counter()
lm.prefill(lm.encode("def f(x):"))
print(f"import {imported - start:.2f} load {loaded - imported:.2f} first forward {time.perf_counter() - loaded:.2f}")
