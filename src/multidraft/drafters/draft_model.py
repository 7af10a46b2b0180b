"""Drafting with a helper model that shares the target's tokenizer: `speculative`, `multi_draft` and `mtad`.

- `DraftSession` keeps the draft model's KV cache in step with the committed sequence across steps: each step
  it feeds only the tokens the cache lacks, then grows a token tree level by level (one draft forward per
  depth, whatever the number of branches, with a 4D mask so each node sees only its ancestors), and after
  verification keeps just the accepted path.
- `DraftModelDrafter` samples K chains of length L (K = 1: classic speculative sampling) merged into one prefix
  tree; `MultiDraftVerifier` verifies them (lossless).
- `BeamDrafter` runs beam sampling over the draft's joint distribution; `MTADVerifier` accepts by joint
  likelihood ratio (lossy).

Randomness is keyed by absolute position: draft k's token at position n is drawn from
`sampler.generator(n, DRAFT_STREAM + k)` and MTAD's beam choices from `sampler.generator(n, BEAM_STREAM)`, so the
same seed gives the same output. A position's draft draw can be repeated only in a step whose earlier decision
already threw the previous draw away, so draws that reach the output are independent.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

import torch

from multidraft.drafters.base import Drafter, LoopState
from multidraft.errors import InvalidOptionError, PromptError, TokenizerMismatchError
from multidraft.models.runner import LM
from multidraft.sampling import SamplingParams, check_finite, draw, logits_to_probs
from multidraft.tokenizer_identity import same_vocabulary, vocab_family
from multidraft.validation import MIN_TEMPERATURE
from multidraft.types import Draft
from multidraft.verify.mtad import THRESHOLD_SEMANTICS, check_threshold, joint_law_params
from multidraft.verify.multi_draft import SELECTION_SCHEMES, DraftChains, MultiDraftVerifier

BEAM_STREAM = 8
DRAFT_STREAM = 16
# Target alias -> default draft alias (same tokenizer).
DEFAULT_DRAFTS = {"qwen2.5-coder-1.5b": "qwen2.5-coder-0.5b"}


# ----------------------------------------------------------------------------------------------------------------
# The draft model and its cache
# ----------------------------------------------------------------------------------------------------------------

class DraftSession:
    """The draft model's cache: the committed chain `chain_ids`, then this step's tree nodes (in creation order)."""

    def __init__(self, lm: LM, target_vocab_size: int, target_device, stats):
        self.lm = lm
        self.cache = lm.new_cache(dynamic=True)     # _masked_forward drives HF's cache with its own tree masks
        self.chain_ids: list[int] = []
        self.target_vocab_size = target_vocab_size
        self.target_device = target_device
        self.stats = stats
        self._reset_tree()

    def _reset_tree(self) -> None:
        self.node_parents: list[int] = []
        self.node_depths: list[int] = []
        self.node_tokens: list[int] = []
        self._nodes_form_chain = True

    @property
    def num_nodes(self) -> int:
        return len(self.node_parents)

    def start(self, seq: Sequence[int]) -> torch.Tensor:
        """Drop last step's tree, feed the tokens of `seq` the cache lacks; return the (1, V) logits after seq."""
        limit = min(len(self.chain_ids), len(seq) - 1)     # the last token is always fed: we need its logits
        common = 0
        while common < limit and self.chain_ids[common] == seq[common]:
            common += 1
        self.cache.crop(common)
        output = self.lm.forward(self.cache, list(seq[common:]), logits_rows=slice(-1, None))
        self.stats.draft_calls += 1
        self.chain_ids = list(seq)
        self._reset_tree()
        return self._to_target(output.logits)

    def extend(self, tokens: Sequence[int], parents: Sequence[int]) -> tuple[torch.Tensor, list[int]]:
        """Feed one level of tree nodes; parents are earlier node indices (-1: the end of the chain).

        Returns the (m, V) logits after each new node and the new nodes' indices.
        """
        tokens, parents = [int(t) for t in tokens], [int(p) for p in parents]
        num_old = self.num_nodes
        depths = [1 if parent < 0 else self.node_depths[parent] + 1 for parent in parents]
        if len(tokens) == 1 and parents[0] == num_old - 1 and self._nodes_form_chain:
            logits = self.lm.forward(self.cache, tokens).logits          # plain causal step
        elif num_old == 0:
            logits = self.lm.forward(self.cache, tokens, parents=[-1] * len(tokens)).logits
        else:
            logits = self._masked_forward(tokens, parents, depths)
        self.stats.draft_calls += 1
        self._nodes_form_chain = self._nodes_form_chain and len(tokens) == 1 and parents[0] == num_old - 1
        self.node_parents.extend(parents)
        self.node_depths.extend(depths)
        self.node_tokens.extend(tokens)
        return self._to_target(logits), list(range(num_old, num_old + len(tokens)))

    def keep_path(self, nodes: Sequence[int]) -> None:
        """Keep the chain plus the given root-to-node path of tree nodes (those that were fed); drop the rest."""
        fed = [node for node in nodes if node < self.num_nodes]
        base = len(self.chain_ids)
        self.cache.keep(base, [base + node for node in fed])
        self.chain_ids.extend(self.node_tokens[node] for node in fed)
        self._reset_tree()

    @torch.inference_mode()
    def _masked_forward(self, tokens: list[int], parents: list[int], depths: list[int]) -> torch.Tensor:
        """One forward where new node i sees the chain, its ancestors in the cached tree and itself."""
        lm, base, past = self.lm, len(self.chain_ids), self.cache.length
        allowed = torch.zeros(len(tokens), past + len(tokens), dtype=torch.bool)
        allowed[:, :base] = True
        for row, parent in enumerate(parents):
            node = parent
            while node >= 0:
                allowed[row, base + node] = True
                node = self.node_parents[node]
            allowed[row, past + row] = True
        mask = torch.zeros(allowed.shape, dtype=lm.dtype).masked_fill_(~allowed, torch.finfo(lm.dtype).min)
        positions = [base + depth - 1 for depth in depths]
        if max(positions) >= lm.context_length:
            raise PromptError(f"the draft would reach position {max(positions)}, beyond the context of {lm.name} "
                              f"({lm.context_length}); shorten the prompt or lower max_new_tokens")
        output = lm.call_model(input_ids=torch.tensor([tokens], device=lm.device),
                               past_key_values=self.cache.hf_cache, use_cache=True,
                               position_ids=torch.tensor([positions], device=lm.device),
                               attention_mask=mask.to(lm.device)[None, None])
        logits = output.logits[0].float()
        check_finite(logits)
        return logits

    def _to_target(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits on the target's device with the target's width (padded embeddings differ by model)."""
        width = logits.shape[-1]
        if width > self.target_vocab_size:
            logits = logits[..., : self.target_vocab_size]
        elif width < self.target_vocab_size:
            pad = logits.new_full((*logits.shape[:-1], self.target_vocab_size - width), float("-inf"))
            logits = torch.cat([logits, pad], dim=-1)
        return logits.to(self.target_device)


# ----------------------------------------------------------------------------------------------------------------
# Drafters
# ----------------------------------------------------------------------------------------------------------------

class DraftModelDrafter(Drafter):
    """K chains of `num_draft_tokens` tokens sampled from the draft model, merged into one prefix tree.

    Draft k samples at `draft_temperatures[k]` (0 = its argmax) with the target's top-k / top-p. Draft tree node i
    is draft-cache node i, so the verifier's accepted path is kept in the draft cache as is. `adaptive` grows the
    length by 2 after a fully accepted draft and shrinks it by 1 otherwise (HF's heuristic), within
    [1, max_draft_tokens]. `stop_below` ends a draft early once every chain's latest token had draft probability
    below it (HF's assistant_confidence_threshold): the stop depends only on the draft's own tokens, so the
    verifiers stay exact, and long drafts cost little where a forward of many tokens costs about one of a few.
    """

    name = "draft_model"

    def __init__(self, draft_lm: LM, num_drafts: int, num_draft_tokens: int, draft_temperatures: Sequence[float],
                 top_k: int = 0, top_p: float = 1.0, adaptive: bool = False,
                 max_draft_tokens: Optional[int] = None, stop_below: float = 0.0):
        self.draft_lm = draft_lm
        self.num_drafts = num_drafts
        self.length = num_draft_tokens
        self.max_length = max_draft_tokens or 3 * num_draft_tokens
        self.adaptive = adaptive
        self.stop_below = stop_below
        self.draft_params = [SamplingParams(float(t), top_k, top_p) for t in draft_temperatures]
        self.session: Optional[DraftSession] = None

    def begin(self, state: LoopState, prefill_output) -> None:
        self.session = DraftSession(self.draft_lm, state.lm.vocab_size, state.lm.device, state.stats)

    def propose(self, state: LoopState, max_tokens: int) -> Draft:
        length = min(self.length, max_tokens)
        if length < 1:
            return Draft()
        first_position = len(state.seq)
        level_logits = self.session.start(state.seq)
        row_of_node = {-1: 0}                       # node -> row of level_logits holding its next-token logits
        current = [-1] * self.num_drafts            # the node each draft sits on
        tokens, parents = [], []
        chain_tokens = [[] for _ in range(self.num_drafts)]
        chain_nodes = [[] for _ in range(self.num_drafts)]
        chain_probs = [[] for _ in range(self.num_drafts)]
        for depth in range(length):
            unsure = True                            # every chain's token at this depth is below stop_below
            level_probs: dict[SamplingParams, torch.Tensor] = {}
            created: dict[tuple[int, int], int] = {}
            for k, params in enumerate(self.draft_params):
                if params not in level_probs:
                    level_probs[params] = logits_to_probs(level_logits, params)
                chain_parent = current[k]
                law = level_probs[params][row_of_node[chain_parent]]
                if params.greedy:
                    token = int(law.argmax())
                else:
                    token = draw(law, state.sampler.generator(first_position + depth, DRAFT_STREAM + k))
                node = created.get((current[k], token))
                if node is None:
                    node = created[(current[k], token)] = len(tokens)
                    tokens.append(token)
                    parents.append(current[k])
                chain_tokens[k].append(token)
                chain_nodes[k].append(node)
                chain_probs[k].append(law)
                current[k] = node
                if unsure and self.stop_below > 0:     # an argmax draft's law is one-hot: judge its softmax
                    row = row_of_node[chain_parent]
                    confidence = torch.softmax(level_logits[row].float(), -1)[token] if params.greedy else law[token]
                    unsure = float(confidence) < self.stop_below
                else:
                    unsure = False
            if unsure:
                break
            if depth + 1 < length:
                level_nodes = list(created.values())
                level_logits, session_nodes = self.session.extend([tokens[n] for n in level_nodes],
                                                                  [parents[n] for n in level_nodes])
                assert session_nodes == level_nodes, "draft tree and draft cache out of step"
                row_of_node = {node: row for row, node in enumerate(level_nodes)}
        draft_probs = torch.stack([torch.stack(rows) for rows in chain_probs])      # (K, L, V)
        chains = DraftChains(chain_tokens, chain_nodes, draft_probs)
        return Draft(tokens, parents, draft_probs[0] if self.num_drafts == 1 else None, {"chains": chains})

    def observe(self, state, draft, verdict, forward_output, kept_rows) -> None:
        self.session.keep_path(verdict.accepted_nodes)
        if self.adaptive and len(draft):
            if len(verdict.accepted_nodes) == max(draft.depths()):
                self.length = min(self.length + 2, self.max_length)
            else:
                self.length = max(1, self.length - 1)


def choose_candidates(scores: torch.Tensor, count: int, generator: Optional[torch.Generator]) -> torch.Tensor:
    """Indices of `count` entries of a flat score vector: sampled without replacement with probability
    proportional to exp(score) (beam sampling), or the top scores when `generator` is None. Entries at -inf are
    never chosen; fewer than `count` come back when fewer are finite."""
    finite = torch.isfinite(scores)
    count = min(count, int(finite.sum()))
    if generator is None:
        return torch.topk(scores, count).indices
    weights = torch.exp(scores - scores[finite].max()).masked_fill(~finite, 0.0)
    return torch.multinomial(weights.cpu(), count, replacement=False, generator=generator).to(scores.device)


class BeamDrafter(Drafter):
    """MTAD's draft (specs/mtad.md §3.2): beam sampling over the draft's warped joint distribution; proposes the
    final beam with the highest joint log-likelihood, with its per-token log-probs in `info["draft_logprobs"]`.

    At temperature 0 (MTAD-greedy) it is a plain beam search over the draft's unwarped law (`joint_law_params`):
    the greedy one-hot law would leave a single beam whatever num_beams."""

    name = "draft_beam"

    def __init__(self, draft_lm: LM, num_beams: int, num_draft_tokens: int, params: SamplingParams,
                 deterministic: bool = False):
        self.draft_lm = draft_lm
        self.num_beams = num_beams
        self.num_draft_tokens = num_draft_tokens
        self.params = joint_law_params(params)
        self.deterministic = deterministic or params.greedy
        self.session: Optional[DraftSession] = None

    def begin(self, state, prefill_output) -> None:
        self.session = DraftSession(self.draft_lm, state.lm.vocab_size, state.lm.device, state.stats)

    def propose(self, state, max_tokens) -> Draft:
        gamma = min(self.num_draft_tokens, max_tokens)
        if gamma < 1:
            return Draft()
        first_position = len(state.seq)
        generator = None if self.deterministic else state.sampler.generator(first_position, BEAM_STREAM)
        logits = self.session.start(state.seq)
        scores = torch.zeros(1, dtype=torch.float64, device=logits.device)   # joint draft log-likelihood per beam
        beam_tokens, beam_logprobs, beam_nodes = [[]], [[]], [[]]
        for depth in range(gamma):
            log_probs = torch.log(logits_to_probs(logits, self.params)).double()   # (beams, V), warped
            vocab_size = log_probs.shape[-1]
            candidate_scores = (scores[:, None] + log_probs).reshape(-1)
            chosen = choose_candidates(candidate_scores, self.num_beams, generator).tolist()
            rows, tokens = [c // vocab_size for c in chosen], [c % vocab_size for c in chosen]
            scores = candidate_scores[chosen]
            picked = log_probs[rows, tokens].tolist()          # one host copy per depth, not one per beam
            beam_tokens = [beam_tokens[r] + [t] for r, t in zip(rows, tokens)]
            beam_logprobs = [beam_logprobs[r] + [lp] for r, lp in zip(rows, picked)]
            if depth + 1 < gamma:
                logits, nodes = self.session.extend(tokens, [beam_nodes[r][-1] if beam_nodes[r] else -1 for r in rows])
                beam_nodes = [beam_nodes[r] + [node] for r, node in zip(rows, nodes)]
            else:
                beam_nodes = [beam_nodes[r] for r in rows]     # the last tokens are never fed to the draft
        best = int(torch.argmax(scores))
        return Draft.chain(beam_tokens[best], draft_logprobs=beam_logprobs[best], draft_nodes=beam_nodes[best])

    def observe(self, state, draft, verdict, forward_output, kept_rows) -> None:
        self.session.keep_path(draft.info["draft_nodes"][: len(verdict.accepted_nodes)])


# ----------------------------------------------------------------------------------------------------------------
# Options and the draft model
# ----------------------------------------------------------------------------------------------------------------

_loaded_drafts: dict[tuple, LM] = {}


def check_same_vocabulary(draft: LM, target: LM) -> None:
    if same_vocabulary(draft, target):
        return
    raise TokenizerMismatchError(
        f"the draft model {draft.name!r} (vocabulary {vocab_family(draft)}, {len(draft.tokenizer):,} tokens) and the "
        f"target model {target.name!r} (vocabulary {vocab_family(target)}, {len(target.tokenizer):,} tokens) use "
        "different tokenizers, so draft token ids mean nothing to the target; pick a draft model of the target's "
        "family (e.g. qwen2.5-coder-0.5b for qwen2.5-coder-1.5b)")


def resolve_draft_model(draft_model, target: LM, method: str) -> LM:
    """An `LM`, or an alias / path / HF id loaded in the target's dtype on the target's device (cached).

    A draft LM of another dtype or device is used as it is: it runs in its own dtype on its own device, and its
    logits are moved to the target's device as float32 before any probability is computed.
    """
    if draft_model is None:
        alias = DEFAULT_DRAFTS.get(getattr(target.info, "name", None))
        if alias is None:
            raise InvalidOptionError(
                f"method {method!r} needs draft_model=: an LM (multidraft.load_model(...)) or a model alias that "
                f"shares the tokenizer of {target.name!r}")
        draft_model = alias
    if isinstance(draft_model, (str, os.PathLike)):
        key = (os.fspath(draft_model), str(target.dtype), str(target.device))
        if key not in _loaded_drafts:
            from multidraft.models.load import load_model
            _loaded_drafts.clear()          # keep at most one loaded draft model alive
            runner = getattr(target, "runner", "eager")
            # A draft session drives HF's cache with its own tree masks (new_cache(dynamic=True)): graphs would idle.
            _loaded_drafts[key] = load_model(os.fspath(draft_model), dtype=target.dtype, device=target.device,
                                             runner="auto" if runner == "static" else runner)
        draft = _loaded_drafts[key]
    elif isinstance(draft_model, LM):
        draft = draft_model
    else:
        raise InvalidOptionError(f"draft_model must be an LM (multidraft.load_model(...)) or a model alias/path, "
                                 f"got {type(draft_model).__name__}")
    if draft.device.type == "meta":
        raise InvalidOptionError(f"the draft model {draft.name!r} has no weights loaded (device 'meta')")
    check_same_vocabulary(draft, target)
    return draft


def positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOptionError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def draft_temperature_list(value, num_drafts: int, target_temperature: float) -> list[float]:
    """None: the target's temperature for every draft, except when the target is greedy and K > 1, where drafts
    sample at 1.0 (K identical argmax chains would coincide). A number: every draft. A list: one per draft."""
    if value is None:
        if target_temperature == 0 and num_drafts > 1:
            return [1.0] * num_drafts
        return [float(target_temperature)] * num_drafts
    values = [value] * num_drafts if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if not isinstance(values, (list, tuple)) or len(values) != num_drafts:
        raise InvalidOptionError(f"draft_temperatures must be a number or a list of num_drafts = {num_drafts} "
                                 f"numbers, got {value!r}")
    for temperature in values:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
                temperature == 0 or MIN_TEMPERATURE <= temperature < float("inf")):   # floor: finite probabilities
            raise InvalidOptionError(f"draft temperatures must be numbers >= 0 (0 = argmax, else at least "
                                     f"{MIN_TEMPERATURE}), got {value!r}")
    return [float(t) for t in values]


def _make_chain_drafter(lm, sampler, options, num_drafts, draft_temperatures, method):
    num_draft_tokens = positive_int("num_draft_tokens", options["num_draft_tokens"])
    if not isinstance(options["adaptive"], bool):
        raise InvalidOptionError(f"adaptive must be True or False, got {options['adaptive']!r}")
    params = sampler.params
    temperatures = draft_temperature_list(draft_temperatures, num_drafts, params.temperature)
    draft_lm = resolve_draft_model(options["draft_model"], lm, method)
    stop_below = options["stop_below"]
    if isinstance(stop_below, bool) or not isinstance(stop_below, (int, float)) or not 0 <= stop_below <= 1:
        raise InvalidOptionError(f"stop_below must be a probability in [0, 1] (0 = never stop early), "
                                 f"got {stop_below!r}")
    return DraftModelDrafter(draft_lm, num_drafts, num_draft_tokens, temperatures, params.top_k, params.top_p,
                             options["adaptive"], stop_below=float(stop_below))


def _make_speculative_drafter(lm, sampler, options):
    return _make_chain_drafter(lm, sampler, options, 1, options["draft_temperature"], "speculative")


def _multi_draft_settings(options):
    num_drafts = positive_int("num_drafts", options["num_drafts"])
    selection = options["selection"]
    if selection not in SELECTION_SCHEMES:
        raise InvalidOptionError(f"selection must be one of {', '.join(SELECTION_SCHEMES)}, got {selection!r}")
    selection_options = options["selection_options"] or {}
    if not isinstance(selection_options, dict):
        raise InvalidOptionError(f"selection_options must be a dict (e.g. {{'s': 5, 'alphabet_size': 40}}), "
                                 f"got {selection_options!r}")
    return num_drafts, selection, selection_options


def _make_multi_draft_drafter(lm, sampler, options):
    num_drafts, selection, _ = _multi_draft_settings(options)
    drafter = _make_chain_drafter(lm, sampler, options, num_drafts, options["draft_temperatures"], "multi_draft")
    if selection == "spectr" and len({p.temperature for p in drafter.draft_params}) > 1:
        raise InvalidOptionError("selection='spectr' needs identical drafts; give every draft the same temperature "
                                 "or use selection='specinfer' or an 'is*' scheme")
    return drafter


def _make_multi_draft_verifier(lm, sampler, options):
    _, selection, selection_options = _multi_draft_settings(options)
    from multidraft.selection.schemes import SCHEME_OPTIONS
    unknown = sorted(set(selection_options) - set(SCHEME_OPTIONS[selection]))
    if unknown:
        raise InvalidOptionError(f"selection {selection!r} takes no option(s) {unknown}; it accepts: "
                                 f"{', '.join(sorted(SCHEME_OPTIONS[selection])) or 'none'}")
    return MultiDraftVerifier(selection, **selection_options)


def _make_mtad_drafter(lm, sampler, options):
    num_beams = positive_int("num_beams", options["num_beams"])
    gamma = positive_int("num_draft_tokens", options["num_draft_tokens"])
    check_threshold(options["accept_threshold"], options["threshold_semantics"])
    if not isinstance(options["deterministic"], bool):
        raise InvalidOptionError(f"deterministic must be True or False, got {options['deterministic']!r}")
    draft_lm = resolve_draft_model(options["draft_model"], lm, "mtad")
    return BeamDrafter(draft_lm, num_beams, gamma, sampler.params, options["deterministic"])


def check_options(options: dict) -> None:
    """The checks of the three methods below that need no model, run before any model is loaded."""
    draft_model = options["draft_model"]
    if draft_model is not None and not isinstance(draft_model, (str, os.PathLike, LM)):
        raise InvalidOptionError(f"draft_model must be an LM (multidraft.load_model(...)) or a model alias/path, "
                                 f"got {type(draft_model).__name__}")
    positive_int("num_draft_tokens", options["num_draft_tokens"])
    num_drafts = _multi_draft_settings(options)[0] if "num_drafts" in options else 1
    for name in ("draft_temperature", "draft_temperatures"):
        if name in options:
            draft_temperature_list(options[name], num_drafts, 0.0)
    if "num_beams" in options:
        positive_int("num_beams", options["num_beams"])
        check_threshold(options["accept_threshold"], options["threshold_semantics"])
    for name in ("adaptive", "deterministic"):
        if name in options and not isinstance(options[name], bool):
            raise InvalidOptionError(f"{name} must be True or False, got {options[name]!r}")


__all__ = ["BeamDrafter", "DraftModelDrafter", "DraftSession", "THRESHOLD_SEMANTICS", "check_same_vocabulary",
           "resolve_draft_model"]
