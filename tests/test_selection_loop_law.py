"""Loop-level statistics: multi-draft decoding with top-k / top-p samples exactly the target's law of whole sequences.

What is checked. `multidraft.generate(method="multi_draft" | "speculative")` on a tiny random target (12-token
vocabulary) with a perturbed copy as draft (it agrees often, so accept branches, residual draws and bonus tokens all
occur), 3 new tokens in drafts of 2, under the target's warps (temperature 1 with top-k and/or top-p, applied to
both models as the selection paper does). The exact law of the 3-token sequence is enumerated from the target
alone (`warped_sequence_law`); N seeded runs (seeds 0..N-1, so every outcome is deterministic) are compared with it
by a Pearson chi-square test, pooling outcomes with expected count < 5.

Thresholds: a correct scheme must give p > 1e-3; the negative control must give p < 1e-6 with the same N, warps and
seeds. The total-variation distance is printed in failure messages for scale.

Negative control (the test can fail): the verifier reads every node's target law one logits row early (row i - 1),
the classic off-by-one between "logits at position n" and "law of token n + 1". The same test, same N and seeds,
must reject it (fast: SpecTr; slow: every scheme). It emits tokens outside the warped supports, so it is a gross
error; the slow set adds one inside the supports: rejected positions redraw from the target instead of the
residual, which every scheme must also fail at 1,500 runs.

Fast tests: every lossless scheme under one warp, 300 runs each (~8 s of CPU each here) and one negative control. The
`slow` off-by-one control runs for every scheme; the `heavy` grid (`make test-heavy`, not in `make test`: ~15 minutes
of CPU) runs every scheme under three warps with 1,500 runs and the target-redraw control for every scheme.
"""

import collections

import pytest
import torch

import multidraft
import multidraft.verify.multi_draft as multi_draft_verifier
from multidraft.models.runner import LM
from multidraft.sampling import SamplingParams, draw, logits_to_probs
from tests.test_sampling import chi_square_p_value
from tests.tiny_models import make_tiny_hf_model, make_tokenizer, perturbed_copy

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models run fastest on one thread

PROMPT_IDS = [3, 4, 5, 3, 4, 5, 3, 4]
LENGTH, DRAFT_TOKENS = 3, 2
PASS_P, FAIL_P = 1e-3, 1e-6
FAST_RUNS, SLOW_RUNS = 300, 1500

TOP_K = dict(top_k=4)
TOP_P = dict(top_p=0.7)
BOTH = dict(top_k=4, top_p=0.85)
WARPS = {"top_k": TOP_K, "top_p": TOP_P, "top_k+top_p": BOTH}

# (method, options): speculative is the K = 1 rule; SpecTr needs identical drafts; the others also run non-identical.
SCHEMES = {
    "speculative": ("speculative", {}),
    "specinfer": ("multi_draft", dict(num_drafts=2, selection="specinfer", draft_temperatures=[1.0, 1.5])),
    "spectr": ("multi_draft", dict(num_drafts=3, selection="spectr")),
    "is": ("multi_draft", dict(num_drafts=2, selection="is", draft_temperatures=[1.0, 1.5])),
    "is_lp": ("multi_draft", dict(num_drafts=2, selection="is_lp")),
    "is_lp_truncated": ("multi_draft", dict(num_drafts=3, selection="is_lp_truncated",
                                            selection_options={"s": 2})),
}
# One warp per scheme for the fast run, so every warp is covered by some scheme.
FAST_WARP = {"speculative": "top_p", "specinfer": "top_k", "spectr": "top_k+top_p", "is": "top_p",
             "is_lp": "top_k", "is_lp_truncated": "top_k+top_p"}


@pytest.fixture(scope="module")
def models():
    target = LM(make_tiny_hf_model("llama", seed=11, vocab_size=12), make_tokenizer(), name="tiny-12")
    return target, perturbed_copy(target, 0.6, seed=3, name="tiny-12-draft")


def warped_sequence_law(lm, prompt_ids, length, params):
    """P(first `length` generated tokens) under temperature / top-k / top-p, by enumeration (tiny models only)."""
    law = {(): 1.0}
    for _ in range(length):
        extended = {}
        for prefix, mass in law.items():
            if prefix and prefix[-1] in lm.eos_token_ids:     # generation ends at EOS
                extended[prefix] = extended.get(prefix, 0.0) + mass
                continue
            logits = lm.forward(lm.new_cache(), prompt_ids + list(prefix)).logits[-1]
            for token, p in enumerate(logits_to_probs(logits, params).tolist()):
                if p > 0:
                    extended[prefix + (token,)] = mass * p
        law = extended
    return law


