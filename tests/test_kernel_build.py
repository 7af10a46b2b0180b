"""The kernel build cache (models/kernel_build.py): a build killed before it finished, or a damaged library, never
hangs or crashes a later process; a whole build is loaded without building again; two processes build once. Each
load runs in a child process (a library's ops register once per process), on a one-op library that builds in
seconds."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from multidraft.models import fast_linear, kernel_build

needs_build = pytest.mark.skipif(fast_linear.cpu_build_unavailable_reason() is not None,
                                 reason="no C++ kernel build on this machine")

SOURCE = r"""
#include <ATen/ATen.h>
#include <torch/library.h>
at::Tensor plus_one(const at::Tensor& x) { return x + 1; }
TORCH_LIBRARY(multidraft_build_test, m) { m.def("plus_one(Tensor x) -> Tensor", &plus_one); }
"""
NAME = "multidraft_build_test"
CHILD = ("import sys, torch\nfrom multidraft.models import kernel_build\n"
         "if sys.argv[2] == 'no-compiler':\n"
         "    import torch.utils.cpp_extension as ext\n"
         "    def refuse(*args, **kwargs): raise RuntimeError('built again')\n"
         "    ext.load_inline = refuse\n"
         "if sys.argv[2] == 'no-lto':              # a GCC whose LTO fails\n"
         "    kernel_build.LTO_COMPILE = ['-fno-such-option-here']\n"
         f"kernel_build.load_library({NAME!r}, {SOURCE!r}, sys.argv[1], 'test library', True)\n"
         "print('plus_one', int(torch.ops.multidraft_build_test.plus_one(torch.tensor([41]))[0]))\n")


def _load(folder, mode="build", timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, "-c", CHILD, str(folder), mode], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One build, by two processes started together: one builds, the other waits for it and loads its library."""
    folder = tmp_path_factory.mktemp("kernels") / "buildtest-0123456789ab"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(folder), "build"], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [child.communicate(timeout=300) for child in children]
    assert all(child.returncode == 0 for child in children), outputs
    assert all("plus_one 42" in out for out, _ in outputs)
    assert sum("building the test library" in err for _, err in outputs) == 1, outputs
    return folder


def _copy(folder, tmp_path):
    target = tmp_path / "kernels" / folder.name
    shutil.copytree(folder, target)
    return target


@pytest.mark.slow
@needs_build
def test_a_whole_build_is_loaded_without_building_again(built, tmp_path):
    folder = _copy(built, tmp_path)
    child = _load(folder, "no-compiler")
    assert child.returncode == 0, child.stderr
    assert "plus_one 42" in child.stdout and "building" not in child.stderr


@pytest.mark.slow
@needs_build
def test_the_build_is_link_time_optimized_and_falls_back_without_it(built, tmp_path):
    """LTO compiles the code in parallel partitions at the link; where it fails the build runs in one piece."""
    lines = dict(line.split(" = ", 1) for line in (built / "build.ninja").read_text().splitlines() if " = " in line)
    jobs = min(kernel_build.MAX_LTO_JOBS, len(os.sched_getaffinity(0)))
    assert "-flto" in lines["cflags"].split() and f"-flto={jobs}" in lines["ldflags"].split()
    folder = tmp_path / "kernels" / "buildtest-0123456789ab"
    child = _load(folder, "no-lto")
    assert child.returncode == 0, child.stderr
    assert "plus_one 42" in child.stdout
    ninja = (folder / "build.ninja").read_text()
    assert "-flto" not in ninja and "-fno-such-option-here" not in ninja


