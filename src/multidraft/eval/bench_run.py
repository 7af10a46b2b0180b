"""Running the benchmark's columns on one prompt: every turn of a prompt per method, HF peers through
`model.generate`, llama.cpp peers through llama-cpp-python on the model's GGUF in a child process
(eval/llama_cpp_peer.py: its crash or hang fails its own rows only), output quality for the columns where it can
differ from the baseline's, the equality check.

HF's generate() stays in this process: it runs the same torch kernels as our own columns, so a crash there would be
one of ours too, and its Python errors already cost only its row.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator, Optional

from multidraft.eval import llama_cpp_peer
from multidraft.eval.bench_methods import BenchMethod
from multidraft.eval.peer_process import PeerFailed
from multidraft.models.runner_choice import GGUF_RUNNERS
from multidraft.types import DecodeStats


def output_perplexity(lm, prompt_ids: list[int], token_ids: list[int]) -> Optional[float]:
    """Perplexity of the generated tokens given the prompt under the target model (metrics.draft_perplexities)."""
    from multidraft.eval.metrics import draft_perplexities
    return draft_perplexities(lm, prompt_ids, [token_ids])[0] if token_ids else None


_STOCK_MODELS: dict = {}      # (folder, dtype) -> the stock HF model the HF peers run, loaded once per process


def hf_peer_model(lm, dtype=None):
    """The model HF's generate() runs for the HF peers. A quantized target computes on GGUF blocks with our kernels,
    which an HF user does not have: the peers then run the model's stock HF folder, in the dtype an HF user gets
    on this hardware (bf16 where the CPU has it natively, else fp32) unless the bench names one."""
    if not getattr(lm, "quantized", False):
        return lm.model
    from multidraft.models.loader import hf_native_dtype, load_hf_model, parse_dtype
    torch_dtype = parse_dtype(dtype, "cpu") if dtype not in (None, "auto") else hf_native_dtype("cpu")
    key = (str(lm.info.path), str(torch_dtype))
    if key not in _STOCK_MODELS:
        _STOCK_MODELS[key] = load_hf_model(lm.info.name, dtype=torch_dtype, device="cpu", progress=False)[0]
    return _STOCK_MODELS[key]


def _hf_generate(lm, draft_lm, method: BenchMethod, prompt_ids: list[int], max_new_tokens: int, dtype=None):
    import torch
    kwargs = dict(method.options)
    if method.name == "hf_assisted":
        kwargs["assistant_model"] = hf_peer_model(draft_lm, dtype)
    pad = lm.tokenizer.pad_token_id
    pad = pad if pad is not None else min(lm.eos_token_ids, default=0)
    input_ids = torch.tensor([prompt_ids], device=lm.device)
    with torch.inference_mode():
        out = hf_peer_model(lm, dtype).generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                max_new_tokens=max_new_tokens, pad_token_id=pad, repetition_penalty=1.0, **kwargs)
    return out[0, len(prompt_ids):].tolist()


@contextlib.contextmanager
def attention_implementation(lm, name: Optional[str]):
    """Switch the target's attention kernel (same weights) for one method, e.g. to "eager" for attention weights."""
    previous = lm.attn_implementation
    if name is None or name == previous:
        yield
        return
    lm.model.set_attn_implementation(name)
    try:
        yield
    finally:
        lm.model.set_attn_implementation(previous)


def run_method(lm, draft_lm, item, method: BenchMethod, config, quality: bool = False, artifacts=None) -> dict:
    """Run one method on every turn of one prompt (later turns see this method's own earlier answers). `artifacts`:
    the run's loaded n-gram files, heads... (multidraft.Artifacts), shared by its prompts."""
    with attention_implementation(lm, method.attention):
        return _run_turns(lm, draft_lm, item, method, config, quality, artifacts)


