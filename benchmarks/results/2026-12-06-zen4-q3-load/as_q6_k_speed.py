"""The load's re-encodings as Q6_K, numpy's (gguf_convert, the reference) against the kernels' (kernels/as_q6_k.inc),
seconds (min of 3), one process, 2 threads: every Q3_K matrix of a Q3_K_M GGUF (paged in first), and 40 random
8960 x 1536 IQ3_S matrices (any bytes are valid IQ3_S blocks; no IQ3_S GGUF here). Checks the bytes are equal.

    python ../2026-12-05-zen5-newer-tiles/requantize.py ~/.cache/multidraft/models/qwen2.5-coder-1.5b/source.gguf \\
        /tmp/models/q3_k_m.gguf Q3_K_M
    PYTHONPATH=src python as_q6_k_speed.py /tmp/models/q3_k_m.gguf
"""
import sys
import time

import gguf
import numpy as np

from multidraft.models import gguf_convert, gguf_kernels
from multidraft.models.gguf_weights import CONVERSIONS

assert gguf_kernels.load()
q3_k = [np.asarray(t.data).reshape(int(t.shape[1]), -1) for t in gguf.GGUFReader(sys.argv[1]).tensors
        if int(t.tensor_type) == 11]
for matrix in q3_k:
    matrix.sum()                                            # page the file in
rng = np.random.default_rng(0)
iq3_s = [rng.integers(0, 256, (8960, 6 * 110), dtype=np.uint8) for _ in range(40)]
cases = [("Q3_K", 11, q3_k, gguf_convert.q3_k_as_q6_k), ("IQ3_S", 21, iq3_s, gguf_convert.iq3_s_as_q6_k)]
for name, type_id, matrices, reference in cases:
    times = {}
    for who, convert in (("numpy", reference), ("kernels", CONVERSIONS[type_id][0])):     # the load's, kernels loaded
        best = 1e9
        for _ in range(3):
            start = time.perf_counter()
            outputs = [convert(matrix) for matrix in matrices]
            best = min(best, time.perf_counter() - start)
        times[who] = (best, outputs)
    equal = all(np.array_equal(a, b) for a, b in zip(times["numpy"][1], times["kernels"][1]))
    print(f"{name}: {len(matrices)} matrices, {sum(m.nbytes for m in matrices) / 1e6:.0f} MB: numpy "
          f"{times['numpy'][0]:.3f} s, kernels {times['kernels'][0]:.3f} s, byte-identical: {equal}", flush=True)
