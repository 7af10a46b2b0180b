"""Exactness of every selection scheme by enumeration (spec §9 P1, P4, P13) on random small alphabets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multidraft.selection import (
    SCHEMES,
    LOSSLESS,
    acceptance_probability,
    build_plan,
    closed_form_acceptance,
    optimal_acceptance,
    output_distribution,
)

TOLERANCE = 1e-9


def random_laws(seed, vocab_size, num_drafts, identical, zeros):
    """Dirichlet draft rows and target (alpha in [0.1, 3]), optionally with exact zeros."""
    rng = np.random.default_rng(seed)

    def law():
        values = rng.dirichlet(np.full(vocab_size, rng.uniform(0.1, 3.0)))
        if zeros and vocab_size > 2:
            values[rng.integers(vocab_size)] = 0.0
            values = values / values.sum()
        return values

    target = law()
    rows = [law()] * num_drafts if identical else [law() for _ in range(num_drafts)]
    return np.stack(rows), target


def usable(scheme, num_drafts, identical, vocab_size):
    if scheme == "speculative":
        return num_drafts == 1
    if scheme == "spectr":
        return identical
    if scheme == "optimal_lp":
        return vocab_size ** num_drafts <= 512  # the LP oracle is slow beyond a few hundred tuples
    return True


cases = st.tuples(
    st.integers(0, 2**32 - 1),  # seed
    st.integers(2, 8),          # V
    st.integers(1, 4),          # K
    st.booleans(),              # identical drafts
    st.booleans(),              # exact zeros in the laws
)


@pytest.mark.parametrize("scheme", SCHEMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases, data=st.data())
def test_output_law_is_the_target(scheme, case, data):
    seed, vocab_size, num_drafts, identical, zeros = case
    if not usable(scheme, num_drafts, identical, vocab_size):
        num_drafts = 1 if scheme == "speculative" else min(num_drafts, 2)
        identical = identical or scheme == "spectr"
    draft, target = random_laws(seed, vocab_size, num_drafts, identical, zeros)
    options = {}
    if scheme in ("is", "is_lp", "is_lp_truncated"):
        # exercise the merged symbol: keep anywhere from 1 token to the whole vocabulary
        options["alphabet_size"] = data.draw(st.one_of(st.none(), st.integers(1, vocab_size)))
    if scheme == "is_lp_truncated":
        options["s"] = data.draw(st.integers(0, vocab_size + 1))
    law = output_distribution(scheme, draft, target, **options)
    assert law.shape == target.shape
    np.testing.assert_allclose(law, target, atol=TOLERANCE, rtol=0)

    # P4: accept branch <= hit <= optimum; the closed form matches enumeration
    accept = acceptance_probability(scheme, draft, target, event="accept", **options)
    hit = acceptance_probability(scheme, draft, target, **options)
    best = optimal_acceptance(draft, target)
    assert accept <= hit + TOLERANCE
    assert hit <= best + 1e-9
    assert closed_form_acceptance(scheme, draft, target, **options) == pytest.approx(accept, abs=TOLERANCE)


def test_every_scheme_is_declared_lossless():
    assert set(LOSSLESS) == set(SCHEMES) and all(LOSSLESS.values())
    for scheme in SCHEMES:
        assert build_plan(scheme, np.ones((1, 3)) / 3, np.ones(3) / 3).lossless


@pytest.mark.parametrize("scheme", ["is", "is_lp", "is_lp_truncated", "optimal_lp"])
def test_intermediate_law_invariants(scheme):
    """P13: p_I >= 0, sums to 1, and p_I(k) >= prod_i p_i(k) (all candidates equal force Y_I = k)."""
    for seed in range(20):
        draft, target = random_laws(seed, 5, 2 + seed % 2, identical=seed % 3 == 0, zeros=seed % 2 == 1)
        plan = build_plan(scheme, draft, target, **({} if scheme == "optimal_lp" else {"alphabet_size": None}))
        law = plan.intermediate_law
        assert (law >= 0).all()
        assert law.sum() == pytest.approx(1.0, abs=1e-12)
        assert (law >= np.prod(draft, axis=0) - 1e-12).all()


def test_relabelling_tokens_keeps_every_acceptance():
    """P11: permuting token ids in the draft and target laws together changes no acceptance value."""
    draft, target = random_laws(3, 5, 3, identical=True, zeros=False)
    permutation = np.array([3, 0, 4, 1, 2])
    for scheme in ("specinfer", "spectr", "is", "is_lp", "is_lp_truncated"):
        original = acceptance_probability(scheme, draft, target)
        relabelled = acceptance_probability(scheme, draft[:, permutation], target[permutation])
        assert relabelled == pytest.approx(original, abs=1e-9), scheme


@pytest.mark.parametrize("identical", [True, False])
def test_classical_is_auto_alphabet_stays_exact_when_it_truncates(identical, monkeypatch):
    """With a budget small enough that "auto" keeps fewer tokens than the target's support, the law stays exact."""
    from multidraft.selection import schemes

    # default budget (measured cost, issue #33): the whole 14-token support, for identical and different drafts
    assert schemes.classical_is_alphabet_size(5, 14, 14, identical) == 14
    monkeypatch.setattr(schemes, "CLASSICAL_IS_TERM_BUDGET", 20_000)
    truncated = schemes.classical_is_alphabet_size(5, 14, 14, identical)
    assert 1 < truncated < 13
    draft, target = random_laws(7, 14, 5, identical, zeros=True)
    np.testing.assert_allclose(output_distribution("is", draft, target), target, atol=TOLERANCE)
    assert 0.0 < acceptance_probability("is", draft, target) <= 1.0


