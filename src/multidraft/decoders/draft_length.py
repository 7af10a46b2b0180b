"""How many drafted tokens are worth verifying: the draft length that maximises tokens per second.

Why: a step that verifies a draft of k tokens yields E(k) tokens on average and costs one forward of k + 1 new
tokens. Where that forward is nearly free (a GPU, or the fast CPU kernel up to ~4 tokens) long drafts pay; where
it is not (an AVX2 CPU with MKL: 8 new tokens cost ~3.7x one), a 10-token prompt-lookup draft accepted 3 tokens
deep is slower than plain greedy. This module picks k* = argmax E(k) / cost(k + 1) each step from two things
measured while decoding:

- `ForwardCosts`: the seconds of a loop step (drafting, the target's forward, verification) by the number of new
  tokens it verified, kept per model and runner across requests (an exponential average; the machine's load moves
  it). The step's fixed costs count, so a draft is not judged by its forward alone. Unseen sizes are assumed to cost what
  the nearest smaller measured size costs, so the policy tries them once and learns (optimism = exploration).
- `DraftLength`: the request's acceptance, as the chance h_i that a step's run of accepted tokens ends at depth i
  given that it got there (decayed counts over recent steps), shrunk toward the pooled per-token rejection rate
  where a depth has little data. E(k) = 1 + S_1 + ... + S_k with S_i = (1 - h_1)...(1 - h_i). Per-depth rates
  matter for copying drafters: a prompt-lookup draft is often wrong at its first token, but once right it tends
  to stay right for many tokens, which a single geometric rate gets wrong.

Only how much of a draft is verified changes, never how it is verified: every lossless method stays lossless
(a drafted prefix is still a valid draft, with its draft probabilities).
"""

from __future__ import annotations

import threading
import weakref
from typing import Optional

MODES = ("fixed", "adaptive")
# The one default of the library, the commands, the server and the bench: the tokens are the same either way, and
# "fixed" (every drafted token verified, what reproducing a paper's acceptance length asks for) is slower than
# greedy where a verified row is not nearly free (a CPU).
DEFAULT_MODE = "adaptive"


class ForwardCosts:
    """Seconds of a forward of n new tokens (exponential average per n), for one model and runner."""

    def __init__(self, smoothing: float = 0.25):
        self.smoothing = smoothing
        self.seconds: dict[int, float] = {}
        self._lock = threading.Lock()

    def record(self, num_new: int, seconds: float) -> None:
        if num_new < 1 or not seconds > 0:
            return
        with self._lock:
            old = self.seconds.get(num_new)
            self.seconds[num_new] = seconds if old is None else old + self.smoothing * (seconds - old)

    def relative(self, num_new: int) -> float:
        """cost(num_new) / cost(1); 1.0 while a 1-token forward is not measured. Non-decreasing in num_new."""
        measured, one = self._snapshot()
        return 1.0 if one is None else _cost(measured, num_new) / one

    def relatives_up_to(self, largest: int) -> list[float]:
        """[n] = relative(n) for n = 0..largest, from one snapshot (a step's draft-length choice reads dozens)."""
        measured, one = self._snapshot()
        return [1.0 if one is None else _cost(measured, n) / one for n in range(largest + 1)]

    def cost(self, num_new: int) -> float:
        """Seconds of a forward of num_new tokens (see _cost); 1.0 while nothing is measured."""
        return _cost(self._snapshot()[0], num_new)

    def costs_up_to(self, largest: int) -> list[float]:
        """[n] = cost(n) for n = 0..largest, from one snapshot."""
        measured = self._snapshot()[0]
        return [_cost(measured, n) for n in range(largest + 1)]

    def _snapshot(self) -> tuple[list[tuple[int, float]], Optional[float]]:
        """The measured (size, seconds) sorted by size, and a 1-token forward's seconds (None: not measured)."""
        with self._lock:
            return sorted(self.seconds.items()), self.seconds.get(1)


def _cost(measured: list[tuple[int, float]], num_new: int) -> float:
    """Seconds of a forward of num_new tokens, from the measured (size, seconds) sorted by size. A measured size: the
    dearest measured size up to it (noise cannot make more rows look cheaper). An unseen one: between two measured
    sizes, the line through them; past the largest, the line through the two largest (a row costs at least what the
    last measured rows cost each); never below the dearest smaller size. Still optimistic where the cost bends
    upward (a size is then tried once and learnt), but an 8-request batch no longer takes 40 drafted rows for the
    price of 8: with the dearest-smaller rule alone, every unseen size looked free, and the server at 8 clients
    spent its steps exploring (`pld` batched 53.7 against 63.5 tok/s after, the 1.5B on a Zen 5). The cheapest
    measured size when none is that small; 1.0 while nothing is measured."""
    if not measured:
        return 1.0
    below = [(n, s) for n, s in measured if n <= num_new]
    if not below:
        return min(s for _, s in measured)
    floor = max(s for _, s in below)
    n0, s0 = below[-1]
    if n0 == num_new:
        return floor
    if len(below) < len(measured):
        n1, s1 = measured[len(below)]
        return max(floor, s0 + (s1 - s0) * (num_new - n0) / (n1 - n0))
    if len(below) < 2:
        return floor
    na, sa = below[-2]
    return max(floor, s0 + max(0.0, (s0 - sa) / (n0 - na)) * (num_new - n0))


_costs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_costs_lock = threading.Lock()


def forward_costs(lm) -> ForwardCosts:
    """The cost table of `lm` on its current runner (one per model object and runner name)."""
    with _costs_lock:
        per_runner = _costs.setdefault(lm, {})
        return per_runner.setdefault(getattr(lm, "runner", "eager"), ForwardCosts())



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
