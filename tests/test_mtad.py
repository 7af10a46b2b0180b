"""MTAD (lossy): the joint-threshold rule, its edge cases end to end, beam search, invariants, bad input."""

import itertools
import math

import pytest
import torch

import multidraft
from multidraft.drafters.draft_model import BeamDrafter, choose_candidates
from multidraft.drafters.base import LoopState
from multidraft.errors import InvalidOptionError
from multidraft.methods import get_method
from multidraft.models.runner import LM
from multidraft.sampling import PositionSampler, SamplingParams, logits_to_probs
from multidraft.types import DecodeStats
from multidraft.verify.mtad import accept_length
from tests.tiny_models import make_tiny_hf_model, make_tokenizer, perturbed_copy

# Tiny models run fastest on one thread (and far faster than on two on a loaded machine).
pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = "the cat sat on the mat and the cat sat on the"



# ----- the verification rule (spec §5.2, §11 items 1-6) -----

def worked_example():
    draft_probs = [0.5, 0.6, 0.4, 0.5]
    target_probs = [0.45, 0.30, 0.60, 0.60]
    return [math.log(p) for p in target_probs], [math.log(q) for q in draft_probs]


def test_accept_length_worked_example_and_longest_prefix():
    lp, lq = worked_example()
    assert accept_length(lp, lq, 0.5) == 4           # prefix 2 fails (ratio 0.45) but prefix 4 passes: keep 4
    assert accept_length(lp, lq, 0.85) == 1          # ratios 0.9, 0.45, 0.675, 0.81
    assert accept_length(lp, lq, 0.46) == 4
    assert accept_length(lp, lq, 1.0) == 0           # paper semantics: threshold 1 rejects everything
    assert accept_length(lp, lq, 0.0) == 4           # threshold 0 accepts everything
    # strict ">" (ICLR code): no sentinel at 1, and equality fails
    assert accept_length([0.0, 0.0], [-0.1, 0.0], 1.0, "strict") == 2
    assert accept_length([0.0, 0.0], [-0.1, 0.0], 1.0, "paper") == 0
    assert accept_length([math.log(0.5)], [0.0], 0.5, "strict") == 0
    assert accept_length([math.log(0.5)], [0.0], 0.5, "paper") == 1


def test_accept_length_properties_on_random_cases():
    generator = torch.Generator().manual_seed(0)
    for _ in range(300):
        gamma = int(torch.randint(1, 6, (1,), generator=generator))
        lq = torch.log(torch.rand(gamma, generator=generator, dtype=torch.float64)).tolist()
        lp = torch.log(torch.rand(gamma, generator=generator, dtype=torch.float64)).tolist()
        if torch.rand(1, generator=generator) < 0.3:
            lp[int(torch.randint(0, gamma, (1,), generator=generator))] = float("-inf")
        lengths = [accept_length(lp, lq, tau) for tau in (0.0, 0.05, 0.2, 0.5, 0.9, 0.99, 1.0)]
        assert lengths[0] == gamma and lengths[-1] == 0
        assert all(a >= b for a, b in zip(lengths, lengths[1:]))        # monotone in the threshold
        for tau in (0.05, 0.2, 0.5, 0.9):
            accepted = accept_length(lp, lq, tau)
            if accepted:
                joint_ratio = math.exp(sum(lp[:accepted]) - sum(lq[:accepted]))
                assert joint_ratio >= tau * (1 - 1e-12)
                assert all(x > float("-inf") for x in lp[:accepted])   # no zero-probability token accepted
            for longer in range(accepted + 1, gamma + 1):             # it is the LONGEST passing prefix
                assert sum(lp[:longer]) - sum(lq[:longer]) < math.log(tau)


# ----- end to end (spec §11 items 7-13) -----

@pytest.mark.parametrize("temperature,top_k", [(1.0, 0), (0.8, 5)])
def test_threshold_one_is_plain_sampling_token_for_token(target, draft, temperature, top_k):
    for seed in range(3):
        plain = multidraft.generate(target, PROMPT, method="sample", max_new_tokens=20, temperature=temperature,
                                    top_k=top_k, seed=seed)
        mtad = multidraft.generate(target, PROMPT, method="mtad", max_new_tokens=20, temperature=temperature,
                                   top_k=top_k, seed=seed, draft_model=draft, accept_threshold=1.0, num_beams=3)
        assert mtad.token_ids == plain.token_ids
        assert mtad.stats.acceptance_histogram == {1: 20}        # one token per iteration
        assert mtad.stats.draft_tokens_accepted == 0


def test_threshold_one_at_temperature_zero_is_greedy_decoding(target, draft):
    expected = multidraft.generate(target, PROMPT, max_new_tokens=30).token_ids
    out = multidraft.generate(target, PROMPT, method="mtad", max_new_tokens=30, draft_model=draft,
                              accept_threshold=1.0)
    assert out.token_ids == expected
    assert out.stats.draft_tokens_accepted == 0


