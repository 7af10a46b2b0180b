"""HF peers for the bench presets: stock `generate()` on the same weights, greedy, timed by eval/timing."""

from __future__ import annotations

from multidraft.eval.timing import Span


def hf_generate(lm, prompt_ids, max_new_tokens: int, stop_at_eos: bool = False, cpu: bool = False, **kwargs):
    """HF generate() greedy on lm's weights (its stock HF model where lm runs on GGUF blocks: bench_run.hf_peer_model):
    (new tokens, wall seconds; CPU seconds of this process with cpu=True). kwargs go to generate() (e.g. prompt_lookup_num_tokens, assistant_model); stop_at_eos
    cuts the tokens after the first EOS."""
    import torch

    from multidraft.eval.bench_run import hf_peer_model
    input_ids = torch.tensor([list(prompt_ids)], device=lm.device)
    pad = lm.tokenizer.pad_token_id
    kwargs.setdefault("pad_token_id", pad if pad is not None else min(lm.eos_token_ids, default=0))
    with Span() as span, torch.inference_mode():
        out = hf_peer_model(lm).generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                max_new_tokens=max_new_tokens, **kwargs)
    tokens = out[0, len(prompt_ids):].tolist()
    if stop_at_eos:
        eos = next((i for i, t in enumerate(tokens) if t in lm.eos_token_ids), None)
        tokens = tokens if eos is None else tokens[: eos + 1]
    return tokens, span.cpu_seconds if cpu else span.seconds


def hf_prompt_lookup(lm, ids, max_new_tokens: int, num_tokens: int = 10):
    """HF's own prompt lookup (`prompt_lookup_num_tokens`), greedy, cut after the first EOS; (tokens, seconds)."""
    return hf_generate(lm, ids, max_new_tokens, stop_at_eos=True, prompt_lookup_num_tokens=num_tokens)
