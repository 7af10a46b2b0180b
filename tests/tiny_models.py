"""Tiny random causal LMs with a real (word-level) tokenizer, built in memory for fast offline tests."""

import copy
import functools

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

from multidraft.models.runner import LM

WORDS = ("the a cat dog sat ran on mat and then . , def return if else for in x y z ( ) : = + 1 2 3 "
         "print value list of to is was it").split()


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A fresh copy each call, so a test that sets e.g. a chat template cannot leak it into other tests."""
    return copy.deepcopy(_shared_tokenizer())


@functools.lru_cache(maxsize=None)
def _shared_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    for i in range(64 - len(vocab)):
        vocab[f"w{i}"] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    return tokenizer


def make_tiny_hf_model(arch: str = "llama", seed: int = 0, vocab_size: int = 64, **overrides):
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  eos_token_id=2, bos_token_id=1, pad_token_id=0, tie_word_embeddings=False)
    if arch == "gemma3":            # Gemma3's text model: sliding-window layers around a full one, per-head norms
        common.update(num_hidden_layers=3, sliding_window=8, query_pre_attn_scalar=48,
                      layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                      rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                       "full_attention": {"rope_type": "default", "rope_theta": 1e6}})
    if arch == "mistral":           # Llama's layers; its config's default sliding window (4096) off, as in v0.3
        common.update(sliding_window=None)
    common.update(overrides)
    if arch in ("gemma3", "qwen3"):  # their configs name head_dim (Qwen3's default, 128, is not hidden / heads)
        common.setdefault("head_dim", common["hidden_size"] // common["num_attention_heads"])
    config_cls, model_cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
                             "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM),
                             "mistral": (MistralConfig, MistralForCausalLM)}[arch]
    config = config_cls(**common)
    model = model_cls(config).float().eval()
    # Sharper logits than the default init so greedy and sampling tests see varied, non-uniform text.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


def make_tiny_lm(arch: str = "llama", seed: int = 0, **overrides) -> LM:
    return LM(make_tiny_hf_model(arch, seed, **overrides), make_tokenizer(), name=f"tiny-{arch}")


def perturbed_copy(lm, scale, seed=0, name=None) -> LM:
    """The same model with Gaussian noise (scale x each matrix's std) on every matrix: a draft that agrees often."""
    model = copy.deepcopy(lm.model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.add_(torch.randn(param.shape, generator=generator) * scale * param.std())
    return LM(model, lm.tokenizer, name=name or f"{lm.name}-perturbed")


def random_heads(lm, num_heads=4, seed=0, scale=0.5):
    """Blockwise heads with random second layers (scale 0: every head repeats head 1), bound to `lm`."""
    from multidraft.blockwise import BlockwiseHeads

    torch.manual_seed(seed)
    heads = BlockwiseHeads(num_heads, lm.hidden_size, 32)
    with torch.no_grad():
        heads.w2.normal_(0, scale / 32 ** 0.5)
    heads.meta["hidden_layer"] = lm.num_layers
    return heads.eval().requires_grad_(False).bind(lm)


NGRAM_PROMPTS = ["the cat sat on the mat and", "def x ( y ) : return", "a"]


def build_tiny_ngram(path, max_order=6):
    """An n-gram file of the tiny tokenizer counted on a tiny model's own greedy text (so its counts help)."""
    import multidraft
    from multidraft.ngram import NGramModel, build
    from multidraft.tokenizer_identity import vocab_fingerprint

    lm = make_tiny_lm("llama", seed=2)
    docs = [np.asarray(multidraft.generate(lm, p, max_new_tokens=40).token_ids, dtype=np.uint32)
            for p in NGRAM_PROMPTS]
    build(docs, lm.vocab_size, path, max_order=max_order, tokenizer_fingerprint=vocab_fingerprint(lm.tokenizer))
    return NGramModel.load(path, tokenizer=lm.tokenizer)


def use_static(lm) -> LM:
    """Switch `lm` to the static runner, over the stock linears on CPU (the fast kernel's build is tested in
    test_fast_runner.py with its own MULTIDRAFT_HOME; here it must neither build nor touch the user's cache)."""
    import os
    import warnings

    previous = os.environ.get("MULTIDRAFT_NO_KERNEL_BUILD")
    os.environ["MULTIDRAFT_NO_KERNEL_BUILD"] = "1"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")            # a fallback to eager would make these tests vacuous
            assert lm.use_runner("static", progress=False) == "static"
    finally:
        if previous is None:
            del os.environ["MULTIDRAFT_NO_KERNEL_BUILD"]
        else:
            os.environ["MULTIDRAFT_NO_KERNEL_BUILD"] = previous
    return lm


def make_tiny_lm_with(runner: str, arch: str = "llama", seed: int = 0, **overrides) -> LM:
    lm = make_tiny_lm(arch, seed, **overrides)
    return use_static(lm) if runner == "static" else lm