def tiny12(seed):
    return LM(make_tiny_hf_model("llama", seed=seed, vocab_size=12), make_tokenizer(), name=f"tiny-12-{seed}")


def test_greedy_mtad_beam_searches_the_unwarped_draft_so_num_beams_matters():
    """At temperature 0 the beam runs over the draft's temperature-1 law (MTAD-greedy, the paper's greedy-MTJD
    approximation): with the one-hot greedy law every beam count would give the same single beam and output."""
    lm = tiny12(12)
    draft_lm = perturbed_copy(lm, 0.3, seed=2)
    outputs = {beams: multidraft.generate(lm, [3, 4, 5, 6], method="mtad", max_new_tokens=12, draft_model=draft_lm,
                                          num_beams=beams, accept_threshold=0.1)
               for beams in (1, 4)}
    assert outputs[1].token_ids != outputs[4].token_ids
    greedy = multidraft.generate(lm, [3, 4, 5, 6], max_new_tokens=12).token_ids
    assert outputs[4].token_ids != greedy                       # no longer plain greedy speculative decoding
    for out in outputs.values():
        assert out.stats.draft_tokens_accepted > 0 and out.stats.lossless is False


def test_greedy_mtad_with_a_perfect_draft_and_full_beam_is_exact_greedy_mtjd():
    """Draft == target, beams >= V^(gamma-1): every block is the exact joint argmax over V^gamma and is accepted
    (ratio 1), then one argmax token: exact greedy MTJD with blocks (gamma, 1), token for token (spec §4, §6.4)."""
    from multidraft.decoders.mtjd import exact_greedy_mtjd

    lm, gamma = tiny12(13), 3
    differs_from_greedy = 0
    for prompt in ([7, 8, 9], [10, 3, 7, 7], [6, 11, 4]):
        exact, _ = exact_greedy_mtjd(lm, prompt, [gamma, 1], 8, eos_token_id=2)
        mtad = multidraft.generate(lm, prompt, method="mtad", max_new_tokens=8, draft_model=lm,
                                   num_beams=12 ** (gamma - 1), num_draft_tokens=gamma, accept_threshold=0.99)
        assert mtad.token_ids == exact
        differs_from_greedy += exact != multidraft.generate(lm, prompt, max_new_tokens=8).token_ids
    assert differs_from_greedy >= 2


def test_exact_mtjd_block_is_at_least_as_likely_as_the_greedy_block():
    """Corollary 3.3, per-block form: the exact MTJD block's joint log-prob >= that of the greedy tokens."""
    from multidraft.decoders.mtjd import exact_greedy_mtjd, sequence_logprob

    lm = tiny12(13)
    for prompt in ([7, 8, 9], [10, 3, 7, 7], [3, 4, 5, 6]):
        for gamma in (1, 2, 3):
            block, (block_logprob,) = exact_greedy_mtjd(lm, prompt, gamma, gamma)
            greedy = multidraft.generate(lm, prompt, max_new_tokens=gamma).token_ids
            assert block_logprob == pytest.approx(sequence_logprob(lm, prompt, block), abs=1e-5)
            assert block_logprob >= sequence_logprob(lm, prompt, greedy) - 1e-6
            if gamma == 1:
                assert block == greedy[:1]


def test_draft_equal_to_target_accepts_every_draft_token(target):
    """Every block is accepted whole; only an end-of-sequence token inside the last block cuts it short."""
    gamma = 4
    for temperature, top_k, seed in ((1.0, 0, 1), (1.0, 0, 2), (0.7, 8, 1), (0.7, 8, 3)):
        out = multidraft.generate(target, PROMPT, method="mtad", max_new_tokens=5 * (gamma + 1), draft_model=target,
                                  temperature=temperature, top_k=top_k, seed=seed, num_draft_tokens=gamma,
                                  num_beams=4, accept_threshold=0.99)
        histogram = dict(out.stats.acceptance_histogram)
        whole = histogram.pop(gamma + 1, 0)
        if out.stats.stop_reason == "max_new_tokens":
            assert whole == 5 and not histogram
            assert out.stats.draft_tokens_accepted == out.stats.draft_tokens_proposed
        else:
            assert out.stats.stop_reason == "eos" and sum(histogram.values()) <= 1, (temperature, seed, histogram)