@pytest.fixture(scope="module")
def laws(models):
    """Exact law of the 3-token continuation for every warp."""
    return {name: warped_sequence_law(models[0], PROMPT_IDS, LENGTH, SamplingParams(temperature=1.0, **warp))
            for name, warp in WARPS.items()}


def sample_runs(models, scheme, warp, runs):
    target, draft = models
    method, options = SCHEMES[scheme]
    counts, accepted = collections.Counter(), 0
    for seed in range(runs):
        result = multidraft.generate(target, PROMPT_IDS, method=method, draft_model=draft,
                                     num_draft_tokens=DRAFT_TOKENS, max_new_tokens=LENGTH, temperature=1.0,
                                     seed=seed, **WARPS[warp], **options)
        counts[tuple(result.token_ids)] += 1
        accepted += result.stats.draft_tokens_accepted
    return counts, accepted


def total_variation(law, counts, runs):
    outcomes = set(law) | set(counts)
    return 0.5 * sum(abs(law.get(o, 0.0) - counts.get(o, 0) / runs) for o in outcomes)


def check_law(models, laws, scheme, warp, runs):
    counts, accepted = sample_runs(models, scheme, warp, runs)
    # Both branches must be exercised, or the test would say little about the residual / accept rules.
    assert runs // 2 < accepted < runs * LENGTH - runs // 2, f"{scheme}: {accepted} draft tokens accepted"
    p_value = chi_square_p_value(laws[warp], counts, runs)
    tv = total_variation(laws[warp], counts, runs)
    print(f"{scheme} under {warp}, {runs} runs: chi-square p = {p_value:.3g}, TV = {tv:.3f}, "
          f"{accepted / runs:.2f} draft tokens accepted per run")
    return p_value, tv


def off_by_one_rows(verify):
    """A planted bug: the verifier reads each node's target law one logits row early (row i - 1; row 0 gets the
    last row), the classic off-by-one between "logits at position n" and "law of token n + 1"."""
    def shifted(self, draft, target_logits, sampler, first_position):
        return verify(self, draft, torch.roll(target_logits, 1, dims=0), sampler, first_position)
    return shifted


def residual_from_target(select):
    """A second planted bug, inside the supports: a rejected position redraws from the target law instead of the
    scheme's residual (too much mass on tokens the drafts already propose often)."""
    def wrong(scheme, candidates, draft_probs, target_probs, generator=None, **options):
        token, accepted = select(scheme, candidates, draft_probs, target_probs, generator, **options)
        return (token, True) if accepted else (draw(target_probs, generator), False)
    return wrong


def plant_off_by_one(monkeypatch):
    verifier = multi_draft_verifier.MultiDraftVerifier
    monkeypatch.setattr(verifier, "verify", off_by_one_rows(verifier.verify))


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_loop_samples_the_warped_target_law(models, laws, scheme):
    p_value, tv = check_law(models, laws, scheme, FAST_WARP[scheme], FAST_RUNS)
    assert p_value > PASS_P, f"{scheme} under {FAST_WARP[scheme]}: chi-square p = {p_value:.2e}, TV = {tv:.3f}"


def test_off_by_one_negative_control_is_rejected(models, laws, monkeypatch):
    plant_off_by_one(monkeypatch)
    p_value, tv = check_law(models, laws, "spectr", FAST_WARP["spectr"], FAST_RUNS)
    assert p_value < FAIL_P, f"the planted off-by-one was not detected: p = {p_value:.2e}, TV = {tv:.3f}"


@pytest.mark.heavy
@pytest.mark.parametrize("warp", list(WARPS))
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_loop_samples_the_warped_target_law_slow(models, laws, scheme, warp):
    p_value, tv = check_law(models, laws, scheme, warp, SLOW_RUNS)
    assert p_value > PASS_P, f"{scheme} under {warp}: chi-square p = {p_value:.2e}, TV = {tv:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_off_by_one_negative_control_is_rejected_slow(models, laws, scheme, monkeypatch):
    plant_off_by_one(monkeypatch)
    p_value, tv = check_law(models, laws, scheme, "top_k+top_p", FAST_RUNS)
    assert p_value < FAIL_P, f"{scheme}: the planted off-by-one was not detected: p = {p_value:.2e}, TV = {tv:.3f}"


@pytest.mark.heavy
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_target_redraw_negative_control_is_rejected_slow(models, laws, scheme, monkeypatch):
    monkeypatch.setattr(multi_draft_verifier, "select", residual_from_target(multi_draft_verifier.select))
    p_value, tv = check_law(models, laws, scheme, "top_k+top_p", SLOW_RUNS)
    assert p_value < FAIL_P, f"{scheme}: redrawing from the target was not detected: p = {p_value:.2e}, TV = {tv:.3f}"
