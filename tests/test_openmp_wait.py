"""openmp_wait.py: importing multidraft sets OpenMP's spin before torch loads libgomp, unless the user set one; peer
processes get their defaults back. Checked in fresh interpreters (the setting is read once per process)."""

import json
import os
import subprocess
import sys

import pytest

from multidraft.eval.peer_process import child_environment
from multidraft.openmp_wait import OURS, SPIN_COUNT, peer_environment

PROBE = ("import os, json, multidraft; from multidraft.eval.peer_process import child_environment; "
         "print(json.dumps([os.environ.get('GOMP_SPINCOUNT'), child_environment().get('GOMP_SPINCOUNT')]))")


def _probe(**env):
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", OURS)}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env, "PYTHONPATH": os.pathsep.join(sys.path)},
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_sets_the_spin_and_peers_do_not_inherit_it():
    assert _probe() == [SPIN_COUNT, None]


def test_a_users_own_setting_wins_and_reaches_the_peers():
    assert _probe(GOMP_SPINCOUNT="1234") == ["1234", "1234"]
    assert _probe(OMP_WAIT_POLICY="PASSIVE") == [None, None]


def test_peer_environment_removes_only_what_multidraft_added():
    assert peer_environment({"GOMP_SPINCOUNT": SPIN_COUNT, OURS: "1", "X": "y"}) == {"X": "y"}
    assert peer_environment({"GOMP_SPINCOUNT": "5", "X": "y"}) == {"GOMP_SPINCOUNT": "5", "X": "y"}
    assert "GOMP_SPINCOUNT" not in child_environment() or OURS not in os.environ


RELEASE_PROBE = """
import json, os, time, torch
from multidraft.openmp_wait import release_thread_pool
torch.set_num_threads(2)
def tasks(): return len(os.listdir('/proc/self/task'))
before = tasks()
torch.ones(4_000_000).sin_()                     # a parallel region: this thread's pool starts its worker
with_pool = tasks()
released = release_thread_pool()
time.sleep(0.3)
print(json.dumps([before, with_pool, released, tasks()]))
"""


def test_release_thread_pool_lets_the_workers_go():
    """The server's worker threads take the forwards from the thread that loaded the model: that thread's OpenMP
    workers must go, or libgomp (more threads than CPUs) stops spinning and every parallel region waits for a
    wake-up. Checked in a fresh interpreter: a parallel region starts a worker thread, the release ends it."""
    if (os.cpu_count() or 1) < 2 or not os.path.isdir("/proc/self/task"):
        pytest.skip("needs 2 CPUs and /proc (Linux)")
    out = subprocess.run([sys.executable, "-c", RELEASE_PROBE], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, check=True)
    before, with_pool, released, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert with_pool > before and released and after == before


def test_load_model_lets_the_loading_threads_workers_go(monkeypatch):
    """multidraft.load_model releases the loading thread's pool once the model is loaded (a web framework then runs
    the forwards from its own threads with spinning workers)."""
    import multidraft
    from multidraft import openmp_wait
    from multidraft.models import loader

    events = []
    monkeypatch.setattr(loader, "load_model", lambda *args, **kwargs: events.append("loaded") or "the model")
    monkeypatch.setattr(openmp_wait, "release_thread_pool", lambda: events.append("released") or True)
    assert multidraft.load_model("anything") == "the model"
    assert events == ["loaded", "released"]
