"""SuffixDecoding (`method="suffix"`): frequency-weighted draft trees from suffix automata (arXiv 2411.04975).

Two sources, each a `SuffixAutomaton`:
- the request's own context (prompt + accepted output), extended token by token as the loop accepts them;
- an optional global `SuffixStore` of earlier prompts and outputs (cross-request repetition: agent loops, the
  same edit over many files, second chat turns). The request's prompt and output are added to it at the end.
Per step: find the longest suffix of the context that occurred before in each source (match length m), grow the
most probable continuation tree from each with at most min(max_draft_tokens, alpha x m) nodes (a longer match
predicts more reliably, so it earns a bigger draft), and keep the tree with the higher expected number of
accepted tokens (sum of node probabilities). Verification is the loop's ordinary tree greedy match /
sample-and-match, so the method is lossless.
"""

from __future__ import annotations

import math
from typing import Optional

from multidraft.drafters.base import Drafter, LoopState
from multidraft.errors import InvalidOptionError
from multidraft.suffix.automaton import SuffixAutomaton
from multidraft.suffix.store import SuffixStore
from multidraft.types import Draft

# Defaults tuned on counts (issue 34; benchmarks/results/2026-11-26-agentic-tuning): qwen2.5-coder-1.5b's greedy
# answers on the agent episodes' validation split (4 episodes, 18 steps, <= 256 tokens each), suffix replayed
# exactly on them (eval/drafter_replay.py). A draft token must be likely, not merely possible: min_token_prob 0.7 (a
# node then has at most one child, so tree and chain draft alike). alpha and max_draft_tokens retuned for the
# adaptive draft length, the default since (benchmarks/results/2026-12-03-zen4-draft-confidence): it cuts each draft
# to what pays on the machine's measured forward costs, so the drafter may offer more. Replayed through the policy
# with two cost curves (this 2-core Zen 4's avx512-vnni forward, 8 rows 2.2x one; issue 42's AMX goal, 8 rows 1.3x),
# alpha 2 / 64 tokens against the earlier 0.5 / 32 predicts +3% / +8% on the validation steps and +2% / +7% on the
# test split's 26 steps (never tuned on); alpha 1-4 and min_token_prob 0.2-0.7 are within 1-2% of it.
DEFAULT_MAX_DRAFT_TOKENS = 64
DEFAULT_ALPHA = 2.0
DEFAULT_MIN_TOKEN_PROB = 0.7
MATCH_WINDOW = 64          # the global match is started from the prompt's last 64 tokens (longer gains nothing)


