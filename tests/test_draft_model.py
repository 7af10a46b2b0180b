"""Helper-model drafting (speculative, multi_draft): greedy equality, seeded equalities, the draft cache, stats,
bad input. The statistical test of the sampling law is in test_draft_model_sampling.py."""

import copy

import pytest
import torch

import multidraft
from multidraft.drafters.base import run_alone
from multidraft.drafters.draft_session import DraftSession
from multidraft.errors import InvalidOptionError, TokenizerMismatchError
from multidraft.models.runner import LM
from multidraft.types import DecodeStats
from multidraft.verify.multi_draft import SELECTION_SCHEMES
from tests.tiny_models import make_tiny_lm, perturbed_copy

# Tiny models run fastest on one thread (and far faster than on two on a loaded machine).
pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [
    "the cat sat on the mat and the cat sat on the",
    "def x ( y ) : return x + 1 def x ( y ) : return",
    "a b",
]



@pytest.fixture(scope="module")
def target():
    return make_tiny_lm("qwen2", seed=3)


@pytest.fixture(scope="module")
def close_draft(target):
    return perturbed_copy(target, 0.2, seed=1)


@pytest.fixture(scope="module")
def unrelated_draft():
    return make_tiny_lm("llama", seed=4)      # another architecture, same tokenizer


def greedy_ids(lm, prompt, max_new_tokens):
    return multidraft.generate(lm, prompt, method="greedy", max_new_tokens=max_new_tokens).token_ids


# ----- greedy equality -----

@pytest.mark.parametrize("prompt", PROMPTS)
def test_speculative_equals_greedy(target, close_draft, unrelated_draft, prompt):
    expected = greedy_ids(target, prompt, 30)
    for draft in (close_draft, unrelated_draft, target):
        for num_draft_tokens, adaptive, stop_below in ((1, False, 0.0), (3, True, 0.0), (6, False, 0.0),
                                                       (8, False, 0.5)):
            out = multidraft.generate(target, prompt, method="speculative", max_new_tokens=30, draft_model=draft,
                                      num_draft_tokens=num_draft_tokens, adaptive=adaptive, stop_below=stop_below)
            assert out.token_ids == expected, (draft.name, num_draft_tokens, adaptive, stop_below)


@pytest.mark.parametrize("selection", SELECTION_SCHEMES)
def test_multi_draft_equals_greedy_for_every_selection(target, close_draft, unrelated_draft, selection):
    for prompt, drafts in ((PROMPTS[0], (close_draft, unrelated_draft)), (PROMPTS[1], (close_draft,))):
        expected = greedy_ids(target, prompt, 30)
        for draft in drafts:
            for num_drafts, temperatures in ((2, None), (3, 0.7), (3, [0.0, 1.0, 1.5])):
                if selection == "spectr" and isinstance(temperatures, list):
                    continue   # spectr needs identical drafts (tested in the bad-input test)
                out = multidraft.generate(target, prompt, method="multi_draft", max_new_tokens=30, draft_model=draft,
                                          num_drafts=num_drafts, num_draft_tokens=3, selection=selection,
                                          draft_temperatures=temperatures, seed=5)
                assert out.token_ids == expected, (draft.name, num_drafts, temperatures)


def test_draft_equal_to_target_accepts_everything(target):
    out = multidraft.generate(target, PROMPTS[0], method="speculative", max_new_tokens=25, draft_model=target,
                              num_draft_tokens=4, draft_length="fixed")
    assert out.token_ids == greedy_ids(target, PROMPTS[0], 25)
    assert out.stats.verification_calls == 5 and out.stats.mean_acceptance_length == 5.0
    assert out.stats.draft_tokens_accepted == out.stats.draft_tokens_proposed == 20


def test_draft_in_another_dtype_still_equals_greedy(target, close_draft):
    bf16_draft = LM(copy.deepcopy(close_draft.model).to(torch.bfloat16), close_draft.tokenizer, name="bf16-draft")
    for method in ("speculative", "multi_draft"):
        out = multidraft.generate(target, PROMPTS[0], method=method, max_new_tokens=20, draft_model=bf16_draft)
        assert out.token_ids == greedy_ids(target, PROMPTS[0], 20)
        assert out.stats.draft_tokens_accepted > 0


def test_draft_with_a_different_logit_width_is_sliced_or_padded(target):
    # Same tokenizer, padded embedding matrices of different widths (as real model families have).
    wide_draft = make_tiny_lm("llama", seed=8, vocab_size=72)
    wide_target = make_tiny_lm("qwen2", seed=9, vocab_size=72)
    narrow_draft = perturbed_copy(target, 0.2, seed=3)
    for lm, draft in ((target, wide_draft), (wide_target, narrow_draft)):
        for method in ("speculative", "multi_draft"):
            out = multidraft.generate(lm, PROMPTS[0], method=method, max_new_tokens=15, draft_model=draft)
            assert out.token_ids == greedy_ids(lm, PROMPTS[0], 15)


# ----- sampling: seeds, K = 1 -----

