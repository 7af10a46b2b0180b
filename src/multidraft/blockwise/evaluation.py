"""Offline evaluation of blockwise drafting (specs/bpd.md §3.7-3.8): block efficiency of any lattice strategy
from one greedy run plus one teacher-forced forward, and the paper's analyses.

Accepted drafts always coincide with the greedy output, so "draft token == the target's argmax" is the same
as "draft token == the greedy token at that position". Steps mirror the online loop exactly: at a step
with D tokens decided, the heads read the hidden state of position P+D-2 (the last cached one), the
certain token is position P+D-1, and draft column c must equal g[D+c]. Block efficiency is
generated tokens / verification calls, as `DecodeStats.mean_acceptance_length` (the prefill emits none).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from multidraft.blockwise.lattice import Lattice, build_lattice, matched_length, oracle_length


@dataclass
class OfflineResult:
    tokens: int
    calls: int
    steps: list[int] = field(default_factory=list)     # tokens gained per call (n)

    @property
    def block_efficiency(self) -> float:
        return self.tokens / self.calls if self.calls else 0.0


class OfflineRun:
    """One prompt: its greedy continuation and the heads' logits at every position of it."""

    def __init__(self, lm, heads, prompt_ids: Sequence[int], max_new_tokens: int, num_heads: Optional[int] = None,
                 greedy_ids: Optional[Sequence[int]] = None):
        from multidraft.api import generate

        self.lm, self.heads = lm, heads
        self.num_heads = num_heads or heads.num_heads
        self.prompt = [int(t) for t in prompt_ids]
        if greedy_ids is None:
            greedy_ids = generate(lm, self.prompt, method="greedy", max_new_tokens=max_new_tokens).token_ids
        self.greedy = [int(t) for t in greedy_ids][:max_new_tokens]
        self.total = len(self.greedy)
        self.sequence = self.prompt + self.greedy
        out = lm.forward(lm.new_cache(), self.sequence, hidden_layer=lm.num_layers, logits_rows=slice(-1, None))
        start = max(len(self.prompt) - 2, 0)
        self._row0 = start
        with torch.no_grad():
            self.head_logits = heads.logits(out.hidden[start:], self.num_heads)   # [rows, h-1, S]

    def with_heads(self, num_heads: int) -> "OfflineRun":
        """The same prompt and greedy output evaluated with heads 2..num_heads only (the h ablation, Table 10).

        Heads are separate FFNs trained with a summed loss on a frozen base, so the first h-1 heads of an
        h=9 set are what an h-head training would learn (up to initialisation): no second training needed."""
        if not 2 <= num_heads <= self.num_heads:
            from multidraft.errors import InvalidOptionError

            raise InvalidOptionError(f"num_heads must be in 2..{self.num_heads} for this run, got {num_heads!r}")
        out = copy.copy(self)
        out.num_heads = num_heads
        out.head_logits = self.head_logits[:, :num_heads - 1]
        return out

    def lattice(self, decided: int, k: int) -> Optional[Lattice]:
        """The lattice of the step that starts with `decided` tokens known (None: no hidden state yet)."""
        row = len(self.prompt) + decided - 2
        if row < 0:
            return None
        return build_lattice(self.sequence[row + 1], self.head_logits[row - self._row0], k, self.heads.token_ids)

    def context(self, decided: int) -> list[int]:
        return self.sequence[:len(self.prompt) + decided]

    def future(self, decided: int) -> list[int]:
        return self.greedy[decided:decided + self.num_heads - 1]

    def run(self, strategy) -> OfflineResult:
        """Block efficiency of a `BlockwiseStrategy` (or any object with lattice/drafts) on its own trajectory."""
        return self._walk(lambda lat, decided: max(
            (matched_length(d, self.future(decided)) for d in strategy.drafts(lat, self.context(decided))), default=0),
            strategy.lattice_k)

    def run_oracle(self, k: int) -> OfflineResult:
        """Oracle top-k: the best path through the lattice at every step (per-step greedy, A10)."""
        return self._walk(lambda lat, decided: oracle_length(lat, self.future(decided)), k)

    def _walk(self, matched, k) -> OfflineResult:
        decided, result = 0, OfflineResult(self.total, 0)
        while decided < self.total:
            lat = self.lattice(decided, k)
            budget = self.total - decided - 1
            m = 0 if lat is None or budget <= 0 else min(matched(lat, decided), budget)
            n = 1 + m
            result.steps.append(n)
            result.calls += 1
            decided += n
        return result

    # ----- analyses along the vanilla trajectory (A13) -----
    def vanilla_steps(self) -> list[int]:
        """`decided` at every step of plain BPD."""
        out, decided = [], 0
        while decided < self.total:
            out.append(decided)
            lat = self.lattice(decided, 1)
            m = 0 if lat is None else matched_length(lat.vanilla(), self.future(decided))
            decided += 1 + min(m, max(self.total - decided - 1, 0))
        return out

    def entropies(self, decided_list: Sequence[int]) -> np.ndarray:
        """[steps, h-1] entropy (nats) of heads 2..h over their shortlist, per step."""
        rows = [len(self.prompt) + d - 2 - self._row0 for d in decided_list if len(self.prompt) + d - 2 >= 0]
        logp = torch.log_softmax(self.head_logits[rows].double(), -1)
        return (-(logp.exp() * logp).sum(-1)).numpy()