class SuffixDrafter(Drafter):
    """Drafts trees from the context's and the store's suffix automata."""

    name = "suffix"
    cuttable = True

    def __init__(self, lm, store: Optional[SuffixStore] = None, max_draft_tokens: int = DEFAULT_MAX_DRAFT_TOKENS,
                 alpha: float = DEFAULT_ALPHA, min_token_prob: float = DEFAULT_MIN_TOKEN_PROB,
                 use_context: bool = True, update_store: bool = True, tree: bool = True):
        check_options(dict(store=store, max_draft_tokens=max_draft_tokens, alpha=alpha,
                           min_token_prob=min_token_prob, use_context=use_context, update_store=update_store,
                           tree=tree))
        if store is not None:
            store.bind(lm)                      # a store of another tokenizer fails here, before any forward
        self.store = store
        self.max_draft_tokens = max_draft_tokens
        self.alpha = float(alpha)
        self.min_token_prob = float(min_token_prob)
        self.use_context = bool(use_context)
        self.update_store = bool(update_store)
        self.tree = bool(tree)               # False: a chain (the most probable child of each node only)
        self.stop_tokens = frozenset(lm.eos_token_ids)
        self.context: Optional[SuffixAutomaton] = None
        self.synced = 0                          # tokens of state.seq already in the automata / global match
        self.global_state = (0, 0)               # (state, match length) of the context in the store
        self.global_version = -1
        self.last_source = ""                    # "context", "store" or "" (tests, attribution)
        self.last_match = 0

    # ----- the loop's hooks -----
    def begin(self, state: LoopState, prefill_output) -> None:
        self.context = SuffixAutomaton() if self.use_context else None
        self.synced = 0
        self.global_version = -1
        self._sync(state.seq)

    def end(self, state: LoopState) -> None:
        if self.store is not None and self.update_store:
            self.store.add(state.seq)

    def _sync(self, seq: list[int]) -> None:
        """Feed the tokens accepted since the last call to both matchers."""
        new = seq[self.synced:]
        if self.context is not None:
            extend = self.context.extend
            for token in new:
                extend(token)
        store = self.store
        if store is not None:
            automaton = store.automaton
            if store.version != self.global_version:   # the store changed (or first call): match afresh
                self.global_version = store.version
                self.global_state = automaton.match(seq[-MATCH_WINDOW:])
            else:
                state, matched = self.global_state
                for token in new:
                    state, matched = automaton.step(state, matched, token)
                self.global_state = (state, matched)
        self.synced = len(seq)

    def propose(self, state: LoopState, max_tokens: int) -> Draft:
        self._sync(state.seq)
        self.last_source, self.last_match = "", 0
        best = ([], [], [], [])
        best_score, best_source, best_match = 0.0, "", 0
        for source, automaton, node, matched in self._matches():
            budget = min(self.max_draft_tokens, max_tokens, math.ceil(self.alpha * matched - 1e-9))
            if budget <= 0:
                continue
            tree = automaton.draft_tree(node, budget, self.min_token_prob, self.stop_tokens, chain=not self.tree)
            score = sum(tree[2])
            if score > best_score:
                best, best_score, best_source, best_match = tree, score, source, matched
        if not best[0]:
            return Draft()
        self.last_source, self.last_match = best_source, best_match
        return Draft(best[0], best[1], None, {"source": best_source, "match_length": best_match,
                                               "counts": best[3]})

    def _matches(self):
        if self.context is not None:
            # The longest suffix that also ended earlier: the suffix link of the whole context's state.
            node = self.context.link[self.context.last]
            if node > 0:
                yield "context", self.context, node, self.context.length[node]
        if self.store is not None:
            node, matched = self.global_state
            if matched > 0:
                yield "store", self.store.automaton, node, matched


def check_options(options: dict) -> None:
    """The checks that need no model (the method row runs them before anything loads; the constructor too)."""
    store = options["store"]
    if store is not None and not isinstance(store, SuffixStore):
        raise InvalidOptionError(f"store must be a multidraft.suffix.SuffixStore or None, got "
                                 f"{type(store).__name__}")
    max_draft_tokens, alpha, min_token_prob = (options["max_draft_tokens"], options["alpha"],
                                               options["min_token_prob"])
    if isinstance(max_draft_tokens, bool) or not isinstance(max_draft_tokens, int) or max_draft_tokens < 1:
        raise InvalidOptionError(f"max_draft_tokens must be an integer >= 1, got {max_draft_tokens!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < math.inf:
        raise InvalidOptionError(f"alpha must be a finite number > 0, got {alpha!r}")
    if isinstance(min_token_prob, bool) or not isinstance(min_token_prob, (int, float)) \
            or not 0 <= min_token_prob <= 1:
        raise InvalidOptionError(f"min_token_prob must be in [0, 1], got {min_token_prob!r}")
    for name in ("use_context", "update_store", "tree"):
        if not isinstance(options.get(name, True), bool):
            raise InvalidOptionError(f"{name} must be True or False, got {options[name]!r}")
    if not options["use_context"] and store is None:
        raise InvalidOptionError("use_context=False drafts only from a store: pass store=SuffixStore(...)")


def make_drafter(lm, sampler, options):
    return SuffixDrafter(lm, **options)