def _run_turns(lm, draft_lm, item, method: BenchMethod, config, quality: bool, artifacts=None) -> dict:
    from multidraft.api import generate_request
    from multidraft.request import Request
    answers: list[str] = []
    turns: list[dict] = []
    pooled: list[DecodeStats] = []       # this method's stats of every turn, pooled into the row's stats
    for turn in range(item.num_turns):
        prompt = item.input if turn == 0 else item.turn_messages(turn, answers)
        prompt_ids = lm.encode(prompt)
        stats = drafts = None
        llama = None
        prompt_seconds = decode_tokens = None      # the prompt's forward, and the tokens the forwards after it made
        if llama_cpp_peer.is_llama_cpp(method.name):     # loaded once per run, outside the timed span
            llama = llama_cpp_peer.runner_for(lm, method.name, method.options,
                                              len(prompt_ids) + config.max_new_tokens, config.model)
        start = time.perf_counter()
        if llama is not None:       # prefill included, like every other column; timed in its child process
            token_ids = llama.generate(prompt_ids, config.max_new_tokens, lm.eos_token_ids)
            seconds = llama.last_seconds
            text = lm.decode(token_ids)
            if llama.last_prompt_seconds is not None:     # its first token comes from the prompt's forward
                prompt_seconds, decode_tokens = llama.last_prompt_seconds, len(token_ids) - 1
        elif method.peer:
            token_ids = _hf_generate(lm, draft_lm, method, prompt_ids, config.max_new_tokens, config.dtype)
            seconds = time.perf_counter() - start
            text = lm.decode(token_ids)
        else:
            options = dict(method.options)
            if method.needs_draft:
                options["draft_model"] = draft_lm
            request = Request.build(prompt_ids, method.name, max_new_tokens=config.max_new_tokens,
                                    temperature=method.temperature, seed=config.seed,
                                    draft_length=config.draft_length, options=options)
            gen = generate_request(lm, request, artifacts=artifacts)
            seconds = time.perf_counter() - start
            token_ids, text, stats = list(gen.token_ids), gen.text, gen.stats.to_dict()
            pooled.append(gen.stats)
            # our prefill runs the prompt but its last token, which the first verify takes with the first draft
            prompt_seconds, decode_tokens = gen.stats.prefill_time, len(token_ids)
            if gen.drafts:
                drafts = [{"text": d.text, "token_ids": list(d.token_ids), "score": d.score} for d in gen.drafts]
        record = {"prompt_tokens": len(prompt_ids), "tokens": len(token_ids), "seconds": seconds,
                  "prompt_seconds": prompt_seconds, "decode_tokens": decode_tokens, "token_ids": token_ids,
                  "text": text, "stats": stats, "drafts": drafts}
        if quality:
            record["perplexity"] = output_perplexity(lm, prompt_ids, token_ids)
            if drafts:
                from multidraft.eval.metrics import best_of_k, draft_perplexities
                scores = draft_perplexities(lm, prompt_ids, [d["token_ids"] for d in drafts])
                for draft, score in zip(drafts, scores):
                    draft["perplexity"] = score
                record["best_of_k_perplexity"] = best_of_k(scores)
        turns.append(record)
        answers.append(text)
    tokens = sum(t["tokens"] for t in turns)
    seconds = sum(t["seconds"] for t in turns)
    ppl = [t["perplexity"] for t in turns if t.get("perplexity") is not None]
    timed = all(t["prompt_seconds"] is not None for t in turns)       # HF's generate() does not split its time
    result = {"tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds if seconds else 0.0,
              "prompt_seconds": sum(t["prompt_seconds"] for t in turns) if timed else None,
              "decode_tokens": sum(t["decode_tokens"] for t in turns) if timed else None,
              "stats": DecodeStats.merge(pooled).to_dict() if pooled else None, "turns": turns,
              "output": turns[-1]["text"], "perplexity": sum(ppl) / len(ppl) if ppl else None}
    if llama_cpp_peer.is_llama_cpp(method.name):      # llama.cpp runs the GGUF itself, on the CPU, not our model
        result.update(dtype="gguf", device="cpu", runner="llama.cpp", runner_setup_s=0.0)
    return result


def _needs_quality(method: BenchMethod, baseline: str) -> bool:
    # Lossless greedy-time outputs equal the baseline's, so their perplexity adds nothing. Peers other than the
    # baseline get none either (the llama.cpp ones are not lossless, but a target forward per row is not worth it).
    return method.label == baseline or (not method.peer and (not method.lossless or method.sampled))


