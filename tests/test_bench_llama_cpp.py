"""The bench's llama.cpp peers (eval/llama_cpp_peer.py): method rows and options, the one-line error without
llama-cpp-python, the skip without a GGUF, the run path on a stand-in `llama_cpp` module (KV reset per prompt, one
Llama per run, threads, EOS, max tokens), and a real 2-prompt x 16-token run on SmolLM2-135M's GGUF when both
llama-cpp-python (`make llama`) and the model are there."""

import sys
import types

import numpy as np
import pytest
import torch

from multidraft.cli import main
from multidraft.errors import InvalidOptionError, OptionalDependencyError
from multidraft.eval import llama_cpp_peer
from multidraft.eval.bench import BASELINE, BenchConfig, read_results, resolve_methods, run_bench
from multidraft.eval.demo_table import demo_table
from multidraft.eval.report import REPORT_NAME
from multidraft.eval.tasks import TaskPrompt

LLAMA = ["llama_cpp_greedy", "llama_cpp_prompt_lookup"]
PROMPTS = {"code_edit": [TaskPrompt("c0", "code_edit", prompt="def x ( y ) : return x + 1 def x ( y ) : return"),
                         TaskPrompt("c1", "code_edit", prompt="for x in list : print value for x in list :")]}


def test_rows_exist_with_defaults_like_hf_prompt_lookup():
    from multidraft.methods import available_methods
    methods, skipped = resolve_methods(LLAMA, has_draft=False)
    by_label = {m.label: m for m in methods}
    assert [m.label for m in methods] == [BASELINE] + LLAMA and not skipped
    pld_tokens = available_methods()["pld"].options["num_draft_tokens"]
    assert by_label["llama_cpp_prompt_lookup"].options == {"num_pred_tokens": pld_tokens, "max_ngram_size": 2}
    assert by_label["llama_cpp_greedy"].options == {}
    for label in LLAMA:    # peers, and not lossless: 8-bit activations may change a token
        assert by_label[label].peer and not by_label[label].lossless and not by_label[label].needs_draft
    methods, _ = resolve_methods(["all"], has_draft=False)
    assert set(LLAMA) <= {m.label for m in methods}


def test_options_validated_and_unknown_ones_refused():
    methods, _ = resolve_methods(["llama_cpp_prompt_lookup"], has_draft=False,
                                 overrides={"llama_cpp_prompt_lookup": {"num_pred_tokens": 4, "max_ngram_size": 3}})
    assert methods[1].options == {"num_pred_tokens": 4, "max_ngram_size": 3}
    with pytest.raises(InvalidOptionError, match="llama_cpp_prompt_lookup has no option 'bogus'"):
        resolve_methods(["llama_cpp_prompt_lookup"], False, {"llama_cpp_prompt_lookup": {"bogus": 1}})
    with pytest.raises(InvalidOptionError, match="llama_cpp_greedy has no option 'num_pred_tokens'.*none"):
        resolve_methods(["llama_cpp_greedy"], False, {"llama_cpp_greedy": {"num_pred_tokens": 4}})
    for bad in (0, -1, "x", 2.5, True):
        with pytest.raises(InvalidOptionError, match="num_pred_tokens must be an integer >= 1"):
            resolve_methods(["llama_cpp_prompt_lookup"], False, {"llama_cpp_prompt_lookup": {"num_pred_tokens": bad}})


