"""Sampling: the distribution transforms, and a statistical test that the whole PLD loop samples the target's law."""

import collections
import itertools

import pytest
import torch

import multidraft
from multidraft.errors import NumericalError
from multidraft.sampling import SamplingParams, argmax_index, argmax_rows, check_finite, logits_to_probs


def test_top_k_and_top_p_keep_the_right_tokens():
    logits = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.1]))
    probs = logits_to_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    torch.testing.assert_close(probs, torch.tensor([2 / 3, 1 / 3, 0, 0]))
    probs = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.7))
    torch.testing.assert_close(probs, torch.tensor([2 / 3, 1 / 3, 0, 0]))
    probs = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.75))   # 0.5+0.25 reaches 0.75
    torch.testing.assert_close(probs, torch.tensor([2 / 3, 1 / 3, 0, 0]))
    probs = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.76))
    torch.testing.assert_close(probs, torch.tensor([0.5, 0.25, 0.15, 0]) / 0.9)
    probs = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.01))
    torch.testing.assert_close(probs, torch.tensor([1.0, 0, 0, 0]))
    greedy = logits_to_probs(logits, SamplingParams())
    torch.testing.assert_close(greedy, torch.tensor([1.0, 0, 0, 0]))


def test_argmax_rows_is_torch_argmax_ties_included():
    """The greedy token of every row, numpy's argmax on a CPU float32 tensor: the same first index on a tie as
    torch.argmax, for rows full of ties, -0.0 against 0.0, a 1-D row, strided views and other dtypes."""
    gen = torch.Generator().manual_seed(0)
    tied = torch.randint(0, 4, (64, 1000), generator=gen).float()          # every row ties 3 at many places
    signed_zeros = torch.zeros(3, 50)
    signed_zeros[:, ::2] = -0.0
    cases = [tied, torch.randn(8, 151936, generator=gen), signed_zeros, tied[5], tied[:, ::3], tied.t(),
             tied.to(torch.bfloat16), tied.double(), torch.full((2, 7), float("-inf"))]
    for logits in cases:
        expected = logits.argmax(-1)
        assert argmax_rows(logits) == (expected.tolist() if logits.dim() == 2 else [int(expected)])
        assert torch.equal(argmax_index(logits), expected)
        assert torch.equal(logits_to_probs(logits, SamplingParams()),
                           torch.nn.functional.one_hot(expected, logits.shape[-1]).float())


def test_check_finite_catches_nan_and_both_infinities_anywhere():
    for bad in (float("nan"), float("inf"), float("-inf")):
        for at in ((0, 0), (3, 151935), (7, 12345)):
            logits = torch.randn(8, 151936)
            logits[at] = bad
            with pytest.raises(NumericalError, match="NaN or infinite"):
                check_finite(logits)
    check_finite(torch.randn(8, 151936))
    check_finite(torch.empty(0, 5))
    check_finite(torch.randn(4, 10).to(torch.bfloat16))


def exact_sequence_law(lm, prompt_ids, length, temperature):
    """P(first `length` generated tokens) by enumeration over the vocabulary (tiny model only)."""
    law = {(): 1.0}
    for _ in range(length):
        new = {}
        for prefix, mass in law.items():
            if mass < 1e-9:
                continue
            if prefix and prefix[-1] in lm.eos_token_ids:      # generation ends at EOS
                new[prefix] = new.get(prefix, 0.0) + mass
                continue
            logits = lm.forward(lm.new_cache(), prompt_ids + list(prefix)).logits[-1]
            probs = logits_to_probs(logits, SamplingParams(temperature=temperature))
            for token, p in enumerate(probs.tolist()):
                if p > 0:
                    new[prefix + (token,)] = mass * p
        law = new
    return law


def chi_square_p_value(law, counts, runs):
    """Pearson chi-square goodness of fit; outcomes with expected count < 5 are pooled into one cell, and an
    outcome the law gives no mass at all makes p = 0."""
    from scipy.stats import chisquare
    if any(outcome not in law for outcome in counts):
        return 0.0
    observed, expected, pooled_observed, pooled_expected = [], [], 0, 0.0
    for outcome, mass in law.items():
        if mass * runs >= 5:
            observed.append(counts.get(outcome, 0))
            expected.append(mass * runs)
        else:
            pooled_observed += counts.get(outcome, 0)
            pooled_expected += mass * runs
    if pooled_expected > 0:
        observed.append(pooled_observed)
        expected.append(pooled_expected)
    if len(observed) == 1:                     # one cell and nothing outside the law: a perfect fit
        return 1.0
    scale = sum(observed) / sum(expected)      # float32 laws sum to 1 only up to rounding
    return float(chisquare(observed, [e * scale for e in expected]).pvalue)


def detectable_tv(law, runs, alpha=0.01, power=0.9):
    """The smallest total-variation error, of any shape, that `chi_square_p_value(law, ...) < alpha` detects with
    probability `power` from `runs` draws (issue #33). An error of size TV has a chi-square divergence of at least
    4 TV^2 (Cauchy-Schwarz), so the test's noncentrality is at least 4 N TV^2: TV = sqrt(lambda / 4N), lambda being
    the noncentrality that reaches `power` for the test's degrees of freedom; errors inside the pooled cell of rare
    outcomes are invisible, so the pooled mass is added."""
    from scipy.optimize import brentq
    from scipy.stats import chi2, ncx2
    pooled = [mass for mass in law.values() if mass * runs < 5]
    df = len(law) - len(pooled) + (1 if pooled else 0) - 1
    if df < 1:          # one cell: any error puts mass on an outcome the law excludes, which gives p = 0
        return sum(pooled)
    critical = chi2.ppf(1 - alpha, df)
    noncentrality = brentq(lambda lam: ncx2.sf(critical, df, lam) - power, 1e-6, 1e5)
    return (noncentrality / (4 * runs)) ** 0.5 + sum(pooled)


