"""The greedy logits' bits (tests/test_avx2_only_cpu.py's digest: a prompt's forward, 7 single-token decodes, an 8-row
verify) of qwen2.5-coder-1.5b (or argv[1]) on this process's paths. From the repository root:

    python benchmarks/results/2026-12-07-zen4-avx2-emulated/logits_bits.py [MODEL]          # this CPU's paths
    qemu-x86_64 -cpu max .venv/bin/python benchmarks/results/2026-12-07-zen4-avx2-emulated/logits_bits.py [MODEL]
"""
import sys
import time

import torch

sys.path.insert(0, ".")
import multidraft
from multidraft.models import gguf_kernels
from tests.test_avx2_only_cpu import logits_digest

torch.set_num_threads(2)
started = time.time()
lm = multidraft.load_model(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-1.5b")
loaded = time.time() - started
print(f"isa {gguf_kernels.isa()}, torch {torch.backends.cpu.get_cpu_capability()}, runner {lm.runner}: digest "
      f"{logits_digest(lm)[:16]} (load {loaded:.1f} s, total {time.time() - started:.1f} s)", flush=True)
