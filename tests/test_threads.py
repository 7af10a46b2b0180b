"""--threads auto: as many threads as the cores other processes leave idle (issue #35 item 11)."""

import pytest
import torch

from multidraft.errors import InvalidOptionError
from multidraft.models import threads


def fake_stat(monkeypatch, cpus, busy_share):
    """/proc/stat readings 100 jiffies per CPU apart, `busy_share` of them busy."""
    readings = iter([(0.0, 0.0), (busy_share * 100 * cpus, 100.0 * cpus)])
    monkeypatch.setattr(threads, "_cpu_times", lambda: next(readings))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: cpus)


@pytest.mark.parametrize("cpus, busy_share, most, expected", [
    (2, 0.0, 2, 2),          # idle machine: all of torch's threads
    (2, 0.5, 2, 1),          # one core busy beside us: one thread (two collapsed in the probe)
    (2, 1.0, 2, 1),          # all busy: still one
    (8, 0.3, 8, 6),          # 2.4 busy cores of 8: 6 threads (5.6 rounded)
    (8, 0.0, 4, 4),          # never more than torch's default
])
def test_auto_threads_leaves_the_busy_cores(monkeypatch, cpus, busy_share, most, expected):
    fake_stat(monkeypatch, cpus, busy_share)
    monkeypatch.setattr(torch, "get_num_threads", lambda: most)
    assert threads.auto_threads(window=0) == expected


def test_without_proc_stat_auto_keeps_torchs_default(monkeypatch):
    monkeypatch.setattr(threads, "_cpu_times", lambda: None)
    assert threads.auto_threads(window=0) == torch.get_num_threads()


def test_the_real_proc_stat_reads():
    busy = threads.busy_cores(window=0.05)
    assert busy is None or 0 <= busy <= (threads.os.cpu_count() or 1) + 1e-6


def test_parse_and_apply():
    assert threads.parse_threads("auto") == "auto" and threads.parse_threads("3") == 3
    for bad in ("0", "-1", "x", "1.5"):
        with pytest.raises(InvalidOptionError, match="positive integer or 'auto'"):
            threads.parse_threads(bad)
    before = torch.get_num_threads()
    try:
        assert threads.apply_threads(1) == 1 and threads.apply_threads(None) == 1
    finally:
        torch.set_num_threads(before)


def test_cli_refuses_a_bad_thread_count(capsys):
    from multidraft.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--threads", "zero", "--model", "x", "hi"])
    assert exit_info.value.code == 2 and "--threads" in capsys.readouterr().err
