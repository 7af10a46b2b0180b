"""Loop-level statistics: multi-draft decoding with top-k / top-p samples exactly the target's law of whole sequences.

What is checked. `multidraft.generate(method="multi_draft" | "speculative")` on a tiny random target (12-token
vocabulary) with a perturbed copy as draft (it agrees often, so accept branches, residual draws and bonus tokens all
occur), 3 new tokens in drafts of 2, under the target's warps (temperature 1 with top-k and/or top-p, applied to
both models as the selection paper does). The exact law of the 3-token sequence is enumerated from the target
alone (`warped_sequence_law`); N seeded runs (seeds 0..N-1, so every outcome is deterministic) are compared with it
by a Pearson chi-square test, pooling outcomes with expected count < 5.

Thresholds: a correct scheme must give p > 0.01; the negative control must give p < 1e-6 with the same N, warps and
seeds. The total-variation distance is printed in failure messages for scale.

Power (issue #33). Every test states the smallest total-variation error it detects: with the chi-square divergence
of any error of size TV at least 4 TV^2 (Cauchy-Schwarz), N runs give the test a noncentrality of at least
4 N TV^2, so `detectable_tv` = sqrt(lambda / 4N) plus the mass of the pooled cells (errors inside them are
invisible), where lambda is the noncentrality at which the test rejects at p < 0.01 with probability 0.9 for its
number of cells. This holds for an error of any shape. `make test` runs every lossless scheme at FAST_RUNS = 4,700:
detectable TV 0.048-0.050 under the top-k and top-k + top-p warps (39-49 outcomes; the old 300 runs detected only
0.32-0.46, most of it the mass of the pooled rare outcomes; 1,500 runs 0.08-0.21), checked by
`test_fast_runs_detect_a_total_variation_error_of_0_05`; the heavy grid sizes N per warp the
same way (top-p alone has 143 outcomes and needs 7,500 runs). The whole grid ran once (16 CPU cores of a lent
machine, torch 2.11, every cell at 7,500 runs, 2 min 38 s):
`benchmarks/results/2026-11-23-selection/selection_loop_law_grid.log`, every
scheme x warp p >= 0.024 and every target-redraw control p = 0; the old sizes' grid
(`selection_loop_law_grid_old_sizes.log`, 1,500 runs) had three correct cells at p = 0.005-0.009.

Negative control (the test can fail): the verifier reads every node's target law one logits row early (row i - 1),
the classic off-by-one between "logits at position n" and "law of token n + 1". The same test, same N and seeds,
must reject it (fast: SpecTr; slow: every scheme). It emits tokens outside the warped supports, so it is a gross
error; the slow set adds one inside the supports: rejected positions redraw from the target instead of the
residual, which every scheme must also fail at 4,700 runs.

Tests in `make test`: every lossless scheme under the top-k or top-k + top-p warp, 4,700 runs each (~45 s of CPU each
here, marked slow; half of the seeds run in a second process at the same time) and one negative control at 300 runs.
The `slow` off-by-one control runs for every scheme; the `heavy` grid (`make test-heavy`, not in `make test`: ~35
minutes of CPU) runs every scheme under all three warps with HEAVY_RUNS (sized to TV 0.05 per warp) and the
target-redraw control for every scheme.
"""

import collections
import concurrent.futures
import multiprocessing
import os

import pytest
import torch

import multidraft
import multidraft.verify.multi_draft as multi_draft_verifier
from multidraft.models.runner import LM
from multidraft.sampling import SamplingParams, draw, logits_to_probs
from tests.test_sampling import chi_square_p_value, detectable_tv
from tests.tiny_models import make_tiny_hf_model, make_tokenizer, perturbed_copy

pytestmark = pytest.mark.usefixtures("one_thread")   # tiny models run fastest on one thread