def sample_pld_runs(lm, prompt_ids, length, temperature, runs, verifier=None):
    from multidraft.decoders.output import OutputCollector
    from multidraft.decoders.loop import draft_and_verify
    from multidraft.drafters import PromptLookupDrafter
    from multidraft.sampling import PositionSampler
    from multidraft.types import DecodeStats
    from multidraft.verify import SampleMatchVerifier
    counts, accepted = collections.Counter(), 0
    for seed in range(runs):
        stats = DecodeStats()
        output = OutputCollector(lm, length)
        draft_and_verify(lm, prompt_ids, PromptLookupDrafter(max_ngram=2, num_draft_tokens=3),
                         verifier or SampleMatchVerifier(), PositionSampler(SamplingParams(temperature, seed=seed)),
                         output, stats, draft_length="fixed")   # every drafted token verified: the count is the
                                                                # drafter's (adaptive follows this machine's timings)
        counts[tuple(output.token_ids)] += 1
        accepted += stats.draft_tokens_accepted
    return counts, accepted


class AcceptFirstDraftTokenVerifier:
    """A deliberately wrong verifier (always takes the first draft token): the test must catch it."""

    def verify(self, draft, target_logits, sampler, first_position):
        from multidraft.types import Verdict
        from multidraft.verify import SampleMatchVerifier
        if len(draft) == 0:
            return SampleMatchVerifier().verify(draft, target_logits, sampler, first_position)
        token = sampler.pick(target_logits[1], first_position + 1)
        return Verdict([0], token)


@pytest.mark.slow
def test_pld_sampling_loop_matches_the_target_distribution():
    """2,000 seeded runs of the PLD loop at T=1 against the exact law of the first 3 tokens (12-token vocabulary).

    Pearson chi-square (cells with expected count < 5 pooled); we require p > 0.001. The seeds are fixed, so the
    result is deterministic. The same test on a wrong verifier must give p < 1e-6: the test can fail.
    """
    from tests.tiny_models import make_tiny_hf_model, make_tokenizer
    from multidraft.models.runner import LM
    lm = LM(make_tiny_hf_model("llama", seed=11, vocab_size=12), make_tokenizer(), name="tiny-12")
    prompt_ids = [3, 4, 5, 3, 4, 5, 3, 4]
    length, temperature, runs = 3, 1.0, 2000
    law = exact_sequence_law(lm, prompt_ids, length, temperature)
    counts, accepted = sample_pld_runs(lm, prompt_ids, length, temperature, runs)
    assert accepted > 100, f"only {accepted} draft tokens accepted: too few for this test to mean anything"
    p_value = chi_square_p_value(law, counts, runs)
    assert p_value > 1e-3, f"PLD sampling deviates from the target law (chi-square p = {p_value:.2e})"

    wrong_counts, _ = sample_pld_runs(lm, prompt_ids, length, temperature, runs, AcceptFirstDraftTokenVerifier())
    assert chi_square_p_value(law, wrong_counts, runs) < 1e-6


def test_draw_follows_the_law_and_never_picks_a_zero_token():
    from scipy.stats import chisquare
    from multidraft.sampling import draw, position_generator
    probs = torch.tensor([0.0, 0.1, 0.0, 0.6, 0.3, 0.0])
    counts = collections.Counter(draw(probs, position_generator(11, i)) for i in range(20_000))
    assert set(counts) <= {1, 3, 4}
    observed = [counts[t] for t in (1, 3, 4)]
    assert chisquare(observed, [20_000 * p for p in (0.1, 0.6, 0.3)]).pvalue > 1e-3


@pytest.mark.parametrize("u", [0.0, 1.0 - 2.0 ** -40])
def test_draw_at_the_ends_of_the_uniform(monkeypatch, u):
    """u = 0 takes the first token with mass; u so close to 1 that u * total rounds to the total takes the last."""
    from multidraft import sampling
    monkeypatch.setattr(sampling.torch, "rand", lambda *a, **k: torch.tensor(u, dtype=torch.float64))
    probs = torch.tensor([0.0, 0.25, 0.5, 0.25, 0.0, 0.0])
    assert sampling.draw(probs, sampling.position_generator(1, 0)) == (1 if u == 0.0 else 3)


def test_draw_keeps_the_distribution_on_the_device():
    """On a (fake) GPU only the chosen index comes to the host: one sync, the same token as on the CPU."""
    from multidraft.sampling import draw, position_generator
    from tests.fake_accelerator import CUDA, FakeCuda
    probs = torch.softmax(torch.randn(1000, generator=torch.Generator().manual_seed(0)), -1)
    expected = [draw(probs, position_generator(5, i)) for i in range(20)]
    with FakeCuda() as fake:
        on_device = probs.to(CUDA)
        got = [draw(on_device, position_generator(5, i)) for i in range(20)]
    assert got == expected and fake.syncs == 20
