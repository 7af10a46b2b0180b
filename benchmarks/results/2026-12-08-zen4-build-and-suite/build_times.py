"""One kernel library built into a fresh folder with torch's builder as kernel_build does it (-O3, LTO over this
process's cores), with or without the <torch/extension.h> torch's load_inline puts on top of a source by default.

    PYTHONPATH=src:. python benchmarks/results/2026-12-08-zen4-build-and-suite/build_times.py implicit|explicit \\
        gguf|fast|test

gguf: the quantized kernels (gguf_kernels.source()); fast: fast_linear.KERNEL_SOURCE; test: the one-op library of
tests/test_kernel_build.py. The mode overrides what kernel_build passes (implicit: the builder's default before
dbfc149)."""
import os
import sys
import tempfile
import time

import torch.utils.cpp_extension as ext

from multidraft.models import fast_linear, gguf_kernels, kernel_build

mode, which = sys.argv[1], sys.argv[2]
builder = ext.load_inline
ext.load_inline = lambda **options: builder(**{**options, "no_implicit_headers": mode == "explicit"})
if which == "test":
    from tests.test_kernel_build import SOURCE as text
else:
    text = gguf_kernels.source() if which == "gguf" else fast_linear.KERNEL_SOURCE
started = time.perf_counter()
library = kernel_build._compile(f"timing_{mode}_{which}", text, tempfile.mkdtemp(), "g++", [], lto=True)
print(mode, which, f"{time.perf_counter() - started:.1f} s", os.path.getsize(library), "bytes")