PROMPT_IDS = [3, 4, 5, 3, 4, 5, 3, 4]
LENGTH, DRAFT_TOKENS = 3, 2
PASS_P, FAIL_P = 0.01, 1e-6
FAST_RUNS, CONTROL_RUNS = 4700, 300
HEAVY_RUNS = {"top_k": 4700, "top_p": 7500, "top_k+top_p": 4700}
TARGET_TV, POWER = 0.05, 0.9

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
# One warp per scheme for `make test`: top-k (the warp every sampler applies first) or top-k + top-p (both, in order);
# top-p alone has three times the outcomes (7,500 runs for the same power) and runs in the heavy grid.
FAST_WARP = {"speculative": "top_k+top_p", "specinfer": "top_k", "spectr": "top_k+top_p", "is": "top_k",
             "is_lp": "top_k", "is_lp_truncated": "top_k+top_p"}


def build_models():
    target = LM(make_tiny_hf_model("llama", seed=11, vocab_size=12), make_tokenizer(), name="tiny-12")
    return target, perturbed_copy(target, 0.6, seed=3, name="tiny-12-draft")


@pytest.fixture(scope="module")
def models():
    return build_models()


# A second process runs the upper half of a FAST_RUNS test's seeds: the suite keeps about one core busy otherwise,
# and these six tests were 4 of its 28 minutes (2 cores, 2026-12-08). It builds the same models from the same seeds
# (checked once, when it starts: its target's logits on the prompt) and runs them on one thread, as the fixture here
# does.
_helper_models = None


def _helper_start():
    global _helper_models
    torch.set_num_threads(1)
    _helper_models = build_models()


def _helper_runs(scheme, warp, seeds):
    return sample_seeds(_helper_models, scheme, warp, seeds)


def _helper_prompt_logits():
    return prompt_logits(_helper_models)


def prompt_logits(models):
    target = models[0]
    return target.forward(target.new_cache(), PROMPT_IDS).logits


@pytest.fixture(scope="module")
def helper(models):
    """The second process (spawned: a fork of a process whose OpenMP threads have run is not safe), or None on a
    machine with one core."""
    if len(os.sched_getaffinity(0)) < 2:
        yield None
        return
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_helper_start) as pool:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)                 # as the helper runs (a module fixture comes before `one_thread`)
        try:
            ours = prompt_logits(models)
        finally:
            torch.set_num_threads(threads)
        assert torch.equal(pool.submit(_helper_prompt_logits).result(), ours), "the helper built other models"
        yield pool


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


