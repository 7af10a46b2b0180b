"""Induction-head calibration for PLD+(a) (specs/pldplus.md §3.5) and the per-model defaults.

For every generated token s[p] that also occurs in the prompt, the copy sources R* are the prompt positions
holding s[p] with the longest shared suffix; a head scores a hit when its attention at query p-1 (the
position that predicted s[p]) peaks on one of them. Heads are ranked by hits. Defaults live in
`<cache>/pldplus/<alias>.json` (what `multidraft pld-plus calibrate` writes) or, failing that, in the
package data `multidraft/pldplus/calibrations/<alias>.json` computed with the same command; reading and writing
them is `multidraft.pldplus.calibration`. (This module was `pldplus.heads`: "heads" alone means BPD's trained
prediction heads in multidraft.)
"""

from __future__ import annotations

import contextlib
from typing import Iterable, Optional, Sequence

import numpy as np
import torch

from multidraft.errors import InvalidOptionError
from multidraft.pldplus.layer_choice import choose_layer

FORMAT_VERSION = 2      # 2: induction heads under "induction_heads" (1: "heads"), layer curve


def copy_events(seq: Sequence[int], prompt_length: int, min_overlap: int = 1):
    """Yield (p, R*) for each generated position p whose token occurs in the prompt (§3.5 lines 6-11)."""
    tokens = np.asarray(seq, dtype=np.int64)
    for p in range(prompt_length, len(tokens)):
        sources = np.flatnonzero(tokens[:prompt_length] == tokens[p])
        if len(sources) == 0:
            continue
        overlap = np.ones(len(sources), dtype=np.int64)
        alive = np.ones(len(sources), dtype=bool)
        for i in range(1, p + 1):   # extend the shared suffix one token further back while it still matches
            back = sources - i
            still = alive & (back >= 0)
            still[still] = tokens[back[still]] == tokens[p - i]
            if not still.any():
                break
            overlap += still
            alive = still
        best = int(overlap.max())
        if best < min_overlap:
            continue
        yield p, set(sources[overlap == best].tolist())


def count_hits(argmax_keys: np.ndarray, seq: Sequence[int], prompt_length: int,
               min_overlap: int = 1) -> tuple[np.ndarray, int]:
    """Hits per head and the number of events. argmax_keys: (L, G, len(seq)) argmax key of each query row."""
    hits = np.zeros(argmax_keys.shape[:2], dtype=np.int64)
    events = 0
    for p, sources in copy_events(seq, prompt_length, min_overlap):
        events += 1
        hits += np.isin(argmax_keys[:, :, p - 1], list(sources))
    return hits, events


def rank_heads(hits: np.ndarray, top_k: Optional[int] = None) -> list[tuple[int, int, int]]:
    """(layer, head, hits) for every head with hits > 0, by hits descending, ties by (layer, head)."""
    layers, heads = np.nonzero(hits)
    ranked = sorted(zip(layers.tolist(), heads.tolist(), hits[layers, heads].tolist()), key=lambda x: (-x[2], x[0], x[1]))
    return ranked[:top_k] if top_k else ranked


@torch.inference_mode()
def attention_argmax(lm, token_ids: Sequence[int]) -> np.ndarray:
    """(L, G, T) argmax key of every query row of every head, from one full eager forward (hooks keep only argmax)."""
    with _argmax_hooks(lm) as argmax:
        lm.forward(lm.new_cache(), list(token_ids), logits_rows=slice(-1, None))
    return _stack_argmax(lm, argmax)


@torch.inference_mode()
def attention_argmax_and_hidden(lm, token_ids: Sequence[int]) -> tuple[np.ndarray, torch.Tensor]:
    """`attention_argmax` and `sweep.all_hidden_states` of token_ids from ONE forward (what calibration needs
    per prompt; the two used to cost a forward each)."""
    from multidraft.pldplus.sweep import hidden_state_hooks, stack_hidden_states
    with _argmax_hooks(lm) as argmax, hidden_state_hooks(lm) as hidden:
        lm.forward(lm.new_cache(), list(token_ids), logits_rows=slice(-1, None))
    return _stack_argmax(lm, argmax), stack_hidden_states(hidden)


