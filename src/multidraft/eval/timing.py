"""The one clock of `multidraft bench` presets: wall time with this process's CPU time beside it.

Why both: on a machine shared with busy processes wall time mostly measures waiting for a core; the CPU time of
this process is what the work cost (with one thread). Presets report wall time unless they say otherwise.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional


@dataclass
class Span:
    """One timed stretch: `seconds` (wall) and `cpu_seconds` (this process, every thread)."""
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    sync: Optional[Callable[[], None]] = None      # e.g. torch.cuda.synchronize: GPU work ends inside the span
    _wall0: float = 0.0
    _cpu0: float = 0.0

    def __enter__(self) -> "Span":
        if self.sync:
            self.sync()
        self._wall0, self._cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        if self.sync:
            self.sync()
        self.seconds = time.perf_counter() - self._wall0
        self.cpu_seconds = time.process_time() - self._cpu0

    @classmethod
    def start(cls) -> "Span":
        """A running span, for progress lines ("[12s] ...") and stretches that end elsewhere (stop())."""
        return cls().__enter__()

    def elapsed(self) -> float:
        """Wall seconds since the start, the span still running."""
        return time.perf_counter() - self._wall0

    def stop(self) -> float:
        self.__exit__()
        return self.seconds


def timed(fn: Callable, sync: Optional[Callable[[], None]] = None):
    """(fn()'s result, its Span)."""
    with Span(sync=sync) as span:
        result = fn()
    return result, span


def device_sync(device) -> Optional[Callable[[], None]]:
    """What a Span on `device` calls at both ends: CUDA's synchronize (kernels run asynchronously), else nothing."""
    if str(device).startswith("cuda"):
        import torch
        return torch.cuda.synchronize
    return None


def repeat(fn: Callable, reps: int, warmup: int = 1, cpu: bool = False) -> list[float]:
    """Seconds of `reps` calls of fn() after `warmup` untimed ones (CPU seconds with cpu=True)."""
    for _ in range(warmup):
        fn()
    spans = [timed(fn)[1] for _ in range(reps)]
    return [s.cpu_seconds if cpu else s.seconds for s in spans]


def median_seconds(fn: Callable, reps: int, warmup: int = 1, cpu: bool = False) -> float:
    return statistics.median(repeat(fn, reps, warmup, cpu))


def clock(cpu: bool = False) -> Callable[[], float]:
    """A bare clock for code that brackets its own stretches: process CPU time or wall time."""
    return time.process_time if cpu else time.perf_counter
