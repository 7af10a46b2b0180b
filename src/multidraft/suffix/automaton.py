"""A suffix automaton over token ids, with occurrence counts, and the frequency-weighted draft trees grown from it.

Why an automaton: it is built online in amortised O(1) per token (tokens are appended as a decode accepts them),
takes linear space, and one state stands for every occurrence of a substring, so the counts of what followed a
matched suffix are read off its transitions (SuffixDecoding, arXiv 2411.04975, uses a depth-limited suffix tree
for the same purpose; an automaton needs no depth limit and no per-depth copies).

Layout, chosen for speed and memory in pure Python:
- per state: `length` (longest string), `link` (suffix link), `count` (occurrences = |endpos|), `first_edge`
  in `array('i')` columns (4 bytes each);
- transitions in one dict keyed by `state * KEY + token + 1` (lookups), plus a singly linked edge list per state
  (`edge_token`, `edge_next`) to enumerate a state's continuations.
Documents of a store are joined with SEPARATOR (-1): a pattern never contains it, so no match crosses documents,
and drafts stop there.
"""

from __future__ import annotations

import heapq
import itertools
import sys
from array import array
from typing import Iterable, Optional

SEPARATOR = -1
KEY = 1 << 22           # > any vocabulary size + 1; a state's transitions occupy keys [state*KEY, state*KEY + KEY)
MAX_TOKEN_ID = KEY - 2


