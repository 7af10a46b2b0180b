"""Queries on a built n-gram file: next-token distributions, the SPD mixture, smoothed log-probs.

The file is a trie flattened into one sorted key array (see build.py): the id of an n-gram is its
position, and the child (context id g, token x) has key (g + 1) * V + x. So every query is a handful
of vectorised numpy calls (one `searchsorted` per trie level), with no Python loop over tokens.

States: the opaque int64 array `context_states` returns holds, per context, the ids of the m-grams
ending at its last token (m = 1..max_order-1); `missing_id` marks an m-gram that never occurred.
A decoder that follows drafts token by token keeps states and pays one lookup per step
(`extend_states`, or `candidate_probs(..., return_children=True)` which yields them for free).
"""

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from multidraft.errors import InvalidOptionError, TokenizerMismatchError
from multidraft.ngram import fileformat

SMOOTHINGS = ("absolute-discount",)


class NGramModel:
    """An n-gram count model loaded (memory-mapped) from a file written by `multidraft ngram build`.

    Probabilities:
      * `next_token_distribution` / `interpolated*` / `candidate_probs`: maximum likelihood
        p_n(x|c) = C(c x) / C(c), as Superposed Decoding uses them (spd.md §3, Eq. 5): an unseen
        context gives no mass at all, and the mixture weights are not renormalised.
      * `log_prob` / `smoothed_probs_batch`: interpolated absolute discounting (Ney, Essen & Kneser
        1994), a back-off-family smoothing that is a proper distribution over the whole vocabulary:
        P_n(x|c) = max(C(cx) - D_n, 0) / C(c) + D_n * N1+(c .) / C(c) * P_{n-1}(x|c'),
        falling back to P_{n-1}(x|c') when C(c) = 0, with c' = c minus its oldest token,
        D_n = n1 / (n1 + 2 n2) from order n's count-of-counts (clipped to [0.05, 0.95]), and at the
        bottom P_1(x) = max(C(x) - D_1, 0) / N + D_1 * N1+(.) / N / V (never zero).
    """

    def __init__(self, header: dict, arrays: dict, path=None):
        self.path = Path(path) if path else None
        self.header = header
        self.vocab_size = int(header["vocab_size"])
        self.max_order = int(header["max_order"])
        self.orders = list(header["orders"])
        self.tokenizer_name = header.get("tokenizer", "")
        self.tokenizer_fingerprint = header.get("tokenizer_fingerprint", "")
        self.num_tokens = int(header["num_tokens"])
        self.keys, self.counts, self.cont_total = arrays["keys"], arrays["counts"], arrays["cont_total"]
        # Plain ndarray views of the same mapped memory: np.memmap's __getitem__ costs microseconds a call.
        self._keys = self.keys.view(np.ndarray)
        self._counts = self.counts.view(np.ndarray)
        self._cont_total = self.cont_total.view(np.ndarray)
        levels = header["levels"]
        self._offset = np.array([0] + [lv["offset"] for lv in levels] + [self._keys.shape[0]], dtype=np.int64)
        self._nkeys = int(self._keys.shape[0])
        # Past every key position, so it is never a real (top-order) child id and no key is built
        # from it; clipped into cont_total it reads the trailing 0 ("never followed by anything").
        self.missing_id = self._nkeys
        self._V = np.uint64(self.vocab_size)
        self.discounts = {}
        for lv in levels:
            n1, n2 = lv["n1"], lv["n2"]
            if lv["order"] == 1:
                uni = self._counts[: self.vocab_size]
                n1, n2 = int(np.count_nonzero(uni == 1)), int(np.count_nonzero(uni == 2))
            self.discounts[lv["order"]] = min(max(n1 / (n1 + 2 * n2), 0.05), 0.95) if n1 + n2 else 0.5
        self._weights_cache = (None, None)

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

    def check_tokenizer(self, tokenizer, fingerprint: str | None = None) -> None:
        """`fingerprint`: the tokenizer's vocab_fingerprint when the caller has it (a loaded model keeps its own)."""
        from multidraft.tokenizer_identity import vocab_fingerprint

        self._check_fingerprint(fingerprint or vocab_fingerprint(tokenizer), "model's")
        if len(tokenizer) != self.vocab_size:
            raise TokenizerMismatchError(
                f"n-gram file {self.path} has vocab size {self.vocab_size}, the tokenizer {len(tokenizer)}; rebuild it")

    # ------------------------------------------------------------------ primitive lookups

    def _children(self, parent_ids: np.ndarray, tokens_plus_v: np.ndarray) -> np.ndarray:
        """Ids of (parent, token) where present, else missing_id. `tokens_plus_v` = token + V (uint64).

        Hot path (a few calls per decode step): every line is one numpy call on a small array."""
        q = parent_ids.view(np.uint64) * self._V + tokens_plus_v  # ids >= 0: the uint64 view is exact
        pos = np.searchsorted(self._keys, q)
        return np.where(np.take(self._keys, pos, mode="clip") == q, pos, self.missing_id)

    def _context_totals(self, ctx_ids: np.ndarray) -> np.ndarray:
        """How often each context was followed by a token; 0 for missing_id (clipped onto the trailing 0)."""
        return np.take(self._cont_total, ctx_ids, mode="clip")

    def _child_range(self, ids: np.ndarray):
        """[lo, hi) positions of the children of the entries `ids` (int64 array)."""
        base = (ids.astype(np.uint64) + np.uint64(1)) * self._V
        return np.searchsorted(self._keys, base), np.searchsorted(self._keys, base + self._V)

    def _tokens_plus_v(self, tokens):
        """(token + V as uint64, valid mask or None if all valid); invalid tokens map to V and the
        caller makes their parent missing."""
        tokens = np.asarray(tokens, dtype=np.int64)
        as_unsigned = tokens.view(np.uint64)  # negative ids become huge, so one comparison checks both ends
        if (as_unsigned < self._V).all():
            return as_unsigned + self._V, None
        valid = (tokens >= 0) & (tokens < self.vocab_size)
        return np.where(valid, tokens, 0).view(np.uint64) + self._V, valid

    # ------------------------------------------------------------------ states

    @property
    def state_width(self) -> int:
        return max(self.max_order - 1, 1)

    def context_states(self, contexts) -> np.ndarray:
        """Ids of the m-grams ending at each context's last token, m = 1..max_order-1: int64 [k, width].

        Contexts: a list of token sequences or a 2-D int array (rows right-aligned; negative = padding).
        Column m-1 is `missing_id` where that m-gram never occurred or the context is shorter than m.
        """
        width = self.state_width
        tail = _right_align(contexts, width)
        tokv, valid = self._tokens_plus_v(tail)
        # Level-1 ids are the tokens. A padded position only ever starts a gram (padding is on the
        # left), so making its id missing makes every gram through it missing.
        ids = tail if valid is None else np.where(valid, tail, self.missing_id)
        states = np.empty((tail.shape[0], width), dtype=np.int64)
        states[:, 0] = ids[:, -1]
        for m in range(2, width + 1):  # level-m ids of the grams starting at each j
            ids = self._children(ids[:, :-1], tokv[:, m - 1:])
            if valid is not None:  # an out-of-vocabulary token inside a gram
                ids = np.where(valid[:, m - 1:], ids, self.missing_id)
            states[:, m - 1] = ids[:, -1]
        return states

    def extend_states(self, states: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """States after appending `tokens` ([k] -> [k, width], or [k, K] -> [k, K, width]). One lookup."""
        states = np.asarray(states, dtype=np.int64)
        tokens = np.asarray(tokens, dtype=np.int64)
        squeeze = tokens.ndim == 1
        tok = tokens[:, None] if squeeze else tokens
        tokv, valid = self._tokens_plus_v(tok)
        width = states.shape[1]
        new = np.empty(tok.shape + (width,), dtype=np.int64)
        new[:, :, 0] = tok if valid is None else np.where(valid, tok, self.missing_id)
        if width > 1:
            parents = states[:, None, : width - 1]
            if valid is not None:
                parents = np.where(valid[:, :, None], parents, self.missing_id)
            new[:, :, 1:] = self._children(parents, tokv[:, :, None])
        return new[:, 0] if squeeze else new

    # ------------------------------------------------------------------ ML queries (SPD)

    def _check_orders(self, orders: np.ndarray) -> None:
        if orders.size and (orders.min() < 1 or orders.max() > self.max_order):
            raise InvalidOptionError(f"orders {orders.tolist()} are outside 1..{self.max_order} of this n-gram file")

    def candidate_probs(self, states: np.ndarray, candidates: np.ndarray, orders: Sequence[int],
                        return_children: bool = False):
        """ML p_n(candidate | context) for context states [k, width], candidates [k, K], each order n.

        Returns (probs float64 [k, len(orders), K], seen bool [k, len(orders)]); an unseen context (or
        one shorter than n-1 tokens) has seen=False and probability 0. With `return_children`, also the
        ids of the n-grams (context, candidate) [k, len(orders), K] (missing_id where absent); for
        orders 2..max_order they are the states of the drafts extended by each candidate, for free.
        """
        orders = np.asarray(orders, dtype=np.int64)
        self._check_orders(orders)
        cand = np.asarray(candidates, dtype=np.int64)
        if orders.size and orders.min() == 1:
            return self._with_unigram(states, cand, orders, return_children)
        return self._candidate_probs(np.asarray(states, dtype=np.int64), cand, orders, orders - 2, return_children)

    def _candidate_probs(self, states, cand, orders, state_cols, return_children=False):
        """candidate_probs for validated orders >= 2; `state_cols` = orders - 2 (cached by callers)."""
        ctx = states[:, state_cols]  # [k, O]: id of the order-(n-1) context
        candv, valid = self._tokens_plus_v(cand)
        parents = ctx[:, :, None] if valid is None else np.where(valid[:, None, :], ctx[:, :, None], self.missing_id)
        children = self._children(parents, candv[:, None, :])  # [k, O, K]
        total = self._context_totals(ctx)
        seen = total > 0
        counts = np.where(children != self.missing_id, np.take(self._counts, children, mode="clip"), 0)
        probs = counts / np.maximum(total, 1)[:, :, None]
        return (probs, seen, children) if return_children else (probs, seen)

    def prob_batch(self, contexts, candidates, order: int):
        """spd.md §4.3 protocol: ML p_order(candidates | contexts) -> (probs [k, K], seen [k])."""
        probs, seen = self.candidate_probs(self.context_states(contexts), candidates, [order])
        return probs[:, 0], seen[:, 0]

    def _with_unigram(self, states, cand, orders, return_children):
        valid = (cand >= 0) & (cand < self.vocab_size)
        uni = np.where(valid, np.take(self._counts, np.where(valid, cand, 0)), 0) / max(self.num_tokens, 1)
        low = orders == 1
        probs = np.zeros((cand.shape[0], orders.size, cand.shape[1]))
        seen = np.zeros((cand.shape[0], orders.size), dtype=bool)
        children = np.full(probs.shape, self.missing_id, dtype=np.int64)
        probs[:, low], seen[:, low] = uni[:, None, :], self.num_tokens > 0
        children[:, low] = np.where(valid, cand, self.missing_id)[:, None, :]
        if (~low).any():
            out = self.candidate_probs(states, cand, orders[~low], return_children=True)
            probs[:, ~low], seen[:, ~low], children[:, ~low] = out
        return (probs, seen, children) if return_children else (probs, seen)

    def next_token_distribution(self, context_ids, order: int):
        """ML distribution p_n(. | last n-1 tokens of context): (token ids int64, probs float64) by id.

        Empty arrays when the context was never followed by a token in the corpus (or is shorter than
        n-1 tokens); otherwise the probabilities sum to 1."""
        self._check_orders(np.array([order]))
        if order == 1:
            counts = self._counts[: self.vocab_size].astype(np.float64)
            ids = np.flatnonzero(counts)
            return ids, counts[ids] / max(self.num_tokens, 1)
        state = self.context_states([list(context_ids)])[0]
        return self._distribution(int(state[order - 2]))

    def _distribution(self, ctx_id: int):
        total = float(self._context_totals(np.array([ctx_id]))[0])
        if total == 0:
            return np.zeros(0, np.int64), np.zeros(0)
        lo, hi = self._child_range(np.array([ctx_id]))
        lo, hi = int(lo[0]), int(hi[0])
        ids = (self._keys[lo:hi] % self._V).astype(np.int64)
        return ids, self._counts[lo:hi].astype(np.float64) / total

    def interpolated_batch(self, contexts, weights, candidates=None, states=None):
        """SPD mixture q_i(x) = sum_n lambda_n * p_n(x | last n-1 tokens of context i) (spd.md Eq. 5).

        weights: {order: lambda} or a sequence of lambdas for orders 2, 3, ... Unseen contexts, and
        orders whose context runs past the start, contribute 0; the lambdas are not renormalised.
        With `candidates` [k, K]: q float64 [k, K]. Without: a list of sparse (ids, q) per context over
        the union of continuations. `states` (from `context_states` / `extend_states`) skips the walk.
        """
        orders, lam, cols = self._weights(weights)
        if states is None:
            states = self.context_states(contexts)
        if candidates is not None:
            cand = np.asarray(candidates, dtype=np.int64)
            if cols is None:  # order 1 in the mixture: the general path
                return np.matmul(lam, self.candidate_probs(states, cand, orders)[0])
            return np.matmul(lam, self._candidate_probs(np.asarray(states, dtype=np.int64), cand, orders, cols)[0])
        out = []
        for state in np.asarray(states):
            ids_all, q_all = [], []
            for n, w in zip(orders.tolist(), lam.tolist()):
                ids, p = self.next_token_distribution([], 1) if n == 1 else self._distribution(int(state[n - 2]))
                ids_all.append(ids)
                q_all.append(p * w)
            uniq, inverse = np.unique(np.concatenate(ids_all), return_inverse=True)
            out.append((uniq, np.bincount(inverse, weights=np.concatenate(q_all), minlength=uniq.size)))
        return out

    def interpolated(self, context_ids, weights, candidates=None):
        """`interpolated_batch` for one context: q [K] with candidates, else sparse (ids, q)."""
        if candidates is not None:
            return self.interpolated_batch([list(context_ids)], weights, np.asarray(candidates)[None, :])[0]
        return self.interpolated_batch([list(context_ids)], weights)[0]

    def _weights(self, weights):
        """(orders, lambdas, orders - 2 or None if order 1 is used), validated; cached for the last
        weights object because a decoder passes the same one at every step."""
        cached_key, cached = self._weights_cache
        if cached_key is weights:
            return cached
        if isinstance(weights, Mapping):
            orders = np.array(sorted(weights), dtype=np.int64)
            lam = np.array([float(weights[o]) for o in orders.tolist()])
        else:
            lam = np.asarray(list(weights), dtype=np.float64)
            orders = np.arange(2, 2 + lam.size, dtype=np.int64)
        if np.any(lam < 0):
            raise InvalidOptionError("interpolation weights must be >= 0")
        self._check_orders(orders)
        cols = orders - 2 if orders.size and orders.min() >= 2 else None
        self._weights_cache = (weights, (orders, lam, cols))
        return orders, lam, cols

    # ------------------------------------------------------------------ smoothed (rescoring)

    def smoothed_probs_batch(self, contexts, candidates, order: int | None = None, smoothing="absolute-discount"):
        """Smoothed P(candidate | context) [k, K] of an order-`order` model (default: the file's max order)."""
        if smoothing not in SMOOTHINGS:
            raise InvalidOptionError(f"unknown smoothing {smoothing!r}; choose one of {', '.join(SMOOTHINGS)}")
        order = self.max_order if order is None else int(order)
        self._check_orders(np.array([order]))
        states = self.context_states(contexts)
        cand = np.asarray(candidates, dtype=np.int64)
        if cand.ndim == 1:
            cand = np.broadcast_to(cand, (states.shape[0], cand.size))
        n_tok = max(self.num_tokens, 1)
        valid = (cand >= 0) & (cand < self.vocab_size)
        uni = np.where(valid, np.take(self._counts, np.where(valid, cand, 0)), 0).astype(np.float64)
        d1 = self.discounts.get(1, 0.5)
        types = float(np.count_nonzero(self._counts[: self.vocab_size]))
        p = np.maximum(uni - d1, 0) / n_tok + d1 * types / n_tok / self.vocab_size
        if self.num_tokens == 0:
            p = np.full(cand.shape, 1.0 / self.vocab_size)
        for n in range(2, order + 1):
            ctx = states[:, n - 2]
            total = self._context_totals(ctx).astype(np.float64)
            rows = np.flatnonzero(total > 0)
            if rows.size == 0:
                continue
            lo, hi = self._child_range(ctx[rows])
            distinct = (hi - lo).astype(np.float64)[:, None]
            candv, ok = self._tokens_plus_v(cand[rows])
            parents = np.broadcast_to(ctx[rows, None], candv.shape)
            child = self._children(parents if ok is None else np.where(ok, parents, self.missing_id), candv)
            c = np.where(child != self.missing_id, np.take(self._counts, child, mode="clip"), 0)
            d = self.discounts.get(n, 0.5)
            tot = total[rows, None]
            p[rows] = np.maximum(c - d, 0) / tot + d * distinct / tot * p[rows]
        return p

    def log_prob(self, token_ids, order: int | None = None, smoothing="absolute-discount") -> np.ndarray:
        """Natural-log probability of each token given the tokens before it (float64 [len]).

        Token 0 is scored with an empty context (unigram level). `.sum()` scores a sequence (BPD)."""
        seq = np.asarray(token_ids, dtype=np.int64).reshape(-1)
        order = self.max_order if order is None else order
        width = max(order - 1, 1)
        padded = np.concatenate([np.full(width, -1, dtype=np.int64), seq])
        contexts = np.lib.stride_tricks.sliding_window_view(padded, width)[: seq.size]
        probs = self.smoothed_probs_batch(contexts, seq[:, None], order=order, smoothing=smoothing)[:, 0]
        return np.log(probs)


def _right_align(contexts, width: int) -> np.ndarray:
    if isinstance(contexts, np.ndarray) and contexts.ndim == 2:
        arr = contexts if contexts.dtype == np.int64 else contexts.astype(np.int64)
        if arr.shape[1] >= width:
            return arr[:, arr.shape[1] - width:]
        pad = np.full((arr.shape[0], width - arr.shape[1]), -1, dtype=np.int64)
        return np.concatenate([pad, arr], axis=1)
    out = np.full((len(contexts), width), -1, dtype=np.int64)
    for i, ctx in enumerate(contexts):
        tail = np.asarray(ctx, dtype=np.int64).reshape(-1)[-width:]
        if tail.size:
            out[i, width - tail.size:] = tail
    return out
