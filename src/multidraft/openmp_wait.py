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