# ----------------------------------------------------------------------------- analysis helpers
def consecutive_stats(drafts: Sequence[Sequence[int]]) -> tuple[float, float]:
    """(% of neighbouring pairs that repeat, mean longest run) over full drafts incl. the certain token (A12)."""
    pairs = repeats = 0
    runs = []
    for d in drafts:
        pairs += max(len(d) - 1, 0)
        repeats += sum(1 for a, b in zip(d, d[1:]) if a == b)
        best = cur = 1
        for a, b in zip(d, d[1:]):
            cur = cur + 1 if a == b else 1
            best = max(best, cur)
        runs.append(best)
    return (100.0 * repeats / pairs if pairs else 0.0), (float(np.mean(runs)) if runs else 0.0)


def h_max(mean_entropy: Sequence[float]) -> int:
    """Largest head index up to which the mean entropy is non-decreasing (>= 1); index 1 = first entry."""
    k = 1
    while k < len(mean_entropy) and mean_entropy[k - 1] <= mean_entropy[k]:
        k += 1
    return k


def has_repeat(draft: Sequence[int]) -> bool:
    return any(a == b for a, b in zip(draft, draft[1:]))


def win_tie_loss(pairs: Sequence[tuple[Sequence[int], int, Sequence[int], int]]) -> dict:
    """pairs of (vanilla draft, its n, rescored draft, its n) at the same step -> counts and repair / regress %."""
    out = {"ties": 0, "wins": 0, "losses": 0, "win_repair": 0, "win_regress": 0, "loss_repair": 0, "loss_regress": 0}
    for vanilla, n_v, rescored, n_r in pairs:
        kind = "wins" if n_r > n_v else "losses" if n_r < n_v else "ties"
        out[kind] += 1
        if kind == "ties":
            continue
        prefix = "win" if kind == "wins" else "loss"
        if has_repeat(vanilla) and not has_repeat(rescored):
            out[f"{prefix}_repair"] += 1
        if not has_repeat(vanilla) and has_repeat(rescored):
            out[f"{prefix}_regress"] += 1
    return out


def analyse(run: OfflineRun, rescored=None, ks: Sequence[int] = (1, 2, 4, 8, 16)) -> dict:
    """Spec §3.8 on one prompt: repetition (vanilla vs `rescored` strategy), entropies, oracle vs k, win/tie/loss."""
    steps = run.vanilla_steps()
    vanilla_drafts, rescored_drafts, pairs = [], [], []
    for decided in steps:
        lat_1 = run.lattice(decided, 1)
        if lat_1 is None:
            continue
        vanilla = [lat_1.first_token] + lat_1.vanilla()
        vanilla_drafts.append(vanilla)
        if rescored is not None:
            lat = run.lattice(decided, rescored.lattice_k)
            best = rescored.drafts(lat, run.context(decided))[0]
            rescored_drafts.append([lat.first_token] + best)
            future = run.future(decided)
            pairs.append((vanilla, matched_length(vanilla[1:], future), rescored_drafts[-1], matched_length(best, future)))
    ent = run.entropies(steps)
    return {"steps": len(steps), "consec_vanilla": consecutive_stats(vanilla_drafts),
            "consec_rescored": consecutive_stats(rescored_drafts) if rescored is not None else None,
            "entropy_sum": ent.sum(0).tolist(), "entropy_steps": int(ent.shape[0]),
            "oracle": {k: run.run_oracle(k).block_efficiency for k in ks},
            "win_tie_loss": win_tie_loss(pairs) if rescored is not None else None}