@contextlib.contextmanager
def _argmax_hooks(lm):
    """Hooks on every attention module that fill the yielded dict {layer: (G, T) argmax key} during a forward."""
    layers = lm._decoder_layers
    if layers is None:
        raise InvalidOptionError(f"cannot find the decoder layers of {lm.name}; PLD+ calibration supports Llama-like models")
    argmax: dict[int, Optional[torch.Tensor]] = {}

    def make_hook(index):
        def hook(_module, _inputs, output):
            weights = output[1] if isinstance(output, (tuple, list)) and len(output) > 1 else None
            argmax[index] = None if weights is None else weights[0].argmax(-1)
        return hook
    handles = [layer.self_attn.register_forward_hook(make_hook(i)) for i, layer in enumerate(layers)]
    try:
        yield argmax
    finally:
        for handle in handles:
            handle.remove()


def _stack_argmax(lm, argmax: dict) -> np.ndarray:
    if any(argmax.get(i) is None for i in range(lm.num_layers)):
        raise InvalidOptionError(
            f"{lm.name} returns no attention weights (attn_implementation={lm.attn_implementation!r}); calibrate a "
            "model loaded with attn_implementation='eager' (the CLI does this) on an architecture that supports it")
    return torch.stack([argmax[i] for i in range(lm.num_layers)]).cpu().numpy()


def greedy_output(lm, ids: list[int], gen_len: int, method: str = "greedy", runner: Optional[str] = None) -> list[int]:
    """The greedy continuation of ids. method: any lossless method (at temperature 0 token-identical to greedy,
    e.g. "pld", which on these copy-heavy prompts needs about half the forwards). runner: the runner to decode
    with (e.g. "fast"), the model's own when None; the model is put back on its runner afterwards, because the
    calibration's own forward needs the eager attention weights."""
    from multidraft.api import generate
    from multidraft.methods import get_method
    if not get_method(method).lossless:
        raise InvalidOptionError(f"calibration needs the greedy output; {method!r} is not lossless (use 'greedy' or "
                                 "a lossless drafting method such as 'pld')")
    previous = lm.runner
    if runner is not None and runner != previous:
        lm.use_runner(runner, progress=False)
    try:
        return generate(lm, ids, method=method, max_new_tokens=gen_len, temperature=0.0).token_ids
    finally:
        if lm.runner != previous:
            lm.use_runner(previous, progress=False)


def calibrate(lm, prompts: Iterable, gen_len: int = 96, top_k: int = 50, min_overlap: int = 1,
              sweep: bool = True, progress=None, labels: Optional[Sequence[str]] = None,
              decode_method: str = "greedy", decode_runner: Optional[str] = None) -> dict:
    """Identify induction heads on `prompts` (text, chat messages or token ids): greedy-decode, one full forward.

    With `sweep`, also replay the greedy outputs to score every PLD+(h) layer (K = 10, as the paper tunes it) and
    pick one with the tie rule of `layer_choice` (bootstrap over prompts). `labels` (one per prompt, e.g. the
    task) only group the copy-event counts in the record. decode_method / decode_runner: how the greedy output is
    produced (`greedy_output`); the attention argmax and the hidden states of every layer then come from one
    teacher-forced forward over prompt + output (causal: the values token-by-token decoding would see).
    """
    from multidraft.pldplus.sweep import sweep_counts
    if lm.attn_implementation != "eager":
        raise InvalidOptionError(
            f"{lm.name} is loaded with {lm.attn_implementation!r} attention, which returns no attention weights; "
            "load it with attn_implementation='eager' to calibrate induction heads")
    prompts = list(prompts)
    labels = list(labels) if labels is not None else ["prompts"] * len(prompts)
    if len(labels) != len(prompts):
        raise InvalidOptionError(f"calibrate got {len(labels)} labels for {len(prompts)} prompts")
    hits = np.zeros((lm.num_layers, lm.num_heads), dtype=np.int64)
    events = 0
    events_by_label: dict[str, int] = {}
    layer_counts = []
    for number, (prompt, label) in enumerate(zip(prompts, labels), start=1):
        ids = lm.encode(prompt)
        output = greedy_output(lm, ids, gen_len, decode_method, decode_runner)
        seq = ids + output
        argmax, hidden = attention_argmax_and_hidden(lm, seq)
        prompt_hits, prompt_events = count_hits(argmax, seq, len(ids), min_overlap)
        hits += prompt_hits
        events += prompt_events
        events_by_label[label] = events_by_label.get(label, 0) + prompt_events
        if sweep and len(output) > 0:
            layer_counts.append(sweep_counts(lm, seq, len(ids), hidden=hidden))
        if progress:
            progress(f"prompt {number} ({label}): {len(ids)} + {len(output)} tokens, {prompt_events} copy events")
    if not prompts:
        raise InvalidOptionError("calibration needs at least one prompt")
    record = {"format": FORMAT_VERSION, "model": lm.name, "num_layers": lm.num_layers, "num_heads": lm.num_heads,
              "num_prompts": len(prompts), "gen_len": gen_len,
              "decode": {"method": decode_method, "runner": decode_runner or lm.runner},
              "events_by_task": events_by_label,
              **_ranking_fields(hits, events, top_k)}
    record.update(_layer_fields(np.stack(layer_counts) if layer_counts else None))   # (prompts, layers, 2)
    return record


