"""The data every decoder shares: the draft tree, the verdict on it, decode statistics and the result."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch


# The typed parts of a Draft a verifier may need (the draft-to-verifier contract): a drafter class lists the ones
# it fills in `Drafter.provides`, a verifier class the ones it reads in `Verifier.needs`, and a method row that
# pairs a verifier with a drafter lacking one of its fields is refused when the row is built (multidraft.methods).
DRAFT_FIELDS = ("draft_probs", "chains", "draft_logprobs", "draft_nodes")


@dataclass
class Draft:
    """A token tree proposed on top of the last committed token (the root, which is not part of it).

    `parents[i]` is the index of node i's parent in this draft, or -1 when its parent is the root.
    Nodes must come after their parents. A chain of k tokens has parents [-1, 0, 1, ..., k-2].
    Typed parts, None unless the drafter fills them (see DRAFT_FIELDS):
    - `draft_probs` (num_nodes, V): the distribution node i was sampled from (stochastic drafters);
    - `chains`: the K sampled chains behind a multi-draft tree (verify.multi_draft.DraftChains);
    - `draft_logprobs`: per-token draft log-probabilities of a chain under the joint law (MTAD's ratio test);
    - `draft_nodes`: the drafter's own session node of each token (it keeps the accepted ones' cache).
    `notes` is free-form attribution (source, match length) that no verifier reads.
    """

    token_ids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    draft_probs: Optional[torch.Tensor] = None
    notes: dict[str, Any] = field(default_factory=dict)
    chains: Any = None
    draft_logprobs: Optional[list[float]] = None
    draft_nodes: Optional[list[int]] = None

    @classmethod
    def chain(cls, token_ids, draft_probs=None, *, draft_logprobs=None, draft_nodes=None, **notes) -> "Draft":
        token_ids = [int(t) for t in token_ids]
        return cls(token_ids, list(range(-1, len(token_ids) - 1)), draft_probs, dict(notes),
                   draft_logprobs=draft_logprobs, draft_nodes=draft_nodes)

    @property
    def info(self) -> dict[str, Any]:
        """Everything the draft carries besides its tree, by name (a read-only view: notes and typed parts)."""
        typed = {name: getattr(self, name) for name in DRAFT_FIELDS[1:] if getattr(self, name) is not None}
        return {**self.notes, **typed}

    def missing(self, fields) -> list[str]:
        """The typed parts among `fields` this (non-empty) draft lacks."""
        return [name for name in fields if getattr(self, name) is None] if self.token_ids else []

    def __len__(self) -> int:
        return len(self.token_ids)

    def is_chain(self) -> bool:
        return all(parent == index - 1 for index, parent in enumerate(self.parents))

    def depths(self) -> list[int]:
        """Depth of each node: 1 for children of the root."""
        depth: list[int] = []
        for parent in self.parents:
            depth.append(1 if parent < 0 else depth[parent] + 1)
        return depth

    def validate(self, vocab_size: int) -> None:
        if len(self.parents) != len(self.token_ids):
            raise ValueError("Draft.parents and Draft.token_ids differ in length")
        for index, parent in enumerate(self.parents):
            if not -1 <= parent < index:
                raise ValueError(f"Draft node {index} has parent {parent}; parents must come first")
        if any(not 0 <= t < vocab_size for t in self.token_ids):
            raise ValueError("Draft holds a token id outside the model's vocabulary")


@dataclass
class Verdict:
    """What a verifier decided: the accepted draft nodes (a root-to-node path) and the next token."""

    accepted_nodes: list[int]
    next_token: int
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class DecodeStats:
    """Decode statistics with the definitions vLLM and llama.cpp use.

    `mean_acceptance_length` = generated tokens / target calls that emitted tokens (= block efficiency);
    plain decoding scores 1.0. Times are seconds of wall clock.
    """

    method: str = ""
    lossless: bool = True
    prompt_tokens: int = 0
    generated_tokens: int = 0
    target_calls: int = 0             # every forward of the target model, prefill included
    verification_calls: int = 0       # target forwards that emitted tokens
    draft_calls: int = 0              # forwards of a draft model or draft heads
    draft_tokens_proposed: int = 0
    draft_tokens_accepted: int = 0
    proposed_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    acceptance_histogram: dict[int, int] = field(default_factory=dict)  # tokens emitted per call -> count
    prefix_reused_tokens: int = 0     # prompt positions whose keys/values came from a PrefixCache
    prefill_time: float = 0.0
    draft_time: float = 0.0
    verify_time: float = 0.0
    total_time: float = 0.0
    stop_reason: str = ""             # "eos", "stop_string", "max_new_tokens"

    @property
    def mean_acceptance_length(self) -> float:
        return self.generated_tokens / self.verification_calls if self.verification_calls else 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / proposed draft tokens."""
        return self.draft_tokens_accepted / self.draft_tokens_proposed if self.draft_tokens_proposed else 0.0

    @property
    def overhead_time(self) -> float:
        return max(0.0, self.total_time - self.prefill_time - self.draft_time - self.verify_time)

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.total_time if self.total_time > 0 else 0.0

    @property
    def per_position_acceptance(self) -> list[float]:
        """P(draft token at depth i+1 accepted | it was proposed)."""
        return [a / p if p else 0.0 for a, p in zip(self.accepted_per_position, self.proposed_per_position)]

    def record_step(self, emitted: int, proposed_depths: list[int], accepted_depth: int) -> None:
        """Count one verification call that proposed nodes at `proposed_depths` and accepted `accepted_depth` of them."""
        self.verification_calls += 1
        self.acceptance_histogram[emitted] = self.acceptance_histogram.get(emitted, 0) + 1
        self.draft_tokens_proposed += len(proposed_depths)
        self.draft_tokens_accepted += accepted_depth
        deepest = max(proposed_depths, default=0)
        while len(self.proposed_per_position) < deepest:
            self.proposed_per_position.append(0)
            self.accepted_per_position.append(0)
        for depth in set(proposed_depths):
            self.proposed_per_position[depth - 1] += 1
        for depth in range(accepted_depth):
            self.accepted_per_position[depth] += 1

    def record_plain_steps(self, count: int) -> None:
        """Count `count` target calls that each emitted one token with no draft (a decoder without drafts)."""
        if count > 0:
            self.verification_calls += count
            self.acceptance_histogram[1] = self.acceptance_histogram.get(1, 0) + count

    @classmethod
    def merge(cls, parts: "Sequence[DecodeStats]") -> "DecodeStats":
        """Pool several decodes (turns of a chat, choices of a request): counters, per-position counts and the
        histogram are summed, so every derived rate is recomputed from the pooled counts. `stop_reason` lists the
        distinct reasons, sorted and comma-joined; method and lossless come from the first part."""
        parts = list(parts)
        merged = cls(method=parts[0].method, lossless=parts[0].lossless) if parts else cls()
        for part in parts:
            for f in dataclasses.fields(cls):
                if f.name in ("method", "lossless", "stop_reason"):
                    continue
                value, total = getattr(part, f.name), getattr(merged, f.name)
                if isinstance(value, list):
                    total.extend([0] * (len(value) - len(total)))
                    for index, count in enumerate(value):
                        total[index] += count
                elif isinstance(value, dict):
                    for key, count in value.items():
                        total[key] = total.get(key, 0) + count
                else:
                    setattr(merged, f.name, total + value)
        merged.stop_reason = ",".join(sorted({part.stop_reason for part in parts if part.stop_reason}))
        return merged

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["acceptance_histogram"] = {str(k): v for k, v in sorted(self.acceptance_histogram.items())}
        for name in ("mean_acceptance_length", "acceptance_rate", "overhead_time", "tokens_per_second",
                     "per_position_acceptance"):
            data[name] = getattr(self, name)
        return data

    def summary(self) -> str:
        # a long prompt's forward can be most of the time: its seconds and the decoding's own rate apart
        decoding = self.total_time - self.prefill_time
        split = (f"; the prompt's forward {self.prefill_time:.2f}s, then {self.generated_tokens / decoding:.2f} tok/s"
                 if self.prefill_time > 0 and decoding > 0 else "")
        return (f"{self.method}: {self.generated_tokens} tokens in {self.total_time:.2f}s "
                f"({self.tokens_per_second:.2f} tok/s{split}), mean acceptance length "
                f"{self.mean_acceptance_length:.2f}, target calls {self.target_calls}, draft tokens "
                f"{self.draft_tokens_accepted}/{self.draft_tokens_proposed} accepted")


@dataclass
class Generation:
    """The result of `multidraft.generate`: text, token ids, stats, and for multi-draft methods the ranked drafts."""

    text: str
    token_ids: list[int]
    stats: DecodeStats
    drafts: Optional[list["Generation"]] = None
    score: Optional[float] = None
