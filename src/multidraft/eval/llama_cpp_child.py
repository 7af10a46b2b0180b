"""The llama.cpp peer's child process (eval/peer_process.py runs this file by path): llama-cpp-python is imported
and run only here, so a crash in its native code ends this process, not the bench.

Standard library and llama_cpp only (no torch, no multidraft: the child starts in a fraction of a second).
Protocol, JSON lines: first this process says {"ok", "version", "system_info"} (or a fatal {"error"} when
llama_cpp does not import); then per request {"op": "load", "args": {...}} -> {"ok"}, and
{"op": "generate", ...} -> {"ok", "token_ids", "seconds", "first_token_seconds"} (the seconds of the generation,
prefill included, and of its prompt's forward up to the first token, timed here so the pipe's cost is not in them).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Iterable

PROMPT_LOOKUP = "llama_cpp_prompt_lookup"


class LlamaCppRunner:
    """One `llama_cpp.Llama` on a GGUF; `generate` runs one prompt from an empty KV cache."""

    def __init__(self, llama_cpp, path, name: str, options: dict[str, Any], threads: int, n_ctx: int):
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        draft = None
        if name == PROMPT_LOOKUP:
            draft = LlamaPromptLookupDecoding(num_pred_tokens=options["num_pred_tokens"],
                                              max_ngram_size=options["max_ngram_size"])
        # logits_all must be passed, not only implied by draft_model: llama-cpp-python sizes its logits buffer
        # from the argument. n_gpu_layers=0: the extra is a CPU build.
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                                   logits_all=draft is not None, draft_model=draft, n_gpu_layers=0, seed=0,
                                   verbose=False)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos_token_ids: Iterable[int],
                 reuse_prefix: bool = False) -> list[int]:
        """Greedy tokens after `prompt_ids`: at most max_new_tokens, ending with (and keeping) an EOS id.
        reuse_prefix: keep the KV of the prefix shared with the previous call's sequence (llama-cpp-python's own
        prefix match), as multidraft.PrefixCache does for ours; else start from an empty KV cache."""
        eos = set(int(t) for t in eos_token_ids)
        self.first_token_at = None      # when the prompt's forward had given the first token (perf_counter)
        if not reuse_prefix:
            self.llm.reset()        # n_tokens = 0: no prefix of the previous prompt is reused; its KV is dropped
        tokens: list[int] = []
        generator = self.llm.generate([int(t) for t in prompt_ids], top_k=1, top_p=1.0, min_p=0.0, typical_p=1.0,
                                      temp=0.0, repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0,
                                      reset=True)
        try:
            for token in generator:
                if self.first_token_at is None:
                    self.first_token_at = time.perf_counter()
                tokens.append(int(token))
                if tokens[-1] in eos or len(tokens) >= max_new_tokens:
                    break
        finally:
            generator.close()
        return tokens


def _channel():
    """Replies go to a private copy of stdout; fd 1 then points at stderr, so whatever llama.cpp prints cannot
    mix into them."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return replies


def _answer(llama_cpp, runner, request: dict):
    """(runner, reply) for one request."""
    if request["op"] == "load":
        return LlamaCppRunner(llama_cpp, **request["args"]), {"ok": True}
    if request["op"] == "generate":
        start = time.perf_counter()
        token_ids = runner.generate(request["prompt_ids"], request["max_new_tokens"], request["eos_token_ids"],
                                    request.get("reuse_prefix", False))
        first = runner.first_token_at
        return runner, {"ok": True, "token_ids": token_ids, "seconds": time.perf_counter() - start,
                        "first_token_seconds": None if first is None else first - start}
    raise ValueError(f"unknown request {request['op']!r}")


def main() -> int:
    replies = _channel()

    def send(reply: dict) -> None:
        replies.write(json.dumps(reply) + "\n")
        replies.flush()

    try:
        import llama_cpp
        info = llama_cpp.llama_print_system_info()
    except Exception as exc:            # installed but broken: ImportError, OSError from its shared library...
        send({"error": f"llama-cpp-python does not load here ({type(exc).__name__}: {exc}); reinstall it with "
                       f"`make llama`", "fatal": True})
        return 1
    send({"ok": True, "version": getattr(llama_cpp, "__version__", "?"),
          "system_info": info.decode(errors="replace") if isinstance(info, bytes) else str(info)})
    runner = None
    for line in sys.stdin:
        try:
            runner, reply = _answer(llama_cpp, runner, json.loads(line))
        except Exception as exc:        # a Python-level failure of one request; the process carries on
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        send(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
