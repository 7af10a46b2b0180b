"""Q3_K -> Q6_K at load (gguf_convert.q3_k_as_q6_k) on the first 40 Q3_K matrices of a Q3_K_M 1.5B, seconds, and the
output saved so two trees' bytes can be compared.

    python ../2026-12-05-zen5-newer-tiles/requantize.py ~/.cache/multidraft/models/qwen2.5-coder-1.5b/source.gguf \\
        /tmp/models/q3_k_m.gguf Q3_K_M
    PYTHONPATH=TREE/src python q3_k_convert.py /tmp/models/q3_k_m.gguf TAG    # writes /tmp/q3_k_TAG.npy
    python q3_k_convert.py compare OLD NEW
"""
import sys
import time

import numpy as np

if sys.argv[1] == "compare":
    old, new = (np.load(f"/tmp/q3_k_{tag}.npy") for tag in sys.argv[2:4])
    print(old.shape, "byte-identical:", np.array_equal(old, new))
    sys.exit(0)

import gguf  # noqa: E402

from multidraft.models import gguf_convert  # noqa: E402

matrices = [t for t in gguf.GGUFReader(sys.argv[1]).tensors if int(t.tensor_type) == 11][:40]
start = time.perf_counter()
outputs = [gguf_convert.q3_k_as_q6_k(np.asarray(t.data).reshape(int(t.shape[1]), -1)) for t in matrices]
print(f"{sys.argv[2]}: {time.perf_counter() - start:.2f} s for {len(matrices)} Q3_K matrices")
np.save(f"/tmp/q3_k_{sys.argv[2]}.npy", np.concatenate([output.ravel() for output in outputs]))
