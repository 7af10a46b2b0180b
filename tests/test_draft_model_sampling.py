"""Statistical test: the whole speculative / multi-draft loop samples exactly the target's law (tiny models).

Seeded runs of the loop at T=1 are compared with the exact law of the first 3 generated tokens (enumerated
over a 12-token vocabulary) by a Pearson chi-square test over 1,000 runs; p > 1e-3 is required (fixed seeds, so the
outcome is deterministic). A deliberately wrong verifier (rejections redrawn from the target instead of the residual,
a subtle bug) must give p < 1e-6 over 1,500 runs, which shows the test can fail. SpecTr and classical IS, and every
scheme under top-k / top-p, are covered at loop level by tests/test_selection_loop_law.py.
"""

import collections

import pytest
import torch

from multidraft.decoders.output import OutputCollector
from multidraft.decoders.loop import draft_and_verify
from multidraft.drafters.draft_model import DraftModelDrafter
from multidraft.models.runner import LM
from multidraft.sampling import PositionSampler, SamplingParams, draw
from multidraft.types import DecodeStats, Verdict
from multidraft.verify.multi_draft import MultiDraftVerifier, chains_of
from tests.test_sampling import chi_square_p_value, exact_sequence_law
from tests.tiny_models import make_tiny_hf_model, make_tokenizer

# Tiny models run fastest on one thread (and far faster than on two on a loaded machine).
pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT_IDS = [3, 4, 5, 3, 4, 5, 3, 4]
LENGTH, TEMPERATURE = 3, 1.0



@pytest.fixture(scope="module")
def models():
    target = LM(make_tiny_hf_model("llama", seed=11, vocab_size=12), make_tokenizer(), name="tiny-12")
    draft = LM(make_tiny_hf_model("qwen2", seed=13, vocab_size=12), make_tokenizer(), name="tiny-12-draft")
    law = exact_sequence_law(target, PROMPT_IDS, LENGTH, TEMPERATURE)
    return target, draft, law


class NoResidualVerifier(MultiDraftVerifier):
    """WRONG on purpose: accepts with min(1, target/draft) but redraws a rejected token from the target."""

    def verify(self, draft, target_logits, sampler, first_position):
        chains = chains_of(draft)
        path = []
        for depth, token in enumerate(chains.tokens[0]):
            target_probs = sampler.probs(target_logits[depth])
            draft_prob = float(chains.draft_probs[0, depth, token])
            generator = sampler.generator(first_position + depth, 1)
            if float(torch.rand(1, generator=generator)) >= min(1.0, float(target_probs[token]) / draft_prob):
                return Verdict(path, draw(target_probs, generator))
            path.append(depth)
        return Verdict(path, sampler.pick(target_logits[len(path)], first_position + len(path)))


def sample_runs(models, runs, num_drafts, temperatures, verifier, stop_below=0.0):
    target, draft, _ = models
    counts, accepted = collections.Counter(), 0
    for seed in range(runs):
        stats = DecodeStats()
        output = OutputCollector(target, LENGTH)
        drafter = DraftModelDrafter(draft, num_drafts, 2, temperatures, stop_below=stop_below)
        draft_and_verify(target, PROMPT_IDS, drafter, verifier, PositionSampler(SamplingParams(TEMPERATURE, seed=seed)),
                         output, stats)
        counts[tuple(output.token_ids)] += 1
        accepted += stats.draft_tokens_accepted
    return counts, accepted


@pytest.mark.slow
@pytest.mark.parametrize("num_drafts,temperatures,selection,stop_below", [
    (1, [1.0], "speculative", 0.0),
    (1, [1.0], "speculative", 0.3),      # drafts of random length (stopped at unsure draft tokens)
    (2, [1.0, 1.6], "specinfer", 0.0),   # non-identical drafts
    (3, [1.0, 1.0, 1.0], "is_lp_truncated", 0.0),
])
def test_loop_samples_the_target_law(models, num_drafts, temperatures, selection, stop_below):
    runs = 1000
    counts, accepted = sample_runs(models, runs, num_drafts, temperatures, MultiDraftVerifier(selection), stop_below)
    assert accepted > runs // 4, f"only {accepted} draft tokens accepted: too few for this test to mean anything"
    p_value = chi_square_p_value(models[2], counts, runs)
    assert p_value > 1e-3, f"{selection}: the loop deviates from the target law (chi-square p = {p_value:.2e})"


@pytest.mark.slow
def test_negative_control_fails(models):
    runs = 1500
    counts, _ = sample_runs(models, runs, 1, [1.0], NoResidualVerifier("speculative"))
    assert chi_square_p_value(models[2], counts, runs) < 1e-6