def test_classical_is_auto_alphabet_keeps_the_target_support():
    """The old "auto" rule kept 12 tokens at K = 5 whatever the target; a 20-token support (what top-k / top-p
    leave) now stays whole, so acceptance equals the untruncated scheme's and beats the 12-token alphabet."""
    from multidraft.selection.schemes import classical_is_alphabet_size

    rng = np.random.default_rng(3)
    vocab, support, num_drafts = 300, 20, 5
    target = np.zeros(vocab)
    target[:support] = rng.dirichlet(np.full(support, 0.5))
    draft = rng.dirichlet(np.full(vocab, 0.05)) * 0.3
    draft[:support] += 0.7 * rng.dirichlet(np.full(support, 0.5))
    drafts = np.tile(draft / draft.sum(), (num_drafts, 1))
    auto = closed_form_acceptance("is", drafts, target)
    assert auto == pytest.approx(closed_form_acceptance("is", drafts, target, alphabet_size=None), abs=1e-12)
    assert auto > closed_form_acceptance("is", drafts, target, alphabet_size=12) + 1e-3
    # On full-vocabulary laws the budget, not the support, sets M: far above the old 25 / 12 / 7.
    assert [classical_is_alphabet_size(k, 150_000, 150_000, True) for k in (4, 5, 6)] >= [40, 30, 20]
    assert classical_is_alphabet_size(2, 150_000, 150_000, True) > 1000


def test_truncated_lp_auto_alphabet_keeps_the_target_support():
    """The paper's M = 40 caps the truncated LP on a 60-token support; "auto" keeps the support (and stays exact)."""
    rng = np.random.default_rng(5)
    vocab, support = 400, 60
    target = np.zeros(vocab)
    target[:support] = rng.dirichlet(np.full(support, 1.0))
    draft = 0.8 * np.concatenate([rng.dirichlet(np.full(support, 1.0)), np.zeros(vocab - support)])
    draft += 0.2 * rng.dirichlet(np.full(vocab, 0.2))
    drafts = np.tile(draft / draft.sum(), (2, 1))
    auto = closed_form_acceptance("is_lp_truncated", drafts, target)
    assert auto == pytest.approx(closed_form_acceptance("is_lp_truncated", drafts, target, alphabet_size=support),
                                 abs=1e-12)
    assert auto > closed_form_acceptance("is_lp_truncated", drafts, target, alphabet_size=40) + 1e-3
    small_draft, small_target = random_laws(11, 6, 2, identical=False, zeros=True)
    np.testing.assert_allclose(output_distribution("is_lp_truncated", small_draft, small_target), small_target,
                               atol=TOLERANCE)
