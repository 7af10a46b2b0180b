"""The engine's counters (vLLM's names), and how a step and a verified draft add to them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EngineMetrics:
    """Counters with vLLM's names (vllm:num_requests_running / waiting, spec_decode_*)."""

    num_requests_running: int = 0
    num_requests_waiting: int = 0
    num_steps: int = 0
    batch_size: int = 0                                   # requests in the last step's forward
    batch_size_histogram: dict[int, int] = field(default_factory=dict)
    num_batched_tokens: int = 0                           # rows of the last step's forward
    generation_tokens_total: int = 0
    prompt_tokens_total: int = 0
    spec_decode_num_drafts: int = 0
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    spec_decode_num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_requests_alone: int = 0                           # ran with their own decoder (beam, superposed, ...)
    num_alone_forwards: int = 0                           # forwards of those requests, one per engine step at most
    num_draft_forwards: int = 0                           # draft-model forwards: one per level and draft model
    num_preemptions: int = 0                              # always 0: regions are reserved at admission

    def count_draft(self, num_draft_tokens: int, accepted: int) -> None:
        """One verified draft (vLLM's spec-decode counters)."""
        self.spec_decode_num_drafts += 1
        self.spec_decode_num_draft_tokens += num_draft_tokens
        self.spec_decode_num_accepted_tokens += accepted
        per_pos = self.spec_decode_num_accepted_tokens_per_pos
        while len(per_pos) < accepted:
            per_pos.append(0)
        for position in range(accepted):
            per_pos[position] += 1

    def count_step(self, batch: int, rows: int) -> None:
        self.num_steps += 1
        self.batch_size, self.num_batched_tokens = batch, rows
        self.batch_size_histogram[batch] = self.batch_size_histogram.get(batch, 0) + 1
