"""Closed forms, LP oracles, orderings and the toy values of spec §5, §9 and §10."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from multidraft.selection import (
    acceptance_probability,
    build_plan,
    closed_form_acceptance,
    optimal_acceptance,
    solve_rho,
    theorem2_condition,
)
from tests.test_selection import random_laws

UNIFORM3 = np.full(3, 1 / 3)
# case: (draft row, target, P*_1..P*_4, SI_2, ST_2, rho*_2, SI_3, ST_3, TR for s in {0, 1, 2})
TOY_CASES = {
    "A": ((1/3, 1/3, 1/3), (.5, .3, .2), (0.833333, 1.0, 1.0, 1.0), 0.888889, 0.924764, 1.274292, 0.925926, 0.969682, 0.911111),
    "B": ((1/3, 1/3, 1/3), (.6, .3, .1), (0.733333, 0.955556, 1.0, 1.0), 0.822222, 0.858654, 1.375961, 0.881481, 0.928778, 0.955556),
    "C": ((.5, .3, .2), (.4, .4, .2), (0.9, 1.0, 1.0, 1.0), 0.93, 0.96, 1.2, 0.951, 0.987035, 0.85),
    "D": ((.7, .2, .1), (.1, .2, .7), (0.4, 0.49, 0.571, 0.6439), 0.46, 0.472621, 1.726209, 0.514, 0.537184, 0.49),
    "E": ((.4, .3, .2, .1), (.1, .2, .3, .4), (0.6, 0.79, 0.871, 0.9439), 0.72, 0.75, 1.5, 0.768, 0.79395, 0.79),
    "F": ((.25,) * 4, (.7, .1, .1, .1), (0.55, 0.7375, 0.878125, 0.983594), 0.6625, 0.689342, 1.557367, 0.746875, 0.787969, 0.7),
}


def drafts(row, num_drafts):
    return np.tile(np.asarray(row, dtype=np.float64), (num_drafts, 1))


@pytest.mark.parametrize("name", sorted(TOY_CASES))
def test_toy_table_of_section_10(name):
    row, target, optimum, si2, st2, rho2, si3, st3, truncated = TOY_CASES[name]
    target = np.asarray(target)
    for num_drafts, expected in zip((1, 2, 3, 4), optimum):
        assert optimal_acceptance(drafts(row, num_drafts), target) == pytest.approx(expected, abs=5e-7)
    assert closed_form_acceptance("specinfer", drafts(row, 2), target) == pytest.approx(si2, abs=5e-7)
    assert closed_form_acceptance("spectr", drafts(row, 2), target) == pytest.approx(st2, abs=5e-7)
    assert solve_rho(torch.tensor(row, dtype=torch.float64), torch.tensor(target), 2)[0] == pytest.approx(rho2, abs=5e-7)
    assert closed_form_acceptance("specinfer", drafts(row, 3), target) == pytest.approx(si3, abs=5e-7)
    assert closed_form_acceptance("spectr", drafts(row, 3), target) == pytest.approx(st3, abs=5e-7)
    for free_tokens in (0, 1, 2):
        value = closed_form_acceptance("is_lp_truncated", drafts(row, 2), target, s=free_tokens, alphabet_size=None)
        assert value == pytest.approx(truncated, abs=5e-7)


def test_toy_case_c_full_truncation_and_below_single_draft():
    """Truncated LP is a heuristic: case C with s <= 2 (0.85) falls below K = 1 (0.90); s = 3 reaches 1."""
    row, target = (.5, .3, .2), np.array([.4, .4, .2])
    assert closed_form_acceptance("is_lp_truncated", drafts(row, 2), target, s=3) == pytest.approx(1.0, abs=1e-9)
    assert closed_form_acceptance("is_lp_truncated", drafts(row, 2), target, s=2) < closed_form_acceptance(
        "speculative", drafts(row, 1), target)


def test_classical_importance_sampling_toy_values():
    for name, num_drafts, accept, hit in [("A", 2, 0.908730, 0.931092), ("D", 2, 0.482200, 0.486021),
                                          ("E", 2, 0.736942, 0.745140), ("A", 3, 0.938444, None),
                                          ("D", 3, 0.550167, None), ("E", 3, 0.810188, None)]:
        row, target = TOY_CASES[name][0], np.asarray(TOY_CASES[name][1])
        assert closed_form_acceptance("is", drafts(row, num_drafts), target) == pytest.approx(accept, abs=5e-7)
        if hit is not None:
            assert acceptance_probability("is", drafts(row, num_drafts), target) == pytest.approx(hit, abs=5e-7)


def test_non_identical_toy_value():
    first, second, target = np.array([.5, .3, .2]), np.array([.2, .3, .5]), np.array([.3, .4, .3])
    pair = np.stack([first, second])
    assert optimal_acceptance(pair, target) == pytest.approx(1.0, abs=1e-9)
    assert optimal_acceptance(pair, target, method="lp") == pytest.approx(1.0, abs=1e-7)
    assert closed_form_acceptance("is_lp", pair, target) == pytest.approx(1.0, abs=1e-9)
    for order in (pair, pair[::-1].copy()):
        assert closed_form_acceptance("specinfer", order, target) == pytest.approx(0.96, abs=1e-9)


@pytest.mark.parametrize("second, optimum, specinfer, spectr, single", [
    (0.0, 0.8889, 0.7778, 0.8114, 0.6667), (0.05, 0.9389, 0.8111, 0.8470, 0.7167),
    (1 / 9, 1.0, 0.8519, 0.8889, 0.7778), (0.2, 1.0, 0.9111, 0.9449, 0.8667),
    (1 / 3, 1.0, 1.0, 1.0, 1.0), (0.5, 1.0, 0.8889, 0.9248, 0.8333), (5 / 9, 1.0, 0.8519, 0.8889, 0.7778),
    (0.6, 0.9556, 0.8222, 0.8587, 0.7333), (2 / 3, 0.8889, 0.7778, 0.8114, 0.6667)])
def test_figure_2_left_panel(second, optimum, specinfer, spectr, single):
    target = np.array([1 / 3, second, 2 / 3 - second])
    assert optimal_acceptance(drafts(UNIFORM3, 2), target) == pytest.approx(optimum, abs=5e-5)
    assert closed_form_acceptance("specinfer", drafts(UNIFORM3, 2), target) == pytest.approx(specinfer, abs=5e-5)
    assert closed_form_acceptance("spectr", drafts(UNIFORM3, 2), target) == pytest.approx(spectr, abs=5e-5)
    assert closed_form_acceptance("speculative", drafts(UNIFORM3, 1), target) == pytest.approx(single, abs=5e-5)
    assert closed_form_acceptance("is_lp", drafts(UNIFORM3, 2), target) == pytest.approx(optimum, abs=5e-5)


def test_closed_form_optimum_equals_the_transport_lp():
    """P3: min_S q(S) + 1 - prod p_k(S) (prefix rule for IID, subsets otherwise) == OT LP."""
    for seed in range(40):
        num_drafts = 1 + seed % 3
        draft, target = random_laws(seed, 2 + seed % 5, num_drafts, identical=seed % 2 == 0, zeros=seed % 4 == 1)
        assert optimal_acceptance(draft, target) == pytest.approx(
            optimal_acceptance(draft, target, method="lp"), abs=1e-7)


def test_optimum_reached_by_two_step_schemes():
    """T1: the full pairwise LP (K = 2) and the tuple-level IS LP both reach P*."""
    for seed in range(15):
        draft, target = random_laws(seed, 4, 2, identical=seed % 2 == 0, zeros=False)
        best = optimal_acceptance(draft, target)
        assert closed_form_acceptance("is_lp", draft, target) == pytest.approx(best, abs=1e-9)
        assert closed_form_acceptance("optimal_lp", draft, target) == pytest.approx(best, abs=1e-6)
        draft3, target3 = random_laws(seed, 3, 3, identical=seed % 2 == 0, zeros=False)
        assert closed_form_acceptance("optimal_lp", draft3, target3) == pytest.approx(
            optimal_acceptance(draft3, target3), abs=1e-6)


def test_acceptance_orderings():
    """IS-LP >= SpecInfer (K = 2, where IS-LP is optimal); chains of full LPs lie in [P*_2, P*_K];
    P*_K grows with K; truncated LP grows with s, s = 0 equals s = 1 and s >= n is the optimum."""
    for seed in range(25):
        vocab_size = 3 + seed % 4
        identical = seed % 2 == 0
        draft, target = random_laws(seed, vocab_size, 4, identical, zeros=seed % 5 == 0)
        optima = [optimal_acceptance(draft[:k], target) for k in (1, 2, 3, 4)]
        assert all(a <= b + 1e-12 for a, b in zip(optima, optima[1:]))
        pair = draft[:2]
        assert closed_form_acceptance("is_lp", pair, target) >= acceptance_probability("specinfer", pair, target) - 1e-9
        for num_drafts in (3, 4):
            chain = closed_form_acceptance("is_lp", draft[:num_drafts], target)
            assert optima[1] - 1e-9 <= chain <= optima[num_drafts - 1] + 1e-9
        if identical:
            values = [closed_form_acceptance("is_lp_truncated", pair, target, s=s, alphabet_size=None)
                      for s in range(vocab_size + 2)]
            assert values[0] == pytest.approx(values[1], abs=1e-12)
            assert all(a <= b + 1e-9 for a, b in zip(values, values[1:]))
            assert values[vocab_size] == pytest.approx(optima[1], abs=1e-9)


def test_truncation_penalty_bound():
    """P9: P*_2 - P~_s <= sum over the non-free tokens of (q_i - p_I(i))^+ <= sum (q_i - p1_i p2_i)^+."""
    for seed in range(30):
        draft, target = random_laws(seed, 6, 2, identical=seed % 2 == 0, zeros=False)
        best = optimal_acceptance(draft, target)
        for free_tokens in (0, 2, 4):
            plan = build_plan("is_lp_truncated", draft, target, s=free_tokens, alphabet_size=None)
            stage = plan.rule.stages[0]
            fixed = stage.ranks >= free_tokens
            bound = np.clip(target - stage.law, 0, None)[fixed].sum()
            loose = np.clip(target - draft[0] * draft[1], 0, None)[fixed].sum()
            assert best - plan.accept_branch_closed_form() <= bound + 1e-9 <= loose + 2e-9


def test_identity_and_single_draft_sanity():
    """P6 and P7: with one draft everything is speculative sampling; with p = q the exact schemes
    always accept, the truncated LP does not (uniform 3 tokens: 7/9 for s <= 2)."""
    draft, target = random_laws(11, 5, 1, identical=True, zeros=False)
    single = float(np.minimum(draft[0], target).sum())
    assert optimal_acceptance(draft, target) == pytest.approx(single, abs=1e-12)
    for scheme in ("speculative", "specinfer", "spectr", "is", "is_lp", "is_lp_truncated", "optimal_lp"):
        assert closed_form_acceptance(scheme, draft, target) == pytest.approx(single, abs=1e-9), scheme
    same = np.tile(target, (3, 1))
    for scheme in ("specinfer", "spectr", "is", "is_lp", "optimal_lp"):
        assert closed_form_acceptance(scheme, same, target) == pytest.approx(1.0, abs=1e-7), scheme
    for free_tokens in (0, 1, 2):
        value = closed_form_acceptance("is_lp_truncated", drafts(UNIFORM3, 2), UNIFORM3, s=free_tokens)
        assert value == pytest.approx(7 / 9, abs=1e-9)


def test_theorem_2():
    """P5: P*_2 = 1 iff q(S) >= p(S)^2 for all S; edges of the uniform band [1/9, 5/9]."""
    assert theorem2_condition(drafts(UNIFORM3, 2), np.array([5 / 9, 1 / 3, 1 / 9]))
    for target in ([5 / 9 + 0.01, 1 / 3 - 0.01, 1 / 9], [1 / 9 - 0.01, 4 / 9 + 0.01, 4 / 9]):
        target = np.array(target)
        assert not theorem2_condition(drafts(UNIFORM3, 2), target)
        assert optimal_acceptance(drafts(UNIFORM3, 2), target) == pytest.approx(0.99, abs=1e-9)
    for seed in range(30):
        draft, target = random_laws(seed, 4, 2, identical=seed % 2 == 0, zeros=False)
        holds = theorem2_condition(draft, target)
        assert holds == (optimal_acceptance(draft, target, method="lp") >= 1 - 1e-7)


def test_spectr_internals():
    """P10: rho in [1, K], p_acc(rho) = rho beta(rho), residual non-negative before clipping."""
    for seed in range(20):
        num_drafts = 2 + seed % 3
        draft, target = random_laws(seed, 6, num_drafts, identical=True, zeros=seed % 3 == 0)
        plan = build_plan("spectr", draft, target)
        assert 1.0 <= plan.rho <= num_drafts
        assert abs(plan.accept_probability - plan.rho * plan.beta) < 1e-9 or plan.rho == 1.0
        row = torch.tensor(draft[0])
        raw = torch.tensor(target) - torch.minimum(row, torch.tensor(target) / plan.rho) * (
            plan.accept_probability / plan.beta)
        assert float(raw.min()) >= -1e-12


def test_spectr_rho_at_vocabulary_scale_matches_bisection():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(50_000, generator=generator, dtype=torch.float64) * 3
    target = torch.softmax(logits, 0)
    draft = torch.softmax((logits + torch.randn(50_000, generator=generator, dtype=torch.float64)) / 1.2, 0)
    for num_drafts in (2, 3, 4):
        rho, beta = solve_rho(draft, target, num_drafts)

        def f(value):
            b = float(torch.minimum(draft, target / value).sum())
            return 1 - (1 - b) ** num_drafts - value * b
        assert f(rho) <= 1e-12 and f(rho - 1e-9) > 0
        assert beta == pytest.approx(float(torch.minimum(draft, target / rho).sum()), abs=1e-12)


def lm_like_laws(rng, vocab_size, num_drafts):
    """Softmax of Gaussian logits at T = 1, top-p = 0.95 on the target; drafts from perturbed logits (P14)."""
    logits = rng.normal(0.0, 2.0, vocab_size)
    target = np.exp(logits - logits.max())
    target /= target.sum()
    order = np.argsort(-target)
    keep = order[: int(np.searchsorted(np.cumsum(target[order]), 0.95) + 1)]
    nucleus = np.zeros(vocab_size)
    nucleus[keep] = target[keep]
    draft_logits = logits + rng.normal(0.0, 1.0, vocab_size)
    draft = np.exp(draft_logits - draft_logits.max())
    return np.tile(draft / draft.sum(), (num_drafts, 1)), nucleus / nucleus.sum()


def test_table_3_style_ordering_on_lm_like_laws():
    """P14: per instance, the optimum bounds every scheme; on average IS-LP(s=5) >= SpecTr >= SpecInfer
    (Table 3's order, typical but not guaranteed per instance, so only the means are compared)."""
    rng = np.random.default_rng(14)
    schemes = ("specinfer", "spectr", "is", "is_lp", "is_lp_truncated")
    totals = dict.fromkeys(schemes, 0.0)
    for _ in range(60):
        draft, target = lm_like_laws(rng, 8, 2)
        best = optimal_acceptance(draft, target)
        for scheme in schemes:
            value = acceptance_probability(scheme, draft, target)
            assert value <= best + 1e-9, scheme
            totals[scheme] += value
    assert totals["is_lp_truncated"] >= totals["spectr"] >= totals["specinfer"]
    assert totals["is_lp"] >= totals["is_lp_truncated"] - 1e-9