@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.8, 0.9, 0), (1.2, 1.0, 6)])
def test_multi_draft_with_one_draft_is_speculative(target, close_draft, temperature, top_p, top_k):
    for seed in range(3):
        common = dict(max_new_tokens=24, draft_model=close_draft, num_draft_tokens=3, temperature=temperature,
                      top_p=top_p, top_k=top_k, seed=seed)
        single = multidraft.generate(target, PROMPTS[1], method="speculative", **common)
        for selection in SELECTION_SCHEMES:
            multi = multidraft.generate(target, PROMPTS[1], method="multi_draft", num_drafts=1, selection=selection,
                                        **common)
            assert multi.token_ids == single.token_ids
            assert multi.stats.draft_tokens_accepted == single.stats.draft_tokens_accepted


def test_same_seed_same_output(target, close_draft):
    for method, options in (("speculative", {}), ("multi_draft", {"num_drafts": 3, "selection": "is_lp_truncated"})):
        runs = [multidraft.generate(target, PROMPTS[0], method=method, max_new_tokens=24, draft_model=close_draft,
                                    temperature=1.0, seed=seed, **options).token_ids for seed in (7, 7, 8)]
        assert runs[0] == runs[1]
        assert runs[0] != runs[2]


# ----- stats -----

def check_stats(stats: DecodeStats, max_depth: int):
    assert sum(k * v for k, v in stats.acceptance_histogram.items()) == stats.generated_tokens
    assert sum(stats.acceptance_histogram.values()) == stats.verification_calls
    assert max(stats.acceptance_histogram) <= max_depth + 1
    assert stats.mean_acceptance_length == stats.generated_tokens / stats.verification_calls
    assert stats.target_calls == stats.verification_calls + 1            # + the prefill
    accepted = stats.accepted_per_position
    assert all(a >= b for a, b in zip(accepted, accepted[1:]))            # reaching depth d+1 needs depth d
    assert all(a <= p for a, p in zip(accepted, stats.proposed_per_position))
    assert sum(accepted) == stats.draft_tokens_accepted


def test_stats_are_consistent(target, close_draft):
    out = multidraft.generate(target, PROMPTS[0], method="speculative", max_new_tokens=40, draft_model=close_draft,
                              num_draft_tokens=4, temperature=1.0, seed=3)
    stats = out.stats
    check_stats(stats, 4)
    # one draft forward per drafted token: the first feeds the unseen tokens, the others one token each
    assert stats.draft_calls == stats.draft_tokens_proposed
    assert 0 < stats.draft_tokens_accepted < stats.draft_tokens_proposed

    out = multidraft.generate(target, PROMPTS[0], method="multi_draft", max_new_tokens=40, draft_model=close_draft,
                              num_drafts=3, num_draft_tokens=4, temperature=1.0, seed=3)
    stats = out.stats
    check_stats(stats, 4)
    # one draft forward per depth, whatever the number of branches
    assert stats.draft_calls == sum(stats.proposed_per_position)
    assert stats.draft_tokens_proposed > stats.draft_calls                 # the drafts did branch


# ----- the draft cache -----

class CountingLM(LM):
    """Counts the tokens the draft model is run on."""

    def __init__(self, lm):
        super().__init__(lm.model, lm.tokenizer, name=lm.name)
        self.tokens_run = 0

    def forward(self, cache, token_ids=None, **kwargs):
        self.tokens_run += len(token_ids)
        return super().forward(cache, token_ids, **kwargs)


def test_draft_model_runs_only_unseen_tokens(target, close_draft):
    draft = CountingLM(close_draft)
    prompt_ids = target.encode(PROMPTS[0])
    out = multidraft.generate(target, prompt_ids, method="speculative", max_new_tokens=30, draft_model=draft,
                              num_draft_tokens=4)
    stats = out.stats
    # Per step: the committed tokens the cache lacks (1, or 2 after a fully accepted draft) + L-1 chained tokens.
    # Re-running the prefix would cost ~len(prompt) per step.
    steps = stats.verification_calls
    assert draft.tokens_run <= len(prompt_ids) + stats.draft_tokens_proposed + steps
    assert draft.tokens_run >= len(prompt_ids) - 1 + stats.draft_tokens_proposed


def test_draft_session_tree_logits_match_running_each_branch(close_draft):
    lm = close_draft
    prompt = lm.encode(PROMPTS[1])
    session = DraftSession(lm, lm.vocab_size, lm.device, DecodeStats())
    root = run_alone(session.start(prompt))           # start / extend ask for their forward (a generator)
    torch.testing.assert_close(root[0], lm.forward(lm.new_cache(), prompt).logits[-1], atol=1e-4, rtol=1e-4)
    # level 1: two branches; level 2: three nodes under them; level 3: a chain under node 3
    level1, nodes1 = run_alone(session.extend([5, 6], [-1, -1]))
    level2, nodes2 = run_alone(session.extend([7, 8, 9], [nodes1[0], nodes1[1], nodes1[1]]))
    level3, nodes3 = run_alone(session.extend([10], [nodes2[1]]))
    branches = {nodes1[0]: [5], nodes1[1]: [6], nodes2[0]: [5, 7], nodes2[1]: [6, 8], nodes2[2]: [6, 9],
                nodes3[0]: [6, 8, 10]}
    rows = dict(zip(nodes1, level1)) | dict(zip(nodes2, level2)) | dict(zip(nodes3, level3))
    for node, branch in branches.items():
        alone = lm.forward(lm.new_cache(), prompt + branch).logits[-1]
        torch.testing.assert_close(rows[node], alone, atol=1e-4, rtol=1e-4)
    # keep the path 6 -> 8 -> 10, then the next step must only need the new tokens
    session.keep_path([nodes1[1], nodes2[1], nodes3[0]])
    assert session.cache.length == len(prompt) + 3
    new_seq = prompt + [6, 8, 10, 11]
    logits = run_alone(session.start(new_seq))
    torch.testing.assert_close(logits[0], lm.forward(lm.new_cache(), new_seq).logits[-1], atol=1e-4, rtol=1e-4)
    assert session.cache.length == len(new_seq)