class SuffixAutomaton:
    """The suffix automaton of one growing token sequence (`extend` appends a token)."""

    def __init__(self, tokens: Iterable[int] = ()):
        self.length = array("i", [0])
        self.link = array("i", [-1])
        self.count = array("i", [0])
        self.last_end = array("i", [-1])       # the latest end position of the state's strings (recency)
        self.first_edge = array("i", [-1])
        self.edge_token = array("i")
        self.edge_next = array("i")
        self.trans: dict[int, int] = {}
        self._ranked: dict = {}                 # (state, min_prob) -> ranked continuations; reset on extend
        self.last = 0
        self.num_tokens = 0
        for token in tokens:
            self.extend(token)

    @property
    def num_states(self) -> int:
        return len(self.length)

    def _new_state(self, length: int, link: int, count: int, last_end: int = -1) -> int:
        self.length.append(length)
        self.link.append(link)
        self.count.append(count)
        self.last_end.append(last_end)
        self.first_edge.append(-1)
        return len(self.length) - 1

    def _add_edge(self, state: int, token: int, target: int) -> None:
        self.trans[state * KEY + token + 1] = target
        self.edge_token.append(token)
        self.edge_next.append(self.first_edge[state])
        self.first_edge[state] = len(self.edge_token) - 1

    def extend(self, token: int) -> None:
        """Append one token (>= 0, or SEPARATOR)."""
        token = int(token)
        if not SEPARATOR <= token <= MAX_TOKEN_ID:
            raise ValueError(f"token id {token} is outside 0..{MAX_TOKEN_ID}")
        trans, length, link = self.trans, self.length, self.link
        offset = token + 1
        cur = self._new_state(length[self.last] + 1, 0, 0)
        p = self.last
        while p != -1 and p * KEY + offset not in trans:
            self._add_edge(p, token, cur)
            p = link[p]
        if p != -1:
            q = trans[p * KEY + offset]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                # Split q: the clone takes the strings of q up to length[p] + 1, which now also end here.
                clone = self._new_state(length[p] + 1, link[q], self.count[q], self.last_end[q])
                edge = self.first_edge[q]
                while edge != -1:
                    edge_token = self.edge_token[edge]
                    self._add_edge(clone, edge_token, trans[q * KEY + edge_token + 1])
                    edge = self.edge_next[edge]
                while p != -1 and trans.get(p * KEY + offset) == q:
                    trans[p * KEY + offset] = clone
                    p = link[p]
                link[q] = clone
                link[cur] = clone
        self.last = cur
        position = self.num_tokens
        self.num_tokens += 1
        if self._ranked:
            self._ranked = {}
        # Every suffix of the text gained an end position: walk the suffix-link path and count it.
        count, last_end = self.count, self.last_end
        state = cur
        while state > 0:
            count[state] += 1
            last_end[state] = position
            state = link[state]

    # ----- queries -----
    def step(self, state: int, matched: int, token: int) -> tuple[int, int]:
        """Longest-match walk: (state, matched) for a context, extended by `token`.

        `matched` is the length of the longest suffix of the context that occurs in this text; the walk falls back
        along suffix links until the token extends a match (amortised O(1) per token)."""
        trans, link, length = self.trans, self.link, self.length
        offset = token + 1
        while True:
            target = trans.get(state * KEY + offset)
            if target is not None:
                return target, matched + 1
            if state == 0:
                return 0, 0
            state = link[state]
            matched = length[state]

    def match(self, tokens) -> tuple[int, int]:
        """(state, length) of the longest suffix of `tokens` that occurs in this text."""
        state, matched = 0, 0
        for token in tokens:
            state, matched = self.step(state, matched, token)
        return state, matched

    def children(self, state: int) -> list[tuple[int, int, int]]:
        """(token, target state, occurrences) of every continuation of `state`'s strings."""
        out = []
        edge = self.first_edge[state]
        trans, count, base = self.trans, self.count, state * KEY + 1
        while edge != -1:
            token = self.edge_token[edge]
            target = trans[base + token]
            out.append((token, target, count[target]))
            edge = self.edge_next[edge]
        return out

    def draft_tree(self, state: int, budget: int, min_prob: float = 0.0, stop_tokens=frozenset(),
                   max_depth: Optional[int] = None, chain: bool = False) -> tuple[list[int], list[int], list[float], list[int]]:
        """Best-first draft tree after `state`: the `budget` most probable continuations (as a tree); with `chain`,
        only the most probable child of each node (a single path).

        A node's probability is the product along its path of count(child) / count(continuations of the parent),
        the empirical law of what followed the matched suffix. Nodes under `min_prob` are not drafted; tokens in
        `stop_tokens` (EOS) and SEPARATOR are never drafted. Returns (tokens, parents, probabilities, counts)
        with parents before children (parent -1 = the root)."""
        tokens: list[int] = []
        parents: list[int] = []
        probs: list[float] = []
        counts: list[int] = []
        if budget <= 0:
            return tokens, parents, probs, counts
        heap: list = []
        order = itertools.count()     # equal probabilities: the first pushed (more frequent, then newer) first
        self._push_children(heap, state, -1, 1.0, 0, stop_tokens, min_prob, order, chain)
        while heap and len(tokens) < budget:
            neg_prob, _, token, target, parent, depth, occurrences = heapq.heappop(heap)
            node = len(tokens)
            tokens.append(token)
            parents.append(parent)
            probs.append(-neg_prob)
            counts.append(occurrences)
            if max_depth is None or depth < max_depth:
                self._push_children(heap, target, node, -neg_prob, depth, stop_tokens, min_prob, order, chain)
        return tokens, parents, probs, counts

    def ranked_children(self, state: int, min_prob: float = 0.0) -> tuple[int, list]:
        """(total, [(count, token, target), ...]): the continuations of `state` most frequent first (ties: the most
        recently seen first), keeping those with count >= min_prob x total (no deeper node can pass the
        threshold otherwise). `total` counts every continuation, SEPARATOR and EOS included, and excludes the
        occurrence that ends the text (it has no continuation yet). Memoised until the next `extend`, which
        makes repeated drafting from a store (unchanged between requests) cheap."""
        key = (state, min_prob)
        cached = self._ranked.get(key)
        if cached is not None:
            return cached
        count, last_end, trans, edge_token, edge_next = self.count, self.last_end, self.trans, self.edge_token, \
            self.edge_next
        total = count[state] - (1 if last_end[state] == self.num_tokens - 1 else 0)
        floor = min_prob * total
        kept = []
        base = state * KEY + 1
        edge = self.first_edge[state]
        while edge != -1:
            token = edge_token[edge]
            target = trans[base + token]
            occurrences = count[target]
            if occurrences >= floor:
                kept.append((occurrences, last_end[target], token, target))
            edge = edge_next[edge]
        kept.sort(reverse=True)
        result = (total, [(c, token, target) for c, _, token, target in kept])
        self._ranked[key] = result
        return result

    def _push_children(self, heap, state, node, prob, depth, stop_tokens, min_prob, order, chain=False) -> None:
        total, kids = self.ranked_children(state, min_prob)
        if total <= 0:
            return
        for occurrences, token, target in kids:
            child_prob = prob * occurrences / total
            if child_prob < min_prob:
                break                                       # sorted: the rest are rarer still
            if token == SEPARATOR or token in stop_tokens:
                continue
            heapq.heappush(heap, (-child_prob, next(order), token, target, node, depth + 1, occurrences))
            if chain:
                break

    def memory_bytes(self) -> int:
        """Bytes held: the array columns, the transition dict's table, and its key and value int objects."""
        arrays = (self.length, self.link, self.count, self.last_end, self.first_edge, self.edge_token, self.edge_next)
        size = sum(a.buffer_info()[1] * a.itemsize for a in arrays)
        entries = len(self.trans)
        return size + sys.getsizeof(self.trans) + entries * (sys.getsizeof(KEY * 1000) + sys.getsizeof(1 << 20))
