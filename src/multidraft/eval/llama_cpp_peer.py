"""llama.cpp as a bench peer: rows `llama_cpp_greedy` and `llama_cpp_prompt_lookup` run llama-cpp-python
(`llama_cpp.Llama`) on the same GGUF file the target model was converted from (`models.loader.gguf_source`).

Like for like with our greedy: the token ids our tokenizer produced are fed as the prompt (no re-tokenizing), the
bench's threads (torch.get_num_threads(), which `--threads` sets) for decode and prefill (n_threads,
n_threads_batch), greedy sampling (temp 0, top_k 1, no penalties), the same max_new_tokens, a stop at our EOS ids
(the EOS token is kept, as in our greedy), and the prefill inside the timed span. Prompt lookup is
llama-cpp-python's `LlamaPromptLookupDecoding` with num_pred_tokens = pld's num_draft_tokens (as hf_prompt_lookup).

One `Llama` per peer and bench run, kept on the LM object (the prompt-lookup one must keep logits of every position,
`logits_all=True`, which llama-cpp-python needs with a draft model; greedy keeps only the last). Its KV is reset
before every prompt: llama-cpp-python otherwise reuses the prefix a prompt shares with the previous one, which
would make later prompts look faster.

llama.cpp quantizes activations to 8 bits in its quantized matmuls, so its tokens need not equal our greedy's: the
rows are marked not lossless, and the bench records how far each matches the baseline (`equal_greedy`,
`greedy_prefix_match`) instead of asserting it. llama-cpp-python is an optional extra (`make llama`, or
`pip install 'multidraft[llama]'`, a ~8 minute source build on 2 cores); without it the rows raise
OptionalDependencyError (one line), and a model with no GGUF (an HF folder) skips them.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from multidraft import validation
from multidraft.errors import InvalidOptionError, ModelNotFoundError, OptionalDependencyError

GREEDY = "llama_cpp_greedy"
PROMPT_LOOKUP = "llama_cpp_prompt_lookup"
LLAMA_CPP_PEERS = (GREEDY, PROMPT_LOOKUP)
INSTALL_HINT = "run `make llama` or `pip install 'multidraft[llama]'` (a source build, ~8 minutes on 2 cores)"
DEFAULT_MAX_NGRAM_SIZE = 2          # LlamaPromptLookupDecoding's default (what users get)
_CONTEXT_STEP = 1024                # n_ctx is rounded up to this, so most prompts of a run fit the first Llama
_CACHE_ATTRIBUTE = "_llama_cpp_peers"


def is_llama_cpp(name: str) -> bool:
    return name in LLAMA_CPP_PEERS


def import_llama_cpp():
    """The llama_cpp module, or OptionalDependencyError saying how to install it."""
    try:
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # noqa: F401
    except ImportError:
        raise OptionalDependencyError(f"the llama.cpp bench rows ({', '.join(LLAMA_CPP_PEERS)}) need "
                                      f"llama-cpp-python, which is not installed: {INSTALL_HINT}") from None
    except (OSError, RuntimeError) as exc:        # installed, but its shared library does not load here
        raise OptionalDependencyError(f"llama-cpp-python is installed but does not load ({exc}); reinstall it: "
                                      f"{INSTALL_HINT}") from None
    return llama_cpp


def skip_reason(model: str, required: bool) -> Optional[str]:
    """Why the llama.cpp rows cannot run on `model` (None: they can). A model without a GGUF is a reason to skip;
    a missing llama-cpp-python is one only when the rows were not asked for by name (`required`): then it raises."""
    from multidraft.models.loader import gguf_source
    try:
        gguf_source(model)
    except ModelNotFoundError as exc:
        return f"llama.cpp needs the model's GGUF: {exc}"
    try:
        import_llama_cpp()
    except OptionalDependencyError:
        if required:
            raise
        return f"llama-cpp-python is not installed ({INSTALL_HINT})"
    return None


def peer_options(name: str, overrides: dict[str, Any], pld_draft_tokens: int) -> dict[str, Any]:
    """A llama.cpp peer's options: defaults, then `overrides` (-o), validated; unknown names are refused."""
    known = OPTIONS[name]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise InvalidOptionError(f"{name} has no option {', '.join(map(repr, unknown))}; its options are: "
                                 f"{', '.join(known) or 'none'}")
    options: dict[str, Any] = {}
    if name == PROMPT_LOOKUP:      # like hf_prompt_lookup: pld's draft length, so the rows compare like for like
        options = {"num_pred_tokens": pld_draft_tokens, "max_ngram_size": DEFAULT_MAX_NGRAM_SIZE}
    options.update(overrides)
    for key, value in options.items():
        options[key] = validation.positive_int(f"{name}.{key}", value)
    return options