def run_prompt(lm, draft_lm, item, methods: list[BenchMethod], config,
               reference: Optional[list[list[int]]] = None, artifacts=None,
               greedy_reference: Optional[list[list[int]]] = None) -> Iterator[dict]:
    """Yield one row per method for `item`; `reference` is the baseline's per-turn token ids if already known,
    `greedy_reference` our greedy's (what our lossless methods must reproduce: the same model and runner).

    Each row records `equal_baseline` (its tokens are the baseline's: the same work) and `equal_greedy` (the
    losslessness check: against our greedy where it ran on this prompt, resolve_methods runs it right after the
    baseline, else against the baseline; `checked_against` names which). `another_model`: the row's tokens and its
    reference come from different models (HF's stock weights, the GGUF's blocks on our GGUF runners, llama.cpp), so
    a difference is the models', not a loss."""
    import torch

    from multidraft.models import gguf_kernels
    for method in methods:
        row = {"kind": "row", "task": item.task, "prompt_id": item.id, "method": method.label, "name": method.name,
               "peer": method.peer, "lossless": method.lossless, "temperature": method.temperature or 0.0,
               "options": method.options, "error": None, "load_average": os.getloadavg()[0],
               "threads": torch.get_num_threads(),
               "dtype": str(lm.dtype).removeprefix("torch."), "device": str(lm.device),
               "runner": getattr(lm, "runner", "eager"), "runner_setup_s": getattr(lm, "runner_setup_seconds", 0.0),
               "isa": gguf_kernels.isa() if getattr(lm, "runner", "") in ("quantized-q8", "native") else None,
               "draft_length": config.draft_length}
        try:
            row.update(run_method(lm, draft_lm, item, method, config, quality=_needs_quality(method, config.baseline),
                                  artifacts=artifacts))
        except (KeyboardInterrupt, SystemExit):
            raise
        except PeerFailed as exc:       # a peer's crash, hang or missing install: its reason is the row's error
            row["error"] = str(exc)
        except Exception as exc:        # a failing method is reported, not fatal for the other columns
            row["error"] = f"{type(exc).__name__}: {exc}"
        if llama_cpp_peer.is_llama_cpp(method.name):
            row["peer_config"] = llama_cpp_peer.peer_config(lm, method.name)
        row["load_average_after"] = os.getloadavg()[0]      # the load while the row ran shows here, not before it
        if method.label == config.baseline and row["error"] is None:
            reference = [t["token_ids"] for t in row["turns"]]
        if method.label == "greedy" and not method.peer and row["error"] is None:
            greedy_reference = [t["token_ids"] for t in row["turns"]]
        row["equal_baseline"] = _equal(row, reference, method)
        own = not method.peer and method.label != "greedy" and greedy_reference is not None
        row["checked_against"] = "greedy" if own else config.baseline
        row["equal_greedy"] = _equal(row, greedy_reference, method) if own else row["equal_baseline"]
        checked_model = "hf" if row["checked_against"] == "hf_greedy" else _our_model(lm)
        row["another_model"] = _model_of(method, lm) != checked_model
        if llama_cpp_peer.is_llama_cpp(method.name) and row["equal_greedy"] is not None:
            row["greedy_prefix_match"] = llama_cpp_peer.prefix_match([t["token_ids"] for t in row["turns"]], reference)
        yield row


def _model_of(method: BenchMethod, lm) -> str:
    """Which model a method's tokens come from: the stock HF weights (HF's peers, our HF-folder runners), the
    GGUF's blocks (our GGUF runners) or llama.cpp's arithmetic on them."""
    if llama_cpp_peer.is_llama_cpp(method.name):
        return "llama.cpp"
    return "hf" if method.peer else _our_model(lm)


def _our_model(lm) -> str:
    """The GGUF runners compute the GGUF's own model (its blocks, 8-bit activations by default): HF's stock weights
    are another model, so a row of theirs that differs from HF greedy says nothing about losslessness."""
    return "gguf" if getattr(lm, "runner", "eager") in GGUF_RUNNERS else "hf"


def _equal(row: dict, reference, method: BenchMethod) -> Optional[bool]:
    if row["error"] is not None or reference is None or method.sampled:
        return None
    return [t["token_ids"] for t in row["turns"]] == reference


def warm_up(lm, draft_lm, item, methods: list[BenchMethod], config, artifacts=None) -> None:
    """A few tokens of every method on a short prefix of a real prompt (first-call costs: kernels, caches)."""
    from dataclasses import replace
    from types import SimpleNamespace
    prefix = SimpleNamespace(task=item.task, id=item.id, input=lm.encode(item.input)[:32], num_turns=1)
    for _ in run_prompt(lm, draft_lm, prefix, methods, replace(config, max_new_tokens=min(4, config.max_new_tokens)),
                        artifacts=artifacts):
        pass


def load_models(config):
    from multidraft.models.loader import load_model
    lm = load_model(config.model, dtype=config.dtype, device=config.device, runner=config.runner)
    draft_lm = load_model(config.draft, dtype=config.dtype, device=config.device, runner=config.runner) if config.draft else None
    return lm, draft_lm
