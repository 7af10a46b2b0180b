"""Two-step importance-sampling schemes (Theorem 1; spec §3.2-3.8).

Step 1 picks one candidate Y_I with an importance rule whose output law p_I is known exactly;
step 2 runs single-draft speculative sampling of Y_I against the target. The output is exact for
*any* rule, provided p_I is the true law of Y_I, so each rule below computes p_I from the same
pick probabilities its sampler uses. Everything here works on the reduced alphabet of
`alphabet.py` (numpy float64, at most ~41 symbols by default).

Rules:
- `SingleCandidate`: K = 1, Y_I = X_1 (plain speculative sampling).
- `PairChain`: K >= 2 by a left fold of two-input stages (§3.8), each stage the full pairwise LP
  or the truncated LP; every stage optimises against the final target.
- `ClassicalIS`: joint weights proportional to q(x_j) / p_j(x_j) (§3.2).
- `TupleTable`: an explicit beta(x) table per candidate tuple (the optimal LP of §3.3).
"""

from __future__ import annotations

import numpy as np

from multidraft.selection.alphabet import ReducedAlphabet
from multidraft.selection.base import SelectionPlan, one_hot, safe_ratio, sample_index_numpy, uniforms
from multidraft.selection.pairwise import build_pair_stage


class SingleCandidate:
    def __init__(self, draft: np.ndarray):
        self.law = draft[0]
        self.num_uniforms = 0

    def pick(self, symbols, draws):
        return symbols[0]

    def tuple_law(self, symbol_tuples):
        return one_hot(symbol_tuples[:, 0], len(self.law))


class PairChain:
    """Y_1 = stage_1(X_1, X_2); Y_m = stage_m(Y_{m-1}, X_{m+1}); p_I = law of the last stage."""

    def __init__(self, draft: np.ndarray, target: np.ndarray, free_tokens: int | None, bottom: int | None,
                 solver: str = "flow"):
        self.stages = []
        running = draft[0]
        for next_draft in draft[1:]:
            stage = build_pair_stage(running, next_draft, target, free_tokens, bottom, solver)
            self.stages.append(stage)
            running = stage.law
        self.law = running
        self.num_uniforms = len(self.stages)

    def pick(self, symbols, draws):
        chosen = symbols[0]
        for stage, challenger, draw in zip(self.stages, symbols[1:], draws):
            if challenger != chosen and draw >= stage.pick_matrix[chosen, challenger]:
                chosen = challenger
        return chosen

    def tuple_law(self, symbol_tuples):
        num_symbols = len(self.law)
        law = one_hot(symbol_tuples[:, 0], num_symbols)
        rows = np.arange(len(symbol_tuples))
        for position, stage in enumerate(self.stages, start=1):
            challenger = symbol_tuples[:, position]
            keep = stage.pick_matrix[:, challenger].T  # (T, n): P(keep a | inputs {a, challenger})
            moved = (law * (1.0 - keep)).sum(axis=1)
            law = law * keep
            law[rows, challenger] += moved
        return law


def _sum_distribution(value_rows, prob_rows, merge_last: bool):
    """Law of the sum of independent discrete variables, as (values, probs) with zero-probability points
    dropped. Equal values are merged after every step but the last unless `merge_last`: merging costs a
    sort, which only pays when many sums coincide (identical drafts)."""
    values, probs = np.zeros(1), np.ones(1)
    last = len(value_rows) - 1
    for step, (row_values, row_probs) in enumerate(zip(value_rows, prob_rows)):
        support = row_probs > 0
        values = (values[:, None] + row_values[support][None, :]).ravel()
        probs = (probs[:, None] * row_probs[support][None, :]).ravel()
        if step < last or merge_last:
            values, inverse = np.unique(values, return_inverse=True)
            probs = np.bincount(inverse.ravel(), weights=probs, minlength=len(values))
    return values, probs


_TABLE_ENTRIES = 2_000_000      # floats per block of the outer table below (16 MB)


