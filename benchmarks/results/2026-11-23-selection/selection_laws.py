"""Next-token law pairs (draft, target) for the selection benchmarks: synthetic and from a real model.

Synthetic: Zipf-shaped target logits (exponent 1.1 over a random token order) plus Gaussian noise, times a
per-instance sharpness, uniform in [0.8, 2.5] by default (peaked and flat positions both occur); the draft's logits are the
target's plus Gaussian noise of std `noise`. Context-dependent laws (for loop simulations) are seeded by a hash
of the context, so drafts that share a prefix see the same laws, as with a real model.

Real: SmolLM2-135M (the only model pulled here) is the target; its first `draft_layers` layers, followed by the
final norm and the LM head, are the draft (a self-speculative, layer-skip draft: a real law that differs from
the target's the way a smaller model's does). Laws are taken along the target's greedy continuation of prompts.
Both are warped as the paper does: temperature, then top-p (or top-k), renormalised (spec A9).
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from multidraft.sampling import SamplingParams, logits_to_probs


def warp(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """float64 law(s) after temperature, top-k, top-p (the library's own warp), renormalised in float64."""
    probs = logits_to_probs(torch.as_tensor(logits), SamplingParams(temperature, top_k, top_p)).double()
    return probs / probs.sum(-1, keepdim=True)


def synthetic_logits(rng: np.random.Generator, vocab: int = 1000, noise: float = 1.0, sharpness=(0.8, 2.5)):
    """(target_logits, draft_logits) as float64 torch tensors."""
    ranks = rng.permutation(vocab) + 1
    scale = rng.uniform(*sharpness)
    target = scale * (-1.1 * np.log(ranks) + 0.5 * rng.standard_normal(vocab))
    draft = target + noise * rng.standard_normal(vocab)
    return torch.from_numpy(target), torch.from_numpy(draft)


def context_logits(context: tuple, seed: int, vocab: int = 1000, noise: float = 1.0):
    """Synthetic logits for a context: a deterministic function of (seed, last 3 tokens, length)."""
    key = f"{seed}|{len(context)}|{context[-3:]}".encode()
    rng = np.random.default_rng(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little"))
    return synthetic_logits(rng, vocab, noise)


def real_prompt_texts(count: int) -> list[str]:
    """The real-law experiments' prompts: the first `count` HumanEval problems and `count` MT-Bench first turns."""
    from multidraft.data import load_humaneval
    from multidraft.eval.tasks import load_task

    return [p["prompt"] for p in load_humaneval()[:count]] + [p.input for p in load_task("chat", limit=count)]


def real_logits(prompt_texts: list[str], tokens: int, draft_layers: int, model: str = "smollm2-135m",
                draft_model: str | None = None):
    """Yield (target_logits, draft_logits) rows (float32, (V,)) along the target's greedy continuations. The draft
    is the target's first `draft_layers` layers, or `draft_model` (a separate model of the same vocabulary)."""
    import multidraft

    lm = multidraft.load_model(model, dtype=torch.float32)
    hf = lm.model
    draft_hf = multidraft.load_model(draft_model, dtype=torch.float32).model if draft_model else None
    for text in prompt_texts:
        prompt_ids = lm.encode(text)[-256:]
        # prompt lookup is lossless: the greedy continuation, sooner
        continuation = multidraft.generate(lm, prompt_ids, method="pld", max_new_tokens=tokens).token_ids
        ids = prompt_ids + continuation
        rows = slice(len(prompt_ids) - 1, len(ids) - 1)
        with torch.inference_mode():
            out = hf(torch.tensor([ids]), output_hidden_states=True)
            target = out.logits[0, rows].float()
            if draft_hf is not None:
                draft = draft_hf(torch.tensor([ids])).logits[0, rows].float()
            else:
                hidden = hf.model.norm(out.hidden_states[draft_layers][0, rows])
                draft = hf.lm_head(hidden).float()
        vocab = min(len(lm.tokenizer), target.shape[-1])
        for t_row, d_row in zip(target[:, :vocab], draft[:, :vocab]):
            yield t_row, d_row
