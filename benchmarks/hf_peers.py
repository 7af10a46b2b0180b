"""HF peers shared by the benchmark scripts (stock `generate()` on the same weights)."""

from __future__ import annotations

import time

import torch


def hf_prompt_lookup(lm, ids, max_new_tokens, num_tokens=10):
    """HF's own prompt lookup (`prompt_lookup_num_tokens`), greedy, cut after the first EOS; (tokens, seconds)."""
    start = time.perf_counter()
    with torch.inference_mode():
        out = lm.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                max_new_tokens=max_new_tokens, do_sample=False, prompt_lookup_num_tokens=num_tokens)
    tokens = out[0, len(ids):].tolist()
    for i, t in enumerate(tokens):
        if t in lm.eos_token_ids:
            tokens = tokens[: i + 1]
            break
    return tokens, time.perf_counter() - start
