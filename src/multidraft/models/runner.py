"""`LM`: one causal language model with its tokenizer, and the few forward passes every decoder needs.

A `KVCache` holds the keys/values of the committed tokens. On top of it the runner can
- extend by a chain of tokens (or embeddings) at the next positions,
- run one forward over a token *tree* with a 4D attention mask and explicit position ids,
- crop the cache to a length, or keep only an accepted root-to-node path of the last tree.
It can also capture the hidden states of one layer and the attention rows of chosen heads.
"""

from __future__ import annotations

import time
import warnings
from typing import Optional, Sequence, Union

import torch

from multidraft.errors import InvalidOptionError, PromptError
from multidraft.forward_watch import WatchPoints
from multidraft.models import quantized, runners, static_runner
from multidraft.models.runners.base import ForwardOutput  # noqa: F401  (part of this module's API)
from multidraft.models.attention_rows import AttentionQueries, install_query_hooks, on_this_thread
from multidraft.models.kv_cache import (KVCache, StaticKVCache, additive_mask, tree_attention_mask,  # noqa: F401
                                       tree_depths)

RUNNERS = ("auto",) + tuple(runners.REGISTRY)
# What "auto" picks for a model on GGUF blocks with 8-bit activations: the native forward where it supports the
# architecture (its logits are the quantized-q8 runner's bits), else HF's modules (quantized-q8). The one switch.
AUTO_NATIVE = True
# Rows per forward of a long prompt on a runner whose cached keys/values are a fresh prefill's bits (prefix_reusable):
# a longer chain runs as consecutive forwards of this many rows, so its intermediate tensors (the MLP's are rows x
# 8,960 floats on the 1.5B) stay a chunk's size. The same bits; the 1.5B on a Zen 4, 2 threads: an 8,000-token prefill
# 85.3 -> 76.9 s, the memory it takes 1.92 -> 0.54 GB (256 to 1,024 rows alike; 2026-12-07-zen4-prefill-chunks).
PREFILL_CHUNK = 512


