"""PLD+ (`method="pld_plus"`): prompt lookup that ranks every earlier occurrence of the last token with the
target model's own artifacts from previous forwards (specs/pldplus.md), then copies up to K tokens after the winner.

- rank_by="hidden": cosine of layer-l hidden states, H[p-1] vs H[q] (optional threshold theta, window m).
- rank_by="attention": the last query row of selected induction heads (the model's own attention heads, option
  induction_heads), max (or sum) over them. Only the chosen heads' rows are kept: from eager weights, or with any
  other kernel computed from the heads' queries and keys (multidraft.models.attention_rows), which spares the
  slower eager kernel.
- rank_by="first": the earliest occurrence (a control; equals HF prompt lookup with max n-gram 1).
Lossless: verification is the ordinary greedy match / sample-and-match of the one loop.
"""

from __future__ import annotations

from typing import Optional, Sequence

from multidraft import validation
from multidraft.drafters.base import Drafter, LoopState
from multidraft.errors import InvalidOptionError
from multidraft.pldplus.ranking import SCOPES, candidates, rank_attention, rank_hidden
from multidraft.pldplus.store import AttentionRowStore, HiddenStore
from multidraft.types import Draft

RANKERS = ("hidden", "attention", "first")
AGGREGATES = ("max", "sum")
# K: the paper uses 70 on a memory-bound GPU. On a CPU a verification forward grows with its length past a few
# tokens (qwen2.5-coder-1.5b in bf16 on an AVX512-BF16 EPYC, median of 5: 2-5 new tokens 0.9-1.0x one token, 9 tokens
# 1.12x, 17 tokens 1.3x, 25 tokens 1.5x), so a long rejected draft costs real time while a long accepted copy saves
# steps. Hence two lengths: a draft after a fully accepted one (a copy in progress) takes up to num_draft_tokens = 16;
# any other draft up to short_draft_tokens = 4. Chosen by replaying 60 recorded greedy outputs of the four
# input-guided tasks with those costs (benchmarks/pld_plus_replay.py, reports/pld_plus_replay_qwen15b_bf16.log):
# overall 16/4 is 4-9% cheaper than a fixed K of 4, 8 or 16 and than 16/8, and within 2% of the best per task.
DEFAULT_NUM_DRAFT_TOKENS = 16
DEFAULT_SHORT_DRAFT_TOKENS = 4


class PLDPlusDrafter(Drafter):
    """Copies the continuation of the best-ranked earlier occurrence of the last token."""

    name = "pld_plus"
    cuttable = True

    def __init__(self, lm, rank_by: str = "hidden", num_draft_tokens: int = DEFAULT_NUM_DRAFT_TOKENS,
                 short_draft_tokens: Optional[int] = DEFAULT_SHORT_DRAFT_TOKENS,
                 layer: Optional[int] = None, theta: Optional[float] = None, avg_window: int = 1,
                 induction_heads: Optional[Sequence[Sequence[int]]] = None, aggregate: str = "max",
                 scope: str = "context"):
        """`layer` (rank_by="hidden") and `induction_heads` (rank_by="attention") come ready: generate() reads the
        stored calibration for them (multidraft.pldplus.calibration.resolve_options); the drafter loads nothing."""
        check_options(dict(rank_by=rank_by, num_draft_tokens=num_draft_tokens, short_draft_tokens=short_draft_tokens,
                           layer=layer, theta=theta, avg_window=avg_window, induction_heads=induction_heads,
                           aggregate=aggregate, scope=scope))
        self.rank_by = rank_by
        self.num_draft_tokens = num_draft_tokens
        self.short_draft_tokens = num_draft_tokens if short_draft_tokens is None else min(short_draft_tokens,
                                                                                           num_draft_tokens)
        self.copying = False          # the last draft was accepted whole: the next one may be long
        self.theta = None if theta is None else float(theta)
        self.avg_window = avg_window
        self.aggregate = aggregate
        self.scope = scope
        self.last_source: Optional[int] = None       # p* of the last proposal (attribution, tests)
        self.hidden_store: Optional[HiddenStore] = None
        self.attention_store: Optional[AttentionRowStore] = None
        if rank_by == "hidden" or layer is not None:     # a layer given to another ranker is checked all the same
            if layer is None or not 1 <= layer <= lm.num_layers:
                raise InvalidOptionError(f"layer {layer!r} does not exist: {lm.name} has decoder layers 1..{lm.num_layers} "
                                         "(HF hidden_states numbering; 0 would be the embeddings)")
        if rank_by == "hidden":
            self.hidden_layer = layer
            self.hidden_store = HiddenStore(lm.hidden_size)
        elif rank_by == "attention":
            self.attention_heads = _checked_heads(lm, induction_heads)
            self.attention_store = AttentionRowStore()

    # ----- the loop's hooks -----
    def begin(self, state: LoopState, prefill_output) -> None:
        self.copying = False
        for store in (self.hidden_store, self.attention_store):
            if store is not None:
                store.reset()
        if prefill_output is not None:
            self._append(prefill_output, list(range(len(state.seq) - 1)), past=0)

    def observe(self, state: LoopState, draft: Draft, verdict, forward_output, kept_rows: list[int]) -> None:
        self._append(forward_output, kept_rows, past=len(state.seq) - 1 - len(kept_rows))
        self.copying = len(draft) > 0 and len(verdict.accepted_nodes) == len(draft)

    def _append(self, forward_output, kept_rows: list[int], past: int) -> None:
        if self.hidden_store is not None:
            self.hidden_store.append(forward_output.hidden[kept_rows])
        if self.attention_store is not None:
            # The last kept position saw the cached past and the kept rows (its path), in sequence order.
            self.attention_store.set(forward_output.attention, kept_rows[-1],
                                     list(range(past)) + [past + row for row in kept_rows])

    def propose(self, state: LoopState, max_tokens: int) -> Draft:
        self.last_source = None
        seq = state.seq
        budget = min(self.num_draft_tokens if self.copying else self.short_draft_tokens, max_tokens)
        if budget <= 0 or len(seq) < 2:
            return Draft()
        positions = candidates(seq, self.scope, state.prompt_length)
        if len(positions) == 0:
            return Draft()
        covered = self.artifact_length()
        if covered is not None and covered != len(seq) - 1:
            raise RuntimeError(f"PLD+ artifact store covers {covered} positions, expected {len(seq) - 1}")
        source = self.rank(positions)
        if source is None:
            return Draft()
        self.last_source = source
        tokens = seq[source + 1: source + 1 + budget]
        for index, token in enumerate(tokens):        # as HF: never draft past an EOS
            if token in state.lm.eos_token_ids:
                tokens = tokens[:index]
                break
        return Draft.chain(tokens, source=source)

    def artifact_length(self) -> Optional[int]:
        store = self.hidden_store or self.attention_store
        return None if store is None else store.length

    def rank(self, positions) -> Optional[int]:
        if self.rank_by == "first":
            return int(positions[0])
        if self.rank_by == "hidden":
            return rank_hidden(self.hidden_store.rows, positions, self.theta, self.avg_window)
        return rank_attention(self.attention_store.row, positions, self.aggregate)