# Options each llama.cpp peer accepts through -o (LlamaPromptLookupDecoding's arguments).
OPTIONS: dict[str, tuple[str, ...]] = {GREEDY: (), PROMPT_LOOKUP: ("num_pred_tokens", "max_ngram_size")}


class LlamaCppRunner:
    """One `llama_cpp.Llama` on a GGUF; `generate` runs one prompt from an empty KV cache."""

    def __init__(self, path, name: str, options: dict[str, Any], threads: int, n_ctx: int):
        llama_cpp = import_llama_cpp()
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        draft = None
        if name == PROMPT_LOOKUP:
            draft = LlamaPromptLookupDecoding(num_pred_tokens=options["num_pred_tokens"],
                                              max_ngram_size=options["max_ngram_size"])
        self.name, self.options, self.threads, self.n_ctx = name, dict(options), threads, n_ctx
        self.path = str(path)
        # logits_all must be passed, not only implied by draft_model: llama-cpp-python sizes its logits buffer
        # from the argument. n_gpu_layers=0: the extra is a CPU build.
        self.llm = llama_cpp.Llama(model_path=self.path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                                   logits_all=draft is not None, draft_model=draft, n_gpu_layers=0, seed=0,
                                   verbose=False)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos_token_ids: Iterable[int],
                 reuse_prefix: bool = False) -> list[int]:
        """Greedy tokens after `prompt_ids`: at most max_new_tokens, ending with (and keeping) an EOS id.
        reuse_prefix: keep the KV of the prefix shared with the previous call's sequence (llama-cpp-python's own
        prefix match), as multidraft.PrefixCache does for ours; else start from an empty KV cache."""
        eos = set(int(t) for t in eos_token_ids)
        if not reuse_prefix:
            self.llm.reset()        # n_tokens = 0: no prefix of the previous prompt is reused; its KV is dropped
        tokens: list[int] = []
        generator = self.llm.generate([int(t) for t in prompt_ids], top_k=1, top_p=1.0, min_p=0.0, typical_p=1.0,
                                      temp=0.0, repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0,
                                      reset=True)
        try:
            for token in generator:
                tokens.append(int(token))
                if tokens[-1] in eos or len(tokens) >= max_new_tokens:
                    break
        finally:
            generator.close()
        return tokens


def runner_for(lm, name: str, options: dict[str, Any], needed_tokens: int, model: str) -> LlamaCppRunner:
    """The run's Llama for this peer, kept on `lm`; made (untimed) on first use, again only when options or threads
    change or a prompt needs a longer context than it has. `needed_tokens`: prompt + new tokens."""
    import torch

    from multidraft.models.loader import gguf_source
    threads = torch.get_num_threads()
    needed_tokens += options.get("num_pred_tokens", 0) + 1      # a draft may reach past the last kept token
    cache = lm.__dict__.setdefault(_CACHE_ATTRIBUTE, {})
    runner = cache.get(name)
    if (runner is None or runner.options != options or runner.threads != threads or runner.n_ctx < needed_tokens):
        cache.pop(name, None)                    # free the old one before loading another
        n_ctx = max(2 * _CONTEXT_STEP, -(-needed_tokens // _CONTEXT_STEP) * _CONTEXT_STEP)
        runner = cache[name] = LlamaCppRunner(gguf_source(model), name, options, threads, n_ctx)
    return runner


def prefix_match(token_ids: list[list[int]], reference: list[list[int]]) -> dict[str, int]:
    """Tokens (pooled over turns) that equal the reference's before the first difference, and the reference's count."""
    common = 0
    for mine, theirs in zip(token_ids, reference):
        for a, b in zip(mine, theirs):
            if a != b:
                break
            common += 1
    return {"common": common, "reference": sum(len(t) for t in reference)}
