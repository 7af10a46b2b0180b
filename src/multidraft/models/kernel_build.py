"""Building a CPU kernel library once and loading it, safe against builds that never finished.

Each library (C++ with TORCH_LIBRARY ops) lives in its own cache folder, keyed by its source and environment. A
build runs in a scratch folder of its own, under an OS file lock, and is published into the cache folder by one
rename once it has loaded, with a record of the library's size and sha256; a later process loads the library only
when the record matches it. Why: torch's `load_inline` builds in place behind a `lock` file of its own, so a build
killed before it finished (a closed terminal, an out-of-memory kill) left that file and every later process waited
on it forever, and a library cut short by such a kill crashed the next process that loaded it (SIGBUS). An OS file
lock ends with the process that holds it, and a scratch folder never becomes the cache folder unless it is whole.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import threading
import time

import torch

RECORD = "built.json"             # written last into a whole build: the library's file name, size and sha256
SCRATCH_DAYS = 1                  # a scratch folder older than this belongs to a build that died
UNUSED_DAYS = 30                  # a cache folder of the same library not loaded for this long is removed
_environment_lock = threading.Lock()   # $CXX is the process's: one build at a time sets it (_cxx)
EXTRA_FLAGS = "MULTIDRAFT_KERNEL_CFLAGS"   # flags added to the compile and link lines (`make test-sanitize`)


def extra_flags() -> str:
    """$MULTIDRAFT_KERNEL_CFLAGS, for developers' builds (AddressSanitizer, UBSan): each kernel puts it in its cache
    key, so such a build never stands in for the normal one."""
    return os.environ.get(EXTRA_FLAGS, "").strip()


def cache_folder(family: str, source: str) -> str:
    """The cache folder of a library built from `source`: $MULTIDRAFT_HOME/kernels/FAMILY-KEY. The key covers what
    changes the build: the source, torch, the environment (ninja rebuilds when the compile command changes, and the
    command names the environment's include folders, so two virtual environments sharing one folder rebuilt the
    kernel each time a process from the other one started), $MULTIDRAFT_KERNEL_CFLAGS and the build's own recipe."""
    from multidraft.paths import subdir

    material = source + torch.__version__ + sys.prefix + extra_flags() + " ".join(BUILD_RECIPE)
    return str(subdir("kernels") / f"{family}-{hashlib.sha256(material.encode()).hexdigest()[:12]}")


def load_library(name: str, source: str, folder: str, label: str, progress: bool) -> None:
    """Load library `name` built from `source` into this process, building it into `folder` first if no whole build
    is there. Raises on any build error; the callers turn that into one warning line."""
    if _load_whole(folder):
        return
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    with _build_lock(folder, progress):
        if _load_whole(folder):          # another process built it while this one waited
            return
        _prune(folder)
        _build_and_publish(name, source, folder, label, progress)


def _load_whole(folder: str) -> bool:
    """Load the library of a whole build in `folder`; False where there is none (no record, or a library that does
    not match it: a build cut short, a damaged file)."""
    try:
        with open(os.path.join(folder, RECORD)) as handle:
            record = json.load(handle)
        library = os.path.join(folder, os.path.basename(record["library"]))
        if os.path.getsize(library) != record["size"] or _sha256(library) != record["sha256"]:
            return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    torch.ops.load_library(library)
    with contextlib.suppress(OSError):   # the last use, for _prune (a read-only cache keeps working)
        os.utime(os.path.join(folder, RECORD))
    return True


