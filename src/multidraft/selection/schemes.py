"""Scheme registry and the public functions of `multidraft.selection`."""

from __future__ import annotations

import math

import numpy as np
import torch

from multidraft.errors import InvalidOptionError
from multidraft.selection import optimal
from multidraft.selection.alphabet import ReducedAlphabet
from multidraft.selection.base import SelectionPlan
from multidraft.selection.importance import ClassicalIS, PairChain, SingleCandidate, TupleTable, TwoStepPlan
from multidraft.selection.specinfer import SpecInferPlan
from multidraft.selection.spectr import SpecTrPlan
from multidraft.selection.validation import (
    check_candidates,
    check_inputs,
    check_options,
    rows_identical,
)

DEFAULT_ALPHABET_SIZE = 40
DEFAULT_FREE_TOKENS = 5
# Classical IS's exact law sums, for each of the n symbols a draft can propose, over the distinct sums of the other
# K - 1 drafts' weights: about n * C(n + K - 2, K - 1) terms for identical drafts (sums of a multiset coincide) and
# K n^K otherwise. Measured (benchmarks/results/2026-11-23-selection/selection_is_alphabet.py --cost, process CPU
# time, one thread, AVX2 EPYC; selection_is_cost.log beside it): 1.5-6 ns a term (the old budget assumed 80 ns,
# a guess, and so cut the alphabet of a 3,000-token flat law to ~1,400 tokens at K = 2 and lost to SpecInfer there,
# issue #33). This budget is ~0.06-0.14 s a position and keeps the whole support of a 3,000-token law at K = 2
# (identical drafts on a 49k vocabulary: 4,471 tokens at K = 2, 340 at K = 3, 102 at K = 4; different drafts 3,161 / 187 / 46).
CLASSICAL_IS_TERM_BUDGET = 20_000_000
# "auto" alphabet of the truncated LP: the target's support, at most this many tokens. A stage costs O(M^2) (pair
# masses plus an s-token LP), measured 10 ms a position at M = 1,024, 45 ms at 2,048, 0.12 s at 3,000 (same log;
# the old cap of 256 assumed 50 ms there, and cut wide supports without top-p to q(top 256)).
TRUNCATED_LP_AUTO_MAX = 3072
MAX_ENUMERATED_ENTRIES = 20_000_000  # V^K tuples times V outputs held by output_distribution

# scheme name -> allowed options with defaults
SCHEME_OPTIONS = {
    "speculative": {},
    "specinfer": {},
    "spectr": {},
    "is": {"alphabet_size": "auto"},
    "is_lp": {"alphabet_size": DEFAULT_ALPHABET_SIZE, "lp_solver": "flow"},
    "is_lp_truncated": {"s": DEFAULT_FREE_TOKENS, "alphabet_size": "auto", "lp_solver": "flow"},
    "optimal_lp": {},
}
SCHEMES = tuple(SCHEME_OPTIONS)
#: Every scheme keeps the target law exactly (tested by enumeration in tests/test_selection*.py).
LOSSLESS = {name: True for name in SCHEMES}


