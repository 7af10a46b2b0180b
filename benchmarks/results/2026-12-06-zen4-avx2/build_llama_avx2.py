"""llama-cpp-python built for AVX2 alone (AVX-512, VNNI and AMX off) on any x86 CPU, installed into a folder of its own,
so that a CPU with AVX-512 stands in for an AVX2-only one (AMD Zen 3, older Intel) beside our forced avx2 path.

    python build_llama_avx2.py /tmp/llama-avx2      # then PYTHONPATH=/tmp/llama-avx2 multidraft bench ...

The flags are this CPU's /proc/cpuinfo flags less every avx512* and avx_vnni, through make llama's own CMAKE_ARGS
recipe (src/multidraft/eval/llama_build.py); the wheel is cached under that flag set's key like make llama's.
"""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src" / "multidraft" / "eval"))
import llama_build  # noqa: E402

target = sys.argv[1] if len(sys.argv) > 1 else "/tmp/llama-avx2"
flags = {f for f in llama_build.cpu_flags(Path("/proc/cpuinfo").read_text())
         if not f.startswith("avx512") and f != "avx_vnni"}
args = llama_build.cmake_args(flags)
version = llama_build.pinned_version()
wheel = llama_build.build_wheel(version, args, llama_build.wheel_dir(version, llama_build.build_key(version, args)))
subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target, str(wheel)], check=True)
print(f"{wheel.name} (CMAKE_ARGS={args}) in {target}")