@contextlib.contextmanager
def _build_lock(folder: str, progress: bool):
    """One build of a folder at a time across processes; the OS drops the lock when its holder dies."""
    with open(f"{folder}.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress:
                print("multidraft: waiting for another process's kernel build...", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_and_publish(name: str, source: str, folder: str, label: str, progress: bool) -> None:
    _put_ninja_on_path()
    compiler = gcc_compiler(progress)
    scratch = f"{folder}.build-{os.getpid()}-{secrets.token_hex(4)}"
    os.makedirs(scratch)
    started = time.perf_counter()
    if progress:
        print(f"multidraft: building the {label} (once per version, ~1 min)...", file=sys.stderr, flush=True)
    try:
        extra = shlex.split(extra_flags())
        try:
            library = _compile(name, source, scratch, compiler, extra, lto=not extra)
        except Exception as error:
            if extra:
                raise RuntimeError(build_failure_summary(str(error))) from error
            try:                       # a GCC without its LTO plugin: the same build in one piece
                library = _compile(name, source, scratch, compiler, extra, lto=False)
            except Exception as error:
                raise RuntimeError(build_failure_summary(str(error))) from error
        with open(os.path.join(scratch, RECORD), "w") as handle:
            json.dump({"library": os.path.basename(library), "size": os.path.getsize(library),
                       "sha256": _sha256(library)}, handle)
        _publish(scratch, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)      # gone once published; a failed build's files
    if progress:
        print(f"multidraft: {label} ready ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)


# -fopenmp makes at::parallel_for use torch's threads: without it the kernel ran on one thread whatever
# torch.get_num_threads() said (at idle with 2 threads, 8960x1536 at 1 row 3.37 vs 2.11 ms). The library it links,
# libgomp.so.1, is the one torch has already loaded (same soname), so there is one thread pool.
BASE_FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-fopenmp"]
# Link-time optimization splits the one translation unit's code generation (~85% of a build) into partitions
# that compile in parallel, one per core: the gguf kernels' build 115 -> 77 s on 2 cores. It changes no
# arithmetic (the same -O3, target pragmas and fp-contract setting, inlining decided before the split); the
# kernel tests check the bits against the scalar reference.
LTO_COMPILE = ["-flto"]
MAX_LTO_JOBS = 16                 # each job's compiler takes ~150 MB here
# Each source includes the headers it uses (ATen, torch/library.h), where torch's builder would put <torch/extension.h>
# (pybind11 and all of torch's C++ API) on top of it; without it, on 2 cores of a Zen 4 (one build each, 2026-12-08)
# the gguf kernels build in 62.7 s against 72.5, the fast linear kernel 12.0 against 24.4, a kernel test's one-op
# library 12.4 / 28.1.
NO_IMPLICIT_HEADERS = True
# What else makes two builds of one source differ (part of the cache key).
BUILD_RECIPE = [*BASE_FLAGS, *LTO_COMPILE, f"no_implicit_headers={NO_IMPLICIT_HEADERS}"]


def _lto_link_flags() -> list:
    """The cores this process may use (GCC's -flto=auto counts every core online, a container's limit aside)."""
    return [f"-flto={min(MAX_LTO_JOBS, len(os.sched_getaffinity(0)))}", "-flto-partition=balanced", *BASE_FLAGS]


def _compile(name: str, source: str, scratch: str, compiler: str, extra: list, lto: bool) -> str:
    """Build and load the library; its path (torch names a second build of one name in a process NAME_v1)."""
    from torch.utils.cpp_extension import load_inline

    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull), _cxx(compiler):
        return load_inline(name=name, cpp_sources=[source],
                           extra_cflags=[*BASE_FLAGS, *(LTO_COMPILE if lto else []), *extra],
                           extra_ldflags=[*(_lto_link_flags() if lto else ["-fopenmp"]), *extra],
                           is_python_module=False, no_implicit_headers=NO_IMPLICIT_HEADERS,
                           build_directory=scratch, verbose=False)


@contextlib.contextmanager
def _cxx(compiler: str):
    """$CXX set to `compiler` while torch's builder runs (it reads no other setting), then as it was. The environment
    is the process's: a lock keeps two threads' builds (the two kernels) from restoring each other's value."""
    with _environment_lock:
        given = os.environ.get("CXX")
        os.environ["CXX"] = compiler
        try:
            yield
        finally:
            if given is None:
                os.environ.pop("CXX", None)
            else:
                os.environ["CXX"] = given


def gcc_compiler(progress: bool = False) -> str:
    """The C++ compiler to build with: $CXX (torch's choice, else `c++`) where it is GCC, else `g++` from PATH. Why:
    the kernels give each instruction-set path its own `#pragma GCC target`, which clang ignores, so under a clang
    $CXX the build failed with "too many errors" (or "'omp.h' file not found") and every run fell back to the slow
    HF weights. A $CXX that is not there is left to the build, whose failure says so."""
    given = os.environ.get("CXX") or "c++"
    kind = _compiler_kind(given)
    if kind == "gcc" or (kind == "missing" and os.environ.get("CXX")):
        return given
    fallback = shutil.which("g++")
    if fallback and _compiler_kind(fallback) == "gcc":
        if progress:
            print(f"multidraft: building with {fallback}: the kernels need GCC and {given} is {kind}", file=sys.stderr,
                  flush=True)
        return fallback
    raise RuntimeError(f"the kernels need GCC's g++ and the C++ compiler {given} is {kind}: install g++ (Debian: "
                       f"apt-get install g++) or point $CXX at it")


def _compiler_kind(command: str) -> str:
    """'gcc', 'clang' (clang and compilers built on it, Intel's icpx included), 'missing', or 'not GCC' (anything
    else), from the macros the compiler predefines."""
    try:
        macros = subprocess.run([*shlex.split(command), "-dM", "-E", "-x", "c++", os.devnull], capture_output=True,
                                text=True, timeout=60).stdout
    except (OSError, ValueError, subprocess.SubprocessError):
        return "missing"
    defined = {line.split()[1] for line in macros.splitlines() if line.startswith("#define ")}
    if "__clang__" in defined:
        return "clang"
    return "gcc" if "__GNUC__" in defined else "not GCC"


def build_failure_summary(output: str) -> str:
    """The line of a failed build's output that says what went wrong (a missing compiler, a full disk, the
    compiler's own error), not the compiler's command line that torch's message starts with."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    missing = next((line for line in lines if line.endswith(": not found")), None)
    if missing:                                    # /bin/sh: 1: g++: not found
        program = missing.rsplit(":", 2)[-2].strip()
        return (f"the C++ compiler {program} was not found: install one (Debian: apt-get install g++) or point "
                f"$CXX at it")
    for marker in ("No space left on device", "fatal error:", "error:", "Killed"):
        hit = next((line for line in lines if marker in line), None)
        if hit:
            return hit
    return lines[0] if lines else "the build failed with no output"


def _publish(scratch: str, folder: str) -> None:
    """Rename the whole build to `folder`, moving aside what was there (a build without a record: cut short, or made
    before builds had records). The library loaded from the scratch folder stays loaded."""
    if os.path.lexists(folder):
        aside = f"{folder}.stale-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)
    os.rename(scratch, folder)


def _prune(folder: str) -> None:
    """Remove what dead builds left beside `folder` and the same library's builds unused for UNUSED_DAYS (older
    versions of it). Best effort: a folder another process still uses is merely built again there."""
    parent, family = os.path.dirname(folder), os.path.basename(folder).rsplit("-", 1)[0] + "-"
    now = time.time()
    for entry in os.listdir(parent):
        path = os.path.join(parent, entry)
        if not entry.startswith(family) or path == folder or not os.path.isdir(path):
            continue
        with contextlib.suppress(OSError):
            if ".build-" in entry or ".stale-" in entry:
                dead = now - os.path.getmtime(path) > SCRATCH_DAYS * 86400
            else:
                record = os.path.join(path, RECORD)
                last_use = os.path.getmtime(record if os.path.exists(record) else path)
                dead = now - last_use > UNUSED_DAYS * 86400
            if dead:
                shutil.rmtree(path, ignore_errors=True)
                with contextlib.suppress(OSError):
                    os.remove(f"{path}.lock")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _put_ninja_on_path() -> None:
    """torch's extension builder runs `ninja` from PATH; a venv's pip-installed ninja is not there unless the venv
    is activated, so add its folder (the `ninja` package is a dependency for this reason)."""
    if shutil.which("ninja"):
        return
    try:
        import ninja
    except ImportError:
        return
    os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
