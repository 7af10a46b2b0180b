"""Offline layer sweep for PLD+(h) (specs/pldplus.md A4): replay greedy outputs to score every layer cheaply.

Greedy output is deterministic, so the acceptance length PLD+ would reach on it can be computed from the
final sequence alone: at each step propose from the artifacts of seq[:N-1], accept the common prefix with the
true continuation, advance by accepted + 1. One full forward with all hidden states serves every layer.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from multidraft.pldplus.ranking import candidates, rank_hidden


def replay_acceptance(seq: Sequence[int], prompt_length: int, choose: Callable[[list[int]], Optional[int]],
                      num_draft_tokens: int) -> tuple[int, int]:
    """(generated tokens, steps) PLD+ takes on the fixed greedy output seq[prompt_length:]; the loop's counting."""
    seq = list(seq)
    n = prompt_length
    steps = 0
    while n < len(seq):
        budget = min(num_draft_tokens, len(seq) - n - 1)
        draft: list[int] = []
        if budget > 0 and n >= 2:
            source = choose(seq[:n])
            if source is not None:
                draft = seq[source + 1: min(source + 1 + budget, n)]   # only what the context holds
        accepted = 0
        while accepted < len(draft) and draft[accepted] == seq[n + accepted]:
            accepted += 1
        n += accepted + 1
        steps += 1
    return len(seq) - prompt_length, steps


@torch.inference_mode()
def all_hidden_states(lm, token_ids: Sequence[int]) -> torch.Tensor:
    """(L+1, T, d) float32 hidden states of one full forward (index 0 = embeddings, as HF numbers them)."""
    out = lm.call_model(torch.tensor([list(token_ids)], device=lm.device), output_hidden_states=True, use_cache=False,
                        logits_to_keep=1)
    return torch.stack([h[0].float().cpu() for h in out.hidden_states])


def sweep_layers(lm, sequences: list[tuple[list[int], int]], num_draft_tokens: int = 10) -> dict[int, float]:
    """Mean acceptance length of PLD+(h) per layer 1..L over (sequence, prompt_length) pairs (greedy outputs)."""
    totals = {layer: [0, 0] for layer in range(1, lm.num_layers + 1)}
    for seq, prompt_length in sequences:
        hidden = all_hidden_states(lm, seq[:-1])
        for layer in totals:
            rows = hidden[layer]

            def choose(prefix, rows=rows):
                return rank_hidden(rows[: len(prefix) - 1], candidates(prefix))
            tokens, steps = replay_acceptance(seq, prompt_length, choose, num_draft_tokens)
            totals[layer][0] += tokens
            totals[layer][1] += steps
    return {layer: (t / s if s else 0.0) for layer, (t, s) in totals.items()}