def sample_runs(models, scheme, warp, runs, helper=None):
    """Counts of each outcome over seeds 0..runs - 1 and the draft tokens accepted; with a helper process, its half
    of the seeds runs there at the same time."""
    if helper is None:
        return sample_seeds(models, scheme, warp, range(runs))
    upper = helper.submit(_helper_runs, scheme, warp, range(runs // 2, runs))
    counts, accepted = sample_seeds(models, scheme, warp, range(runs // 2))
    upper_counts, upper_accepted = upper.result()
    return counts + upper_counts, accepted + upper_accepted


def sample_seeds(models, scheme, warp, seeds):
    target, draft = models
    method, options = SCHEMES[scheme]
    counts, accepted = collections.Counter(), 0
    for seed in seeds:
        result = multidraft.generate(target, PROMPT_IDS, method=method, draft_model=draft,
                                     num_draft_tokens=DRAFT_TOKENS, max_new_tokens=LENGTH, temperature=1.0,
                                     seed=seed, **WARPS[warp], **options)
        counts[tuple(result.token_ids)] += 1
        accepted += result.stats.draft_tokens_accepted
    return counts, accepted


def total_variation(law, counts, runs):
    outcomes = set(law) | set(counts)
    return 0.5 * sum(abs(law.get(o, 0.0) - counts.get(o, 0) / runs) for o in outcomes)


def check_law(models, laws, scheme, warp, runs, helper=None):
    counts, accepted = sample_runs(models, scheme, warp, runs, helper)
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


def test_fast_runs_detect_a_total_variation_error_of_0_05(laws):
    for scheme, warp in FAST_WARP.items():
        tv = detectable_tv(laws[warp], FAST_RUNS, PASS_P, POWER)
        assert tv <= TARGET_TV, (scheme, warp, tv)
    for warp, runs in HEAVY_RUNS.items():
        assert detectable_tv(laws[warp], runs, PASS_P, POWER) <= TARGET_TV, (warp, runs)
    # ... and the power calculation is not vacuous: 300 runs (the old size) miss errors of 0.15.
    assert detectable_tv(laws["top_k"], 300) > 0.15


def test_detectable_tv_matches_a_simulated_error(laws):
    """The power claim, checked by simulation: move mass `detectable_tv` from one half of the outcomes (by mass) to
    the other, in proportion to the law (the shape with the least chi-square divergence for its size), draw N runs
    from it 400 times; the test must reject at p < 0.01 in about 90 % of them."""
    import numpy as np
    law, runs = laws["top_k"], 1000
    tv = detectable_tv(law, runs)
    outcomes = sorted(law, key=law.get)
    mass = np.array([law[o] for o in outcomes])
    mass /= mass.sum()
    half = np.cumsum(mass) <= 0.5                     # outcomes losing mass; the rest gain as much
    wrong = np.where(half, mass * (1 - tv / mass[half].sum()), mass * (1 + tv / mass[~half].sum()))
    assert abs(0.5 * np.abs(wrong - mass).sum() - tv) < 1e-9
    rng = np.random.default_rng(0)
    rejected = 0
    for _ in range(400):
        counts = {o: int(c) for o, c in zip(outcomes, rng.multinomial(runs, wrong)) if c}
        rejected += chi_square_p_value(law, counts, runs) < PASS_P
    assert 0.85 <= rejected / 400, rejected / 400


@pytest.mark.slow
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_loop_samples_the_warped_target_law(models, laws, helper, scheme):
    warp = FAST_WARP[scheme]
    p_value, tv = check_law(models, laws, scheme, warp, FAST_RUNS, helper)
    assert p_value > PASS_P, (f"{scheme} under {warp}: chi-square p = {p_value:.2e}, TV = {tv:.3f} "
                              f"(this test detects TV >= {detectable_tv(laws[warp], FAST_RUNS):.3f})")


def test_off_by_one_negative_control_is_rejected(models, laws, monkeypatch):
    plant_off_by_one(monkeypatch)
    p_value, tv = check_law(models, laws, "spectr", FAST_WARP["spectr"], CONTROL_RUNS)
    assert p_value < FAIL_P, f"the planted off-by-one was not detected: p = {p_value:.2e}, TV = {tv:.3f}"


@pytest.mark.heavy
@pytest.mark.parametrize("warp", list(WARPS))
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_loop_samples_the_warped_target_law_slow(models, laws, helper, scheme, warp):
    p_value, tv = check_law(models, laws, scheme, warp, HEAVY_RUNS[warp], helper)
    assert p_value > PASS_P, f"{scheme} under {warp}: chi-square p = {p_value:.2e}, TV = {tv:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_off_by_one_negative_control_is_rejected_slow(models, laws, scheme, monkeypatch):
    plant_off_by_one(monkeypatch)
    p_value, tv = check_law(models, laws, scheme, "top_k+top_p", CONTROL_RUNS)
    assert p_value < FAIL_P, f"{scheme}: the planted off-by-one was not detected: p = {p_value:.2e}, TV = {tv:.3f}"


@pytest.mark.heavy
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_target_redraw_negative_control_is_rejected_slow(models, laws, scheme, monkeypatch):
    monkeypatch.setattr(multi_draft_verifier, "select", residual_from_target(multi_draft_verifier.select))
    p_value, tv = check_law(models, laws, scheme, "top_k+top_p", HEAVY_RUNS["top_k+top_p"])
    assert p_value < FAIL_P, f"{scheme}: redrawing from the target was not detected: p = {p_value:.2e}, TV = {tv:.3f}"
