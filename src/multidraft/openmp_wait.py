"""How long OpenMP's worker threads spin before they sleep: set once, before torch loads libgomp.

A CPU forward is a sequence of short parallel kernels (on smollm2-135m, ~120 linears of 20-100 us each) with a few
microseconds to tens of microseconds of Python between them. With libgomp's default spin the workers often fall
asleep in those gaps, and each next kernel then waits for a wake-up. Measured on a 2-core Zen 3, native runner, one
1-token forward after 200 tokens: smollm2-135m 24.9 ms by default, 18.0 ms with GOMP_SPINCOUNT=10000000 (and 19.9
with OMP_WAIT_POLICY=ACTIVE, 30.5 with PASSIVE). The arithmetic is unchanged: only when a waiting thread wakes.
A user's own GOMP_SPINCOUNT or OMP_WAIT_POLICY wins; importing torch before multidraft leaves libgomp's default (it
reads the setting once). Child processes that run peers (llama.cpp) get their own defaults back
(`peer_environment`), so a peer is measured as its users run it.
"""

from __future__ import annotations

import os

SPIN_COUNT = "10000000"      # ~0.1 s of spinning at most after a parallel region
OURS = "MULTIDRAFT_SET_GOMP_SPINCOUNT"

if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    os.environ[OURS] = "1"


def peer_environment(environment: dict[str, str]) -> dict[str, str]:
    """`environment` without the spin setting this module added (a user's own setting stays)."""
    environment = dict(environment)
    if environment.pop(OURS, None) is not None:
        environment.pop("GOMP_SPINCOUNT", None)
    return environment


def release_thread_pool() -> bool:
    """Let the calling thread's OpenMP worker threads go (OpenMP 5.0's omp_pause_resource_all, hard pause); a later
    parallel region of this thread starts a new pool. Call it in a thread that has run forwards (loaded a model)
    and hands the forwards to another thread from now on (the server's model worker; `multidraft.load_model` calls
    it once the model is loaded).

    Why: libgomp spins its idle workers for GOMP_SPINCOUNT only while the process has no more OpenMP threads than
    CPUs; past that (the loading thread's pool plus the worker thread's) they spin ~100 times and sleep, so every
    parallel region waits for a wake-up. Measured on a 2-core Xeon VM: a small linear (256 x 1536) 12 us from the
    thread that ran the first regions, 70-85 us from a second thread, 12 us after this call; `serve` on the 1.5B,
    one request of 64 tokens, 4.6-5.2 s without this call and 4.0-4.4 s with it (`generate` in the loading thread:
    3.1-3.9 s); benchmarks/results/2026-11-29-amx-engine. The arithmetic is unchanged.
    Returns False where the runtime has no such call (or none is found)."""
    import ctypes

    try:                                          # every OpenMP runtime loaded (Linux): torch's, and others'
        with open("/proc/self/maps") as handle:    # (sentencepiece bundles its own libgomp)
            paths = {line.split()[-1] for line in handle if "/" in line}
    except OSError:
        return False
    released = False
    for path in sorted(p for p in paths if os.path.basename(p).startswith(("libgomp", "libiomp", "libomp"))):
        try:
            pause = ctypes.CDLL(path).omp_pause_resource_all
        except (OSError, AttributeError):
            continue
        pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
        released = pause(2) == 0 or released      # 2: omp_pause_hard
    return released