def _check_integer_option(name, value, minimum, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        extra = " or None to disable" if allow_none else ""
        raise InvalidOptionError(f"option {name} must be an integer >= {minimum}{extra}; got {value!r}")
    return int(value)


def classical_is_law_cost(num_symbols: int, num_drafts: int, identical: bool) -> int:
    """Terms the exact classical-IS law costs on `num_symbols` symbols that drafts can propose."""
    if identical:
        return num_symbols * math.comb(num_symbols + num_drafts - 2, num_drafts - 1)
    return num_drafts * num_symbols ** num_drafts


def classical_is_alphabet_size(num_drafts: int, target_support: int, draft_support: int,
                               identical: bool) -> int:
    """The "auto" alphabet of classical IS: the target's support if its exact law fits the budget, else the
    largest M that does.

    Why the support: a token the target gives no mass has IS weight q/p = 0 whether it is kept or merged into ⊥,
    so keeping exactly the target's support loses no acceptance at all (with top-k / top-p on the target it is
    usually a few dozen tokens). Only when the support is wider than the budget does the alphabet truncate, and
    the budget counts the work really done (distinct weight sums over the symbols the drafts can propose), priced
    at the measured cost of a term (CLASSICAL_IS_TERM_BUDGET): the whole support up to ~3,000 tokens at K = 2,
    ~340 at K = 3, ~100 at K = 4 on a 49k vocabulary (identical drafts; fewer for different drafts).
    """
    size = max(1, target_support)
    while size > 1 and classical_is_law_cost(min(size, draft_support) + 1, num_drafts, identical) \
            > CLASSICAL_IS_TERM_BUDGET:
        size -= 1
    return size


def _build_importance_plan(scheme, draft, target, settings):
    alphabet_size = settings["alphabet_size"]
    if alphabet_size == "auto" and scheme == "is":
        alphabet_size = classical_is_alphabet_size(draft.shape[0], int((target > 0).sum()),
                                                   int((draft > 0).any(dim=0).sum()), rows_identical(draft))
    elif alphabet_size == "auto" and scheme == "is_lp_truncated":
        # The paper's M = 40 caps acceptance at q(top 40) whenever the target's support is wider (no top-p, or a
        # flat top-p set); tokens outside the support need no symbol (no target mass), so keeping the support
        # loses nothing. alphabet_size=40 gives the paper's setting.
        alphabet_size = max(1, min(int((target > 0).sum()), TRUNCATED_LP_AUTO_MAX))
    alphabet_size = _check_integer_option("alphabet_size", alphabet_size, 1, allow_none=True)
    alphabet = ReducedAlphabet(draft, target, alphabet_size)
    num_drafts = draft.shape[0]
    if num_drafts == 1:
        rule = SingleCandidate(alphabet.draft)
    elif scheme == "is":
        rule = ClassicalIS(alphabet.draft, alphabet.target, identical=rows_identical(draft))
    else:
        free_tokens = None
        if scheme == "is_lp_truncated":
            free_tokens = _check_integer_option("s", settings["s"], 0)
        solver = settings["lp_solver"]
        if solver not in ("flow", "highs"):
            raise InvalidOptionError(f"option lp_solver must be 'flow' or 'highs', got {solver!r}")
        rule = PairChain(alphabet.draft, alphabet.target, free_tokens, alphabet.bottom, solver)
    return TwoStepPlan(alphabet, rule)


def _build_optimal_plan(draft, target):
    draft_np, target_np = draft.cpu().numpy(), target.cpu().numpy()
    table, law = optimal.optimal_is_table(draft_np, target_np)
    alphabet = ReducedAlphabet(draft, target, None)
    return TwoStepPlan(alphabet, TupleTable(table, law, len(target_np), draft_np.shape[0]))


def build_plan(scheme: str, draft_probs, target_probs, **options) -> SelectionPlan:
    """Validate the inputs and build the scheme's rule for one position.

    The plan depends only on the laws, so a caller verifying many candidate tuples at one tree node
    can build it once and call `plan.sample(candidates, generator)` for each (spec A7).
    """
    if scheme not in SCHEME_OPTIONS:
        raise InvalidOptionError(f"unknown selection scheme {scheme!r}; choose one of: {', '.join(SCHEMES)}")
    settings = check_options(scheme, options, SCHEME_OPTIONS[scheme])
    draft, target = check_inputs(draft_probs, target_probs)
    num_drafts = draft.shape[0]
    if scheme == "speculative":
        if num_drafts != 1:
            raise InvalidOptionError(
                f"scheme 'speculative' takes exactly one draft, got K = {num_drafts}; "
                "use 'specinfer', 'spectr' or an 'is*' scheme for several drafts"
            )
        return SpecInferPlan(draft, target)
    if scheme == "specinfer":
        return SpecInferPlan(draft, target)
    if scheme == "spectr":
        if not rows_identical(draft):
            raise InvalidOptionError(
                "scheme 'spectr' needs identical drafts (every row of draft_probs equal); "
                "use 'specinfer' or 'is_lp_truncated' for non-identical drafts"
            )
        return SpecTrPlan(draft, target)
    if scheme == "optimal_lp":
        return _build_optimal_plan(draft, target)
    return _build_importance_plan(scheme, draft, target, settings)


def select(scheme: str, candidates, draft_probs, target_probs, generator: torch.Generator | None = None,
           **options) -> tuple[int, bool]:
    """Choose one output token from the K drafted `candidates`; its law is exactly `target_probs`.

    Returns (token, accepted): `accepted` is True when the token came from the accept branch (it is
    then one of the candidates); False means it was drawn from a residual / correction law, which can
    still coincide with a candidate. Drafts that continue are `surviving_drafts(candidates, token)`.
    """
    plan = build_plan(scheme, draft_probs, target_probs, **options)
    vocab_size = plan_vocab_size(draft_probs)
    ids = check_candidates(candidates, len(draft_probs), vocab_size)
    return plan.sample(ids, generator)


def plan_vocab_size(draft_probs) -> int:
    return int(draft_probs.shape[-1]) if hasattr(draft_probs, "shape") else len(draft_probs[0])


def _enumerate(scheme, draft_probs, target_probs, options):
    plan = build_plan(scheme, draft_probs, target_probs, **options)
    draft, _ = check_inputs(draft_probs, target_probs)
    draft_np = draft.cpu().numpy()
    num_drafts, vocab_size = draft_np.shape
    if vocab_size ** (num_drafts + 1) > MAX_ENUMERATED_ENTRIES:
        raise InvalidOptionError(
            f"exact enumeration needs V^(K+1) = {vocab_size ** (num_drafts + 1)} entries "
            f"(limit {MAX_ENUMERATED_ENTRIES}); it is meant for small alphabets (V <= ~50, K <= 3)"
        )
    tuples = optimal.all_tuples(vocab_size, num_drafts)
    probs = optimal.tuple_probabilities(draft_np, tuples)
    accept, residual = plan.tuple_laws(tuples)
    return tuples, probs, accept, residual


def output_distribution(scheme: str, draft_probs, target_probs, **options) -> np.ndarray:
    """Exact law of the selected token, by enumerating every candidate tuple (small V and K only)."""
    _, probs, accept, residual = _enumerate(scheme, draft_probs, target_probs, options)
    return probs @ (accept + residual)


def acceptance_probability(scheme: str, draft_probs, target_probs, event: str = "hit", **options) -> float:
    """Exact probability, by enumeration, that the output is one of the candidates.

    event="hit" (default): P(Y in set(X)), the paper's objective. event="accept": P(accept branch),
    the quantity the closed forms give (`closed_form_acceptance`); it is <= the hit probability.
    """
    if event not in ("hit", "accept"):
        raise InvalidOptionError(f"event must be 'hit' or 'accept', got {event!r}")
    tuples, probs, accept, residual = _enumerate(scheme, draft_probs, target_probs, options)
    if event == "accept":
        return float(probs @ accept.sum(axis=1))
    in_set = np.zeros_like(accept, dtype=bool)
    in_set[np.repeat(np.arange(len(tuples)), tuples.shape[1]), tuples.ravel()] = True
    return float(probs @ ((accept + residual) * in_set).sum(axis=1))


def closed_form_acceptance(scheme: str, draft_probs, target_probs, **options) -> float:
    """Accept-branch probability from the laws alone (works at vocabulary scale).

    speculative: sum min(p, q); specinfer: 1 - prod(1 - beta_k); spectr: 1 - (1 - beta(rho*))^K;
    IS schemes and optimal_lp: q(kept) * sum min(q~, p_I).
    """
    return build_plan(scheme, draft_probs, target_probs, **options).accept_branch_closed_form()


def optimal_acceptance(draft_probs, target_probs, method: str = "closed_form") -> float:
    """P*(acc): the best hit probability any valid rule can reach with these drafts."""
    draft, target = check_inputs(draft_probs, target_probs)
    draft_np, target_np = draft.cpu().numpy(), target.cpu().numpy()
    if method == "closed_form":
        return optimal.closed_form_optimum(draft_np, target_np)
    if method == "lp":
        return optimal.optimal_transport_value(draft_np, target_np)
    raise InvalidOptionError(f"method must be 'closed_form' or 'lp', got {method!r}")


def theorem2_condition(draft_probs, target_probs, tolerance: float = 1e-12) -> bool:
    """Theorem 2 (K-draft form): True iff q(S) >= prod_k p_k(S) for every token set S, i.e. P* = 1."""
    draft, target = check_inputs(draft_probs, target_probs)
    return optimal.theorem2_holds(draft.cpu().numpy(), target.cpu().numpy(), tolerance)


def surviving_drafts(candidates, token: int) -> torch.Tensor:
    """Boolean mask (K,) of drafts that continue after `token` was emitted: those that drafted it.

    Exact even when the token came from a residual draw (spec §4, A3).
    """
    ids = torch.as_tensor(candidates).reshape(-1)
    return ids == int(token)