def _expected_share(own, values, probs, num_drafts):
    """E[g(c, S)] for each c in `own`, S ~ (values, probs), g(c, s) = c / (c + s), or 1/K when c + s = 0.

    The O(len(own) * len(values)) core of the classical-IS law: one in-place outer sum and division."""
    share = np.empty(len(own))
    positive = own > 0
    if positive.any():
        c = own[positive]
        out = np.empty(len(c))
        rows = max(1, _TABLE_ENTRIES // max(1, len(values)))     # bounded memory at any alphabet size
        for start in range(0, len(c), rows):
            block = c[start:start + rows]
            table = np.add.outer(block, values)
            np.divide(block[:, None], table, out=table)
            out[start:start + rows] = table @ probs
        share[positive] = out
    share[~positive] = probs[values == 0].sum() / num_drafts  # c = 0: only the all-zero-weights case picks it
    return share


class ClassicalIS:
    """beta_y(x) = sum_{j: x_j = y} w_j / sum_j w_j with w_j = q(x_j) / p_j(x_j); uniform if all w are 0."""

    def __init__(self, draft: np.ndarray, target: np.ndarray, identical: bool):
        self.num_drafts, num_symbols = draft.shape
        self.weights = np.zeros_like(draft)
        np.divide(target[None, :], draft, out=self.weights, where=draft > 0)
        self.num_uniforms = 1
        # p_I(y) = sum_j p_j(y) E[ g(w_j(y), S_{-j}) ], S_{-j} = sum of the other drafts' weights.
        # Identical drafts share one S law and one expectation, so the sum is K times one term.
        law = np.zeros(num_symbols)
        for j in range(1 if identical else self.num_drafts):
            others = [k for k in range(self.num_drafts) if k != j]
            values, probs = _sum_distribution(self.weights[others], draft[others], merge_last=identical)
            drawn = draft[j] > 0  # symbols draft j never proposes add nothing
            law[drawn] += draft[j][drawn] * _expected_share(self.weights[j][drawn], values, probs, self.num_drafts)
        if identical:
            law *= self.num_drafts
        self.law = np.clip(law, 0.0, None) / law.sum()

    def _candidate_shares(self, symbol_tuples):
        weights = self.weights[np.arange(self.num_drafts)[None, :], symbol_tuples]  # (T, K)
        totals = weights.sum(axis=1, keepdims=True)
        shares = np.full(weights.shape, 1.0 / self.num_drafts)
        np.divide(weights, totals, out=shares, where=totals > 0)
        return shares

    def pick(self, symbols, draws):
        shares = self._candidate_shares(np.asarray([symbols]))[0]
        return symbols[sample_index_numpy(shares, draws[0])]

    def tuple_law(self, symbol_tuples):
        shares = self._candidate_shares(symbol_tuples)
        law = np.zeros((len(symbol_tuples), len(self.law)))
        rows = np.repeat(np.arange(len(symbol_tuples)), self.num_drafts)
        np.add.at(law, (rows, symbol_tuples.ravel()), shares.ravel())
        return law


class TupleTable:
    """An explicit beta table, one row per candidate tuple in C order (see optimal.py)."""

    def __init__(self, table: np.ndarray, law: np.ndarray, num_symbols: int, num_drafts: int):
        self.table = table
        self.law = law
        self.shape = (num_symbols,) * num_drafts
        self.num_uniforms = 1

    def pick(self, symbols, draws):
        row = self.table[np.ravel_multi_index(tuple(symbols), self.shape)]
        return sample_index_numpy(row, draws[0])

    def tuple_law(self, symbol_tuples):
        return self.table[np.ravel_multi_index(tuple(symbol_tuples.T), self.shape)]


class TwoStepPlan(SelectionPlan):
    """Importance pick of Y_I, then speculative sampling of Y_I (law p_I) against the target."""

    def __init__(self, alphabet: ReducedAlphabet, rule):
        self.alphabet = alphabet
        self.rule = rule
        target = alphabet.target
        self.intermediate_law = rule.law
        self.accept_ratio = safe_ratio(target, rule.law)  # min(1, q~/p_I) per symbol
        residual = np.clip(target - rule.law, 0.0, None)
        self.residual = residual / residual.sum() if residual.sum() > 0 else target

    def sample(self, candidates, generator):
        draws = uniforms(self.rule.num_uniforms + 3, generator)
        symbols = self.alphabet.to_reduced(candidates)
        chosen = self.rule.pick(symbols, draws[3:])
        if draws[0] < self.accept_ratio[chosen]:
            return self.alphabet.finish_sample(chosen, True, draws[2], generator)
        corrected = sample_index_numpy(self.residual, draws[1])
        return self.alphabet.finish_sample(corrected, False, draws[2], generator)

    def tuple_laws(self, tuples):
        symbol_tuples = self.alphabet.symbol_map()[tuples]
        intermediate = self.rule.tuple_law(symbol_tuples)  # (T, n)
        accept_reduced = intermediate * self.accept_ratio[None, :]
        rejected = (intermediate * (1.0 - self.accept_ratio[None, :])).sum(axis=1)
        residual_reduced = rejected[:, None] * self.residual[None, :]
        return self.alphabet.expand(accept_reduced, residual_reduced)

    def accept_branch_closed_form(self):
        return self.alphabet.kept_mass * float(np.minimum(self.alphabet.target, self.intermediate_law).sum())
