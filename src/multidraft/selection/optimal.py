"""The optimum P*(acc) (spec §3.1, §3.3, §5): closed forms and LP oracles.

Closed form (Theorem 3 and its K-draft / non-identical generalisation, a max-flow min-cut):
    P* = min over token sets S of  q(S) + 1 - prod_k p_k(S).
For identical drafts some minimiser is a prefix of the tokens sorted by q/p ascending (p = 0 last),
so P* = min_m Q_m + 1 - P_m^K in O(n log n). Non-identical drafts have no such order: their closed
form enumerates subsets and is limited to small alphabets.
Theorem 2 (K-draft form): P* = 1 iff q(S) >= prod_k p_k(S) for every S.
"""

from __future__ import annotations

import numpy as np

from multidraft.errors import InvalidOptionError

MAX_SUBSET_TOKENS = 16     # 2^16 subsets for the non-identical closed form
MAX_LP_VARIABLES = 300_000  # OT / IS LPs are test oracles only


def _deficit_iid(draft_row: np.ndarray, target: np.ndarray, num_drafts: int) -> float:
    """min_S q(S) - p(S)^K via the sorted-prefix rule."""
    ratio = np.full(len(target), np.inf)
    np.divide(target, draft_row, out=ratio, where=draft_row > 0)
    order = np.argsort(ratio, kind="stable")
    target_prefix = np.concatenate([[0.0], np.cumsum(target[order])])
    draft_prefix = np.concatenate([[0.0], np.cumsum(draft_row[order])])
    return float(np.min(target_prefix - np.minimum(draft_prefix, 1.0) ** num_drafts))


def _deficit_subsets(draft: np.ndarray, target: np.ndarray) -> float:
    """min_S q(S) - prod_k p_k(S) by enumerating every subset."""
    num_symbols = len(target)
    if num_symbols > MAX_SUBSET_TOKENS:
        raise InvalidOptionError(
            f"the closed-form optimum for non-identical drafts enumerates subsets and supports at most "
            f"{MAX_SUBSET_TOKENS} tokens (got {num_symbols}); use identical drafts or method='lp' on a small alphabet"
        )
    masks = ((np.arange(2 ** num_symbols)[:, None] >> np.arange(num_symbols)[None, :]) & 1).astype(np.float64)
    return float(np.min(masks @ target - np.prod(masks @ draft.T, axis=1)))


def deficit(draft: np.ndarray, target: np.ndarray) -> float:
    """min_S q(S) - prod_k p_k(S) (<= 0; S = empty set gives 0)."""
    if np.abs(draft - draft[:1]).max() <= 1e-12:
        return _deficit_iid(draft[0], target, draft.shape[0])
    return _deficit_subsets(draft, target)


def closed_form_optimum(draft: np.ndarray, target: np.ndarray) -> float:
    return 1.0 + deficit(draft, target)


def theorem2_holds(draft: np.ndarray, target: np.ndarray, tolerance: float = 1e-12) -> bool:
    """True when some valid rule always outputs one of the candidates (P* = 1)."""
    return deficit(draft, target) >= -tolerance


def all_tuples(num_symbols: int, num_drafts: int) -> np.ndarray:
    """Every candidate tuple, (n^K, K), in C order (matches np.ravel_multi_index)."""
    return np.indices((num_symbols,) * num_drafts).reshape(num_drafts, -1).T


def tuple_probabilities(draft: np.ndarray, tuples: np.ndarray) -> np.ndarray:
    return np.prod(draft[np.arange(draft.shape[0])[None, :], tuples], axis=1)


def _check_lp_size(num_symbols, num_drafts, what):
    variables = num_symbols ** (num_drafts + 1)
    if variables > MAX_LP_VARIABLES:
        raise InvalidOptionError(
            f"{what} builds an LP with V^(K+1) = {variables} variables (limit {MAX_LP_VARIABLES}); "
            "it is a test oracle for small alphabets: use V <= 8 and K <= 4, or method='closed_form'"
        )


