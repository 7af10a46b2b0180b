"""A stand-in `llama_cpp` for the bench's llama.cpp peer tests (tests/test_bench_llama_cpp.py), imported by the
peer's child process when the test puts tests/fake_llama_cpp on the import path. Its environment says how to act:

FAKE_LLAMA_MODE: ok (default), segv (a real segfault in the first generate), segv_load (one in Llama()), hang (the
first generate never returns), import_error (the import itself fails, as a broken shared library does).
FAKE_LLAMA_CONTINUATION: a JSON list, the tokens every generate yields. FAKE_LLAMA_LOG: a file that gets one JSON
line per Llama made and per generate call (kwargs, the KV length before it, tokens, sampling).
FAKE_LLAMA_PROMPT_SECONDS / FAKE_LLAMA_TOKEN_SECONDS: how long the prompt's forward (a sleep before the first token)
and each later token take (default 0).
"""

import ctypes
import json
import os
import time

MODE = os.environ.get("FAKE_LLAMA_MODE", "ok")
if MODE == "import_error":
    raise OSError("libllama.so: cannot open shared object file (fake)")

__version__ = "0.0.0-fake"


def llama_print_system_info():
    return b"CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | FMA = 1 | AMX_INT8 = 0 | REPACK = 1 | "


def _log(record):
    path = os.environ.get("FAKE_LLAMA_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")


def _crash():
    ctypes.string_at(0)        # reads address 0: SIGSEGV in native code, as llama.cpp's AMX path did


class Llama:
    def __init__(self, model_path, **kwargs):
        if MODE == "segv_load":
            _crash()
        draft = kwargs.get("draft_model")
        logged = dict(kwargs, draft_model=None if draft is None else {"num_pred_tokens": draft.num_pred_tokens})
        _log({"event": "made", "model_path": model_path, "kwargs": logged})
        self.n_tokens = 0

    def reset(self):
        self.n_tokens = 0

    def generate(self, tokens, reset=True, **sampling):
        if MODE == "segv":
            _crash()
        if MODE == "hang":
            time.sleep(3600)
        # llama-cpp-python reuses the prefix it still holds unless n_tokens was reset to 0 first.
        _log({"event": "generate", "tokens": list(tokens), "n_tokens_before": self.n_tokens, "sampling": sampling})
        self.n_tokens = len(tokens)
        time.sleep(float(os.environ.get("FAKE_LLAMA_PROMPT_SECONDS", "0")))
        for index, token in enumerate(json.loads(os.environ.get("FAKE_LLAMA_CONTINUATION", "[7, 8, 9, 10, 11, 12]"))):
            if index:
                time.sleep(float(os.environ.get("FAKE_LLAMA_TOKEN_SECONDS", "0")))
            self.n_tokens += 1
            yield token
