"""`method="blockwise"`: blockwise parallel decoding with trained heads and rescored top-k lattices (specs/bpd.md).

Each step the heads read the hidden state the loop captured at the last cached position (seq[-2]); head j
(j >= 2) guesses the token j-1 places after the certain token seq[-1]. Their top-k lists form a lattice;
a strategy picks `num_paths` paths, merged into one token tree that the loop verifies in one target forward
with greedy matching, so the output is exactly greedy decoding whatever the drafts are (lossless).

rescoring:
- "none":   p-best by summed head logits ("0-gram"); with num_paths=1 this is plain BPD (every head's argmax).
- "ngram":  exact p-best DP over the lattice with head logits + alpha * n-gram log-prob (bpd.md §3.5 A3.3).
- "neural": greedy local rescoring with a smaller LM sharing the tokenizer (`rescorer=`, required: without one it
            is an error, never a silent switch to n-grams) (A3.2); with num_paths > 1 the other drafts are the
            0-gram best paths. `BlockwiseStrategy` itself takes any `LocalScorer` (benchmarks pass an n-gram one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from multidraft import validation
from multidraft.drafters.base import Drafter, LoopState
from multidraft.blockwise.lattice import (Lattice, LocalScorer, build_lattice, check_width, local_rescore,
                                         paths_to_tree, pbest_paths)
from multidraft.errors import InvalidOptionError
from multidraft.types import Draft

RESCORINGS = ("none", "neural", "ngram")


# ----------------------------------------------------------------------------- scorers
class NGramScorer(LocalScorer):
    """Local rescoring with a smoothed n-gram model (natural-log absolute-discount probabilities)."""

    def __init__(self, model, order: int):
        self.model, self.order = model, order
        self.history: list[int] = []

    def begin(self, context):
        self.history = [int(t) for t in context[-max(self.order - 1, 1):]]

    def logprobs(self, candidates):
        hist = self.history[-(self.order - 1):] if self.order > 1 else []
        return np.log(self.model.smoothed_probs_batch([hist], np.asarray(candidates)[None, :], order=self.order)[0])

    def advance(self, token):
        self.history.append(int(token))


class NeuralScorer(LocalScorer):
    """Local rescoring with a small causal LM; its KV cache follows the committed text between steps."""

    def __init__(self, lm):
        self.lm = lm
        self.cache = lm.new_cache()
        self.cached: list[int] = []
        self.base_length = 0
        self.calls = 0
        self._logp: Optional[torch.Tensor] = None

    def begin(self, context):
        ctx = [int(t) for t in context]
        common = 0
        limit = min(len(self.cached), len(ctx) - 1)      # always feed at least one token to get logits
        while common < limit and self.cached[common] == ctx[common]:
            common += 1
        self.cache.crop(common)
        self._feed(ctx[common:])
        self.cached = ctx
        self.base_length = len(ctx)

    def _feed(self, tokens):
        out = self.lm.forward(self.cache, tokens, logits_rows=slice(-1, None))
        self.calls += 1
        self._logp = torch.log_softmax(out.logits[-1].double(), -1).cpu()   # read by numpy in logprobs()

    def logprobs(self, candidates):
        return self._logp[torch.as_tensor(np.asarray(candidates))].numpy()

    def advance(self, token):
        self._feed([int(token)])
        self.cached.append(int(token))

    def end(self):
        self.cache.crop(self.base_length)
        self.cached = self.cached[:self.base_length]


def ngram_logprob_fn(model, order: int):
    """log P_order(candidate | history) for a batch of histories, vectorised by the n-gram model."""
    def logprob(histories, candidates):
        cands = np.broadcast_to(np.asarray(candidates, dtype=np.int64), (len(histories), len(candidates)))
        return np.log(model.smoothed_probs_batch([list(h) for h in histories], cands, order=order))
    return logprob


# ----------------------------------------------------------------------------- strategy
class BlockwiseStrategy:
    """How drafts are picked from a lattice; shared by the online drafter and the offline evaluator."""

    def __init__(self, rescoring: str = "none", lattice_k: int = 1, num_paths: int = 1, alpha: float = 1.0,
                 ngram=None, ngram_order: int = 3, scorer: Optional[LocalScorer] = None):
        if rescoring not in RESCORINGS:
            raise InvalidOptionError(f"rescoring must be one of {', '.join(RESCORINGS)}, got {rescoring!r}")
        check_width(lattice_k, num_paths)
        validation.number("alpha", alpha, minimum=0.0)
        if rescoring == "ngram" and ngram is None:
            raise InvalidOptionError("rescoring='ngram' needs an n-gram model")
        if rescoring == "neural" and scorer is None:
            raise InvalidOptionError("rescoring='neural' needs a local scorer (a rescoring LM)")
        if ngram is not None and not 1 <= ngram_order <= ngram.max_order:
            raise InvalidOptionError(f"ngram_order must be in 1..{ngram.max_order} for {ngram.path}, got {ngram_order!r}")
        self.rescoring, self.lattice_k, self.num_paths, self.alpha = rescoring, lattice_k, num_paths, float(alpha)
        self.ngram, self.ngram_order, self.scorer = ngram, ngram_order, scorer
        self._logprob = ngram_logprob_fn(ngram, ngram_order) if ngram is not None else None

    def lattice(self, first_token: int, head_logits: torch.Tensor, token_ids=None) -> Lattice:
        return build_lattice(first_token, head_logits, self.lattice_k, token_ids)

    def drafts(self, lattice: Lattice, context: Sequence[int]) -> list[list[int]]:
        """Up to num_paths distinct drafts, best first (context ends with the certain token)."""
        p = self.num_paths
        if self.rescoring == "none" and (p == 1 or lattice.k == 1):
            return [lattice.vanilla()]
        if self.rescoring == "ngram":
            paths = pbest_paths(lattice, p, self.alpha, self._logprob, self.ngram_order, context)
            return [list(path.tokens) for path in paths]
        others = [list(path.tokens) for path in pbest_paths(lattice, p)] if p > 1 else []
        if self.rescoring == "none":
            return others
        first = list(local_rescore(lattice, self.alpha, self.scorer, context).tokens)
        return [first] + [d for d in others if d != first][:p - 1]


# ----------------------------------------------------------------------------- drafter
class BlockwiseDrafter(Drafter):
    """BPD heads + lattice strategy as a drafter of the one draft-and-verify loop. Lossless (greedy)."""

    name = "blockwise"
    cuttable = True

    def __init__(self, heads, strategy: BlockwiseStrategy, num_heads: Optional[int] = None,
                 num_layers: Optional[int] = None):
        self.heads = heads
        self.strategy = strategy
        self.num_heads = num_heads or heads.num_heads
        # The layer the heads read: the one they were trained on, else the base's last (`num_layers`). Resolved
        # here, not in begin(): the loop reads capture_options() before begin(), so a later fallback never applies.
        self.hidden_layer = int(heads.meta.get("hidden_layer") or 0) or num_layers
        if not self.hidden_layer:
            raise InvalidOptionError("the heads record no hidden_layer; pass num_layers (the base model's depth)")
        self._hidden: Optional[torch.Tensor] = None

    def begin(self, state: LoopState, prefill_output) -> None:
        hidden = getattr(prefill_output, "hidden", None)
        self._hidden = hidden[-1] if hidden is not None and len(hidden) else None

    def propose(self, state: LoopState, max_tokens: int) -> Draft:
        if self._hidden is None or max_tokens < 1 or self.num_heads < 2:
            return Draft()
        logits = self.heads.draft_logits(self._hidden, self.num_heads)
        state.stats.draft_calls += 1
        lattice = self.strategy.lattice(state.seq[-1], logits, self.heads.token_ids)
        drafts = self.strategy.drafts(lattice, state.seq)
        return paths_to_tree([d[:max_tokens] for d in drafts])

    def observe(self, state, draft, verdict, forward_output, kept_rows) -> None:
        # The last kept row is the last cached position (seq[-2] at the next step): the heads' input.
        self._hidden = forward_output.hidden[kept_rows[-1]] if forward_output.hidden is not None else None


# ----------------------------------------------------------------------------- method


def make_strategy(lm, options: dict) -> BlockwiseStrategy:
    rescoring = options["rescoring"]       # checked with the others by the row (check_options below)
    # `ngram` and `rescorer` arrive loaded (blockwise/artifacts.py, wired by methods.py)
    ngram, scorer, order = None, None, options["ngram_order"]
    if rescoring == "ngram":
        ngram = options["ngram"]
        if not isinstance(order, int) or not 1 <= order <= ngram.max_order:
            raise InvalidOptionError(f"ngram_order must be an integer in 1..{ngram.max_order}, got {order!r}")
    if rescoring == "neural":
        scorer = NeuralScorer(options["rescorer"])
    return BlockwiseStrategy(rescoring, options["lattice_k"], options["num_paths"], options["alpha"], ngram, order, scorer)


def check_options(options: dict) -> None:
    """Every check that needs no model or file: types and ranges (heads, n-gram and rescorer are loaded later)."""
    from multidraft.blockwise.heads import BlockwiseHeads

    heads = options["heads"]
    if heads is not None and not isinstance(heads, (str, Path, BlockwiseHeads)):
        raise InvalidOptionError(f"heads must be a heads file path or BlockwiseHeads (None: the trained default), "
                                 f"got {heads!r:.80}")
    validation.positive_int("num_heads", options["num_heads"], allow_none=True)
    validation.choice("rescoring", options["rescoring"], RESCORINGS)
    check_width(options["lattice_k"], options["num_paths"])
    validation.number("alpha", options["alpha"], minimum=0.0)
    validation.positive_int("ngram_order", options["ngram_order"])
    for name in ("ngram_path", "rescorer"):
        value = options[name]
        if value is not None and not isinstance(value, (str, Path)) and not (name == "rescorer" and hasattr(value, "forward")):
            raise InvalidOptionError(f"{name} must be a path{' or an LM' if name == 'rescorer' else ''}, "
                                     f"got {type(value).__name__}")
    ngram = options["ngram"]
    if ngram is not None and not hasattr(ngram, "smoothed_probs_batch"):
        raise InvalidOptionError(f"ngram must be an NGramModel (or pass ngram_path=FILE), got {type(ngram).__name__}")


def make_drafter(lm, sampler, options: dict) -> BlockwiseDrafter:
    """The drafter over ready heads / n-gram / rescorer (blockwise.artifacts.resolve_options loads them first; the
    method row's greedy_only refuses a temperature before that; the row's resolve_options checked the options)."""
    return BlockwiseDrafter(options["heads"], make_strategy(lm, options), options["num_heads"],
                            num_layers=lm.num_layers)
