"""Top-k lattices, the exact p-best DP (vs brute force), local rescoring and the analysis helpers (bpd.md §8)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from multidraft.blockwise.lattice import (Lattice, LocalScorer, brute_force_paths, build_lattice, local_rescore,
                                         oracle_length, paths_to_tree, pbest_paths)
from multidraft.blockwise.evaluation import consecutive_stats, h_max, win_tie_loss

VOCAB = 6


class RandomBackoffLM:
    """A random backoff LM over a small vocabulary: explicit probabilities for some histories, else back off."""

    def __init__(self, seed, order):
        rng = np.random.default_rng(seed)
        self.order = order
        self.table = {}
        for n in range(order):          # history lengths 0..order-1
            for _ in range(6 if n else 1):
                hist = tuple(rng.integers(0, VOCAB, n).tolist())
                self.table[hist] = rng.dirichlet(np.ones(VOCAB))
        self.table[()] = rng.dirichlet(np.ones(VOCAB))

    def logprob_fn(self, histories, candidates):
        out = np.empty((len(histories), len(candidates)))
        for i, hist in enumerate(histories):
            h = tuple(hist)
            while h not in self.table:
                h = h[1:]
            out[i] = np.log(self.table[h][np.asarray(candidates)])
        return out


def random_lattice(rng, length, k, ties):
    tokens = np.stack([rng.permutation(VOCAB)[:k] for _ in range(length)]).reshape(length, k)
    scores = rng.integers(0, 3, (length, k)).astype(float) if ties else rng.normal(size=(length, k))
    scores = -np.sort(-scores, axis=1)
    return Lattice(int(rng.integers(VOCAB)), tokens.astype(np.int64), scores)


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10_000), length=st.integers(1, 4), k=st.integers(1, 3), p=st.integers(1, 12),
       order=st.integers(0, 4), alpha=st.sampled_from([0.0, 0.5, 1.0, 3.0]), ties=st.booleans())
def test_pbest_dp_equals_brute_force(seed, length, k, p, order, alpha, ties):
    rng = np.random.default_rng(seed)
    lattice = random_lattice(rng, length, k, ties)
    lm = RandomBackoffLM(seed, max(order, 1))
    context = rng.integers(0, VOCAB, int(rng.integers(0, 4))).tolist() + [lattice.first_token]
    args = (lattice, p, alpha, lm.logprob_fn, order, context)
    dp, brute = pbest_paths(*args), brute_force_paths(*args)
    assert [(h.tokens, h.ranks) for h in dp] == [(h.tokens, h.ranks) for h in brute]
    assert [h.score for h in dp] == pytest.approx([h.score for h in brute], abs=1e-9)
    assert len(dp) == min(p, k ** length)
    assert len({h.tokens for h in dp}) == len(dp)                      # distinct drafts
    assert all(a.score >= b.score for a, b in zip(dp, dp[1:]))         # best first
    smaller = pbest_paths(lattice, max(p - 3, 1), alpha, lm.logprob_fn, order, context)
    assert [h.tokens for h in smaller] == [h.tokens for h in dp[:len(smaller)]]   # p1-list is a prefix


def test_zero_gram_and_alpha_zero_give_vanilla_first():
    rng = np.random.default_rng(3)
    lattice = random_lattice(rng, 3, 3, ties=False)
    lm = RandomBackoffLM(1, 3)
    assert list(pbest_paths(lattice, 1)[0].tokens) == lattice.vanilla()
    assert list(pbest_paths(lattice, 4, 0.0, lm.logprob_fn, 3, [1])[0].tokens) == lattice.vanilla()


def test_column_shift_leaves_ranking_unchanged():
    rng = np.random.default_rng(5)
    lattice = random_lattice(rng, 3, 3, ties=False)
    shifted = Lattice(lattice.first_token, lattice.tokens, lattice.scores + np.array([[4.0], [-2.0], [7.5]]))
    lm = RandomBackoffLM(2, 2)
    a = pbest_paths(lattice, 10, 1.0, lm.logprob_fn, 2, [0])
    b = pbest_paths(shifted, 10, 1.0, lm.logprob_fn, 2, [0])
    assert [h.tokens for h in a] == [h.tokens for h in b]


def test_build_lattice_shape_order_and_ties():
    logits = torch.tensor([[0.0, 5.0, 5.0, 1.0, 3.0], [2.0, 2.0, 2.0, 2.0, 9.0]])
    lat = build_lattice(7, logits, 3)
    assert lat.tokens.tolist() == [[1, 2, 4], [4, 0, 1]]      # ties -> lower token id
    assert lat.first_token == 7 and lat.num_paths() == 9
    assert all((np.diff(row) <= 0).all() for row in lat.scores)
    assert lat.vanilla() == [1, 4]
    mapped = build_lattice(7, logits, 2, torch.tensor([10, 30, 20, 40, 50]))   # columns map to token ids
    assert mapped.tokens.tolist() == [[20, 30], [50, 10]]
    assert build_lattice(7, logits, 1).num_paths() == 1


class LogScorer(LocalScorer):
    """Prefers the token after the previous one (t -> t+1) and logs what it was conditioned on."""

    def __init__(self):
        self.log = []

    def begin(self, context):
        self.prev = context[-1]

    def logprobs(self, candidates):
        self.log.append(self.prev)
        return np.where(np.asarray(candidates) == (self.prev + 1) % VOCAB, 0.0, -10.0)

    def advance(self, token):
        self.prev = token


def test_local_rescoring_is_greedy_left_to_right():
    lattice = Lattice(0, np.array([[3, 1], [4, 2], [5, 3]]), np.array([[1.0, 0.9], [1.0, 0.9], [1.0, 0.9]]))
    scorer = LogScorer()
    path = local_rescore(lattice, 1.0, scorer, [5, 0])
    assert list(path.tokens) == [1, 2, 3]
    assert scorer.log == [0, 1, 2]                  # each step conditioned on the rescored choice before it
    assert all(t in lattice.tokens[c] for c, t in enumerate(path.tokens))
    assert list(local_rescore(lattice, 0.0, LogScorer(), [0]).tokens) == lattice.vanilla()


def test_k1_every_strategy_is_vanilla():
    rng = np.random.default_rng(9)
    lattice = random_lattice(rng, 4, 1, ties=False)
    lm = RandomBackoffLM(3, 3)
    assert list(pbest_paths(lattice, 5, 2.0, lm.logprob_fn, 3, [1, 2])[0].tokens) == lattice.vanilla()
    assert len(pbest_paths(lattice, 5)) == 1
    assert list(local_rescore(lattice, 5.0, LogScorer(), [1]).tokens) == lattice.vanilla()


def test_oracle_and_tree():
    lattice = Lattice(0, np.array([[3, 1], [4, 2], [5, 3]]), np.zeros((3, 2)))
    assert oracle_length(lattice, [1, 2, 9]) == 2
    assert oracle_length(lattice, [9, 2, 3]) == 0
    tree = paths_to_tree([[1, 2, 3], [1, 2, 5], [4]])
    assert tree.token_ids == [1, 2, 3, 5, 4] and tree.parents == [-1, 0, 1, 1, -1]


def test_analysis_helpers():
    assert consecutive_stats([[7, 7, 7, 7]]) == (100.0, 4.0)
    assert consecutive_stats([[1, 2, 3, 4]]) == (0.0, 1.0)
    assert h_max([1.0, 2.0, 3.0]) == 3 and h_max([2.0, 1.0, 3.0]) == 1 and h_max([5.0]) == 1
    counts = win_tie_loss([([1, 1, 2], 1, [1, 3, 2], 3), ([1, 2, 3], 2, [1, 2, 2], 1), ([1, 2], 1, [1, 2], 1)])
    assert (counts["wins"], counts["losses"], counts["ties"]) == (1, 1, 1)
    assert counts["win_repair"] == 1 and counts["loss_regress"] == 1
