"""Two-input importance-weight stages: the pairwise LP (§3.4, §3.6) and the truncated LP (§3.5).

A stage takes two independent candidates X1 ~ first, X2 ~ second and outputs one of them. For an
unordered pair {i, j} the mass S_ij = first_i second_j + first_j second_i can go to i or to j; the
fraction that goes to i is the weight w_ij. Splitting by the unordered pair loses nothing against
ordered-pair weights: the objective sum_y min(q_y, p_I(y)) depends only on these totals, so the
same LP serves identical (first == second) and non-identical drafts.

Tokens are ranked by q_i - first_i second_i (descending, ties by id, ⊥ always last). In the
truncated LP only the top `free_tokens` tokens have free pair weights; any pair touching a lower
token goes to the higher-ranked token. `free_tokens=None` frees every pair (the full LP).

The LP is a max-flow problem (pair masses flow to one of their two tokens, token i absorbs at most
q_i), so two solvers give the same optimum: scipy's HiGHS (`solver="highs"`), and a small exact
augmenting-path solver (`solver="flow"`, the default) that avoids linprog's ~1.5 ms of per-call
overhead, which alone would exceed the per-token budget for a K = 4 chain of three stages.
Either way the output law is exact: p_I is recomputed from the weights actually used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class PairStage:
    #: pick_matrix[a, b] = probability of outputting a when the inputs are {a, b}; diagonal 1.
    pick_matrix: np.ndarray
    #: exact law of the stage output given the two input laws
    law: np.ndarray
    ranks: np.ndarray


def _solve_free_weights(free, pair_mass, fixed_inflow, target):
    """LP over the free pairs: maximise sum_i min(target_i, inflow_i) for i in `free`.

    Returns shares[a, b] (a < b): the fraction of pair {free[a], free[b]} sent to free[a]; None on failure.
    """
    from scipy.optimize import linprog            # here: scipy.optimize is ~0.5 s of `import multidraft`

    count = len(free)
    pairs = [(a, b) for a in range(count) for b in range(a + 1, count)]
    num_pairs = len(pairs)
    constraint = np.zeros((count, num_pairs + count))
    bound = fixed_inflow.copy()
    for column, (a, b) in enumerate(pairs):
        mass = pair_mass[free[a], free[b]]
        # w goes to free[a], 1 - w to free[b]: z_a <= fixed_a + mass*w ; z_b <= fixed_b + mass*(1 - w)
        constraint[a, column] = -mass
        constraint[b, column] = mass
        bound[b] += mass
    constraint[np.arange(count), num_pairs + np.arange(count)] = 1.0
    objective = np.concatenate([np.zeros(num_pairs), -np.ones(count)])
    bounds = [(0.0, 1.0)] * num_pairs + [(0.0, float(target[i])) for i in free]
    result = linprog(objective, A_ub=constraint, b_ub=bound, bounds=bounds, method="highs")
    if result.status != 0:
        return None
    shares = np.zeros((count, count))
    rows, cols = np.array(pairs).T
    shares[rows, cols] = np.clip(result.x[:num_pairs], 0.0, 1.0)
    return shares


def _flow_free_weights(free, pair_mass, fixed_inflow, target, pick):
    """Same optimum as `_solve_free_weights`, by augmenting paths between tokens.

    assigned[a, b] is the mass of pair {free[a], free[b]} currently sent to free[a]. A token above
    its cap q can pass mass along a pair it holds to the pair's other token; a shortest chain of
    such moves ending at a token below its cap raises sum_i min(q_i, inflow_i). When no such chain
    exists the assignment is a maximum flow (the min-cut certificate is the reachable set).
    """
    index = np.asarray(free)
    mass = pair_mass[np.ix_(index, index)]
    assigned = mass * pick[np.ix_(index, index)]
    caps = target[index]
    inflow = fixed_inflow + assigned.sum(axis=1)
    tolerance = 1e-15
    count = len(free)
    _direct_moves(assigned, inflow - caps, tolerance)
    inflow = fixed_inflow + assigned.sum(axis=1)
    for _ in range(50 * count * count):
        excess = inflow - caps
        sources, sinks = excess > tolerance, excess < -tolerance
        if not sources.any() or not sinks.any():
            break
        parent = np.full(count, -1)
        visited, frontier, found = sources.copy(), sources.copy(), -1
        while found < 0 and frontier.any():
            frontier_ids = np.nonzero(frontier)[0]
            movable = assigned[frontier_ids] > tolerance          # (frontier, count)
            reached = movable.any(axis=0) & ~visited
            if not reached.any():
                break
            parent[reached] = frontier_ids[movable[:, reached].argmax(axis=0)]
            visited |= reached
            frontier = reached
            hits = np.nonzero(reached & sinks)[0]
            if len(hits):
                found = int(hits[0])
        if found < 0:
            break
        path = [found]
        while parent[path[-1]] >= 0:
            path.append(int(parent[path[-1]]))
        path.reverse()  # source ... found
        amount = min(excess[path[0]], -excess[found],
                     min(assigned[a, b] for a, b in zip(path[:-1], path[1:])))
        for a, b in zip(path[:-1], path[1:]):
            assigned[a, b] -= amount
            assigned[b, a] += amount
        inflow[path[0]] -= amount
        inflow[found] += amount
    shares = pick[np.ix_(index, index)].copy()  # massless pairs keep the rank rule
    np.divide(assigned, mass, out=shares, where=mass > 0)
    return np.clip(shares, 0.0, 1.0)


def _direct_moves(assigned, excess, tolerance):
    """Augmenting paths of length one, in bulk: each token above its cap hands mass held on pairs
    with tokens below their caps straight to them (most of the augmentations, in one pass per
    source). `assigned` and `excess` are updated in place; the path search finishes the job."""
    for source in np.nonzero(excess > tolerance)[0]:
        deficit = np.clip(-excess, 0.0, None)
        moves = np.minimum(assigned[source], deficit)
        moves[source] = 0.0
        moves = np.diff(np.minimum(np.cumsum(moves), excess[source]), prepend=0.0)  # no more than the excess
        assigned[source] -= moves
        assigned[:, source] += moves
        excess += moves
        excess[source] -= moves.sum()


def build_pair_stage(first: np.ndarray, second: np.ndarray, target: np.ndarray,
                     free_tokens: int | None = None, bottom: int | None = None,
                     solver: str = "flow") -> PairStage:
    """Solve one two-input stage against the final target law."""
    num_symbols = len(target)
    key = target - first * second
    if bottom is not None:
        key = key.copy()
        key[bottom] = -np.inf  # ⊥ has no target mass: rank it last (spec A4)
    order = np.argsort(-key, kind="stable")
    ranks = np.empty(num_symbols, dtype=np.int64)
    ranks[order] = np.arange(num_symbols)

    # Fixed rule everywhere: the higher-ranked (smaller rank) token wins.
    pick = (ranks[:, None] < ranks[None, :]).astype(np.float64)
    np.fill_diagonal(pick, 1.0)
    pair_mass = np.outer(first, second)
    pair_mass = pair_mass + pair_mass.T
    np.fill_diagonal(pair_mass, 0.0)
    base = first * second

    num_free = num_symbols if free_tokens is None else min(free_tokens, num_symbols)
    free = [int(t) for t in order[:num_free]]
    if len(free) >= 2:
        free_mask = np.zeros(num_symbols, dtype=bool)
        free_mask[free] = True
        # inflow to each free token from pairs with a fixed weight (its partner is not free)
        fixed_inflow = base[free] + (pair_mass[free][:, ~free_mask] * pick[free][:, ~free_mask]).sum(axis=1)
        if solver == "flow":
            weights = _flow_free_weights(free, pair_mass, fixed_inflow, target, pick)
        else:
            weights = _solve_free_weights(free, pair_mass, fixed_inflow, target)
        if weights is not None:  # on solver failure the rank rule stays: still exact (spec A7)
            upper = np.triu(np.ones((len(free), len(free)), dtype=bool), 1)
            a, b = np.nonzero(upper)
            index = np.asarray(free)
            pick[index[a], index[b]] = weights[a, b]
            pick[index[b], index[a]] = 1.0 - weights[a, b]

    law = np.clip(base + (pair_mass * pick).sum(axis=1), 0.0, None)
    law = law / law.sum()
    return PairStage(pick_matrix=pick, law=law, ranks=ranks)
