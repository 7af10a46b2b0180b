"""How many CPU threads a forward should use when other processes share the machine.

A forward is hundreds of parallel regions per token, each ending in a barrier that waits for its slowest
thread. When another process keeps one core busy, the thread scheduled on that core runs only part of the time
and every barrier waits for it: the probe of issue #35 saw smollm2 greedy fall from ~17-30 to 0.5-0.8 tok/s with
torch's default 2 threads on 2 cores beside one busy process, while 1 thread did not collapse. So `auto` uses as
many threads as there are cores other processes leave idle, measured from /proc/stat over a short window before
the work starts (a neighbour that starts later is not seen: pass a number to pin it).

`generate` and `serve` use `auto` by default where the thread count cannot change a result: the quantized runners
split a matrix by output rows, each row summed in a fixed order by one thread, so their bits are the same at any
count (tests/test_threads.py checks it). torch's eager matmuls may split a sum differently per thread count
(smollm2's logits bits differ at 1 and 2 threads), so a model on them keeps torch's fixed default unless the user
asks: greedy output stays reproducible from run to run. `bench` keeps torch's default (timings name their count).
benchmarks/thread_contention.py measures the rates this choice is about (threads x busy neighbour x OpenMP wait
policy).
"""

from __future__ import annotations

import os
import time
from typing import Optional, Union

from multidraft.errors import InvalidOptionError


def _cpu_times() -> Optional[tuple[float, float]]:
    """(busy, total) jiffies over all CPUs, from the first line of /proc/stat; None where it cannot be read."""
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [float(v) for v in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)          # idle + iowait
    total = sum(values[:8])                                             # guest time is already in user
    return total - idle, total


def busy_cores(window: float = 0.25) -> Optional[float]:
    """How many cores other processes keep busy now (this process idles while it measures); None off Linux."""
    first = _cpu_times()
    if first is None:
        return None
    time.sleep(window)
    second = _cpu_times()
    if second is None or second[1] <= first[1]:
        return None
    share = (second[0] - first[0]) / (second[1] - first[1])
    return share * (os.cpu_count() or 1)


def auto_threads(window: float = 0.25) -> int:
    """Threads for the forwards: the cores left idle (at least 1, at most torch's own default)."""
    import torch
    most = torch.get_num_threads()
    busy = busy_cores(window)
    if busy is None:
        return most
    idle = (os.cpu_count() or most) - busy
    return max(1, min(most, int(idle + 0.5)))


def add_threads_argument(parser, help_text: str = "CPU threads (auto: the cores other processes leave idle; "
                         "default: auto on the quantized runners, whose results do not depend on it, else torch's, "
                         "all cores)") -> None:
    """The --threads option of generate, serve (this help) and bench (its own help: bench keeps torch's count)."""
    parser.add_argument("--threads", type=_threads_option, default=None, metavar="N|auto", help=help_text)


def max_threads() -> int:
    """The most threads a run may ask for: 4 per CPU (more only makes OpenMP's workers wait for cores; 10,000 of
    them hung the process)."""
    return 4 * (os.cpu_count() or 1)


def check_thread_count(value, option: str = "--threads", auto: bool = True) -> int:
    """A thread count as given (an int, or its text): a positive integer up to max_threads(), else a clear error."""
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = 0
    if isinstance(value, bool) or not 1 <= count <= max_threads():
        either = " or 'auto'" if auto else ""
        raise InvalidOptionError(f"{option} must be a positive integer{either}, at most {max_threads()} on this "
                                 f"machine ({os.cpu_count()} CPUs), got {value!r}")
    return count


def parse_threads(text: str) -> Union[int, str]:
    """The --threads value: a positive integer up to max_threads(), or 'auto'."""
    return text if text == "auto" else check_thread_count(text)


def _threads_option(text: str) -> Union[int, str]:
    """parse_threads for argparse, whose error line then carries its message (not 'invalid ... value')."""
    import argparse
    try:
        return parse_threads(text)
    except InvalidOptionError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def measure_default_threads(threads: Union[int, str, None]) -> Union[int, str, None]:
    """What --threads means before the model is loaded: a number or 'auto' as given; when not given, the auto count
    measured now (while this process idles), to be applied only if the model's runner allows (`apply_for_model`)."""
    return ("default", auto_threads()) if threads is None else threads


def apply_for_model(lm, planned) -> int:
    """Apply `measure_default_threads`'s plan once the runner is known; returns the thread count in use."""
    if isinstance(planned, tuple):              # not chosen by the user
        return apply_threads(planned[1] if lm.capabilities.thread_invariant else None)
    return apply_threads(planned)


def apply_threads(threads: Union[int, str, None]) -> int:
    """Set torch's thread count (None: leave torch's default); returns the count in use."""
    import torch
    if threads == "auto":
        threads = auto_threads()
    if threads is not None:
        torch.set_num_threads(check_thread_count(threads, "threads"))
    return torch.get_num_threads()
