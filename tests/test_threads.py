"""--threads auto: as many threads as the cores other processes leave idle (issue #35 item 11)."""

import pytest
import torch

from multidraft.errors import InvalidOptionError
from multidraft.models import threads
from tests.installed import require_quantized_kernels


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
    for bad in ("0", "-1", "x", "1.5", str(threads.max_threads() + 1), "9999999"):
        with pytest.raises(InvalidOptionError, match="positive integer or 'auto'"):
            threads.parse_threads(bad)
    before = torch.get_num_threads()
    try:
        assert threads.apply_threads(1) == 1 and threads.apply_threads(None) == 1
    finally:
        torch.set_num_threads(before)


def test_every_thread_count_is_capped():
    """The library's threads= and the commands that take a plain number refuse a count that would hang the machine."""
    too_many = threads.max_threads() + 1
    for bad in (too_many, 0, True, "x"):
        with pytest.raises(InvalidOptionError, match="at most"):
            threads.apply_threads(bad)
    with pytest.raises(InvalidOptionError, match="--threads must be a positive integer, at most"):
        threads.check_thread_count(too_many, auto=False)


@pytest.mark.parametrize("argv", [["bench", "forward-cost", "--random", "qwen2.5-1.5b", "--threads", "{n}"],
                                  ["heads", "train", "--model", "x", "--corpus", "y", "--threads", "{n}"]])
def test_commands_with_a_plain_thread_number_refuse_a_huge_one(argv, capsys):
    from multidraft.cli import main
    argv = [a.format(n=threads.max_threads() + 1) for a in argv]
    assert main(argv) != 0
    assert "at most" in capsys.readouterr().err


def test_cli_refuses_a_bad_thread_count(capsys):
    from multidraft.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--threads", "zero", "--model", "x", "hi"])
    assert exit_info.value.code == 2 and "--threads" in capsys.readouterr().err


# ----- the default: auto only where the thread count cannot change a result

def _at_threads(count, fn):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(count)
        return fn()
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("type_name", ["Q4_K", "Q6_K", "Q8_0"])
def test_quantized_linears_give_the_same_bits_at_any_thread_count(type_name):
    import gguf
    import numpy as np
    from multidraft.models import gguf_kernels
    from tests.tiny_gguf import random_blocks

    require_quantized_kernels()
    type_id = int(gguf.GGMLQuantizationType[type_name])
    blocks = torch.from_numpy(random_blocks(type_name, 300, 512, np.random.default_rng(1), scale=0.05))
    x = torch.randn(7, 512)
    kernels = [gguf_kernels.linear] + ([gguf_kernels.linear_q8] if type_name != "Q8_0" else [])
    for kernel in kernels:      # 300 rows: several 64-row slices, so 2 and 3 threads really split the work
        outputs = [_at_threads(n, lambda: kernel(x, blocks, type_id, 512)) for n in (1, 2, 3)]
        assert all(torch.equal(outputs[0], other) for other in outputs[1:])


def test_quantized_model_logits_do_not_depend_on_threads():
    require_quantized_kernels()
    from tests.test_quantized_runner import _tiny
    lm, _ = _tiny("llama", "Q4_K")
    ids = list(range(3, 40))
    from multidraft.models.runners import REGISTRY
    invariant = [name for name, runner in REGISTRY.items() if runner.capabilities.thread_invariant]
    assert {"quantized", "quantized-q8", "native"} <= set(invariant)
    for runner in invariant:
        lm.use_runner(runner)
        outputs = [_at_threads(n, lambda: lm.prefill(ids)[1].logits.clone()) for n in (1, 2)]
        assert torch.equal(*outputs), runner


class _Model:
    def __init__(self, runner):
        from multidraft.models.runners import REGISTRY
        self.runner = runner
        self.capabilities = REGISTRY[runner].capabilities


def test_default_is_auto_only_on_thread_invariant_runners(monkeypatch):
    monkeypatch.setattr(threads, "auto_threads", lambda window=0.25: 1)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        planned = threads.measure_default_threads(None)
        assert threads.apply_for_model(_Model("eager"), planned) == 2        # torch's default stays
        assert threads.apply_for_model(_Model("fast"), planned) == 2
        assert threads.apply_for_model(_Model("quantized"), planned) == 1    # the idle cores' count
        torch.set_num_threads(2)
        assert threads.apply_for_model(_Model("quantized-q8"), planned) == 1
        torch.set_num_threads(2)
        assert threads.apply_for_model(_Model("eager"), threads.measure_default_threads("auto")) == 1  # asked
        assert threads.apply_for_model(_Model("quantized"), threads.measure_default_threads(2)) == 2    # pinned
    finally:
        torch.set_num_threads(before)


def test_generate_cli_applies_the_default_after_loading(monkeypatch, tiny_llama, capsys):
    """`multidraft generate` without --threads: the runner of the loaded model decides (eager keeps torch's)."""
    import multidraft
    from multidraft.cli import main
    monkeypatch.setattr(threads, "auto_threads", lambda window=0.25: 1)
    monkeypatch.setattr(multidraft, "load_model", lambda *a, **k: tiny_llama)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert main(["generate", "--model", "tiny", "--max-new-tokens", "2", "hello"]) == 0
        assert torch.get_num_threads() == 2 and tiny_llama.runner == "eager"
    finally:
        torch.set_num_threads(before)
