"""How `make llama` builds llama-cpp-python (the bench's llama.cpp peer) for this CPU, and the build itself.

    python src/multidraft/eval/llama_build.py cmake-args    # the CMAKE_ARGS for this machine
    python src/multidraft/eval/llama_build.py install       # build once per flag set, install into this Python

PyPI ships llama-cpp-python as source only, and its default build (GGML_NATIVE=ON, -march=native) turns on every
backend the build machine has, AMX included: on a Sapphire Rapids Xeon its AMX path segfaulted in the first decode
(issue 43). So the build names each SIMD extension from /proc/cpuinfo explicitly, with GGML_NATIVE=OFF (whose
defaults would otherwise turn AVX2/FMA/F16C/BMI2 on even where the CPU lacks them) and the AMX backend off.
pip's wheel cache keys a source build by name and version only, not by CMAKE_ARGS, so the wheel is built with
--no-cache-dir into a folder keyed by the flag set (MULTIDRAFT_HOME/wheels/llama-cpp-python-VERSION-KEY/) and
installed from there: a second install, or another checkout on the same machine, reuses it.

Standard library only: the Makefile runs it by path, before (or without) the package's own imports.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = "llama-cpp-python"
# /proc/cpuinfo flag(s) -> the llama.cpp CMake option they enable (ggml/src/ggml-cpu/CMakeLists.txt, x86 without
# GGML_NATIVE). GGML_AVX512 compiles with -mavx512f/cd/vl/dq/bw, so it needs all five.
X86_OPTIONS = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512vbmi",)),
    ("GGML_AVX512_VNNI", ("avx512_vnni",)),
    ("GGML_AVX512_BF16", ("avx512_bf16",)),
)
# Left out whatever the CPU has: the AMX backend crashed llama.cpp's first decode on Q4_K / Q6_K weights.
ALWAYS_OFF = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
# llama-cpp-python's multimodal library (mtmd, imported only by its llava chat handlers): the bench never loads it,
# and leaving it out shortens the build on every platform.
LIBRARY_ONLY = "-DLLAVA_BUILD=OFF"
# llama-cpp-python forces llama.cpp's `common` library on (chat-template parsers, argument parsing, downloads: 52 of
# the build's 127 objects on x86), though its Python bindings load libllama alone. CMake includes this file right
# after llama.cpp's own project() call (CMAKE_PROJECT_<name>_INCLUDE, a documented hook), that is after the force
# and before llama.cpp reads the option, so `common` is neither built nor installed.
NO_COMMON = 'set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama-cpp-python loads libllama alone" FORCE)\n'
NO_COMMON_FILE = "no-common.cmake"


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of the first processor listed in a /proc/cpuinfo text ("flags : fpu vme ...")."""
    match = re.search(r"^flags\s*:(.*)$", cpuinfo, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def cmake_args(flags: set[str], machine: str = "x86_64") -> str:
    """CMAKE_ARGS for a CPU with these /proc/cpuinfo flags; off x86 llama.cpp's own defaults (library only)."""
    if machine not in ("x86_64", "AMD64", "i686"):
        return LIBRARY_ONLY
    options = [LIBRARY_ONLY, "-DGGML_NATIVE=OFF"]
    options += [f"-D{name}={'ON' if all(f in flags for f in needs) else 'OFF'}" for name, needs in X86_OPTIONS]
    options += [f"-D{name}=OFF" for name in ALWAYS_OFF]
    return " ".join(options)


def this_machine_args() -> str:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return cmake_args(cpu_flags(cpuinfo), platform.machine())


def pinned_version(pyproject: Path = Path(__file__).resolve().parents[3] / "pyproject.toml") -> str:
    """The llama-cpp-python version the `llama` extra pins (one place: pyproject.toml)."""
    if pyproject.exists():
        import tomllib
        extra = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["llama"]
    else:
        from importlib.metadata import requires
        extra = [r.split(";")[0] for r in requires("multidraft") or [] if 'extra == "llama"' in r]
    pins = [r.split("==", 1)[1].strip() for r in extra if r.replace(" ", "").startswith(PACKAGE + "==")]
    if not pins:
        raise SystemExit(f"the `llama` extra in {pyproject} pins no {PACKAGE}==VERSION")
    return pins[0]


def build_key(version: str, args: str) -> str:
    """What the wheel depends on: the version, the flags and the Python it was built for."""
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return hashlib.sha256(f"{version}\n{args}\n{NO_COMMON}{python}".encode()).hexdigest()[:12]


def wheel_dir(version: str, key: str) -> Path:
    home = Path(os.environ.get("MULTIDRAFT_HOME") or Path.home() / ".cache" / "multidraft")
    return home / "wheels" / f"{PACKAGE}-{version}-{key}"


def build_wheel(version: str, args: str, folder: Path) -> Path:
    """The wheel in `folder`, built there first (into a temporary folder, renamed when whole) if missing."""
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if wheels:
        return wheels[0]
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"make llama: building {PACKAGE} {version} from source, once for this flag set (~5-10 min on 2 cores)\n"
          f"  CMAKE_ARGS={args or '(llama.cpp defaults)'}", flush=True)
    tmp.mkdir(parents=True)
    (tmp / NO_COMMON_FILE).write_text(NO_COMMON)
    args += f" -DCMAKE_PROJECT_llama.cpp_INCLUDE={tmp / NO_COMMON_FILE}"
    env = dict(os.environ, CMAKE_ARGS=args.strip(), FORCE_CMAKE="1")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir",
                    "--no-binary", PACKAGE, "-w", str(tmp), f"{PACKAGE}=={version}"], env=env, check=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return sorted(folder.glob("*.whl"))[0]


def install() -> int:
    """Build (once per flag set) and install into this Python; a no-op when this key is installed already."""
    import importlib.util
    version, args = pinned_version(), this_machine_args()
    key = build_key(version, args)
    marker = Path(sys.prefix) / ".llama-build-key"
    if marker.exists() and marker.read_text().strip() == key and importlib.util.find_spec("llama_cpp"):
        print(f"make llama: {PACKAGE} {version} ({key}) is installed")
        return 0
    wheel = build_wheel(version, args, wheel_dir(version, key))
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["--no-deps", "--force-reinstall", str(wheel)], check=True)   # replaces another flag set
    subprocess.run(pip + [str(wheel)], check=True)                                      # its dependencies
    marker.write_text(key + "\n")
    print(f"make llama: installed {wheel.name} ({key}; CMAKE_ARGS={args})")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["cmake-args"]:
        print(this_machine_args())
        return 0
    if argv == ["key"]:
        print(build_key(pinned_version(), this_machine_args()))
        return 0
    if argv == ["install"]:
        return install()
    print("usage: llama_build.py cmake-args | key | install", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
