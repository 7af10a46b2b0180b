"""Drafting with a helper model that shares the target's tokenizer: `speculative`, `multi_draft` and `mtad`.

- `DraftModelDrafter` samples K chains of length L (K = 1: classic speculative sampling) merged into one prefix
  tree; `MultiDraftVerifier` verifies them (lossless).
- `BeamDrafter` runs beam sampling over the draft's joint distribution; `MTADVerifier` accepts by joint
  likelihood ratio (lossy).
Both receive a ready draft `LM` (multidraft.models.draft_models resolves one) and keep its cache in a `DraftSession`
(draft_session.DraftLMDrafter); their factories and option checks are in draft_model_options.py.

Randomness is keyed by absolute position: draft k's token at position n is drawn from
`sampler.generator(n, DRAFT_STREAM + k)` and MTAD's beam choices from `sampler.generator(n, BEAM_STREAM)`, so the
same seed gives the same output. A position's draft draw can be repeated only in a step whose earlier decision
already threw the previous draw away, so draws that reach the output are independent.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from multidraft.drafters.base import LoopState
from multidraft.drafters.draft_session import DraftLMDrafter
from multidraft.models.runner import LM
from multidraft.sampling import SamplingParams, argmax_rows, draw, logits_to_probs
from multidraft.types import Draft
from multidraft.verify.mtad import joint_law_params
from multidraft.verify.multi_draft import DraftChains

BEAM_STREAM = 8
DRAFT_STREAM = 16


class DraftModelDrafter(DraftLMDrafter):
    """K chains of `num_draft_tokens` tokens sampled from the draft model, merged into one prefix tree.

    Draft k samples at `draft_temperatures[k]` (0 = its argmax) with the target's top-k / top-p. Draft tree node i
    is draft-cache node i, so the verifier's accepted path is kept in the draft cache as is. `adaptive` grows the
    length by 2 after a fully accepted draft and shrinks it by 1 otherwise (HF's heuristic), within
    [1, max_draft_tokens]. `stop_below` ends a draft early once every chain's latest token had draft probability
    below it (HF's assistant_confidence_threshold): the stop depends only on the draft's own tokens, so the
    verifiers stay exact, and long drafts cost little where a forward of many tokens costs about one of a few.
    """

    name = "draft_model"
    provides = ("chains",)

    def __init__(self, draft_lm: LM, num_drafts: int, num_draft_tokens: int, draft_temperatures: Sequence[float],
                 top_k: int = 0, top_p: float = 1.0, adaptive: bool = False,
                 max_draft_tokens: Optional[int] = None, stop_below: float = 0.0):
        super().__init__(draft_lm)
        self.num_drafts = num_drafts
        self.length = num_draft_tokens
        self.max_length = max_draft_tokens or 3 * num_draft_tokens
        self.adaptive = adaptive
        self.stop_below = stop_below
        self.draft_params = [SamplingParams(float(t), top_k, top_p) for t in draft_temperatures]

    def drafting(self, state: LoopState, max_tokens: int):
        length = min(self.length, max_tokens)
        if length < 1:
            return Draft()
        first_position = len(state.seq)
        level_logits = yield from self.session.start(state.seq)
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
                    token = argmax_rows(law)[0]
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
                level_logits, session_nodes = yield from self.session.extend([tokens[n] for n in level_nodes],
                                                                             [parents[n] for n in level_nodes])
                assert session_nodes == level_nodes, "draft tree and draft cache out of step"
                row_of_node = {node: row for row, node in enumerate(level_nodes)}
        draft_probs = torch.stack([torch.stack(rows) for rows in chain_probs])      # (K, L, V)
        chains = DraftChains(chain_tokens, chain_nodes, draft_probs)
        return Draft(tokens, parents, draft_probs[0] if self.num_drafts == 1 else None, chains=chains)

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


class BeamDrafter(DraftLMDrafter):
    """MTAD's draft (specs/mtad.md §3.2): beam sampling over the draft's warped joint distribution; proposes the
    final beam with the highest joint log-likelihood, with its per-token log-probs in `draft_logprobs`.

    At temperature 0 (MTAD-greedy) it is a plain beam search over the draft's unwarped law (`joint_law_params`):
    the greedy one-hot law would leave a single beam whatever num_beams."""

    name = "draft_beam"
    provides = ("draft_logprobs", "draft_nodes")

    def __init__(self, draft_lm: LM, num_beams: int, num_draft_tokens: int, params: SamplingParams,
                 deterministic: bool = False):
        super().__init__(draft_lm)
        self.num_beams = num_beams
        self.num_draft_tokens = num_draft_tokens
        self.params = joint_law_params(params)
        self.deterministic = deterministic or params.greedy

    def drafting(self, state, max_tokens):
        gamma = min(self.num_draft_tokens, max_tokens)
        if gamma < 1:
            return Draft()
        first_position = len(state.seq)
        generator = None if self.deterministic else state.sampler.generator(first_position, BEAM_STREAM)
        logits = yield from self.session.start(state.seq)
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
                logits, nodes = yield from self.session.extend(tokens, [beam_nodes[r][-1] if beam_nodes[r] else -1
                                                                        for r in rows])
                beam_nodes = [beam_nodes[r] + [node] for r, node in zip(rows, nodes)]
            else:
                beam_nodes = [beam_nodes[r] for r in rows]     # the last tokens are never fed to the draft
        best = int(torch.argmax(scores))
        return Draft.chain(beam_tokens[best], draft_logprobs=beam_logprobs[best], draft_nodes=beam_nodes[best])

    def observe(self, state, draft, verdict, forward_output, kept_rows) -> None:
        self.session.keep_path(draft.draft_nodes[: len(verdict.accepted_nodes)])


__all__ = ["BeamDrafter", "DraftModelDrafter", "choose_candidates"]
