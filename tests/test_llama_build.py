"""`make llama`'s build configuration (eval/llama_build.py): llama.cpp's SIMD options from /proc/cpuinfo, each one
set explicitly, the AMX backend always off, a wheel folder keyed by the flag set; no compiler run here."""

import subprocess
import sys
from pathlib import Path

from multidraft.eval import llama_build

ZEN3 = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 bmi1 bmi2 fma f16c popcnt"
SAPPHIRE_RAPIDS = (ZEN3 + " avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi avx512_vnni avx512_bf16 avx_vnni "
                   "amx_tile amx_int8 amx_bf16")


def options(flags: str, machine: str = "x86_64") -> dict[str, str]:
    args = llama_build.cmake_args(set(flags.split()), machine)
    return dict(arg.removeprefix("-D").split("=") for arg in args.split())


def test_cpuinfo_flags_are_read_from_the_flags_line():
    text = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\nbugs\t\t: sysret_ss_attrs\n"
    assert llama_build.cpu_flags(text) == {"fpu", "avx2", "fma"}
    assert llama_build.cpu_flags("no flags here") == set()


def test_zen3_gets_avx2_fma_f16c_and_no_avx512():
    got = options(ZEN3)
    assert got["GGML_NATIVE"] == "OFF"
    assert all(got[name] == "ON" for name in ("GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_BMI2", "GGML_FMA", "GGML_F16C"))
    assert all(got[name] == "OFF" for name in ("GGML_AVX512", "GGML_AVX512_VNNI", "GGML_AVX512_BF16", "GGML_AVX_VNNI"))


def test_sapphire_rapids_gets_avx512_vnni_bf16_but_never_amx():
    got = options(SAPPHIRE_RAPIDS)
    assert all(got[name] == "ON" for name in ("GGML_AVX512", "GGML_AVX512_VBMI", "GGML_AVX512_VNNI",
                                               "GGML_AVX512_BF16", "GGML_AVX_VNNI", "GGML_AVX2", "GGML_FMA"))
    assert got["GGML_AMX_TILE"] == got["GGML_AMX_INT8"] == got["GGML_AMX_BF16"] == "OFF"


def test_every_option_is_explicit_where_the_cpu_lacks_it():
    # With GGML_NATIVE=OFF llama.cpp turns SSE4.2/AVX/AVX2/BMI2/FMA/F16C on by default: an old CPU needs them OFF.
    got = options("fpu sse sse2 ssse3")
    assert all(got[name] == "OFF" for name, _ in llama_build.X86_OPTIONS)
    # GGML_AVX512 compiles with -mavx512bw and friends: avx512f alone is not enough.
    assert options(ZEN3 + " avx512f avx512cd")["GGML_AVX512"] == "OFF"
    # Off x86: llama.cpp's own defaults; everywhere without the multimodal library the bench never loads.
    assert llama_build.cmake_args(set(ZEN3.split()), "aarch64") == "-DLLAVA_BUILD=OFF"
    assert "-DLLAVA_BUILD=OFF" in llama_build.cmake_args(set(ZEN3.split()))


def test_the_wheel_folder_is_keyed_by_version_and_flags(monkeypatch, tmp_path):
    zen3, spr = llama_build.cmake_args(set(ZEN3.split())), llama_build.cmake_args(set(SAPPHIRE_RAPIDS.split()))
    assert llama_build.build_key("0.3.36", zen3) == llama_build.build_key("0.3.36", zen3)
    assert len({llama_build.build_key("0.3.36", zen3), llama_build.build_key("0.3.36", spr),
                llama_build.build_key("0.3.37", zen3)}) == 3
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    key = llama_build.build_key("0.3.36", zen3)
    assert llama_build.wheel_dir("0.3.36", key) == tmp_path / "wheels" / f"llama-cpp-python-0.3.36-{key}"


def test_the_version_is_the_llama_extras_pin():
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    assert f'"llama-cpp-python=={llama_build.pinned_version(pyproject)}"' in pyproject.read_text()


def test_install_builds_once_per_key_and_replaces_another_flag_set(monkeypatch, tmp_path):
    commands = []

    def run(command, env=None, check=False):
        commands.append(command)
        if "wheel" in command:           # the source build: leaves a wheel in its -w folder
            folder = Path(command[command.index("-w") + 1])
            (folder / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
            machine, include = env["CMAKE_ARGS"].split(" -DCMAKE_PROJECT_llama.cpp_INCLUDE=")
            assert machine == llama_build.this_machine_args() and "--no-cache-dir" in command
            assert Path(include).read_text() == llama_build.NO_COMMON      # llama.cpp's `common` left out
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(llama_build.subprocess, "run", run)
    monkeypatch.setattr(llama_build.sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / ".llama-build-key").write_text("another-flag-set\n")
    assert llama_build.install() == 0
    assert [c[3] for c in commands] == ["wheel", "install", "install"]
    assert "--force-reinstall" in commands[1] and "--no-deps" in commands[1]
    commands.clear()
    assert llama_build.install() == 0 and commands == []          # this key is installed: nothing to do
    (tmp_path / "venv" / ".llama-build-key").unlink()
    assert llama_build.install() == 0
    assert [c[3] for c in commands] == ["install", "install"]     # the wheel of this key is reused, not rebuilt


def test_the_script_runs_by_path_without_the_package():
    script = Path(llama_build.__file__)
    out = subprocess.run([sys.executable, "-I", str(script), "cmake-args"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == llama_build.this_machine_args()


def test_the_recipe_that_leaves_out_common_is_in_the_key(monkeypatch):
    """A wheel built with another recipe (e.g. with llama.cpp's `common` library) is never taken for this one."""
    args = llama_build.cmake_args(set(ZEN3.split()))
    key = llama_build.build_key("0.3.36", args)
    assert "LLAMA_BUILD_COMMON OFF" in llama_build.NO_COMMON
    monkeypatch.setattr(llama_build, "NO_COMMON", "")
    assert llama_build.build_key("0.3.36", args) != key