def optimal_transport_value(draft: np.ndarray, target: np.ndarray) -> float:
    """The optimal-transport LP of §3.1: max P(Y in set(X)) over every valid rule pi(y | x)."""
    from scipy import sparse                    # here: scipy.optimize is ~0.5 s of `import multidraft`
    from scipy.optimize import linprog

    num_drafts, num_symbols = draft.shape
    _check_lp_size(num_symbols, num_drafts, "the optimal-transport LP")
    tuples = all_tuples(num_symbols, num_drafts)
    probs = tuple_probabilities(draft, tuples)
    live = probs > 0
    tuples, probs = tuples[live], probs[live]
    num_tuples = len(tuples)
    # variable (t, y) at column t * n + y
    in_set = np.zeros((num_tuples, num_symbols))
    in_set[np.repeat(np.arange(num_tuples), num_drafts), tuples.ravel()] = 1.0
    objective = -(probs[:, None] * in_set).ravel()
    columns = np.arange(num_tuples * num_symbols)
    row_sums = sparse.csr_matrix((np.ones(len(columns)), (columns // num_symbols, columns)),
                                 shape=(num_tuples, len(columns)))
    marginals = sparse.csr_matrix((np.repeat(probs, num_symbols), (columns % num_symbols, columns)),
                                  shape=(num_symbols, len(columns)))
    result = linprog(objective, A_eq=sparse.vstack([row_sums, marginals]).tocsr(),
                     b_eq=np.concatenate([np.ones(num_tuples), target]), bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"optimal-transport LP failed: {result.message}")
    return float(-result.fun)


def optimal_is_table(draft: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The IS LP of §3.3 over every tuple; returns (beta table (n^K, n), exact law p_I)."""
    from scipy import sparse                    # here: scipy.optimize is ~0.5 s of `import multidraft`
    from scipy.optimize import linprog

    num_drafts, num_symbols = draft.shape
    _check_lp_size(num_symbols, num_drafts, "scheme 'optimal_lp'")
    tuples = all_tuples(num_symbols, num_drafts)
    probs = tuple_probabilities(draft, tuples)
    num_tuples = len(tuples)
    membership = np.zeros((num_tuples, num_symbols), dtype=bool)
    membership[np.repeat(np.arange(num_tuples), num_drafts), tuples.ravel()] = True
    # free variables beta_y(t) for live tuples and y in set(t); dead tuples get uniform weights
    live_rows, live_tokens = np.nonzero(membership & (probs[:, None] > 0))
    num_beta = len(live_rows)
    beta_columns = np.arange(num_beta)
    # z_y - sum_t P(t) beta_y(t) <= 0
    upper = sparse.hstack([
        sparse.csr_matrix((-probs[live_rows], (live_tokens, beta_columns)), shape=(num_symbols, num_beta)),
        sparse.identity(num_symbols, format="csr"),
    ]).tocsr()
    live_tuple_ids, tuple_rows = np.unique(live_rows, return_inverse=True)
    equal = sparse.csr_matrix((np.ones(num_beta), (tuple_rows.ravel(), beta_columns)),
                              shape=(len(live_tuple_ids), num_beta + num_symbols))
    objective = np.concatenate([np.zeros(num_beta), -np.ones(num_symbols)])
    bounds = [(0.0, 1.0)] * num_beta + [(0.0, float(t)) for t in target]
    result = linprog(objective, A_ub=upper, b_ub=np.zeros(num_symbols), A_eq=equal,
                     b_eq=np.ones(len(live_tuple_ids)), bounds=bounds, method="highs")
    if result.status != 0:
        raise RuntimeError(f"importance-sampling LP failed: {result.message}")
    table = membership / membership.sum(axis=1, keepdims=True)
    table[live_rows, live_tokens] = np.clip(result.x[:num_beta], 0.0, 1.0)
    # renormalise over set(x), then recompute p_I from the weights actually used (spec §2, §3.3)
    table = table * membership
    totals = table.sum(axis=1, keepdims=True)
    table = np.where(totals > 0, table / np.where(totals > 0, totals, 1.0), membership / membership.sum(1, keepdims=True))
    law = probs @ table
    return table, law / law.sum()