@pytest.fixture
def fake_gguf(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")          # resolves as a GGUF model; never loaded by these tests
    return str(path)


@pytest.fixture
def no_llama_cpp(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)        # `import llama_cpp` raises ImportError
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_speculative", None)


def test_missing_llama_cpp_is_one_clear_error(no_llama_cpp, fake_gguf, tmp_path, capsys):
    with pytest.raises(OptionalDependencyError, match=r"not installed: run `make llama` or "
                                                      r"`pip install 'multidraft\[llama\]'`"):
        llama_cpp_peer.import_llama_cpp()
    with pytest.raises(OptionalDependencyError):        # named: an error before any model is loaded
        resolve_methods(["greedy", "llama_cpp_greedy"], False, model=fake_gguf)
    methods, skipped = resolve_methods(["all"], False, model=fake_gguf)      # under "all": skipped, with the fix
    assert not set(LLAMA) & {m.label for m in methods}
    assert all("make llama" in skipped[name] for name in LLAMA)
    out = tmp_path / "o"
    code = main(["bench", "--model", fake_gguf, "--methods", "llama_cpp_greedy", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("multidraft: error:") and "make llama" in err[-1]
    assert "Traceback" not in "\n".join(err) and not out.exists()


def test_model_without_gguf_skips_the_rows(tiny_folder, tmp_path):
    methods, skipped = resolve_methods(["greedy"] + LLAMA, False, model=tiny_folder)
    assert [m.label for m in methods] == [BASELINE, "greedy"]
    assert all("GGUF" in skipped[name] and "HF model" in skipped[name] for name in LLAMA)
    config = BenchConfig(model=tiny_folder, tasks=["code_edit"], methods=["greedy"] + LLAMA, max_new_tokens=4, limit=1)
    run_bench(config, tmp_path, prompts=PROMPTS, progress=False)
    header, rows = read_results(tmp_path)
    assert set(header["skipped"]) == set(LLAMA)
    assert [r["method"] for r in rows] == [BASELINE, "greedy"]
    assert "- not run: `llama_cpp_greedy` (llama.cpp needs the model's GGUF" in (tmp_path / REPORT_NAME).read_text()


class FakeLlama:
    """Stands in for llama_cpp.Llama: records how it was made and called; generates a fixed continuation."""

    made: list = []
    continuation = [7, 8, 9, 10, 11, 12]

    def __init__(self, model_path, **kwargs):
        self.model_path, self.kwargs, self.n_tokens, self.calls = model_path, kwargs, 0, []
        FakeLlama.made.append(self)

    def reset(self):
        self.n_tokens = 0

    def generate(self, tokens, reset=True, **sampling):
        # llama-cpp-python reuses the prefix it still holds unless n_tokens was reset to 0 first.
        self.calls.append({"tokens": list(tokens), "n_tokens_before": self.n_tokens, "sampling": sampling})
        self.n_tokens = len(tokens)
        for token in self.continuation:
            self.n_tokens += 1
            yield token


class FakeLookup:
    def __init__(self, max_ngram_size=2, num_pred_tokens=10):
        self.max_ngram_size, self.num_pred_tokens = max_ngram_size, num_pred_tokens

    def __call__(self, input_ids):
        return np.array([], dtype=np.intc)


@pytest.fixture
def fake_llama_cpp(monkeypatch, fake_gguf):
    module = types.ModuleType("llama_cpp")
    module.Llama = FakeLlama
    speculative = types.ModuleType("llama_cpp.llama_speculative")
    speculative.LlamaPromptLookupDecoding = FakeLookup
    module.llama_speculative = speculative
    monkeypatch.setitem(sys.modules, "llama_cpp", module)
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_speculative", speculative)
    from pathlib import Path

    import multidraft.models.loader as loader
    monkeypatch.setattr(loader, "gguf_source", lambda name: Path(fake_gguf), raising=False)
    FakeLlama.made = []
    return FakeLlama


@pytest.fixture(scope="module")
def tiny_bench_lm(tmp_path_factory):
    import multidraft
    from tests.tiny_models import make_tiny_hf_model, make_tokenizer
    folder = tmp_path_factory.mktemp("tiny-llama-cpp")
    make_tiny_hf_model("llama", seed=0).save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    return str(folder), multidraft.load_model(str(folder))


def test_run_path_resets_per_prompt_loads_once_and_stops(fake_llama_cpp, tiny_bench_lm, tmp_path):
    folder, lm = tiny_bench_lm
    lm.__dict__.pop("_llama_cpp_peers", None)
    eos = min(lm.eos_token_ids)
    FakeLlama.continuation = [7, 8, eos, 9, 10]                 # stops at EOS, keeping it (as our greedy does)
    threads = torch.get_num_threads()
    config = BenchConfig(model=folder, tasks=["code_edit"], methods=LLAMA, max_new_tokens=8, limit=2,
                         options={"llama_cpp_prompt_lookup": {"num_pred_tokens": 3}})
    run_bench(config, tmp_path, prompts=PROMPTS, models=(lm, None), progress=False)
    _, rows = read_results(tmp_path)
    llama_rows = [r for r in rows if r["name"] in LLAMA]
    assert [(r["prompt_id"], r["method"]) for r in llama_rows] == [(p, m) for p in ("c0", "c1") for m in LLAMA]
    for row in llama_rows:
        assert row["error"] is None, row["error"]
        assert row["turns"][0]["token_ids"] == [7, 8, eos] and row["tokens"] == 3 and row["seconds"] > 0
        assert row["runner"] == "llama.cpp" and row["peer"] and not row["lossless"]
        assert row["equal_greedy"] is False and row["greedy_prefix_match"]["reference"] == len(
            next(r for r in rows if r["method"] == BASELINE and r["prompt_id"] == row["prompt_id"])["turns"][0]["token_ids"])
        assert row["perplexity"] is None                    # no target forward for peers
    # One Llama per peer for the whole run (warm-up included); KV reset before every prompt.
    assert len(FakeLlama.made) == 2
    greedy, lookup = FakeLlama.made
    assert greedy.kwargs["logits_all"] is False and greedy.kwargs["draft_model"] is None
    assert lookup.kwargs["logits_all"] is True and lookup.kwargs["draft_model"].num_pred_tokens == 3
    for llm in FakeLlama.made:
        assert llm.kwargs["n_threads"] == llm.kwargs["n_threads_batch"] == threads and llm.kwargs["verbose"] is False
        assert len(llm.calls) == 3 and all(call["n_tokens_before"] == 0 for call in llm.calls)   # warm-up + 2
        assert all(call["sampling"]["temp"] == 0.0 and call["sampling"]["top_k"] == 1 for call in llm.calls)
        assert [call["tokens"] for call in llm.calls[1:]] == [lm.encode(p.prompt) for p in PROMPTS["code_edit"]]
        prompt = max(len(call["tokens"]) for call in llm.calls)
        assert llm.kwargs["n_ctx"] >= prompt + 8
    table = demo_table(rows)
    assert "vs llama.cpp greedy" in table.splitlines()[0]
    assert "0/2 prompts" in table and "llama-cpp-python on the same GGUF" in table
    assert "`llama_cpp_greedy` (llama.cpp)" in (tmp_path / REPORT_NAME).read_text()


def test_max_new_tokens_caps_the_output(fake_llama_cpp, tiny_bench_lm):
    FakeLlama.continuation = [7, 8, 9, 10, 11, 12]
    runner = llama_cpp_peer.LlamaCppRunner("m.gguf", "llama_cpp_greedy", {}, threads=1, n_ctx=2048)
    assert runner.generate([1, 2, 3], 4, eos_token_ids=[0]) == [7, 8, 9, 10]
    assert runner.generate([1, 2, 3], 4, eos_token_ids=[9]) == [7, 8, 9]


def _real_llama_cpp_and_gguf():
    try:
        llama_cpp_peer.import_llama_cpp()
    except OptionalDependencyError as exc:
        pytest.skip(str(exc))
    from multidraft.errors import ModelNotFoundError
    from multidraft.models.loader import gguf_source
    try:
        return gguf_source("smollm2-135m")
    except ModelNotFoundError as exc:
        pytest.skip(f"SmolLM2-135M's GGUF is not pulled: {exc}")


@pytest.mark.real_model
def test_real_run_on_smollm2_gguf(tmp_path):
    _real_llama_cpp_and_gguf()
    import multidraft
    lm = multidraft.load_model("smollm2-135m", dtype=torch.float32)
    config = BenchConfig(model="smollm2-135m", tasks=["code_edit"], methods=["greedy"] + LLAMA, max_new_tokens=16,
                         limit=2)
    run_bench(config, tmp_path, prompts=PROMPTS, models=(lm, None), progress=False)
    _, rows = read_results(tmp_path)
    assert [r["method"] for r in rows] == [BASELINE, "greedy"] + LLAMA + [BASELINE, "greedy"] + LLAMA
    for row in rows:
        assert row["error"] is None, row["error"]
        tokens = row["turns"][0]["token_ids"]
        assert 1 <= len(tokens) <= 16 and row["tokens"] == len(tokens) and row["seconds"] > 0
        assert all(isinstance(t, int) and 0 <= t < lm.vocab_size for t in tokens)
        if row["name"] in LLAMA:     # compared with greedy, not required to equal it
            assert isinstance(row["equal_greedy"], bool)
            match = row["greedy_prefix_match"]
            assert 0 <= match["common"] <= match["reference"]
    # The same Llama served both prompts, from an empty KV cache each time: prompt 2 alone gives the same tokens.
    runner = lm._llama_cpp_peers["llama_cpp_greedy"]
    second = [r for r in rows if r["method"] == "llama_cpp_greedy"][1]
    assert runner.generate(lm.encode(PROMPTS["code_edit"][1].prompt), 16, lm.eos_token_ids) == \
        second["turns"][0]["token_ids"]