def _checked_heads(lm, induction_heads) -> list[tuple[int, int]]:
    """The (layer, head) attention heads to capture, each checked to exist in `lm`."""
    if induction_heads is None:
        raise InvalidOptionError("rank_by='attention' needs induction_heads=[(layer, head), ...] "
                                 "(generate() reads the calibrated ones)")
    pairs = []
    for layer, head in induction_heads:
        if not (0 <= layer < lm.num_layers and 0 <= head < lm.num_heads):
            raise InvalidOptionError(f"attention head ({layer}, {head}) does not exist: {lm.name} has "
                                     f"{lm.num_layers} layers x {lm.num_heads} attention heads (0-based)")
        pairs.append((layer, head))
    if not pairs:
        raise InvalidOptionError("induction_heads is empty; give at least one (layer, head) pair or leave it unset")
    return pairs


def make_drafter(lm, sampler, options):
    return PLDPlusDrafter(lm, **options)


def check_options(options: dict) -> None:
    """The drafter's checks that need no model (types and ranges); layer and head numbers are checked against the
    model later. The calibration's own options are checked by multidraft.pldplus.calibration.check_options."""
    validation.choice("rank_by", options["rank_by"], RANKERS)
    validation.positive_int("num_draft_tokens", options["num_draft_tokens"])
    validation.integer("short_draft_tokens", options["short_draft_tokens"], minimum=1, allow_none=True,
                       hint=" (None: always num_draft_tokens)")
    validation.integer("layer", options["layer"], minimum=1, allow_none=True)
    validation.number("theta", options["theta"], allow_none=True)
    validation.positive_int("avg_window", options["avg_window"])
    pairs = options["induction_heads"]
    if pairs is not None:
        if not isinstance(pairs, (list, tuple)):
            raise InvalidOptionError(f"induction_heads must be a list of (layer, head) integer pairs, "
                                     f"got {pairs!r:.80}")
        for pair in pairs:
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2
                    and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)):
                raise InvalidOptionError(f"induction_heads must be (layer, head) integer pairs, got {pair!r:.80}")
        if options["rank_by"] != "attention":
            raise InvalidOptionError(f"induction_heads ranks drafts with rank_by='attention' only; with "
                                     f"rank_by={options['rank_by']!r} it would be ignored: drop it, or set "
                                     "rank_by='attention'")
    validation.choice("aggregate", options["aggregate"], AGGREGATES)
    validation.choice("scope", options["scope"], SCOPES)
