"""`load_model` of a GGUF file, wall seconds (run from a tree's checkout with PYTHONPATH=TREE/src; alternate trees).

    PYTHONPATH=TREE/src python load_time.py /tmp/models/q3_k_m.gguf
"""
import sys
import time

import multidraft

start = time.perf_counter()
lm = multidraft.load_model(sys.argv[1])
print(f"load {time.perf_counter() - start:.2f} s", flush=True)