# ----- bad input -----

def test_bad_options_are_clear_errors(target, close_draft):
    def run(method="multi_draft", **options):
        return multidraft.generate(target, PROMPTS[0], method=method, max_new_tokens=5,
                                   **({"draft_model": close_draft} | options))

    for options, message in [
        ({"num_drafts": 0}, r"num_drafts must be an integer in 1\.\.1024"),
        ({"num_drafts": 2.0}, r"num_drafts must be an integer in 1\.\.1024"),
        ({"num_draft_tokens": 0}, "num_draft_tokens must be an integer >= 1"),
        ({"selection": "best"}, "selection must be one of"),
        ({"selection": "spectr", "draft_temperatures": [1.0, 0.5]}, "spectr' needs identical drafts"),
        ({"draft_temperatures": [1.0]}, "list of num_drafts = 2"),
        ({"draft_temperatures": -1}, "draft temperatures must be numbers >= 0"),
        ({"selection_options": {"s": 3}}, "takes no option"),
        ({"draft_model": None}, "needs draft_model="),
        ({"draft_model": 42}, "draft_model must be an LM"),
    ]:
        with pytest.raises(InvalidOptionError, match=message):
            run(**options)
    with pytest.raises(InvalidOptionError, match="num_draft_tokens must be an integer >= 1"):
        run("speculative", num_draft_tokens=-2)
    with pytest.raises(InvalidOptionError, match="adaptive must be True or False"):
        run("speculative", adaptive="yes")
    for bad in (-0.1, 1.5, "high", True):
        with pytest.raises(InvalidOptionError, match="stop_below must be a probability"):
            run("speculative", stop_below=bad)
    with pytest.raises(InvalidOptionError, match="no option 'num_drafts'"):
        run("speculative", num_drafts=2)


def test_vocabulary_mismatch_names_both_models(target):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"v{i}": i + 3 for i in range(61)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    other_tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="</s>")
    other = LM(copy.deepcopy(target.model), other_tokenizer, name="other-vocab")
    for method in ("speculative", "multi_draft", "mtad"):
        with pytest.raises(TokenizerMismatchError, match="other-vocab.*tiny-qwen2|tiny-qwen2.*other-vocab"):
            multidraft.generate(target, PROMPTS[0], method=method, max_new_tokens=5, draft_model=other)


@pytest.mark.real_model
@pytest.mark.slow
def test_smollm_speculative_and_multi_draft_equal_greedy(smollm):
    draft = perturbed_copy(smollm, 0.02, seed=0, name="smollm-perturbed")
    prompt = "def fibonacci(n):"
    expected = greedy_ids(smollm, prompt, 24)
    out = multidraft.generate(smollm, prompt, method="speculative", max_new_tokens=24, draft_model=smollm,
                              draft_length="fixed")
    assert out.token_ids == expected and out.stats.mean_acceptance_length > 4
    out = multidraft.generate(smollm, prompt, method="speculative", max_new_tokens=24, draft_model=draft,
                              num_draft_tokens=3)
    assert out.token_ids == expected and out.stats.draft_tokens_accepted > 0
    for selection in SELECTION_SCHEMES:
        out = multidraft.generate(smollm, prompt, method="multi_draft", max_new_tokens=24, draft_model=draft,
                                  num_drafts=2, num_draft_tokens=3, selection=selection, seed=1)
        assert out.token_ids == expected, selection


def test_stop_below_ends_drafts_at_unsure_tokens(target, close_draft):
    """With stop_below = 1 every draft stops after its first token; 0 keeps the full length."""
    prompt = PROMPTS[0]
    full = multidraft.generate(target, prompt, method="speculative", max_new_tokens=20, draft_model=close_draft,
                               num_draft_tokens=5, draft_length="fixed")
    short = multidraft.generate(target, prompt, method="speculative", max_new_tokens=20, draft_model=close_draft,
                                num_draft_tokens=5, stop_below=1.0, draft_length="fixed")
    assert short.token_ids == full.token_ids
    assert 0 < short.stats.draft_tokens_proposed <= short.stats.verification_calls  # one token per draft
    assert full.stats.draft_tokens_proposed > full.stats.verification_calls
