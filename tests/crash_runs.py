"""Run a write in a process that kills itself (SIGKILL, as kill -9) at a chosen write step.

Both helpers try every crash point of fsutil (CRASH_STEPS) at every occurrence n = 1, 2, ... until a run gets
through without dying (the step happens fewer times), and yield (step, n) after each killed run so the caller can
check what the crash left on disk. `reset()` runs before every run (put the old version back).
- `crash_runs(code)`: a fresh Python process runs `code` (the command line end to end; ~seconds per run when it
  imports torch);
- `forked_crash_runs(fn)`: a fork of the test process runs `fn()` (milliseconds per run; for writers that do no
  torch compute, since OpenMP is not fork-safe).
"""

import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path

from multidraft import fsutil
from multidraft.fsutil import CRASH_ENV, CRASH_STEPS

ROOT = Path(__file__).resolve().parents[1]


def run_child(code: str, env_extra: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


def _occurrences(run_once, steps, reset, max_occurrences):
    for step in steps:
        for n in range(1, max_occurrences + 1):
            if reset is not None:
                reset()
            killed, detail = run_once(f"{step}@{n}")
            if not killed:
                break
            yield step, n


def crash_runs(code: str, env_extra: dict = None, steps=CRASH_STEPS, reset=None, max_occurrences: int = 50):
    def run_once(where):
        done = run_child(code, {**(env_extra or {}), CRASH_ENV: where})
        assert done.returncode in (0, -signal.SIGKILL), (where, done.returncode, done.stderr[-3000:])
        return done.returncode == -signal.SIGKILL, done
    yield from _occurrences(run_once, steps, reset, max_occurrences)


def forked_crash_runs(fn, steps=CRASH_STEPS, reset=None, max_occurrences: int = 50):
    def run_once(where):
        sys.stdout.flush(), sys.stderr.flush()
        pid = os.fork()
        if pid == 0:                                   # the child: write, dying at `where`
            code = 0
            try:
                os.environ[CRASH_ENV] = where
                fsutil._crash_counts.clear()
                fn()
            except BaseException:
                traceback.print_exc()
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        assert killed or (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0), (where, status)
        return killed, status
    yield from _occurrences(run_once, steps, reset, max_occurrences)