@pytest.mark.slow
@needs_build
def test_a_damaged_library_is_never_loaded(built, tmp_path):
    folder = _copy(built, tmp_path)
    record = json.loads((folder / kernel_build.RECORD).read_text())
    library = folder / record["library"]
    os.truncate(library, library.stat().st_size // 20)         # what a kill mid-link or a full disk leaves
    child = _load(folder, "no-compiler")          # loading it would die of SIGBUS; the record says build it again
    assert child.returncode == 1 and "built again" in child.stderr, child.stderr


@pytest.mark.slow
@needs_build
def test_a_build_killed_midway_blocks_no_later_process(tmp_path):
    folder = tmp_path / "kernels" / "buildtest-0123456789ab"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    victim = subprocess.Popen([sys.executable, "-c", CHILD, str(folder), "build"], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not any(".build-" in p.name for p in folder.parent.glob("*")) and time.monotonic() < deadline:
        assert victim.poll() is None, "the build ended before it could be killed"
        time.sleep(0.05)
    time.sleep(2)                                               # inside the compiler now
    os.killpg(victim.pid, signal.SIGKILL)       # with its compiler; no finally runs: torch's lock file would stay
    victim.wait()
    assert not (folder / kernel_build.RECORD).exists()
    # what torch's in-place build left when killed: its lock file; every later load used to wait on it forever
    folder.mkdir()
    (folder / "lock").touch()
    child = _load(folder, timeout=240)
    assert child.returncode == 0, child.stderr
    assert "plus_one 42" in child.stdout


def test_prune_removes_dead_scratch_and_unused_builds_only(tmp_path):
    parent = tmp_path / "kernels"
    current = parent / "gguf-aaaaaaaaaaaa"
    old_days, now = 40 * 86400, time.time()

    def folder(name, age_seconds, record=True):
        path = parent / name
        path.mkdir(parents=True)
        if record:
            (path / kernel_build.RECORD).write_text("{}")
            os.utime(path / kernel_build.RECORD, (now - age_seconds, now - age_seconds))
        os.utime(path, (now - age_seconds, now - age_seconds))
        return path

    kept = [folder("gguf-bbbbbbbbbbbb", 3600), folder("gguf-bbbbbbbbbbbb.build-7-00aa", 3600),
            folder("small_m_linear-cccccccccccc", old_days)]           # another library: not this one's to prune
    gone = [folder("gguf-dddddddddddd", old_days), folder("gguf-eeeeeeeeeeee", old_days, record=False),
            folder("gguf-ffffffffffff.build-9-11bb", 2 * 86400, record=False)]
    kernel_build._prune(str(current))
    assert all(p.exists() for p in kept)
    assert not any(p.exists() for p in gone)


def test_a_failed_build_says_why_in_one_line():
    summary = kernel_build.build_failure_summary
    command = "[1/2] /usr/bin/g++ -MMD -MF main.o.d -isystem /x/include -O3 -c /k/main.cpp -o main.o"
    assert summary(f"Error building extension 'k': {command}\nFAILED: main.o\n{command}\n"
                   "/bin/sh: 1: /opt/bin/g++: not found\nninja: build stopped: subcommand failed.") == (
        "the C++ compiler /opt/bin/g++ was not found: install one (Debian: apt-get install g++) or point $CXX at it")
    assert summary(f"Error building extension 'k': {command}\n/k/main.cpp:3:1: error: 'x' was not declared\n"
                   "ninja: build stopped") == "/k/main.cpp:3:1: error: 'x' was not declared"
    assert summary(f"Error building extension 'k': {command}\n"
                   "g++: fatal error: Killed signal terminated program cc1plus") == (
        "g++: fatal error: Killed signal terminated program cc1plus")
    assert summary(f"{command}\n/usr/bin/ld: final link failed: No space left on device\ncollect2: error: ld") == (
        "/usr/bin/ld: final link failed: No space left on device")
    assert summary("") == "the build failed with no output"


def _fake_clang(tmp_path):
    """A compiler that predefines clang's macros, as clang++ does, and compiles nothing."""
    script = tmp_path / "clang++"
    script.write_text('#!/bin/sh\ncase "$*" in *-dM*) printf "#define __clang__ 1\\n#define __GNUC__ 4\\n";;\n'
                      '*) echo "clang: error: the kernels were given to clang" >&2; exit 1;; esac\n')
    script.chmod(0o755)
    return str(script)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")
def test_a_clang_cxx_builds_with_g_plus_plus_or_says_to_install_it(tmp_path, monkeypatch):
    clang, gxx = _fake_clang(tmp_path), shutil.which("g++")
    assert kernel_build._compiler_kind(clang) == "clang"
    assert kernel_build._compiler_kind(gxx) == "gcc"
    assert kernel_build._compiler_kind(str(tmp_path / "absent")) == "missing"
    assert kernel_build._compiler_kind("env g++") == "gcc"          # a command with words, as `ccache g++` is
    monkeypatch.setenv("CXX", clang)
    assert kernel_build.gcc_compiler() == gxx
    monkeypatch.setenv("PATH", str(tmp_path))                   # no g++ to fall back on
    with pytest.raises(RuntimeError, match=r"need GCC's g\+\+ and the C\+\+ compiler .*clang\+\+ is clang: install g"):
        kernel_build.gcc_compiler()
    gcc_only = tmp_path / "gcc-only"                             # no $CXX and no c++ on PATH, but a g++
    gcc_only.mkdir()
    (gcc_only / "g++").symlink_to(gxx)
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", str(gcc_only))
    assert kernel_build.gcc_compiler() == str(gcc_only / "g++")


@pytest.mark.slow
@needs_build
@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")
def test_a_build_under_a_clang_cxx_is_made_by_g_plus_plus(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", _fake_clang(tmp_path))
    child = _load(tmp_path / "kernels" / "buildtest-0123456789ab")
    assert child.returncode == 0, child.stderr
    assert "plus_one 42" in child.stdout and "the kernels need GCC" in child.stderr


def test_the_build_compiler_is_set_for_the_build_only(monkeypatch):
    for before in (None, "clang++"):
        if before is None:
            monkeypatch.delenv("CXX", raising=False)
        else:
            monkeypatch.setenv("CXX", before)
        with kernel_build._cxx("/usr/bin/g++"):
            assert os.environ["CXX"] == "/usr/bin/g++"
        assert os.environ.get("CXX") == before