def test_iteration_invariants_and_support(target, draft):
    gamma = 3
    for seed in range(4):
        out = multidraft.generate(target, PROMPT, method="mtad", max_new_tokens=23, draft_model=draft,
                                  temperature=1.0, top_k=4, seed=seed, num_draft_tokens=gamma, num_beams=4,
                                  accept_threshold=0.1)
        stats = out.stats
        assert len(out.token_ids) <= 23
        assert set(stats.acceptance_histogram) <= set(range(1, gamma + 2))
        assert stats.target_calls == stats.verification_calls + 1
        assert stats.draft_calls == sum(stats.proposed_per_position)         # gamma draft forwards per iteration
        # every emitted token is inside the warped target's support (top-4) given its prefix
        ids = target.encode(PROMPT) + out.token_ids
        logits = target.forward(target.new_cache(), ids).logits
        probs = logits_to_probs(logits, SamplingParams(1.0, top_k=4))
        start = len(ids) - len(out.token_ids) - 1
        for offset, token in enumerate(out.token_ids):
            assert probs[start + offset, token] > 0


def test_same_seed_same_output_and_mtad_is_labelled_lossy(target, draft):
    runs = [multidraft.generate(target, PROMPT, method="mtad", max_new_tokens=20, draft_model=draft, temperature=1.0,
                                seed=seed).token_ids for seed in (3, 3, 4)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    method = get_method("mtad")
    assert method.lossless is False and "LOSSY" in method.description.upper()
    out = multidraft.generate(target, PROMPT, method="mtad", max_new_tokens=5, draft_model=draft)
    assert out.stats.lossless is False


def test_accept_all_keeps_the_draft_whatever_the_target(target, draft):
    # threshold 0: the first iteration's draft tokens do not depend on the target (spec §11 item 9)
    other_target = perturbed_copy(target, 1.0, seed=9, name="other-target")
    firsts = []
    for lm in (target, other_target):
        out = multidraft.generate(lm, PROMPT, method="mtad", max_new_tokens=8, draft_model=draft, temperature=1.0,
                                  seed=2, accept_threshold=0.0, num_draft_tokens=4)
        assert out.stats.acceptance_histogram[5] >= 1
        firsts.append(out.token_ids[:4])
    assert firsts[0] == firsts[1]


# ----- beam search and beam sampling -----

def test_deterministic_beam_search_finds_the_joint_argmax():
    lm = LM(make_tiny_hf_model("llama", seed=12, vocab_size=12), make_tokenizer(), name="tiny-12")
    prompt = [3, 4, 5, 6]
    gamma, vocab = 3, 12
    params = SamplingParams(1.0)
    # exact argmax of the joint over V^gamma by enumeration
    best, best_score = None, -math.inf
    for head in itertools.product(range(vocab), repeat=gamma - 1):      # one forward scores all V last tokens
        logits = lm.forward(lm.new_cache(), prompt + list(head)).logits[-gamma:]
        log_probs = torch.log(logits_to_probs(logits, params)).double()
        head_score = sum(float(log_probs[i, t]) for i, t in enumerate(head))
        last = int(log_probs[-1].argmax())
        if head_score + float(log_probs[-1, last]) > best_score:
            best, best_score = list(head) + [last], head_score + float(log_probs[-1, last])
    for num_beams, exact in ((vocab ** (gamma - 1), True), (2, False)):
        drafter = BeamDrafter(lm, num_beams, gamma, params, deterministic=True)
        state = LoopState(seq=list(prompt), prompt_length=len(prompt), lm=lm,
                          sampler=PositionSampler(SamplingParams(1.0, seed=0)), stats=DecodeStats())
        drafter.begin(state, None)
        draft = drafter.propose(state, gamma)
        score = sum(draft.info["draft_logprobs"])
        assert score <= best_score + 1e-9
        if exact:
            assert draft.token_ids == best and score == pytest.approx(best_score, abs=1e-5)
        assert state.stats.draft_calls == gamma


def test_choose_candidates_samples_without_replacement_in_proportion():
    scores = torch.log(torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64))
    assert choose_candidates(scores, 2, None).tolist() == [0, 1]
    assert sorted(choose_candidates(scores, 8, torch.Generator().manual_seed(0)).tolist()) == [0, 1, 2]
    counts = torch.zeros(4)
    generator = torch.Generator().manual_seed(1)
    for _ in range(4000):
        counts[choose_candidates(scores, 1, generator)] += 1
    torch.testing.assert_close(counts / 4000, torch.tensor([0.5, 0.3, 0.2, 0.0]), atol=0.03, rtol=0)


def test_bad_mtad_options(target, draft):
    for options, message in [
        ({"accept_threshold": 1.5}, r"accept_threshold must be a number in \[0, 1\]"),
        ({"accept_threshold": -0.1}, r"accept_threshold must be a number in \[0, 1\]"),
        ({"num_beams": 0}, "num_beams must be an integer >= 1"),
        ({"num_draft_tokens": 0}, "num_draft_tokens must be an integer >= 1"),
        ({"threshold_semantics": "loose"}, "threshold_semantics must be one of"),
        ({"deterministic": 1}, "deterministic must be True or False"),
    ]:
        with pytest.raises(InvalidOptionError, match=message):
            multidraft.generate(target, PROMPT, method="mtad", max_new_tokens=4, draft_model=draft, **options)
