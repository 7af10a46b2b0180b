"""llama.cpp as a bench peer: rows `llama_cpp_greedy` and `llama_cpp_prompt_lookup` run llama-cpp-python
(`llama_cpp.Llama`) on the same GGUF file the target model was converted from (`models.loader.gguf_source`).

Like for like with our greedy: the token ids our tokenizer produced are fed as the prompt (no re-tokenizing), the
bench's threads (torch.get_num_threads(), which `--threads` sets) for decode and prefill (n_threads,
n_threads_batch), greedy sampling (temp 0, top_k 1, no penalties), the same max_new_tokens, a stop at our EOS ids
(the EOS token is kept, as in our greedy), and the prefill inside the timed span. Prompt lookup is
llama-cpp-python's `LlamaPromptLookupDecoding` with num_pred_tokens = pld's num_draft_tokens (as hf_prompt_lookup).

llama.cpp runs in a child process (eval/llama_cpp_child.py through eval/peer_process.py): a crash in its native
code (a build for the wrong CPU features segfaulted in its first decode, issue 43), a hang, or an install that does
not load fails that peer's rows with the reason ("llama.cpp crashed (SIGSEGV) in its first decode") and the bench
goes on. One child per peer and bench run, kept on the LM object (the prompt-lookup one must keep logits of every
position, `logits_all=True`, which llama-cpp-python needs with a draft model; greedy keeps only the last). Its KV is
reset before every prompt: llama-cpp-python otherwise reuses the prefix a prompt shares with the previous one,
which would make later prompts look faster. The child reports llama.cpp's system info (the SIMD features the build
uses), which the rows keep as `peer_config` and the report names.

llama.cpp quantizes activations to 8 bits in its quantized matmuls, so its tokens need not equal our greedy's: the
rows are marked not lossless, and the bench records how far each matches the baseline (`equal_greedy`,
`greedy_prefix_match`) instead of asserting it. llama-cpp-python is an optional extra (`make llama`, a source build
for this CPU's features without the AMX backend, eval/llama_build.py); without it the rows fail with that hint, or
are skipped under `--methods all`; a model with no GGUF (an HF folder) skips them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Iterable, Optional

from multidraft import validation
from multidraft.errors import InvalidOptionError, ModelNotFoundError
from multidraft.eval.peer_process import PeerFailed, PeerProcess

GREEDY = "llama_cpp_greedy"
PROMPT_LOOKUP = "llama_cpp_prompt_lookup"
LLAMA_CPP_PEERS = (GREEDY, PROMPT_LOOKUP)
INSTALL_HINT = ("run `make llama` in a checkout (a source build for this CPU, ~5-10 minutes on 2 cores), or "
                "`CMAKE_ARGS=\"$(python -m multidraft.eval.llama_build cmake-args)\" pip install 'multidraft[llama]'`")
DEFAULT_MAX_NGRAM_SIZE = 2          # LlamaPromptLookupDecoding's default (what users get)
_CONTEXT_STEP = 1024                # n_ctx is rounded up to this, so most prompts of a run fit the first Llama
_CACHE_ATTRIBUTE = "_llama_cpp_peers"
CHILD_SCRIPT = Path(__file__).with_name("llama_cpp_child.py")
# How long the child may stay silent before it counts as hung and is stopped: starting and loading the GGUF, and a
# generation (a base plus a per-token allowance: a 2-core CPU prefills a 1.5B model at tens of tokens a second).
LOAD_TIMEOUT_S = 600.0
GENERATE_TIMEOUT_S = 120.0
TIMEOUT_PER_TOKEN_S = 0.5


def is_llama_cpp(name: str) -> bool:
    return name in LLAMA_CPP_PEERS


def missing_reason() -> Optional[str]:
    """Why llama-cpp-python cannot run here (None: it is installed). Looks for the package without importing it:
    its native library is loaded only in the peer's child process."""
    try:
        found = importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"llama-cpp-python is not installed: {INSTALL_HINT}"


def skip_reason(model: str, required: bool) -> Optional[str]:
    """Why the llama.cpp rows are not run on `model` (None: they are). A model without a GGUF skips them; so does a
    missing llama-cpp-python under `--methods all`. Asked for by name (`required`), they run and each row fails
    with the install hint instead, so the report says what to do beside the other rows."""
    from multidraft.models.loader import gguf_source
    try:
        gguf_source(model)
    except ModelNotFoundError as exc:
        return f"llama.cpp needs the model's GGUF: {exc}"
    reason = missing_reason()
    return None if required else reason


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


