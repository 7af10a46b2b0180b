"""The 1.5B stand-in (../2026-12-04-h200-host/stand_in.py) with its Q4_K matrices as random IQ1_S blocks whose d is
4e-3 / 2 .. 4e-3 (an IQ1_S model's d is ~a tenth of its weights' spread: every d / 8 an fp16, so they convert; the
stand-in's own 3e-4 would leave every matrix fp32). From the repository root, after `stand_in.py pack
qwen2.5-coder-1.5b DIR` and renaming "Q4_K" to "IQ1_S" in DIR/spec.json:

    MULTIDRAFT_HOME=HOME PYTHONPATH=src:. python benchmarks/results/2026-12-07-zen4-iq1-tq/unpack_iq1_stand_in.py DIR
"""
import runpy
import sys

import tests.tiny_gguf as tiny

real = tiny.random_blocks
tiny.random_blocks = lambda name, rows, width, rng, scale=0.02: real(name, rows, width, rng,
                                                                     4e-3 if name == "IQ1_S" else scale)
sys.argv = ["stand_in.py", "unpack", sys.argv[1]]
runpy.run_path("benchmarks/results/2026-12-04-h200-host/stand_in.py", run_name="__main__")
