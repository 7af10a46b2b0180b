"""Queries on a built n-gram file: next-token distributions, the SPD mixture, smoothed log-probs.

Every query is a few vectorised numpy calls over the memory-mapped arrays of `build.py`:
a lookup of K keys is one `searchsorted` into the small fence array (about 1/32 of the keys, so it
stays in cache) plus one gather of a 32-key block per query. Contexts are walked as a trie: the id
of an m-gram is found from the id of its first m-1 tokens, so a state (ids of the grams ending at
the last token, one per length) can be extended by a token with a single lookup per order.
"""

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from multidraft.errors import InvalidOptionError, TokenizerMismatchError
from multidraft.ngram import fileformat
from multidraft.ngram.build import TAG_SHIFT

MISSING = -1
SMOOTHINGS = ("absolute-discount",)


class NGramModel:
    """An n-gram count model loaded (memory-mapped) from a file written by `multidraft ngram build`.

    Probabilities:
      * `next_token_distribution` / `interpolated`: maximum likelihood p_n(x|c) = C(c x) / C(c), as
        Superposed Decoding uses them (spd.md §3, Eq. 5): an unseen context gives no mass at all.
      * `log_prob` / `smoothed_probs`: interpolated absolute discounting (Ney, Essen & Kneser 1994), a
        back-off family smoothing that is a proper distribution over the whole vocabulary:
        P_n(x|c) = max(C(cx) - D_n, 0) / C(c) + D_n * N1+(c .) / C(c) * P_{n-1}(x|c'),
        falling back to P_{n-1}(x|c') when C(c) = 0, with c' = c minus its oldest token,
        D_n = n1 / (n1 + 2 n2) from order n's count-of-counts, and at the bottom
        P_1(x) = max(C(x) - D_1, 0) / N + D_1 * N1+(.) / N / V (never zero).
    """

    def __init__(self, header: dict, arrays: dict, path=None):
        self.path = Path(path) if path else None
        self.header = header
        self.vocab_size = int(header["vocab_size"])
        self.max_order = int(header["max_order"])
        self.orders = list(header["orders"])
        self.tokenizer_name = header.get("tokenizer", "")
        self.tokenizer_fingerprint = header.get("tokenizer_fingerprint", "")
        self.keys = arrays["keys"]
        self.counts = arrays["counts"]
        self.cont_total = arrays["cont_total"]
        self.fences = np.ascontiguousarray(arrays["fences"])  # small; keep it in RAM for hot searches
        self.stride = int(header["fence_stride"])
        levels = header["levels"]
        self._offset = np.array([0] + [lv["offset"] for lv in levels], dtype=np.int64)  # index = order
        self._size = np.array([0] + [lv["size"] for lv in levels], dtype=np.int64)
        self._nkeys = int(self.keys.shape[0])
        self._block = np.arange(self.stride, dtype=np.int64)
        self._V = np.uint64(self.vocab_size)
        self.discounts = {}
        for lv in levels:
            n1, n2 = lv["n1"], lv["n2"]
            self.discounts[lv["order"]] = min(max(n1 / (n1 + 2 * n2), 0.05), 0.95) if n1 + n2 else 0.5
        if self.max_order >= 2:
            # order-1 discount from its own count-of-counts (level 1 is dense, so count here)
            uni = np.asarray(self.counts[: self.vocab_size])
            n1, n2 = int(np.count_nonzero(uni == 1)), int(np.count_nonzero(uni == 2))
            self.discounts[1] = min(max(n1 / (n1 + 2 * n2), 0.05), 0.95) if n1 + n2 else 0.5
        self.num_tokens = int(header["num_tokens"])

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, path, tokenizer=None, tokenizer_fingerprint: str | None = None, vocab_size: int | None = None,
             verify: bool = True) -> "NGramModel":
        """Memory-map an n-gram file. Pass the tokenizer (or its fingerprint / vocab size) you will use
        to get a TokenizerMismatchError now instead of meaningless probabilities later.
        `verify=True` checks the sha256 of the whole file (about 1 s per GB)."""
        header, arrays = fileformat.read(path, verify=verify)
        model = cls(header, arrays, path)
        if tokenizer is not None:
            model.check_tokenizer(tokenizer)
        if tokenizer_fingerprint is not None:
            model._check_fingerprint(tokenizer_fingerprint, "given")
        if vocab_size is not None and vocab_size < model.vocab_size:
            raise TokenizerMismatchError(
                f"n-gram file {path} was built for a vocabulary of {model.vocab_size} tokens "
                f"({model.tokenizer_name or 'unnamed tokenizer'}), but the model has {vocab_size}; "
                "rebuild it with the model's tokenizer")
        return model

    def _check_fingerprint(self, fingerprint: str, label: str) -> None:
        if self.tokenizer_fingerprint and fingerprint != self.tokenizer_fingerprint:
            raise TokenizerMismatchError(
                f"n-gram file {self.path} was built with tokenizer {self.tokenizer_name!r} "
                f"({self.tokenizer_fingerprint}), but the {label} tokenizer is {fingerprint}; rebuild it with "
                f"`multidraft ngram build --tokenizer <your model> ...`")

    def check_tokenizer(self, tokenizer) -> None:
        from multidraft.ngram.corpus import tokenizer_fingerprint

        self._check_fingerprint(tokenizer_fingerprint(tokenizer), "model's")
        if len(tokenizer) != self.vocab_size:
            raise TokenizerMismatchError(
                f"n-gram file {self.path} has vocab size {self.vocab_size}, the tokenizer {len(tokenizer)}; rebuild it")

    # ------------------------------------------------------------------ primitive lookups

    def _locate(self, queries: np.ndarray) -> np.ndarray:
        """searchsorted(keys, queries, side='left') via the fence array and one block per query."""
        block = np.searchsorted(self.fences, queries, side="right") - 1
        np.maximum(block, 0, out=block)
        idx = block[:, None] * self.stride + self._block
        np.minimum(idx, self._nkeys - 1, out=idx)
        keys = self.keys[idx]
        pos = block * self.stride + np.count_nonzero(keys < queries[:, None], axis=1)
        return np.minimum(pos, self._nkeys, out=pos)

    def _find(self, queries: np.ndarray) -> np.ndarray:
        """Global index of each query key, or MISSING."""
        if self._nkeys == 0:
            return np.full(queries.shape, MISSING, dtype=np.int64)
        pos = self._locate(queries)
        hit = pos < self._nkeys
        hit[hit] = self.keys[pos[hit]] == queries[hit]
        return np.where(hit, pos, MISSING)

    def _child_keys(self, order: np.ndarray, parent: np.ndarray, token: np.ndarray) -> np.ndarray:
        key = parent.astype(np.uint64) * self._V + token.astype(np.uint64)
        return key | (order.astype(np.uint64) << np.uint64(TAG_SHIFT))

    def _extend(self, order, parent_local, token):
        """Local ids in level `order` of (parent m-gram, token); MISSING where absent or parent missing."""
        order = np.broadcast_to(order, parent_local.shape)
        ok = (parent_local >= 0) & (token >= 0) & (token < self.vocab_size) & (order <= self.max_order)
        out = np.full(parent_local.shape, MISSING, dtype=np.int64)
        if ok.any():
            found = self._find(self._child_keys(order[ok], parent_local[ok], token[ok]))
            out[ok] = np.where(found >= 0, found - self._offset[order[ok]], MISSING)
        return out

    # ------------------------------------------------------------------ states

    def context_states(self, contexts) -> np.ndarray:
        """For each context, ids of the m-grams ending at its last token, m = 1..max_order-1.

        Returns int64 [k, max_order-1]; column m-1 is the local id in level m, MISSING when that m-gram
        never occurred or the context is shorter than m. Contexts: a list of token sequences or a 2-D array.
        """
        width = max(self.max_order - 1, 1)
        tail = _right_align(contexts, width)  # [k, width], MISSING-padded on the left
        k = tail.shape[0]
        states = np.full((k, width), MISSING, dtype=np.int64)
        valid_tok = (tail >= 0) & (tail < self.vocab_size)
        ids = np.where(valid_tok, tail, MISSING)  # level-1 ids of every position (dense level)
        states[:, 0] = ids[:, -1]
        # Level m ids of the grams starting at j: extend level m-1 ids at j by token j+m-1.
        for m in range(2, width + 1):
            ids = self._extend(np.int64(m), ids[:, :-1], tail[:, m - 1:])
            states[:, m - 1] = ids[:, -1]
        return states

    def extend_states(self, states: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """States after appending `tokens` ([k] or [k, K]) to contexts with `states` [k, width].

        One lookup per order: the cheap way to follow drafts token by token."""
        states = np.asarray(states, dtype=np.int64)
        tokens = np.asarray(tokens, dtype=np.int64)
        squeeze = tokens.ndim == 1
        tok = tokens[:, :, None] if not squeeze else tokens[:, None, None]
        width = states.shape[1]
        parents = states[:, None, : width - 1]  # gram of length m-1 ending before the new token
        orders = np.arange(2, width + 1, dtype=np.int64)
        new = np.empty(tok.shape[:2] + (width,), dtype=np.int64)
        new[:, :, 0] = np.where((tok[:, :, 0] >= 0) & (tok[:, :, 0] < self.vocab_size), tok[:, :, 0], MISSING)
        if width > 1:
            shape = tok.shape[:2] + (width - 1,)
            new[:, :, 1:] = self._extend(np.broadcast_to(orders, shape), np.broadcast_to(parents, shape),
                                         np.broadcast_to(tok, shape)).reshape(shape)
        return new[:, 0] if squeeze else new

    # ------------------------------------------------------------------ ML queries (SPD)

    def _check_order(self, order: int) -> None:
        if not 1 <= order <= self.max_order:
            raise InvalidOptionError(f"order {order} is outside 1..{self.max_order} of this n-gram file")

    def candidate_probs(self, states: np.ndarray, candidates: np.ndarray, orders: Sequence[int]):
        """ML p_n(candidate | context) for each context state [k, width], candidates [k, K], order n.

        Returns (probs float64 [k, len(orders), K], seen bool [k, len(orders)]); an unseen context
        (or one shorter than n-1 tokens) has seen=False and probability 0.
        """
        states = np.asarray(states, dtype=np.int64)
        cand = np.asarray(candidates, dtype=np.int64)
        k, kk = cand.shape
        orders = np.asarray(list(orders), dtype=np.int64)
        for n in orders:
            self._check_order(int(n))
        probs = np.zeros((k, orders.size, kk))
        seen = np.zeros((k, orders.size), dtype=bool)
        low = orders == 1  # unigram: the context is empty and always "seen"
        if low.any():
            total = max(self.num_tokens, 1)
            ok = (cand >= 0) & (cand < self.vocab_size)
            uni = np.zeros(cand.shape)
            uni[ok] = np.asarray(self.counts[cand[ok]], dtype=np.float64) / total
            probs[:, low, :] = uni[:, None, :]
            seen[:, low] = self.num_tokens > 0
        high = np.flatnonzero(~low)
        if high.size:
            ho = orders[high]
            ctx = states[:, ho - 2]  # [k, h]: local id in level n-1
            has = ctx >= 0
            total = np.zeros(ctx.shape)
            total[has] = self.cont_total[self._offset[ho - 1][np.nonzero(has)[1]] + ctx[has]]
            has &= total > 0
            shape = (k, ho.size, kk)
            child = self._extend(np.broadcast_to(ho[None, :, None], shape),
                                 np.broadcast_to(np.where(has, ctx, MISSING)[:, :, None], shape),
                                 np.broadcast_to(cand[:, None, :], shape))
            found = child >= 0
            counts = np.zeros(shape)
            counts[found] = self.counts[self._offset[np.broadcast_to(ho[None, :, None], shape)[found]] + child[found]]
            probs[:, high, :] = np.divide(counts, total[:, :, None], out=np.zeros(shape), where=has[:, :, None])
            seen[:, high] = has
        return probs, seen

    def next_token_distribution(self, context_ids, order: int):
        """ML distribution p_n(. | last n-1 tokens of context): (token ids int64, probs float64), sorted by id.

        Empty arrays when the context was never seen (or is shorter than n-1 tokens); otherwise the
        probabilities sum to 1."""
        self._check_order(order)
        if order == 1:
            counts = np.asarray(self.counts[: self.vocab_size], dtype=np.float64)
            ids = np.flatnonzero(counts)
            return ids, counts[ids] / max(self.num_tokens, 1)
        state = self.context_states([list(context_ids)])[0]
        ctx = state[order - 2]
        if ctx < 0:
            return np.zeros(0, np.int64), np.zeros(0)
        lo, hi = self._child_range(np.array([order]), np.array([ctx]))
        lo, hi = int(lo[0]), int(hi[0])
        total = float(self.cont_total[self._offset[order - 1] + ctx])
        if hi <= lo or total == 0:
            return np.zeros(0, np.int64), np.zeros(0)
        keys = np.asarray(self.keys[lo:hi]) & np.uint64((1 << TAG_SHIFT) - 1)
        ids = (keys % self._V).astype(np.int64)
        return ids, np.asarray(self.counts[lo:hi], dtype=np.float64) / total

    def _child_range(self, order: np.ndarray, parent_local: np.ndarray):
        """[lo, hi) global positions of the children (level `order`) of parent ids in level order-1."""
        zero = np.zeros(parent_local.shape, dtype=np.int64)
        lo = self._locate(self._child_keys(order, parent_local, zero))
        hi = self._locate(self._child_keys(order, parent_local + 1, zero))
        return lo, hi

    def interpolated_batch(self, contexts, weights, candidates=None, states=None):
        """SPD mixture q_i(x) = sum_n lambda_n * p_n(x | last n-1 tokens of context i) (spd.md Eq. 5).

        Unseen contexts, and orders whose context runs past the start, contribute 0; the lambdas are
        not renormalised. With `candidates` [k, K] returns q [k, K] (float64). Without, returns a list of
        sparse (ids, q) per context over the union of continuations. `states` (from `context_states` /
        `extend_states`) skips the context walk.
        """
        orders, lam = _weights(weights)
        if states is None:
            states = self.context_states(contexts)
        if candidates is not None:
            probs, _ = self.candidate_probs(states, np.asarray(candidates), orders)
            return np.tensordot(probs, lam, axes=([1], [0]))
        out = []
        for row in range(states.shape[0]):
            ids_all, p_all = [], []
            for n, w in zip(orders, lam):
                ids, p = self._distribution_from_state(states[row], int(n))
                ids_all.append(ids)
                p_all.append(p * w)
            ids = np.concatenate(ids_all) if ids_all else np.zeros(0, np.int64)
            p = np.concatenate(p_all) if p_all else np.zeros(0)
            uniq, inv = np.unique(ids, return_inverse=True)
            out.append((uniq, np.bincount(inv, weights=p, minlength=uniq.size)))
        return out

    def _distribution_from_state(self, state, order):
        if order == 1:
            return self.next_token_distribution([], 1)
        ctx = int(state[order - 2])
        if ctx < 0:
            return np.zeros(0, np.int64), np.zeros(0)
        lo, hi = self._child_range(np.array([order]), np.array([ctx]))
        total = float(self.cont_total[self._offset[order - 1] + ctx])
        if total == 0:
            return np.zeros(0, np.int64), np.zeros(0)
        keys = np.asarray(self.keys[int(lo[0]):int(hi[0])]) & np.uint64((1 << TAG_SHIFT) - 1)
        return (keys % self._V).astype(np.int64), np.asarray(self.counts[int(lo[0]):int(hi[0])], np.float64) / total

    def interpolated(self, context_ids, weights, candidates=None):
        """`interpolated_batch` for one context: q [K] with candidates, else sparse (ids, q)."""
        if candidates is not None:
            return self.interpolated_batch([list(context_ids)], weights, np.asarray(candidates)[None, :])[0]
        return self.interpolated_batch([list(context_ids)], weights)[0]

    # ------------------------------------------------------------------ smoothed (rescoring)

    def smoothed_probs_batch(self, contexts, candidates, order: int | None = None, smoothing="absolute-discount"):
        """Smoothed P(candidate | context) [k, K] of an order-`order` model (default: the file's max order)."""
        if smoothing not in SMOOTHINGS:
            raise InvalidOptionError(f"unknown smoothing {smoothing!r}; choose one of {', '.join(SMOOTHINGS)}")
        order = self.max_order if order is None else order
        self._check_order(order)
        states = self.context_states(contexts)
        cand = np.asarray(candidates, dtype=np.int64)
        if cand.ndim == 1:
            cand = np.broadcast_to(cand, (states.shape[0], cand.size))
        k, kk = cand.shape
        total_tokens = max(self.num_tokens, 1)
        ok = (cand >= 0) & (cand < self.vocab_size)
        uni = np.zeros(cand.shape)
        uni[ok] = np.asarray(self.counts[cand[ok]], dtype=np.float64)
        d1 = self.discounts.get(1, 0.5)
        types = float(np.count_nonzero(np.asarray(self.counts[: self.vocab_size])))
        p = np.maximum(uni - d1, 0) / total_tokens + d1 * types / total_tokens / self.vocab_size
        if self.num_tokens == 0:
            p = np.full(cand.shape, 1.0 / self.vocab_size)
        for n in range(2, order + 1):
            ctx = states[:, n - 2]
            has = ctx >= 0
            total = np.zeros(k)
            total[has] = self.cont_total[self._offset[n - 1] + ctx[has]]
            has &= total > 0
            if not has.any():
                continue
            rows = np.flatnonzero(has)
            lo, hi = self._child_range(np.full(rows.size, n), ctx[rows])
            distinct = (hi - lo).astype(np.float64)
            child = self._extend(np.int64(n), np.broadcast_to(ctx[rows, None], (rows.size, kk)), cand[rows])
            found = child >= 0
            c = np.zeros(child.shape)
            c[found] = self.counts[self._offset[n] + child[found]]
            d = self.discounts.get(n, 0.5)
            tot = total[rows, None]
            p[rows] = np.maximum(c - d, 0) / tot + d * distinct[:, None] / tot * p[rows]
        return p

    def log_prob(self, token_ids, order: int | None = None, smoothing="absolute-discount") -> np.ndarray:
        """Natural-log probability of each token given the tokens before it (float64 [len]).

        Token 0 is scored by the unigram level. Use `.sum()` for a sequence score (BPD rescoring)."""
        seq = np.asarray(token_ids, dtype=np.int64).reshape(-1)
        order = self.max_order if order is None else order
        width = max(order - 1, 1)
        contexts = [seq[max(0, t - width):t] for t in range(seq.size)]
        probs = self.smoothed_probs_batch(contexts, seq[:, None], order=order, smoothing=smoothing)[:, 0]
        return np.log(probs)


def _right_align(contexts, width: int) -> np.ndarray:
    if isinstance(contexts, np.ndarray) and contexts.ndim == 2:
        arr = contexts.astype(np.int64, copy=False)
        if arr.shape[1] >= width:
            return arr[:, arr.shape[1] - width:]
        pad = np.full((arr.shape[0], width - arr.shape[1]), MISSING, dtype=np.int64)
        return np.concatenate([pad, arr], axis=1)
    out = np.full((len(contexts), width), MISSING, dtype=np.int64)
    for i, ctx in enumerate(contexts):
        tail = np.asarray(ctx, dtype=np.int64).reshape(-1)[-width:] if width else np.zeros(0, np.int64)
        if tail.size:
            out[i, width - tail.size:] = tail
    return out


def _weights(weights) -> tuple[np.ndarray, np.ndarray]:
    """(orders, lambdas) from {order: lambda} or a sequence of lambdas for orders 2, 3, ..."""
    if isinstance(weights, Mapping):
        orders = np.array(sorted(weights), dtype=np.int64)
        lam = np.array([float(weights[o]) for o in orders])
    else:
        lam = np.asarray(list(weights), dtype=np.float64)
        orders = np.arange(2, 2 + lam.size, dtype=np.int64)
    if np.any(lam < 0):
        raise InvalidOptionError("interpolation weights must be >= 0")
    return orders, lam