class LlamaCppPeer:
    """One llama.cpp peer's child process with one `Llama` loaded: `generate` runs one prompt there."""

    def __init__(self, path, name: str, options: dict[str, Any], threads: int, n_ctx: int):
        self.name, self.options, self.threads, self.n_ctx = name, dict(options), threads, n_ctx
        self.path = str(path)
        self.config: Optional[dict] = None            # llama.cpp's version and system info, once the child said them
        self.last_seconds = 0.0                       # the last generation's time, measured in the child
        self.last_prompt_seconds: Optional[float] = None    # of it, the time to the first token (the prompt's forward)
        self.calls = 0
        self.process: Optional[PeerProcess] = None
        self.failure: Optional[PeerFailed] = None     # set once it crashed, hung or did not load: no second try

    def start(self) -> None:
        try:
            missing = missing_reason()
            if missing:
                raise PeerFailed(missing, fatal=True)
            self.process = PeerProcess(CHILD_SCRIPT, "llama.cpp")
            hello = self.process.receive(LOAD_TIMEOUT_S, "while starting")
            self.config = {"version": hello["version"], "system_info": hello["system_info"]}
            self.process.ask({"op": "load", "args": {"path": self.path, "name": self.name, "options": self.options,
                                                     "threads": self.threads, "n_ctx": self.n_ctx}},
                             LOAD_TIMEOUT_S, f"while loading {Path(self.path).name}")
        except PeerFailed as exc:
            self.failure = PeerFailed(str(exc), fatal=True)     # without its model the peer cannot run at all
            self.close()
            raise self.failure from None

    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos_token_ids: Iterable[int],
                 reuse_prefix: bool = False) -> list[int]:
        """Greedy tokens after `prompt_ids` (llama_cpp_child.LlamaCppRunner.generate, in the child)."""
        if self.failure is not None:
            raise PeerFailed(str(self.failure), fatal=True)
        self.calls += 1
        where = "in its first decode" if self.calls == 1 else f"in decode call {self.calls}"
        timeout = GENERATE_TIMEOUT_S + TIMEOUT_PER_TOKEN_S * (len(prompt_ids) + max_new_tokens)
        try:
            reply = self.process.ask({"op": "generate", "prompt_ids": [int(t) for t in prompt_ids],
                                      "max_new_tokens": int(max_new_tokens),
                                      "eos_token_ids": [int(t) for t in eos_token_ids], "reuse_prefix": reuse_prefix},
                                     timeout, where)
        except PeerFailed as exc:
            if exc.fatal:
                self.failure = exc
            raise
        self.last_seconds = float(reply["seconds"])
        first = reply.get("first_token_seconds")
        self.last_prompt_seconds = None if first is None else float(first)
        return [int(t) for t in reply["token_ids"]]

    def close(self) -> None:
        if self.process is not None:
            self.process.close()


def runner_for(lm, name: str, options: dict[str, Any], needed_tokens: int, model: str) -> LlamaCppPeer:
    """The run's llama.cpp peer for `name`, kept on `lm`; started (untimed) on first use, again only when options or
    threads change or a prompt needs a longer context than it has. `needed_tokens`: prompt + new tokens. A peer
    that crashed, hung or did not load raises its PeerFailed again, without a second start."""
    import torch

    from multidraft.models.loader import gguf_source
    threads = torch.get_num_threads()
    needed_tokens += options.get("num_pred_tokens", 0) + 1      # a draft may reach past the last kept token
    cache = lm.__dict__.setdefault(_CACHE_ATTRIBUTE, {})
    runner = cache.get(name)
    if runner is not None and runner.failure is not None:
        raise PeerFailed(str(runner.failure), fatal=True)
    if runner is None or runner.options != options or runner.threads != threads or runner.n_ctx < needed_tokens:
        if runner is not None:
            runner.close()                      # free the old one before loading another
        n_ctx = max(2 * _CONTEXT_STEP, -(-needed_tokens // _CONTEXT_STEP) * _CONTEXT_STEP)
        runner = cache[name] = LlamaCppPeer(gguf_source(model), name, options, threads, n_ctx)
        runner.start()
    return runner


def peer_config(lm, name: str) -> Optional[dict]:
    """The llama.cpp build a peer ran ({"version", "system_info"}), or None before its child said it."""
    runner = lm.__dict__.get(_CACHE_ATTRIBUTE, {}).get(name)
    return runner.config if runner is not None else None


def close_peers(lm) -> None:
    """Stop the run's llama.cpp children (a bench run ends with this)."""
    for runner in lm.__dict__.pop(_CACHE_ATTRIBUTE, {}).values():
        runner.close()


def describe(config: Optional[dict]) -> str:
    """'llama-cpp-python 0.3.36, CPU: SSE3 AVX AVX2 F16C FMA ...': the features llama.cpp's system info turns on."""
    if not config:
        return "llama-cpp-python (did not start)"
    groups = []
    for group in str(config.get("system_info", "")).split("|"):
        name, _, value = group.partition("=")
        backend, colon, feature = name.rpartition(":")
        if colon:
            groups.append([backend.strip() + ":"])
        feature = (feature if colon else name).strip()
        if feature and value.strip() not in ("", "0") and groups:
            groups[-1].append(feature)
    features = "; ".join(" ".join(g) for g in groups) or str(config.get("system_info", "")).strip()
    return f"llama-cpp-python {config.get('version', '?')}, {features}"


def prefix_match(token_ids: list[list[int]], reference: list[list[int]]) -> dict[str, int]:
    """Tokens (pooled over turns) that equal the reference's before the first difference, and the reference's count."""
    common = 0
    for mine, theirs in zip(token_ids, reference):
        for a, b in zip(mine, theirs):
            if a != b:
                break
            common += 1
    return {"common": common, "reference": sum(len(t) for t in reference)}
