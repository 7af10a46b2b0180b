"""The draft model's KV cache during one generation, shared by every helper-model drafter (draft_model.py, bild.py).

`DraftSession` keeps the draft model's cache in step with the committed sequence across steps: each step it feeds
only the tokens the cache lacks, then grows a token tree level by level (one draft forward per depth, whatever the
number of branches, with a 4D mask so each node sees only its ancestors), and after verification keeps just the
accepted path.

Its `start` and `extend` are generators: each yields the one `DraftForward` it needs and receives its logits, so a
drafter's proposal (`drafting`) is written once and runs either alone (`run_alone`: the forward on the session's
own cache, what `generate` does) or in the engine, which answers the forwards of every request at the same level
with one packed forward over a KV arena of the draft model (multidraft.batched_drafts; the session's cache is then
the request's region of that arena).
"""

from __future__ import annotations

from typing import Generator, Optional, Sequence

import torch

from multidraft.drafters.base import DraftForward, Drafter, LoopState, run_alone
from multidraft.models.runner import LM
from multidraft.types import Draft

Steps = Generator[DraftForward, torch.Tensor, torch.Tensor]


class DraftSession:
    """The draft model's cache: the committed chain `chain_ids`, then this step's tree nodes (in creation order)."""

    def __init__(self, lm: LM, target_vocab_size: int, target_device, stats, cache=None):
        self.lm = lm
        # HF's cache (the tree masks need an eager one), or the request's region of the engine's draft arena
        self.cache = cache if cache is not None else lm.new_cache(dynamic=True)
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

    def start(self, seq: Sequence[int]) -> Steps:
        """Drop last step's tree, feed the tokens of `seq` the cache lacks; return the (1, V) logits after seq
        (a generator: `logits = yield from session.start(seq)`)."""
        limit = min(len(self.chain_ids), len(seq) - 1)     # the last token is always fed: we need its logits
        common = 0
        while common < limit and self.chain_ids[common] == seq[common]:
            common += 1
        self.cache.crop(common)
        logits = yield DraftForward(self.lm, self.cache, [int(t) for t in seq[common:]], last_only=True)
        self.stats.draft_calls += 1
        self.chain_ids = list(seq)
        self._reset_tree()
        return self._to_target(logits)

    def extend(self, tokens: Sequence[int], parents: Sequence[int]) -> Generator[DraftForward, torch.Tensor,
                                                                                 tuple[torch.Tensor, list[int]]]:
        """Feed one level of tree nodes; parents are earlier node indices (-1: the end of the chain).

        Returns the (m, V) logits after each new node and the new nodes' indices (a generator, as `start`).
        """
        tokens, parents = [int(t) for t in tokens], [int(p) for p in parents]
        num_old = self.num_nodes
        depths = [1 if parent < 0 else self.node_depths[parent] + 1 for parent in parents]
        if len(tokens) == 1 and parents[0] == num_old - 1 and self._nodes_form_chain:
            forward = DraftForward(self.lm, self.cache, tokens)                       # plain causal step
        elif num_old == 0:
            forward = DraftForward(self.lm, self.cache, tokens, parents=[-1] * len(tokens))
        else:
            forward = DraftForward(self.lm, self.cache, tokens, visible=self._visible(parents, depths))
        logits = yield forward
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

    def _visible(self, parents: list[int], depths: list[int]) -> tuple[torch.Tensor, list[int]]:
        """(allowed, positions) of a forward where new node i sees the chain, its ancestors in the cached tree and
        itself."""
        base, past = len(self.chain_ids), self.cache.length
        allowed = torch.zeros(len(parents), past + len(parents), dtype=torch.bool)
        allowed[:, :base] = True
        for row, parent in enumerate(parents):
            node = parent
            while node >= 0:
                allowed[row, base + node] = True
                node = self.node_parents[node]
            allowed[row, past + row] = True
        return allowed, [base + depth - 1 for depth in depths]

    def _to_target(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits on the target's device with the target's width (padded embeddings differ by model)."""
        width = logits.shape[-1]
        if width > self.target_vocab_size:
            logits = logits[..., : self.target_vocab_size]
        elif width < self.target_vocab_size:
            pad = logits.new_full((*logits.shape[:-1], self.target_vocab_size - width), float("-inf"))
            logits = torch.cat([logits, pad], dim=-1)
        return logits.to(self.target_device)


class DraftLMDrafter(Drafter):
    """A drafter that runs a ready draft `LM`: one `DraftSession` per generation, opened in begin(). Subclasses write
    their proposal once, as `drafting` (a generator of the session's forwards); `propose` runs it alone."""

    def __init__(self, draft_lm: LM):
        self.draft_lm = draft_lm
        self.session: Optional[DraftSession] = None
        self.draft_cache = None

    def use_cache(self, cache) -> None:
        """Draft in `cache` (the engine's KV region of the draft model) instead of a cache of the session's own;
        before begin()."""
        if self.session is not None:
            raise RuntimeError("use_cache must come before begin(): the session's cache is already in use")
        self.draft_cache = cache

    def begin(self, state: LoopState, prefill_output) -> None:
        self.session = DraftSession(self.draft_lm, state.lm.vocab_size, state.lm.device, state.stats,
                                    cache=self.draft_cache)

    def propose(self, state: LoopState, max_tokens: int) -> Draft:
        return run_alone(self.drafting(state, max_tokens))

    def drafting(self, state: LoopState, max_tokens: int) -> Generator[DraftForward, torch.Tensor, Draft]:
        raise NotImplementedError
