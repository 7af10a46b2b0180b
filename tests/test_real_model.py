"""Integration on the real SmolLM2-135M-Instruct: greedy equals HF generate(), PLD equals greedy."""

import inspect
import textwrap

import pytest
import torch

import multidraft

pytestmark = pytest.mark.real_model

PROMPTS = [
    [{"role": "user", "content": "Add a docstring to this function and return the whole function:\n\n"
                                 + inspect.getsource(textwrap.indent)}],
    [{"role": "user", "content": "Repeat this list exactly: apples, pears, plums, apples, pears, plums, cherries."}],
    "The capital of France is Paris. The capital of Italy is Rome. The capital of France is",
    "def fibonacci(n):",
]


def hf_greedy(lm, prompt_ids, max_new_tokens):
    with torch.no_grad():
        out = lm.model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens, do_sample=False,
                                attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long))
    return out[0, len(prompt_ids):].tolist()


@pytest.mark.parametrize("prompt", PROMPTS[:3])
def test_greedy_equals_hf_generate(smollm, prompt):
    ids = smollm.encode(prompt)
    ours = multidraft.generate(smollm, ids, max_new_tokens=24)
    theirs = hf_greedy(smollm, ids, 24)
    assert ours.token_ids == theirs[: len(ours.token_ids)]
    assert len(ours.token_ids) == len(theirs) or ours.stats.stop_reason == "eos"


@pytest.mark.parametrize("prompt", PROMPTS)
def test_pld_equals_greedy_on_smollm(smollm, prompt):
    greedy = multidraft.generate(smollm, prompt, max_new_tokens=40)
    pld = multidraft.generate(smollm, prompt, method="pld", max_new_tokens=40)
    assert pld.token_ids == greedy.token_ids
    assert pld.text == greedy.text


def test_pld_accepts_drafts_on_a_copying_task(smollm):
    # draft_length="fixed": every drafted token verified. Under "adaptive" how much is verified follows the forward
    # costs measured on this machine, so the acceptance length varies from machine to machine (1.18 on a CI run).
    pld = multidraft.generate(smollm, PROMPTS[0], method="pld", max_new_tokens=40, draft_length="fixed")
    assert pld.stats.draft_tokens_accepted > 0
    assert pld.stats.mean_acceptance_length > 1.2
    assert pld.stats.target_calls < pld.stats.generated_tokens


def test_sampling_with_pld_equals_plain_sampling_on_smollm(smollm):
    for seed in (0, 1):
        plain = multidraft.generate(smollm, PROMPTS[1], method="sample", temperature=0.8, top_p=0.95, seed=seed,
                                    max_new_tokens=24)
        pld = multidraft.generate(smollm, PROMPTS[1], method="pld", temperature=0.8, top_p=0.95, seed=seed,
                                  max_new_tokens=24)
        assert pld.token_ids == plain.token_ids


def test_chat_template_and_eos(smollm):
    result = multidraft.generate(smollm, "What is the capital of France? Answer in one word.", chat=True,
                                 max_new_tokens=30)
    assert "Paris" in result.text
    assert result.stats.stop_reason in ("eos", "max_new_tokens")