def _ranking_fields(hits: np.ndarray, events: int, top_k: int) -> dict:
    """The record's induction heads: the top_k by hits, and their hit rates over the copy events."""
    ranked = rank_heads(hits)
    return {"events": events, "heads_with_hits": len(ranked), "induction_heads": [list(h) for h in ranked[:top_k]],
            "hit_rates": [[l, g, h / max(events, 1)] for l, g, h in ranked[:top_k]]}


def _layer_fields(counts: Optional[np.ndarray]) -> dict:
    """The record's PLD+(h) layer chosen from the per-prompt replay counts (none without a layer sweep)."""
    if counts is None:
        return {"layer": None, "layer_sweep": {}}
    choice = choose_layer(counts)
    return {"layer": choice["layer"], "layer_sweep": {str(l): c["aal"] for l, c in choice["curve"].items()},
            "layer_curve": {str(l): c for l, c in choice["curve"].items()},
            "layer_rule": {k: choice[k] for k in ("best", "band", "rule", "resamples", "confidence")},
            "layer_counts": counts.tolist()}


def merge_records(records: Sequence[dict], top_k: int = 50) -> dict:
    """One calibration from several runs of `calibrate` on the same model (e.g. one per task, run side by side).

    Hit counts add up, so the runs must keep every head with hits (calibrate with a large top_k); the layer sweep's
    per-prompt counts are pooled and the layer is chosen again with the same tie rule.
    """
    if not records:
        raise InvalidOptionError("nothing to merge: give at least one calibration record")
    first = records[0]
    for record in records:
        if (record.get("model"), record.get("num_layers"), record.get("num_heads")) != \
                (first.get("model"), first.get("num_layers"), first.get("num_heads")):
            raise InvalidOptionError("calibration records of different models cannot be merged")
        if len(record.get("induction_heads", [])) < record.get("heads_with_hits", 0):
            raise InvalidOptionError(f"a record keeps {len(record['induction_heads'])} of its "
                                     f"{record['heads_with_hits']} heads with hits; rerun it with --top-k 1000")
    hits = np.zeros((first["num_layers"], first["num_heads"]), dtype=np.int64)
    events_by_task: dict[str, int] = {}
    for record in records:
        for l, g, h in record["induction_heads"]:
            hits[l, g] += h
        for task, count in record.get("events_by_task", {}).items():
            events_by_task[task] = events_by_task.get(task, 0) + count
    events = sum(r["events"] for r in records)
    merged = {k: v for k, v in first.items() if k not in ("layer_curve", "layer_rule", "layer_counts", "source")}
    merged.update({"format": FORMAT_VERSION, "num_prompts": sum(r["num_prompts"] for r in records),
                   "events_by_task": events_by_task, **_ranking_fields(hits, events, top_k),
                   "task": ",".join(str(r.get("task", "")) for r in records),
                   "prompt_ids": [p for r in records for p in r.get("prompt_ids", [])]})
    counts = [np.asarray(r["layer_counts"]) for r in records if r.get("layer_counts")]
    merged.update(_layer_fields(np.concatenate(counts) if counts else None))
    return merged
