"""Shared fixtures: tiny random models (fast, offline) and the real SmolLM2-135M (pulled by `make test`; missing, it
fails the tests that need it under make and skips them in a plain pytest run: tests/installed.py). The run ends with
one line per skip reason and its count."""

import os
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.set_num_threads(min(2, os.cpu_count() or 1))
# The same hypothesis examples on every run, so CI is reproducible; explore new ones locally with
# `HYPOTHESIS_PROFILE=explore pytest` (that is how two n-gram bugs were found).
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

from tests.installed import load_smollm  # noqa: E402
from tests.tiny_models import (build_tiny_ngram, make_tiny_hf_model, make_tiny_lm, make_tokenizer,  # noqa: E402
                               perturbed_copy)


@pytest.fixture(scope="session")
def tiny_llama():
    return make_tiny_lm("llama", seed=0)


@pytest.fixture(scope="session")
def tiny_qwen():
    return make_tiny_lm("qwen2", seed=1)


@pytest.fixture(scope="session", params=["llama", "qwen2"])
def tiny_lm(request):
    return make_tiny_lm(request.param, seed=2)


@pytest.fixture(scope="session")
def tiny_ngram(tmp_path_factory):
    """An n-gram model (orders 1..6) of the tiny tokenizer, counted on a tiny model's own greedy text."""
    return build_tiny_ngram(tmp_path_factory.mktemp("ngram") / "tiny.ngram")


@pytest.fixture(scope="module")
def target():
    """A tiny target and a draft close to it (test_bild, test_mtad; files with another pair define their own)."""
    return make_tiny_lm("llama", seed=6)


@pytest.fixture(scope="module")
def draft(target):
    return perturbed_copy(target, 0.3, seed=2)


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """A tiny random Llama and its tokenizer (no chat template) saved as a local HF folder, for the command line."""
    folder = tmp_path_factory.mktemp("tiny-model")
    make_tiny_hf_model("llama", seed=0).save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def dense_ngram_path(tmp_path_factory):
    """An n-gram file over the 64-token tiny vocabulary from a dense random corpus: every bigram context is seen,
    most candidates supported (Superposed Decoding, the server's named n-gram files)."""
    from multidraft.ngram import build

    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.full(64, 0.7))
    docs = [rng.choice(64, size=int(rng.integers(20, 80)), p=probs) for _ in range(600)]
    path = tmp_path_factory.mktemp("dense-ngram") / "tiny.ngram"
    build(docs, 64, path, max_order=5)
    return path


@pytest.fixture(scope="session")
def smollm():
    # The HF folder's weights in fp32 (tests perturb and inspect them); the GGUF-block runner that load_model
    # picks by default has its own fixture (test_quantized_runner.py). Missing under `make test`: a failure.
    return load_smollm(dtype=torch.float32, runner="eager")


@pytest.fixture(scope="module")
def one_thread():
    """Run a module's tiny-model tests on one thread; restore the thread count afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_terminal_summary(terminalreporter):
    """One line per skip reason with its count, last, so a skip nobody meant is seen."""
    reasons: Counter = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        terminalreporter.section(f"{sum(reasons.values())} skipped, by reason")
        for reason, count in reasons.most_common():
            terminalreporter.write_line(f"{count:5d}  {reason}")
