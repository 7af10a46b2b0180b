"""Top-k "sausage" lattices over the heads' drafts and the ways to pick paths through them (bpd.md §2.3, §3.4-3.5).

Position 1 of a block is the certain token (the verifier's greedy token), never rescored (A2); column c of
the lattice (0-based) holds the top-k tokens of head c+2. Paths are tuples of per-column ranks.
- `pbest_paths`: the exact p best paths under head scores + alpha * n-gram log-prob, by dynamic programming
  over n-gram histories (§3.5 A3.3; with no LM, the "0-gram" p-best of A3.4). Ties: lower rank tuple first.
- `brute_force_paths`: the same by enumeration (tests only; k**L paths).
- `local_rescore`: greedy left-to-right rescoring with any next-token scorer (neural LM or n-gram, A3.2).
- `oracle_length`: the longest lattice prefix that matches a known greedy future (§3.5 A3.5).
- `paths_to_tree`: merge drafts into one token tree (a trie) verified in one forward.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from multidraft import validation
from multidraft.types import Draft

# logprob_fn(histories, candidates) -> float64 [len(histories), len(candidates)] natural-log P(candidate | history).
LogProbFn = Callable[[list[tuple[int, ...]], np.ndarray], np.ndarray]


@dataclass
class Lattice:
    first_token: int
    tokens: np.ndarray        # int64 [L, k]: column c = top-k token ids of head c+2, best first
    scores: np.ndarray        # float64 [L, k]: their head scores (logits), non-increasing per row

    @property
    def length(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def k(self) -> int:
        return int(self.tokens.shape[1]) if self.tokens.ndim == 2 else 0

    def num_paths(self) -> int:
        return self.k ** self.length

    def path(self, ranks: Sequence[int]) -> list[int]:
        """Draft tokens (after the certain token) of the path with these per-column ranks."""
        return [int(self.tokens[c, r]) for c, r in enumerate(ranks)]

    def vanilla(self) -> list[int]:
        """Plain BPD: every head's argmax (the rank-0 path)."""
        return [int(t) for t in self.tokens[:, 0]] if self.length else []


@dataclass(frozen=True)
class Path:
    tokens: tuple[int, ...]
    score: float
    ranks: tuple[int, ...]


def check_width(lattice_k, num_paths) -> None:
    validation.positive_int("lattice_k", lattice_k)
    validation.positive_int("num_paths", num_paths)


def build_lattice(first_token: int, head_logits: torch.Tensor, k: int,
                  token_ids: Optional[torch.Tensor] = None) -> Lattice:
    """Top-k of every head row ([L, S] logits; column j of a row is token token_ids[j], default j).

    Ties go to the lower token id (A8), so the lattice does not depend on the shortlist's order."""
    logits = head_logits.detach().double().cpu().numpy()
    ids = np.arange(logits.shape[1]) if token_ids is None else token_ids.cpu().numpy().astype(np.int64)
    k = min(k, logits.shape[1])
    tokens = np.empty((logits.shape[0], k), dtype=np.int64)
    scores = np.empty((logits.shape[0], k), dtype=np.float64)
    for row in range(logits.shape[0]):
        values = logits[row]
        # Candidates: everything at least as good as the k-th best value, then an exact (score, id) sort.
        kth = np.partition(values, len(values) - k)[len(values) - k]
        cand = np.flatnonzero(values >= kth)
        order = np.lexsort((ids[cand], -values[cand]))[:k]
        tokens[row], scores[row] = ids[cand[order]], values[cand[order]]
    return Lattice(int(first_token), tokens, scores)


def _top(hyps: list[Path], p: int) -> list[Path]:
    return sorted(hyps, key=lambda h: (-h.score, h.ranks))[:p]


