"""Shared fixtures: tiny random models (fast, offline) and the real SmolLM2-135M when it has been pulled."""

import os

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

from tests.tiny_models import build_tiny_ngram, make_tiny_lm  # noqa: E402


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


@pytest.fixture(scope="session")
def smollm():
    from multidraft.models.loader import load_model
    from multidraft.errors import ModelNotFoundError
    try:
        return load_model("smollm2-135m", dtype=torch.float32)
    except ModelNotFoundError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"SmolLM2-135M not pulled: {exc}")


@pytest.fixture(scope="module")
def one_thread():
    """Run a module's tiny-model tests on one thread; restore the thread count afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
