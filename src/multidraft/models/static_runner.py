"""The "static" runner: forwards on a preallocated KV cache in fixed shape buckets, replayed as CUDA graphs.

On a GPU a small model's forward is bound by Python and kernel launches (~25 ms for 1 or 64 tokens on an H100,
benchmarks/results/2026-11-23-h100). With every forward of n new tokens padded to a bucket (1, 2, 4, ..., 64
rows; padding rows are masked out and write only slots past the sequence), written into the StaticArena at
explicit slots and masked by an explicit 4D mask over all slots, each bucket's forward has fixed shapes and
addresses: it is captured once as a CUDA graph and then replayed with one launch. Longer forwards (a prefill)
run in chunks of the largest bucket. Without CUDA (or when a forward captures hidden states or attention rows,
whose hooks are Python) the same static forward runs as ordinary calls, so the CPU tests exercise the same path.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import torch

from multidraft.models.kv_cache import StaticArena, StaticKVCache, ancestor_matrix, static_mask

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_CAPACITY = 4096          # positions per generation; longer sequences spill to the eager cache


def bucket_for(num_rows: int) -> int:
    return next(b for b in BUCKETS if b >= num_rows)


def unsupported_reason(model) -> Optional[str]:
    """Why the static cache cannot serve this model (None if it can): it handles full causal attention only."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder models are not supported"
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds - {"full_attention"}:
        return f"its layers use {', '.join(sorted(kinds - {'full_attention'}))} (only full attention is supported)"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True) and \
            "layer_types" not in config.to_dict():
        return "it uses sliding-window attention"
    return None


class _Graph:
    """One captured bucket: its static inputs and the logits it writes."""

    def __init__(self, graph, input_ids, position_ids, write_index, mask, logits):
        self.graph, self.input_ids, self.position_ids = graph, input_ids, position_ids
        self.write_index, self.mask, self.logits = write_index, mask, logits


class StaticRunner:
    """Static-cache forwards of one model (and, on CUDA, their CUDA graphs)."""

    def __init__(self, model, capacity: int):
        self.model = model
        self.arena = StaticArena(capacity, slack=max(BUCKETS))
        self.graphs: dict[int, _Graph] = {}
        parameter = next(model.parameters())
        self.device, self.dtype = parameter.device, parameter.dtype

    def new_cache(self) -> Optional[StaticKVCache]:
        cache = StaticKVCache(self.arena)
        return cache if self.arena.claim(cache) else None

    def fits(self, cache: StaticKVCache, num_new: int) -> bool:
        return cache.length + num_new <= self.arena.capacity

    # ----- forwards -----
    def run(self, cache: StaticKVCache, input_ids: Optional[torch.Tensor], embeds: Optional[torch.Tensor],
            positions: torch.Tensor, parents: Optional[Sequence[int]], logits_rows: Optional[slice],
            whole: bool = False) -> torch.Tensor:
        """Append the new rows (ids (N,) or embeds (N, d), positions (N,) on the device) to `cache`; return the
        float logits of `logits_rows`. `whole`: one forward of exactly N rows, no padding, no graph (for hooks)."""
        arena, past = self.arena, cache.length
        if not arena.claim(cache):
            raise RuntimeError("this model's static cache is in use by another generation")
        num_new = positions.shape[0]
        wanted = list(range(num_new))[logits_rows] if logits_rows is not None else list(range(num_new))
        if wanted and wanted != list(range(wanted[0], wanted[-1] + 1)):
            raise ValueError("logits_rows must be a contiguous slice")
        ancestors = None
        if parents is not None:
            ancestors = ancestor_matrix(torch.tensor(list(parents), device=self.device))
        chunk = num_new if whole else max(BUCKETS)
        pieces = []
        for first in range(0, num_new, chunk):
            rows = min(chunk, num_new - first)
            bucket = rows if whole else bucket_for(rows)
            local = [r - first for r in wanted if first <= r < first + rows]
            graph = self.graphs.get(bucket) if input_ids is not None and not whole else None
            kv_limit = arena.slots if graph else min(arena.slots, -(-(past + first + bucket) // 64) * 64)
            mask = static_mask(past, first, bucket, num_new, kv_limit, self.dtype, self.device, ancestors)
            slots = torch.arange(past + first, past + first + bucket, device=self.device)
            pad = bucket - rows
            pos = _pad(positions[first: first + rows], pad, positions[first + rows - 1])
            if graph is not None:
                graph.input_ids[0].copy_(_pad(input_ids[first: first + rows], pad, 0))
                graph.position_ids[0].copy_(pos)
                graph.write_index.copy_(slots)
                graph.mask.copy_(mask)
                graph.graph.replay()
                if local:                       # a slice, not a list: no index tensor to copy to the device
                    pieces.append(graph.logits[0, local[0]: local[-1] + 1].float())
                continue
            arena.write_index, arena.kv_limit = slots, kv_limit
            arena.seen, arena.valid_slots = past + first, past + first + rows
            inputs = ({"input_ids": _pad(input_ids[first: first + rows], pad, 0)[None]} if input_ids is not None
                      else {"inputs_embeds": _pad(embeds[first: first + rows], pad, 0.0)[None]})
            keep = torch.tensor(local or [rows - 1])
            output = self.model(**inputs, position_ids=pos[None], attention_mask=mask, past_key_values=arena,
                                use_cache=True, logits_to_keep=keep)
            if local:
                pieces.append(output.logits[0].float())
        cache.length = past + num_new
        if not pieces:
            return torch.zeros(0, 0, device=self.device)
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)

    # ----- CUDA graphs -----
    @torch.inference_mode()
    def capture(self, progress: bool = False) -> float:
        """Capture one CUDA graph per bucket (largest first, sharing one memory pool). Returns seconds taken.
        In inference mode, as every forward is: the arena's buffers are made by the first forward (inference
        tensors), which may not be updated outside it."""
        started = time.perf_counter()
        arena, pool = self.arena, torch.cuda.graph_pool_handle()
        for done, bucket in enumerate(sorted(BUCKETS, reverse=True)):
            if progress:
                print(f"\rmultidraft: capturing CUDA graphs for the static runner ({done}/{len(BUCKETS)})",
                      end="", flush=True)
            input_ids = torch.zeros(1, bucket, dtype=torch.long, device=self.device)
            position_ids = torch.zeros(1, bucket, dtype=torch.long, device=self.device)
            # Warm-up and capture write only the slack slots past the capacity: no generation's data.
            write_index = torch.arange(arena.capacity, arena.capacity + bucket, device=self.device)
            mask = torch.zeros(1, 1, bucket, arena.slots, dtype=self.dtype, device=self.device)
            arena.write_index, arena.kv_limit = write_index, arena.slots

            def call():
                return self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                                  past_key_values=arena, use_cache=True).logits
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    call()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                logits = call()
            self.graphs[bucket] = _Graph(graph, input_ids, position_ids, write_index, mask, logits)
        torch.cuda.synchronize()
        if progress:
            print(f"\rmultidraft: captured {len(BUCKETS)} CUDA graphs for the static runner in "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
        return time.perf_counter() - started


def _pad(values: torch.Tensor, count: int, fill) -> torch.Tensor:
    """`values` with `count` more rows equal to `fill` (a scalar or a row)."""
    if count == 0:
        return values
    if isinstance(fill, torch.Tensor) and fill.dim() == 0:
        return torch.cat([values, fill.expand(count)])
    return torch.cat([values, values.new_full((count, *values.shape[1:]), fill)])
