"""Offline layer sweep for PLD+(h) (specs/pldplus.md A4): replay greedy outputs to score every layer cheaply.

Greedy output is deterministic, so the acceptance length PLD+ would reach on it can be computed from the
final sequence alone: at each step propose from the artifacts of seq[:N-1], accept the common prefix with the
true continuation, advance by accepted + 1. One full forward with all hidden states serves every layer.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from multidraft.errors import InvalidOptionError
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
    """(L+1, T, d) float32 hidden states of one full forward (index 0 = embeddings, l = output of decoder block l).

    Read with forward hooks on the same modules the drafter's capture hooks (`lm.forward(..., hidden_layer=l)`),
    not from HF's `output_hidden_states`: HF applies the final norm to its last entry, so at l = L the sweep
    would score a different vector from the one PLD+ then ranks with.
    """
    with hidden_state_hooks(lm) as captured:
        lm.forward(lm.new_cache(), list(token_ids), logits_rows=slice(-1, None))
    return stack_hidden_states(captured)


@contextlib.contextmanager
def hidden_state_hooks(lm):
    """Hooks that fill the yielded dict {l: (T, d) float32} during one forward (l = 0 embeddings, l = block l)."""
    layers = lm._decoder_layers
    if layers is None:
        raise InvalidOptionError(f"cannot find the decoder layers of {lm.name}; the PLD+ layer sweep supports "
                                 "Llama-like models")
    captured: dict[int, torch.Tensor] = {}

    def make_hook(index):
        def keep(_module, _inputs, output):
            tensor = output[0] if isinstance(output, (tuple, list)) else output
            captured[index] = tensor[0].detach().float().cpu()
        return keep
    modules = [lm.model.get_input_embeddings()] + list(layers)
    handles = [module.register_forward_hook(make_hook(i)) for i, module in enumerate(modules)]
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def stack_hidden_states(captured: dict) -> torch.Tensor:
    return torch.stack([captured[i] for i in range(len(captured))])


def sweep_counts(lm, seq: list[int], prompt_length: int, num_draft_tokens: int = 10,
                 hidden: Optional[torch.Tensor] = None) -> np.ndarray:
    """(layers, 2): the (generated tokens, steps) PLD+(h) takes on one greedy output at each layer 1..L.

    hidden: the (L+1, >= len(seq)-1, d) states of `all_hidden_states` when the caller already ran that forward
    (the calibration takes them from its one forward over the whole sequence; causal, so the first rows are those
    of seq[:-1]); computed here otherwise.
    """
    if hidden is None:
        hidden = all_hidden_states(lm, seq[:-1])
    counts = np.zeros((lm.num_layers, 2), dtype=np.int64)
    for layer in range(1, lm.num_layers + 1):
        rows = hidden[layer]

        def choose(prefix, rows=rows):
            return rank_hidden(rows[: len(prefix) - 1], candidates(prefix))
        counts[layer - 1] = replay_acceptance(seq, prompt_length, choose, num_draft_tokens)
    return counts


def sweep_layers(lm, sequences: list[tuple[list[int], int]], num_draft_tokens: int = 10) -> dict[int, float]:
    """Pooled mean acceptance length of PLD+(h) per layer 1..L over (sequence, prompt_length) pairs."""
    totals = sum(sweep_counts(lm, seq, n0, num_draft_tokens) for seq, n0 in sequences)
    return {layer: (int(t) / int(s) if s else 0.0) for layer, (t, s) in enumerate(totals, start=1)}