class LM:
    """A causal LM ready for drafting and verification. Build it with `multidraft.load_model`."""

    def __init__(self, model, tokenizer, name: str = "model", info=None, runner: Optional[str] = None):
        self.model = model.eval()
        self._runner: runners.Runner = runners.EagerRunner(self)
        self.tokenizer = tokenizer
        self.name = name
        self.info = info
        config = model.config
        text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.config = text_config
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.num_layers = int(text_config.num_hidden_layers)
        self.num_heads = int(text_config.num_attention_heads)
        self.hidden_size = int(text_config.hidden_size)
        self.context_length = int(getattr(text_config, "max_position_embeddings", 0) or 2048)
        self.eos_token_ids = self._eos_ids()
        self._decoder_layers = self._find_layers()
        self.forward_watch = WatchPoints()   # checks a runner with its own layer loop calls (forward_watch.py)
        self.static_capacity = static_runner.DEFAULT_CAPACITY
        self.runner_setup_seconds = 0.0    # how long the last use_runner took (kernel build, graph capture): the bench
        # None: the model's own kind: for a model on GGUF blocks (models/quantized.py) "auto" keeps the activations it
        # was loaded with (and goes native in q8 where AUTO_NATIVE says so), else eager
        self.use_runner(runner or ("auto" if self.quantized else "eager"))

    # ----- runner choice -----
    def use_runner(self, runner: str = "auto", progress: bool = True) -> str:
        """Pick how forwards run (one file each under models/runners/): "eager" (HF modeling as is), "fast" (CPU
        fp32: fast_linear.py's linears, a small kernel for 1-16 rows and oneDNN beyond; CUDA: SDPA without the cuDNN
        backend), "static" (a preallocated KV cache and fixed shape buckets, replayed as CUDA graphs on CUDA; on CPU
        with the fast kernel where it applies; static_runner.py) or "auto" (fast where it was measured faster: a CPU
        whose best ISA is AVX2, in fp32; and CUDA). A model on GGUF blocks takes "quantized", "quantized-q8" or
        "native" (models/native.py; "auto" picks it on 8-bit activations, see AUTO_NATIVE). Where a runner cannot
        run here it warns once and falls back. Returns the runner in use; `capabilities` says what it guarantees."""
        if runner not in RUNNERS:
            raise InvalidOptionError(f"unknown runner {runner!r}; use one of {', '.join(RUNNERS)}")
        started = time.perf_counter()
        try:
            return self._use_runner(runner, progress)
        finally:
            self.runner_setup_seconds = time.perf_counter() - started

    @property
    def quantized(self) -> bool:
        """True when the model runs on GGUF blocks (models/quantized.py): chosen at load, it cannot be switched
        to another runner (but between "quantized" and "quantized-q8", its activations, it can)."""
        return hasattr(self.model, "gguf_weights")

    def _use_runner(self, runner: str, progress: bool) -> str:
        name = self._auto_runner() if runner == "auto" else runner
        chosen = runners.REGISTRY[name]
        if self.quantized and not chosen.quantized:
            raise InvalidOptionError(f"{self.name} runs on the quantized runner (GGUF blocks); for the {runner!r} "
                                     f"runner load it with multidraft.load_model(..., runner={runner!r})")
        if chosen.quantized and not self.quantized:
            raise InvalidOptionError(f"the quantized runner is chosen when a model is loaded: "
                                     f"multidraft.load_model({self.name!r}, runner={runner!r})")
        self._runner.deactivate()
        self._runner = runners.EagerRunner(self)
        self._runner = chosen(self).activate(progress, runner)
        return self.runner

    def _auto_runner(self) -> str:
        """What "auto" means here: a model on GGUF blocks keeps the activations it has (and runs native in q8
        where AUTO_NATIVE says so and the architecture allows); other models take the fast runner where it was
        measured faster (it falls back to eager silently elsewhere)."""
        if self.quantized:
            name = quantized.runner_name(self.model)
            return "native" if name == "quantized-q8" and AUTO_NATIVE else name
        return "fast"

    @property
    def runner(self) -> str:
        """The name of the runner in use (`runner_object` is the runner itself)."""
        return self._runner.name

    @property
    def runner_object(self) -> runners.Runner:
        return self._runner

    @property
    def capabilities(self) -> runners.Capabilities:
        """What the runner in use guarantees (batch/thread invariance, exact prefix reuse, captures, CUDA graphs)."""
        return self._runner.capabilities

    @property
    def _static(self):
        return self._runner.static

    def kernels(self, prefill: bool = False):
        """Context in which this model's forwards take the runner's kernels (a no-op for the eager runner).
        prefill: this forward starts an empty cache (the quantized runner may use a dense GEMM for it)."""
        return self._runner.kernels(prefill)

    def unembedding(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows of the output embedding (LM head) matrix: (len(rows), hidden) in the model's dtype."""
        head = self.model.get_output_embeddings()
        matrix = getattr(head, "gguf_matrix", None)
        if matrix is not None:
            return matrix.dequantize(rows.cpu())
        return head.weight.detach()[rows.to(head.weight.device)]

    def call_model(self, *args, **kwargs):
        """`self.model(...)` with the runner's kernels: the one way code outside the runner calls the HF model."""
        with self.kernels():
            return self.model(*args, **kwargs)

    # ----- properties -----
    @property
    def device(self) -> torch.device:
        return self._runner.device()

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def attn_implementation(self) -> str:
        return str(getattr(self.model.config, "_attn_implementation", "sdpa"))

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.model.config, self.tokenizer):
            value = getattr(source, "eos_token_id", None)
            if value is None:
                continue
            ids.update([value] if isinstance(value, int) else list(value))
        return {int(i) for i in ids}

    def _find_layers(self):
        for path in ("model.layers", "model.language_model.layers", "transformer.h", "gpt_neox.layers"):
            module = self.model
            try:
                for part in path.split("."):
                    module = getattr(module, part)
                return module
            except AttributeError:
                continue
        return None

    # ----- text -----
    def encode(self, prompt_or_messages, chat: Optional[bool] = None) -> list[int]:
        """Token ids of a prompt. A list of {"role", "content"} messages (or chat=True) uses the chat template."""
        if isinstance(prompt_or_messages, str):
            if not prompt_or_messages:
                raise PromptError("the prompt is empty; give some text to continue")
            if chat:
                prompt_or_messages = [{"role": "user", "content": prompt_or_messages}]
        elif isinstance(prompt_or_messages, (list, tuple)) and prompt_or_messages and all(
                isinstance(t, int) for t in prompt_or_messages):
            return [int(t) for t in prompt_or_messages]
        if isinstance(prompt_or_messages, (list, tuple)):
            messages = list(prompt_or_messages)
            if not messages or not all(isinstance(m, dict) and "role" in m and "content" in m for m in messages):
                raise PromptError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
            if not self.has_chat_template:
                raise PromptError(f"{self.name} has no chat template; pass plain text instead of messages")
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            ids = [int(t) for t in ids]
        elif isinstance(prompt_or_messages, str):
            ids = [int(t) for t in self.tokenizer(prompt_or_messages)["input_ids"]]
        else:
            raise PromptError(f"a prompt must be text, a list of chat messages or token ids, not {type(prompt_or_messages).__name__}")
        if not ids:
            raise PromptError("the prompt encodes to no tokens; give some text to continue")
        return ids

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def check_prompt_length(self, num_prompt_tokens: int, max_new_tokens: int, role: str = "") -> None:
        """`role`: how the message names this model when it is not the one the caller chose ("the draft model ")."""
        if num_prompt_tokens + max_new_tokens > self.context_length:
            raise PromptError(
                f"prompt of {num_prompt_tokens} tokens plus max_new_tokens={max_new_tokens} exceeds the context of "
                f"{role}{self.name} ({self.context_length} tokens); shorten the prompt or lower max_new_tokens"
                f"{', or use one with a longer context' if role else ''}")

    # ----- forward passes -----
    def new_cache(self, dynamic: bool = False) -> Union[KVCache, StaticKVCache]:
        """A cache for one generation: the static runner's (unless `dynamic` or its buffers are taken) or HF's."""
        if dynamic:
            return KVCache()
        static = self._static.new_cache() if self._static is not None else None
        return static if static is not None else self._runner.new_cache()

    def embed(self, token_ids) -> torch.Tensor:
        return self.model.get_input_embeddings()(torch.as_tensor(token_ids, device=self.device))

    @torch.inference_mode()
    def forward(self, cache: KVCache, token_ids: Optional[Sequence[int]] = None, *,
                parents: Optional[Sequence[int]] = None, inputs_embeds: Optional[torch.Tensor] = None,
                logits_rows: Optional[slice] = None, hidden_layer: Optional[int] = None,
                attention_heads: Optional[Sequence[tuple[int, int]]] = None,
                attention_rows: Optional[Sequence[int]] = None,
                visible: Optional[tuple[torch.Tensor, Sequence[int]]] = None) -> ForwardOutput:
        """Run new tokens on top of `cache` and append them to it.

        token_ids (or inputs_embeds of shape (T, d)) are the new positions. With `parents` they form a
        tree (see `Draft`): node i sits at position cache.length + depth(i) and sees only its ancestors.
        `visible` = (allowed, positions) is the general form, for a tree grown on top of cached tree nodes (a
        draft model's session): allowed (T, cache.length + T) bool says which cached and new entries row i sees,
        positions its position ids; it needs an eager (dynamic) cache.
        `logits_rows` limits which rows get logits (e.g. slice(-1, None) for a prefill).
        `hidden_layer` l captures the output of decoder block l (1-based; 0 = embeddings), as HF's
        hidden_states[l]. `attention_heads` [(layer, head), ...] (0-based) captures post-softmax attention
        rows: the weights with eager attention, else the heads' queries and keys (`AttentionQueries`, rows on
        demand; attention_rows.py); `attention_rows` picks which query rows to keep.
        """
        start = time.perf_counter()
        past, device = cache.length, self.device
        if inputs_embeds is None:
            if token_ids is None or len(token_ids) == 0:
                raise ValueError("forward needs at least one new token")
            input_ids = torch.as_tensor([list(token_ids)], dtype=torch.long, device=device)
            num_new = input_ids.shape[1]
            model_inputs = {"input_ids": input_ids}
        else:
            embeds = inputs_embeds.to(device=device, dtype=self.dtype)
            num_new = embeds.shape[0]
            model_inputs = {"inputs_embeds": embeds[None]}
        is_tree = parents is not None and list(parents) != list(range(-1, num_new - 1))
        # a tree's nodes take cache slots past the context's end, but positions only down to its depth (the path
        # kept after the verify is at most that deep): only a position past the context is refused
        reach = past + (max(tree_depths(parents)) + 1 if is_tree else num_new)
        if visible is None and reach > self.context_length:
            raise PromptError(f"the sequence would reach {reach} tokens, beyond the context of "
                              f"{self.name} ({self.context_length}); shorten the prompt or lower max_new_tokens")
        if visible is not None:
            allowed, positions = visible
            if parents is not None or tuple(allowed.shape) != (num_new, past + num_new) or len(positions) != num_new:
                raise ValueError(f"visible needs a ({num_new}, {past + num_new}) mask and {num_new} positions, "
                                 "without parents")
            if max(positions) >= self.context_length:
                raise PromptError(f"the draft would reach position {max(positions)}, beyond the context of "
                                  f"{self.name} ({self.context_length}); shorten the prompt or lower max_new_tokens")
            position_ids = torch.tensor([list(positions)], device=device)
        elif is_tree:
            position_ids = torch.tensor([[past + d for d in tree_depths(parents)]], device=device)
        else:
            position_ids = torch.arange(past, past + num_new, device=device)[None]
        cache = self._fit_static(cache, num_new)
        if visible is not None and isinstance(cache, StaticKVCache):
            raise InvalidOptionError("a forward with `visible` needs an eager cache: lm.new_cache(dynamic=True)")

        if self._in_chunks(num_new, is_tree, visible, logits_rows, attention_heads):
            result = self._forward_in_chunks(cache, model_inputs, position_ids, logits_rows, hidden_layer,
                                             attention_heads)
        else:
            result = self._runner.forward(cache, model_inputs, position_ids, parents if is_tree else None, visible,
                                          logits_rows, hidden_layer, attention_heads)
        if isinstance(result.attention, AttentionQueries) and attention_rows is not None:
            result.attention = result.attention.select_rows(attention_rows)
        elif result.attention is not None and attention_rows is not None:
            result.attention = result.attention[:, list(attention_rows)]
        result.seconds = time.perf_counter() - start
        return result

    def _in_chunks(self, num_new: int, is_tree: bool, visible, logits_rows: Optional[slice], attention_heads) -> bool:
        """Whether a forward runs as PREFILL_CHUNK-row forwards: a chain longer than one, on a runner where a chunk
        on top of the earlier ones' keys/values gives the one forward's bits, with captures that concatenate
        (eager attention weights are as wide as each chunk's keys)."""
        return (num_new > PREFILL_CHUNK and not is_tree and visible is None and self.capabilities.prefix_reusable
                and (logits_rows is None or logits_rows.step in (None, 1))
                and not (attention_heads and self.attn_implementation == "eager"))

    def _forward_in_chunks(self, cache, model_inputs: dict, position_ids: torch.Tensor, logits_rows: Optional[slice],
                           hidden_layer: Optional[int], attention_heads) -> ForwardOutput:
        """One chain's forward as consecutive forwards of PREFILL_CHUNK rows: each chunk's logits rows are those of
        `logits_rows` it holds, the captures are concatenated over the chunks (the attention's keys: the last
        chunk's, which hold every position)."""
        num_new = position_ids.shape[1]
        wanted = range(num_new)[logits_rows if logits_rows is not None else slice(None)]
        parts = []
        for start in range(0, num_new, PREFILL_CHUNK):
            end = min(num_new, start + PREFILL_CHUNK)
            first, last = max(wanted.start, start), min(wanted.stop, end)
            rows = slice(first - start, max(first, last) - start)
            inputs = {key: value[:, start:end] for key, value in model_inputs.items()}
            parts.append(self._runner.forward(cache, inputs, position_ids[:, start:end], None, None, rows,
                                              hidden_layer, attention_heads))
        result = ForwardOutput(logits=torch.cat([part.logits for part in parts]))
        if hidden_layer is not None:
            result.hidden = torch.cat([part.hidden for part in parts])
        if attention_heads:
            last = parts[-1].attention
            queries = [torch.cat(per_head) for per_head in zip(*(part.attention.queries for part in parts))]
            result.attention = AttentionQueries(queries, last.keys, last.scaling)
        return result

    def _check_hidden_layer(self, hidden_layer: Optional[int]) -> None:
        if hidden_layer is not None and not 0 <= hidden_layer <= self.num_layers:
            raise InvalidOptionError(f"hidden layer {hidden_layer} does not exist: {self.name} has layers 0..{self.num_layers}")

    def _heads_by_layer(self, attention_heads) -> tuple[dict[int, list[int]], list[tuple[int, int]]]:
        """{layer: [heads]} and the requested order of (layer, head) pairs, each checked to exist."""
        by_layer: dict[int, list[int]] = {}
        order = []
        for layer, head in attention_heads or ():
            if not (0 <= layer < self.num_layers and 0 <= head < self.num_heads):
                raise InvalidOptionError(f"attention head ({layer}, {head}) does not exist: {self.name} has "
                                         f"{self.num_layers} layers x {self.num_heads} heads (0-based)")
            by_layer.setdefault(layer, []).append(head)
            order.append((layer, head))
        return by_layer, order

    def _fit_static(self, cache, num_new: int):
        """The cache a forward uses: a static one past its capacity moves to the eager cache (one warning)."""
        if not isinstance(cache, StaticKVCache) or cache.dynamic is not None:
            return cache.dynamic if isinstance(cache, StaticKVCache) else cache
        if self._static is None or cache.arena is not self._static.arena:
            raise InvalidOptionError("this cache belongs to another runner; start a new generation (lm.new_cache())")
        if self._static.fits(cache, num_new):
            return cache
        warnings.warn(f"multidraft: the sequence reaches {cache.length + num_new} tokens, beyond the static runner's "
                      f"{self._static.arena.capacity}; going on with the eager cache (raise lm.static_capacity before "
                      "use_runner('static') for longer ones)", RuntimeWarning, stacklevel=3)
        return cache.spill()

    def _install_hooks(self, hidden_layer, attention_heads, captured):
        hooks = []
        if hidden_layer is not None:
            self._check_hidden_layer(hidden_layer)
            if hidden_layer == 0:
                module = self.model.get_input_embeddings()
            else:
                module = self._decoder_layers[hidden_layer - 1]

            def keep_hidden(_module, _inputs, output):
                tensor = output[0] if isinstance(output, (tuple, list)) else output
                captured["hidden"].append(tensor[0].detach().float())
            hooks.append(module.register_forward_hook(on_this_thread(keep_hidden)))
        if attention_heads:
            by_layer, order = self._heads_by_layer(attention_heads)
            per_layer: dict = {}
            if self.attn_implementation != "eager":
                # No weights from this kernel: keep the chosen heads' queries and keys instead (attention_rows.py).
                hooks += install_query_hooks(self._decoder_layers, by_layer, per_layer)

                class _QueryCollector:
                    def remove(self_inner):
                        # Runs in the forward's `finally`: a forward stopped part-way (timeout, hang-up, Ctrl-C)
                        # never reached some layers, and its own exception must be the one that propagates.
                        if any(layer not in per_layer for layer in by_layer):
                            return
                        triples = [per_layer[layer][by_layer[layer].index(head)] for layer, head in order]
                        captured["attn"] = AttentionQueries(*map(list, zip(*triples)))
                hooks.append(_QueryCollector())
                return hooks

            def make_hook(layer):
                def keep_attention(_module, _inputs, output):
                    weights = output[1] if isinstance(output, (tuple, list)) and len(output) > 1 else None
                    per_layer[layer] = None if weights is None else weights[0, by_layer[layer]].detach().float()
                return keep_attention
            for layer in by_layer:
                attention = self._decoder_layers[layer].self_attn
                hooks.append(attention.register_forward_hook(on_this_thread(make_hook(layer))))

            class _Collector:
                def remove(self_inner):
                    for layer, head in order:
                        weights = per_layer.get(layer)
                        captured["attn"].append(None if weights is None else weights[by_layer[layer].index(head)])
            hooks.append(_Collector())
        return hooks

    # ----- conveniences -----
    def prefill(self, token_ids: Sequence[int], **capture) -> tuple[KVCache, ForwardOutput]:
        cache = self.new_cache()
        return cache, self.forward(cache, token_ids, logits_rows=slice(-1, None), **capture)
