"""Lossless methods on long prompts (300 and 1,000 tokens: past the quantized runner's dense prefill GEMM threshold
of 64 rows and the engine's prefill chunk of 256): token-identical to greedy on the real SmolLM2, on the
GGUF-block runners and the eager runner in fp32, alone and in an engine batch (the prefix cache on long prompts:
test_prefix_cache.py covers reuse on a Q4_K model; SmolLM2's GGUF cannot reuse, its matrices are Q4_1/Q8_0).

Greedy prefills all N prompt rows at once; a drafting method prefills N-1 and verifies the last row together with
its first draft; the engine reads the prompt in chunks. Each of those must give the same first token."""

from pathlib import Path

import pytest
import torch

import multidraft
from multidraft.models.loader import load_model

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

METHODS = ["pld", "pld_plus", "suffix"]
NEW_TOKENS = 16
# Real code to continue (this repository's own engine): a prompt whose continuation copies from it.
SOURCE = (Path(__file__).resolve().parents[1] / "src" / "multidraft" / "engine" / "scheduler.py").read_text(encoding="utf-8")


@pytest.fixture(scope="module", params=["quantized", "quantized-q8", "eager"])
def lm(request, smollm):            # `smollm`: the pulled model, or a skip/failure saying how to pull it
    runner = request.param
    model = load_model("smollm2-135m", runner=runner, dtype=torch.float32)
    assert model.runner == runner, f"{runner} did not load: {model.runner}"
    return model


def _prompt(lm, length: int) -> list[int]:
    ids = lm.encode(SOURCE, chat=False)
    assert len(ids) >= length
    return ids[:length]


def _greedy(lm, prompt):
    return multidraft.generate(lm, prompt, method="greedy", max_new_tokens=NEW_TOKENS).token_ids


@pytest.mark.parametrize("length", [300, 1000])
def test_every_lossless_method_equals_greedy_on_a_long_prompt(lm, length):
    prompt = _prompt(lm, length)
    greedy = _greedy(lm, prompt)
    assert len(greedy) == NEW_TOKENS
    for method in METHODS:
        for draft_length in ("fixed", "adaptive"):
            out = multidraft.generate(lm, prompt, method=method, max_new_tokens=NEW_TOKENS, draft_length=draft_length)
            assert out.token_ids == greedy, (method, draft_length)


def test_a_long_prompt_in_an_engine_batch_equals_greedy(lm):
    prompts = [_prompt(lm, 1000), _prompt(lm, 300), _prompt(lm, 700)[-400:]]
    requests = [multidraft.Request.build(p, m, max_new_tokens=NEW_TOKENS)
                for p, m in zip(prompts, ["greedy", "pld", "suffix"])]
    results = multidraft.generate_batch(lm, requests, max_num_seqs=3, kv_slots=4096, prefill_chunk=256)
    for prompt, result in zip(prompts, results):
        assert result.token_ids == _greedy(lm, prompt)

