"""How many drafted tokens are worth verifying: the draft length that maximises tokens per second.

Why: a step that verifies a draft of k tokens yields E(k) tokens on average and costs one forward of k + 1 new
tokens. Where that forward is nearly free (a GPU, or the fast CPU kernel up to ~4 tokens) long drafts pay; where
it is not (an AVX2 CPU with MKL: 8 new tokens cost ~3.7x one), a 10-token prompt-lookup draft accepted 3 tokens
deep is slower than plain greedy. This module picks k* = argmax E(k) / cost(k + 1) each step from two things
measured while decoding:

- `ForwardCosts`: the seconds of a loop step (drafting, the target's forward, verification) by the number of new
  tokens it verified, kept per model, runner and context length (`context_bucket`) across requests (the least of
  each size's last few steps: the machine's load moves it, a step slowed by another process does not). The step's
  fixed costs count, so a draft is not judged by its forward alone. Every estimate leans optimistic, so that the
  policy tries a size and learns (optimism = exploration): an estimate too low is measured again as soon as the
  policy acts on it, one too high never would be.
- `DraftLength`: the request's acceptance, as the chance h_i that a step's run of accepted tokens ends at depth i
  given that it got there (decayed counts over recent steps), shrunk toward the pooled per-token rejection rate
  where a depth has little data. E(k) = 1 + S_1 + ... + S_k with S_i = (1 - h_1)...(1 - h_i). Per-depth rates
  matter for copying drafters: a prompt-lookup draft is often wrong at its first token, but once right it tends
  to stay right for many tokens, which a single geometric rate gets wrong.

Only how much of a draft is verified changes, never how it is verified: every lossless method stays lossless
(a drafted prefix is still a valid draft, with its draft probabilities).
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections import deque
from typing import Optional

MODES = ("fixed", "adaptive")
# The one default of the library, the commands, the server and the bench: the tokens are the same either way, and
# "fixed" (every drafted token verified, what reproducing a paper's acceptance length asks for) is slower than
# greedy where a verified row is not nearly free (a CPU).
DEFAULT_MODE = "adaptive"


class ForwardCosts:
    """Seconds of a step of n new tokens, for one model and runner: per n, the least of its last `window` steps, and
    for an n measured fewer times than that, no more than what the sizes measured `window` times say (`_optimistic`).

    Why: a VM's noise only ever slows a step (another process on a core, a dip in memory bandwidth); on the 2-core VMs
    of the benchmarks steps of the same size vary by 1.5-2x. An average keeps a slowed step for as long as its size
    goes unmeasured, and a size the policy thinks dear it never measures again: one slowed step could cut a copying
    drafter's drafts short for the rest of a process. The least of the last few ignores a slowed step and still
    follows a lasting change of load within `window` steps of each size; a size seen only once or twice is priced
    optimistically, so the policy tries it and learns (an estimate too low is measured again as soon as the policy
    acts on it, one too high never would be)."""

    WINDOW = 4

    def __init__(self, window: int = WINDOW):
        self.window = window
        self.seconds: dict[int, float] = {}             # n -> the least of its recent steps
        self._recent: dict[int, deque] = {}
        self._lock = threading.Lock()

    def record(self, num_new: int, seconds: float) -> None:
        if num_new < 1 or not seconds > 0:
            return
        with self._lock:
            recent = self._recent.setdefault(num_new, deque(maxlen=self.window))
            recent.append(seconds)
            self.seconds[num_new] = min(recent)

    def relative(self, num_new: int) -> float:
        """cost(num_new) / cost(1); 1.0 while a 1-token forward is not measured. Non-decreasing in num_new."""
        measured, one = self._snapshot()
        if one is None:
            return 1.0
        cost, cost_of_one = _costs_of(measured, [num_new, 1])
        return cost / cost_of_one

    def relatives_up_to(self, largest: int) -> list[float]:
        """[n] = relative(n) for n = 0..largest, from one snapshot (a step's draft-length choice reads dozens)."""
        measured, one = self._snapshot()
        if one is None:
            return [1.0] * (largest + 1)
        costs = _costs_of(measured, range(max(largest, 1) + 1))
        return [cost / costs[1] for cost in costs[: largest + 1]]

    def cost(self, num_new: int) -> float:
        """Seconds of a forward of num_new tokens (see _cost); 1.0 while nothing is measured."""
        return _cost(self._snapshot()[0], num_new)

    def costs_up_to(self, largest: int) -> list[float]:
        """[n] = cost(n) for n = 0..largest, from one snapshot."""
        return _costs_of(self._snapshot()[0], range(largest + 1))

    def _snapshot(self) -> tuple[list[tuple[int, float]], Optional[float]]:
        """The measured (size, seconds) sorted by size, each uncertain size priced optimistically, and a 1-token
        forward's seconds (None: not measured). A size set without steps (a test's fixed table) counts as certain."""
        with self._lock:
            measured = sorted(self.seconds.items())
            certain = {n for n, _ in measured if len(self._recent.get(n, ())) >= self.window or n not in self._recent}
            one = self.seconds.get(1)
        return _optimistic(measured, certain), one


def _optimistic(measured: list[tuple[int, float]], certain: set) -> list[tuple[int, float]]:
    """Each size measured fewer than `window` times priced at no more than the curve of the certain sizes there (the
    line through them, as _cost draws it): one slowed step at a depth seen once must not price that depth out."""
    anchors = [(n, s) for n, s in measured if n in certain]
    if not anchors or len(anchors) == len(measured):
        return measured
    capped = _costs_of(anchors, [n for n, _ in measured])
    return [(n, s if n in certain else min(s, cap)) for (n, s), cap in zip(measured, capped)]


def _cost(measured: list[tuple[int, float]], num_new: int) -> float:
    """Seconds of a forward of num_new tokens, from the measured (size, seconds) sorted by size.

    Each measured size stands for the cheapest measured size at or above it: a step of more rows costs no less, and
    noise only slows a step, so every larger size's seconds bound a smaller one's too (a 5-row step slowed by another
    process is priced as the 6-row step measured after it). An unseen size: between two measured sizes, the line
    through them; past the largest, the line through the two largest (a row costs at least what the last measured
    rows cost each), so an 8-request batch does not take 40 drafted rows for the price of 8 (with unseen sizes priced
    as the nearest smaller one, the server at 8 clients spent its steps exploring: `pld` batched 53.7 against 63.5
    tok/s after, the 1.5B on a Zen 5). Below the smallest measured size: its price. 1.0 while nothing is measured."""
    return _costs_of(measured, [num_new])[0]


def _costs_of(measured: list[tuple[int, float]], sizes) -> list[float]:
    """_cost of each of `sizes`, the envelope built once (a step's draft-length choice prices dozens of sizes)."""
    if not measured:
        return [1.0 for _ in sizes]
    envelope, cheapest = [], float("inf")
    for size, seconds in reversed(measured):
        cheapest = min(cheapest, seconds)
        envelope.append((size, cheapest))
    envelope.reverse()
    points = [size for size, _ in envelope]
    return [_on_envelope(envelope, bisect.bisect_right(points, n), n) for n in sizes]


def _on_envelope(envelope: list[tuple[int, float]], at: int, num_new: int) -> float:
    """The price of num_new on the envelope, `at` = the measured sizes <= num_new."""
    if at == 0:
        return envelope[0][1]
    n0, s0 = envelope[at - 1]
    if n0 == num_new:
        return s0
    if at < len(envelope):
        n1, s1 = envelope[at]
        return s0 + (s1 - s0) * (num_new - n0) / (n1 - n0)
    if at < 2:
        return s0
    na, sa = envelope[at - 2]
    return s0 + (s0 - sa) / (n0 - na) * (num_new - n0)


_costs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_costs_lock = threading.Lock()
# Keys in the cache below which a step's cost table is one: above it, one table per doubling (1,024-2,047,
# 2,048-4,095, ...). Why: each drafted row attends to every cached key, so a long context makes rows dear (the 1.5B on
# a Zen 4: 8 rows cost 1.45-1.70x one at 300 keys, 2.94x at 8,000), and one table for all contexts kept a long
# request's prices for the sizes the policy then avoided: after one 6,000-token request, 5 short code edits took
# 22-25% more target calls than in a fresh process, 2-3% with a table per context
# (benchmarks/results/2026-12-07-zen4-cost-by-context).
CONTEXT_BUCKET = 1024


def context_bucket(past: int) -> int:
    """The cost table's bucket of a step over `past` cached keys: 0 below CONTEXT_BUCKET, then one per doubling."""
    return (max(0, past) // CONTEXT_BUCKET).bit_length()


def forward_costs(lm, past: int = 0) -> ForwardCosts:
    """The cost table of `lm` on its current runner for steps over `past` cached keys (one per model object, runner
    name and context bucket). A bucket's table starts from the prices of the nearest shorter context measured (an
    optimistic start: its rows cost at least those, and the policy re-measures what it acts on)."""
    runner, bucket = getattr(lm, "runner", "eager"), context_bucket(past)
    with _costs_lock:
        tables = _costs.setdefault(lm, {})
        table = tables.get((runner, bucket))
        if table is None:
            table = tables[(runner, bucket)] = ForwardCosts()
            shorter = [b for r, b in tables if r == runner and b < bucket]
            if shorter:
                start = tables[(runner, max(shorter))]
                with start._lock:
                    table.seconds = dict(start.seconds)
        return table



class DraftLength:
    """Per-request policy: how deep a draft to ask for and to verify, given the model's forward costs."""

    PROBE_EVERY = 8       # after this many steps that verified nothing, verify one drafted token to re-measure
    DEPTH_PRIOR = 2.0     # steps' worth of weight of the pooled rate in each depth's rejection rate

    def __init__(self, costs: ForwardCosts, prior_rate: float = 0.6, prior_steps: float = 3.0, decay: float = 0.9):
        self.costs = costs
        self.decay = decay
        self.accepted = prior_rate * prior_steps    # decayed counts of accepted drafted tokens ...
        self.trials = prior_steps                   # ... and of accept/reject trials
        self.reached: list[float] = [0.0]           # [i]: decayed steps that verified depth i with 1..i-1 accepted
        self.rejected: list[float] = [0.0]          # [i]: ... and whose run ended there
        self._idle_steps = 0

    @property
    def rate(self) -> float:
        return self.accepted / self.trials

    def best_depth(self, max_depth: int, nodes_at_depth: Optional[list[int]] = None) -> int:
        """The depth k in 0..max_depth with the most expected tokens per unit of forward cost.

        nodes_at_depth[k] = nodes of the draft at depth <= k (a tree has several per depth); a chain by default.
        """
        expected = self.expected_tokens(max_depth)
        relative = self.costs.relatives_up_to((max_depth if nodes_at_depth is None else nodes_at_depth[max_depth]) + 1)
        best, best_value = 0, 1.0 / relative[1]
        for depth in range(1, max_depth + 1):
            nodes = depth if nodes_at_depth is None else nodes_at_depth[depth]
            value = expected[depth] / relative[nodes + 1]
            if value > best_value * (1 + 1e-9):
                best, best_value = depth, value
        return best

    def expected_tokens(self, max_depth: int) -> list[float]:
        """[k] = expected tokens of a step that verifies a chain of k drafted tokens, k = 0..max_depth."""
        pooled = 1.0 - self.rate
        survival, expected = 1.0, [1.0]
        for depth in range(1, max_depth + 1):
            reached = self.reached[depth] if depth < len(self.reached) else 0.0
            rejected = self.rejected[depth] if depth < len(self.rejected) else 0.0
            hazard = (rejected + self.DEPTH_PRIOR * pooled) / (reached + self.DEPTH_PRIOR)
            survival *= 1.0 - hazard
            expected.append(expected[-1] + survival)
        return expected

    def request_depth(self, max_depth: int) -> int:
        """How deep a draft to ask the drafter for (as if it were a chain; at least 1, `choose` may still drop it)."""
        return max(1, min(max_depth, self.best_depth(max_depth)))

    def choose(self, depths: list[int]) -> int:
        """How deep to verify the proposed draft, given its nodes' depths (1 = children of the root)."""
        if not depths:
            return 0
        return self.probe(self.best_depth(max(depths), nodes_by_depth(depths)))

    def probe(self, chosen: int) -> int:
        """The depth to verify given the chosen one: after PROBE_EVERY steps that verified nothing, one token (or
        the rate is never re-learnt)."""
        if chosen > 0:
            self._idle_steps = 0
            return chosen
        self._idle_steps += 1
        if self._idle_steps >= self.PROBE_EVERY:
            self._idle_steps = 0
            return 1
        return 0

    def observe(self, drafted_depth: int, accepted: int) -> None:
        """One verified step: `accepted` of a draft `drafted_depth` deep (a rejection ends the run)."""
        if drafted_depth <= 0:
            return
        self.accepted = self.decay * self.accepted + accepted
        self.trials = self.decay * self.trials + accepted + (1 if accepted < drafted_depth else 0)
        while len(self.reached) <= drafted_depth:
            self.reached.append(0.0)
            self.rejected.append(0.0)
        for depth in range(1, len(self.reached)):
            self.reached[depth] *= self.decay
            self.rejected[depth] *= self.decay
        for depth in range(1, min(accepted + 1, drafted_depth) + 1):
            self.reached[depth] += 1.0
        if accepted < drafted_depth:
            self.rejected[accepted + 1] += 1.0


def nodes_by_depth(depths: list[int]) -> list[int]:
    """[k] = nodes at depth <= k of a draft whose nodes have these depths (1 = children of the root)."""
    counts = [0] * (max(depths, default=0) + 1)
    for depth in depths:
        counts[depth] += 1
    for depth in range(1, len(counts)):
        counts[depth] += counts[depth - 1]
    return counts


def batch_depths(costs: ForwardCosts, base_rows: int, base_tokens: float,
                 requests: list[tuple["DraftLength", list[int]]]) -> list[int]:
    """The global draft budget of one packed forward: a depth per adaptive request.

    The forward already has `base_rows` rows (every request's last token, prefill chunks, drafts verified whole)
    expected to give `base_tokens` tokens. Each adaptive request offers its draft as (policy, nodes_at_depth), with
    nodes_at_depth[k] the rows its draft up to depth k adds (a chain: k). The choice maximises expected tokens
    of the whole step per unit of the step's measured cost (`costs`, by total rows): greedily, each round giving
    one request the deeper cut that raises the step's tokens per cost most. At batch size 1 this is DraftLength's
    own choice; as the batch grows and rows stop being free, drafts shrink (to none where speculation would cost
    more than it saves), which a per-request choice cannot see.
    """
    depths = [0] * len(requests)
    expected = [policy.expected_tokens(len(nodes) - 1) for policy, nodes in requests]
    rows, tokens = base_rows, base_tokens
    cost = costs.costs_up_to(max(1, rows + sum(nodes[-1] for _, nodes in requests)))     # every reachable size
    value = tokens / cost[max(1, rows)]
    while True:
        best = None
        for i, (_, nodes) in enumerate(requests):
            for depth in range(depths[i] + 1, len(nodes)):
                extra_rows = rows + nodes[depth] - nodes[depths[i]]
                candidate = (tokens + expected[i][depth] - expected[i][depths[i]]) / cost[max(1, extra_rows)]
                if candidate > value * (1 + 1e-9) and (best is None or candidate > best[0]):
                    best = (candidate, i, depth)
        if best is None:
            return depths
        value, i, depth = best
        rows += requests[i][1][depth] - requests[i][1][depths[i]]
        tokens += expected[i][depth] - expected[i][depths[i]]
        depths[i] = depth


def add_draft_length_argument(parser) -> None:
    """`--draft-length` for the commands that decode (generate, bench, serve); DEFAULT_MODE as everywhere."""
    parser.add_argument("--draft-length", choices=MODES, default=DEFAULT_MODE,
                        help="adaptive: verify only as much of each draft as pays for its forward on this machine "
                             "(same tokens, measured costs); fixed: every drafted token, as the papers do")


def check_mode(mode) -> str:
    from multidraft.errors import InvalidOptionError

    if mode not in MODES:
        raise InvalidOptionError(f"draft_length must be one of {', '.join(MODES)}, got {mode!r}")
    return mode