def pbest_paths(lattice: Lattice, p: int, alpha: float = 0.0, logprob_fn: Optional[LogProbFn] = None,
                order: int = 0, context: Sequence[int] = ()) -> list[Path]:
    """The exact p best paths by sum over columns of (head score + alpha * log P_order(token | history)).

    `context` ends with the certain token; it supplies the n-gram history left of column 0 (A5). With no
    logprob_fn, alpha == 0 or order < 1 this is the 0-gram p-best (summed head scores only).
    Exact because a path's future depends only on its last order-1 tokens: keep the p best per such key."""
    use_lm = logprob_fn is not None and alpha != 0 and order >= 1
    width = order - 1 if use_lm else 0
    pre = tuple(int(t) for t in context)[-width:] if width else ()
    hyps: dict[tuple, list[Path]] = {(): [Path((), 0.0, ())]}
    for col in range(lattice.length):
        cands = lattice.tokens[col]
        keys = list(hyps)
        if use_lm:
            histories = [(pre + key)[-width:] if width else () for key in keys]
            lps = logprob_fn(histories, cands)
        cand: dict[tuple, list[Path]] = {}
        for ki, key in enumerate(keys):
            for r, w in enumerate(cands.tolist()):
                inc = float(lattice.scores[col, r])
                if use_lm:
                    inc = inc + alpha * float(lps[ki, r])
                nkey = (key + (w,))[-width:] if width else ()
                bucket = cand.setdefault(nkey, [])
                for h in hyps[key]:
                    bucket.append(Path(h.tokens + (w,), h.score + inc, h.ranks + (r,)))
        hyps = {key: _top(lst, p) for key, lst in cand.items()}
    return _top([h for lst in hyps.values() for h in lst], p)


def brute_force_paths(lattice: Lattice, p: int, alpha: float = 0.0, logprob_fn: Optional[LogProbFn] = None,
                      order: int = 0, context: Sequence[int] = ()) -> list[Path]:
    """Reference for `pbest_paths`: score every one of the k**L paths (same arithmetic, same tie rule)."""
    use_lm = logprob_fn is not None and alpha != 0 and order >= 1
    width = order - 1 if use_lm else 0
    pre = tuple(int(t) for t in context)[-width:] if width else ()
    out = []
    for ranks in itertools.product(range(lattice.k), repeat=lattice.length):
        toks, score = tuple(lattice.path(ranks)), 0.0
        for col, r in enumerate(ranks):
            inc = float(lattice.scores[col, r])
            if use_lm:
                hist = (pre + toks[:col])[-width:] if width else ()
                inc = inc + alpha * float(logprob_fn([hist], lattice.tokens[col])[0, r])
            score = score + inc
        out.append(Path(toks, score, tuple(ranks)))
    return _top(out, p)


class LocalScorer:
    """A left-to-right next-token scorer for local rescoring (a small LM, or an n-gram model)."""

    def begin(self, context: Sequence[int]) -> None:
        raise NotImplementedError

    def logprobs(self, candidates: np.ndarray) -> np.ndarray:
        """Log-probabilities of the candidates as the next token after the current prefix."""
        raise NotImplementedError

    def advance(self, token: int) -> None:
        raise NotImplementedError

    def end(self) -> None:
        pass


def local_rescore(lattice: Lattice, alpha: float, scorer: LocalScorer, context: Sequence[int]) -> Path:
    """Greedy local rescoring (Algorithm 2): at each column pick argmax over S_j of head score + alpha * r,
    with r conditioned on the already rescored prefix. Ties go to the lower rank."""
    if alpha == 0 or lattice.length == 0:
        return Path(tuple(lattice.vanilla()), float(lattice.scores[:, 0].sum()) if lattice.length else 0.0,
                    (0,) * lattice.length)
    scorer.begin(context)
    try:
        toks, ranks, total = [], [], 0.0
        for col in range(lattice.length):
            combined = lattice.scores[col] + alpha * np.asarray(scorer.logprobs(lattice.tokens[col]), dtype=np.float64)
            r = int(np.argmax(combined))          # first maximum = lowest rank
            toks.append(int(lattice.tokens[col, r]))
            ranks.append(r)
            total += float(combined[r])
            if col + 1 < lattice.length:
                scorer.advance(toks[-1])
    finally:
        scorer.end()
    return Path(tuple(toks), total, tuple(ranks))


def oracle_length(lattice: Lattice, future: Sequence[int]) -> int:
    """Matched draft tokens of the best path: the longest prefix of `future` with future[c] in column c."""
    m = 0
    for col in range(min(lattice.length, len(future))):
        if int(future[col]) in lattice.tokens[col]:
            m += 1
        else:
            break
    return m


def matched_length(draft: Sequence[int], future: Sequence[int]) -> int:
    m = 0
    for a, b in zip(draft, future):
        if int(a) != int(b):
            break
        m += 1
    return m


def paths_to_tree(paths: Sequence[Sequence[int]], **info) -> Draft:
    """One token tree holding every path (shared prefixes merged), in path order (best first)."""
    token_ids, parents = [], []
    index: dict[tuple[int, int], int] = {}
    for path in paths:
        node = -1
        for token in path:
            key = (node, int(token))
            if key not in index:
                index[key] = len(token_ids)
                token_ids.append(int(token))
                parents.append(node)
            node = index[key]
    return Draft(token_ids, parents, None, dict(info))
