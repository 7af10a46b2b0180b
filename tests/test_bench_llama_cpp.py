"""The bench's llama.cpp peers (eval/llama_cpp_peer.py, run in a child process by eval/peer_process.py): method
rows and options, the rows' failure without llama-cpp-python, the skip without a GGUF, the run path on a stand-in
`llama_cpp` (tests/fake_llama_cpp: KV reset per prompt, one Llama per run, threads, EOS, max tokens), a peer that
segfaults, hangs or does not import costing its own rows only, and a real 2-prompt x 16-token run on SmolLM2-135M's
GGUF when both llama-cpp-python (`make llama`) and the model are there."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from multidraft.errors import InvalidOptionError
from multidraft.eval import demo_table as demo_module
from multidraft.eval import llama_cpp_peer
from multidraft.eval.bench import BASELINE, BenchConfig, read_results, resolve_methods, run_bench
from multidraft.eval.demo_table import demo_table
from multidraft.eval.peer_process import PeerFailed
from multidraft.eval.report import REPORT_NAME
from multidraft.eval.tasks import TaskPrompt

FAKE_PACKAGE = Path(__file__).parent / "fake_llama_cpp"
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
    monkeypatch.setitem(sys.modules, "llama_cpp", None)        # find_spec("llama_cpp") is None: not installed


@pytest.fixture(scope="module")
def tiny_bench_lm(tmp_path_factory):
    import multidraft
    from tests.tiny_models import make_tiny_hf_model, make_tokenizer
    folder = tmp_path_factory.mktemp("tiny-llama-cpp")
    make_tiny_hf_model("llama", seed=0).save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    return str(folder), multidraft.load_model(str(folder))


@pytest.fixture
def fake_llama_cpp(monkeypatch, fake_gguf, tmp_path):
    """The stand-in llama_cpp on the import path the peer's child gets; its log file is returned."""
    monkeypatch.syspath_prepend(str(FAKE_PACKAGE))
    monkeypatch.delitem(sys.modules, "llama_cpp", raising=False)
    log = tmp_path / "fake-llama.jsonl"
    monkeypatch.setenv("FAKE_LLAMA_LOG", str(log))
    monkeypatch.setenv("FAKE_LLAMA_MODE", "ok")
    import multidraft.models.loader as loader
    monkeypatch.setattr(loader, "gguf_source", lambda name: Path(fake_gguf), raising=False)
    return log


def events(log: Path, kind: str) -> list[dict]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [record for record in map(json.loads, lines) if record["event"] == kind]


def bench(lm_pair, out, methods, **config):
    folder, lm = lm_pair
    lm.__dict__.pop("_llama_cpp_peers", None)
    config = BenchConfig(model=folder, tasks=["code_edit"], methods=methods, limit=2, **{"max_new_tokens": 8, **config})
    run_bench(config, out, prompts=PROMPTS, models=(lm, None), progress=False)
    return read_results(out)[1]


def test_missing_llama_cpp_fails_its_rows_with_the_fix(no_llama_cpp, fake_gguf, tiny_bench_lm, tmp_path, monkeypatch):
    assert "not installed: run `make llama`" in llama_cpp_peer.missing_reason()
    methods, skipped = resolve_methods(["greedy", "llama_cpp_greedy"], False, model=fake_gguf)   # named: run
    assert [m.label for m in methods] == [BASELINE, "greedy", "llama_cpp_greedy"] and not skipped
    methods, skipped = resolve_methods(["all"], False, model=fake_gguf)      # under "all": skipped, with the fix
    assert not set(LLAMA) & {m.label for m in methods}
    assert all("make llama" in skipped[name] for name in LLAMA)
    import multidraft.models.loader as loader
    monkeypatch.setattr(loader, "gguf_source", lambda name: Path(fake_gguf), raising=False)
    rows = bench(tiny_bench_lm, tmp_path, ["greedy", "llama_cpp_greedy"])
    failed = [r for r in rows if r["method"] == "llama_cpp_greedy"]
    assert len(failed) == 2 and all(r["error"].startswith("llama-cpp-python is not installed: run `make llama`")
                                    for r in failed)
    assert all(r["error"] is None for r in rows if r["method"] != "llama_cpp_greedy")
    assert "| `llama_cpp_greedy` (llama.cpp) | failed: llama-cpp-python is not installed" in (
        tmp_path / REPORT_NAME).read_text()


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


def test_run_path_resets_per_prompt_loads_once_and_stops(fake_llama_cpp, tiny_bench_lm, tmp_path, monkeypatch):
    _, lm = tiny_bench_lm
    eos = min(lm.eos_token_ids)
    monkeypatch.setenv("FAKE_LLAMA_CONTINUATION", json.dumps([7, 8, eos, 9, 10]))   # stops at EOS, keeping it
    monkeypatch.setenv("FAKE_LLAMA_PROMPT_SECONDS", "0.3")
    monkeypatch.setenv("FAKE_LLAMA_TOKEN_SECONDS", "0.1")
    threads = torch.get_num_threads()
    rows = bench(tiny_bench_lm, tmp_path, LLAMA, options={"llama_cpp_prompt_lookup": {"num_pred_tokens": 3}})
    llama_rows = [r for r in rows if r["name"] in LLAMA]
    assert [(r["prompt_id"], r["method"]) for r in llama_rows] == [(p, m) for p in ("c0", "c1") for m in LLAMA]
    for row in llama_rows:
        assert row["error"] is None, row["error"]
        assert row["turns"][0]["token_ids"] == [7, 8, eos] and row["tokens"] == 3 and row["seconds"] > 0
        # the prompt's forward timed apart: up to the first token; the two tokens after it are the decode's (lower
        # bounds only: the sleeps guarantee them on any machine)
        assert row["prompt_seconds"] >= 0.3 and row["seconds"] - row["prompt_seconds"] >= 0.2
        assert row["decode_tokens"] == 2
        assert row["runner"] == "llama.cpp" and row["peer"] and not row["lossless"]
        assert row["equal_greedy"] is False and row["greedy_prefix_match"]["reference"] == len(
            next(r for r in rows if r["method"] == BASELINE and r["prompt_id"] == row["prompt_id"])["turns"][0]["token_ids"])
        assert row["perplexity"] is None                    # no target forward for peers
        assert row["peer_config"]["version"] == "0.0.0-fake" and "AVX2 = 1" in row["peer_config"]["system_info"]
    # One Llama per peer for the whole run (warm-up included), each in its own child; KV reset before every prompt.
    made, calls = events(fake_llama_cpp, "made"), events(fake_llama_cpp, "generate")
    assert len(made) == 2 and len(calls) == 6
    greedy, lookup = (m["kwargs"] for m in made)
    assert greedy["logits_all"] is False and greedy["draft_model"] is None
    assert lookup["logits_all"] is True and lookup["draft_model"]["num_pred_tokens"] == 3
    for kwargs in (greedy, lookup):
        assert kwargs["n_threads"] == kwargs["n_threads_batch"] == threads and kwargs["verbose"] is False
        assert kwargs["n_ctx"] >= max(len(call["tokens"]) for call in calls) + 8
    assert all(call["n_tokens_before"] == 0 for call in calls)
    assert all(call["sampling"]["temp"] == 0.0 and call["sampling"]["top_k"] == 1 for call in calls)
    prompts = [lm.encode(p.prompt) for p in PROMPTS["code_edit"]]
    assert [call["tokens"] for call in calls[2:]] == [p for p in prompts for _ in LLAMA]   # after the warm-ups
    table = demo_table(rows)
    assert "vs llama.cpp greedy" in table.splitlines()[0]
    assert "0/2 prompts" in table and "llama-cpp-python 0.0.0-fake, CPU: SSE3 AVX AVX2 FMA REPACK" in table
    report = (tmp_path / REPORT_NAME).read_text()
    assert "`llama_cpp_greedy` (llama.cpp)" in report
    assert "- llama.cpp peers ran llama-cpp-python 0.0.0-fake, CPU: SSE3 AVX AVX2 FMA REPACK" in report


def test_max_new_tokens_caps_the_output(fake_llama_cpp):
    peer = llama_cpp_peer.LlamaCppPeer("m.gguf", "llama_cpp_greedy", {}, threads=1, n_ctx=2048)
    peer.start()
    try:
        assert peer.generate([1, 2, 3], 4, eos_token_ids=[0]) == [7, 8, 9, 10]
        assert peer.generate([1, 2, 3], 4, eos_token_ids=[9]) == [7, 8, 9]
    finally:
        peer.close()
    assert peer.process.process.poll() is not None          # the child ended with close()


def test_segfaulting_peer_costs_its_own_rows_only(fake_llama_cpp, tiny_bench_lm, tmp_path, monkeypatch, capsys):
    """The issue-43 crash, through the real bench path: llama.cpp segfaults in its first decode. Before the peers ran
    in a child process this took the whole bench (here: pytest) down with SIGSEGV."""
    monkeypatch.setenv("FAKE_LLAMA_MODE", "segv")
    rows = bench(tiny_bench_lm, tmp_path, ["greedy"] + LLAMA)
    reason = "llama.cpp crashed (SIGSEGV) in its first decode"
    assert [r["method"] for r in rows] == [BASELINE, "greedy"] + LLAMA + [BASELINE, "greedy"] + LLAMA
    for row in rows:
        if row["name"] in LLAMA:
            assert row["error"] == reason and row["peer_config"]["version"] == "0.0.0-fake"
        else:
            assert row["error"] is None and row["equal_greedy"] is not False
    assert len(events(fake_llama_cpp, "made")) == 2              # crashed once each (in the warm-up); not restarted
    report = (tmp_path / REPORT_NAME).read_text()
    assert f"| `llama_cpp_greedy` (llama.cpp) | failed: {reason} |" in report
    lines = report.splitlines()          # its line in the task's table has that table's columns
    failed_line = [line for line in lines if line.startswith("| `llama_cpp_greedy` (llama.cpp) | failed")][-1]
    assert failed_line.count("|") == next(line for line in lines if line.startswith("| method | tok/s")).count("|")
    assert f"`llama_cpp_prompt_lookup` on 2 prompt(s) (code_edit `c0`, code_edit `c1`): {reason}" in report
    assert demo_module.main([str(tmp_path)]) == 0                 # the demo's table, exit 0: our rows are fine
    out = capsys.readouterr().out
    assert f"| llama_cpp_greedy | failed: {reason} |" in out and "| greedy |" in out


def test_hanging_peer_is_stopped_after_its_timeout(fake_llama_cpp, tiny_bench_lm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_MODE", "hang")
    monkeypatch.setattr(llama_cpp_peer, "GENERATE_TIMEOUT_S", 2.0)
    monkeypatch.setattr(llama_cpp_peer, "TIMEOUT_PER_TOKEN_S", 0.0)
    rows = bench(tiny_bench_lm, tmp_path, ["greedy", "llama_cpp_greedy"])
    failed = [r for r in rows if r["method"] == "llama_cpp_greedy"]
    assert [r["error"] for r in failed] == ["llama.cpp gave no answer in 2 s in its first decode (hung?); stopped it"] * 2
    assert all(r["error"] is None for r in rows if r["method"] != "llama_cpp_greedy")
    children = subprocess.run(["pgrep", "-f", "llama_cpp_child.py"], capture_output=True, text=True).stdout.split()
    assert not children                                           # the hung child was killed, not left behind


@pytest.mark.parametrize("mode, reason", [
    ("import_error", "llama.cpp: llama-cpp-python does not load here (OSError: libllama.so: cannot open shared "
                     "object file (fake)); reinstall it with `make llama`"),
    ("segv_load", "llama.cpp crashed (SIGSEGV) while loading m.gguf")])
def test_a_peer_that_does_not_start_fails_and_stays_failed(fake_llama_cpp, monkeypatch, mode, reason):
    monkeypatch.setenv("FAKE_LLAMA_MODE", mode)
    peer = llama_cpp_peer.LlamaCppPeer("m.gguf", "llama_cpp_greedy", {}, threads=1, n_ctx=2048)
    for attempt in (peer.start, lambda: peer.generate([1], 2, [0])):
        with pytest.raises(PeerFailed) as failure:
            attempt()
        assert str(failure.value) == reason and failure.value.fatal


def test_describe_names_the_features_the_build_uses():
    info = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 0 | AVX2 = 1 | AMX_INT8 = 0 | REPACK = 1 | "
    assert llama_cpp_peer.describe({"version": "0.3.36", "system_info": info}) == \
        "llama-cpp-python 0.3.36, CPU: SSE3 SSSE3 AVX AVX2 REPACK"
    assert llama_cpp_peer.describe(None) == "llama-cpp-python (did not start)"


def _real_llama_cpp_and_gguf():
    missing = llama_cpp_peer.missing_reason()
    if missing:         # `make test` does not install llama-cpp-python (`make llama` does): an optional extra
        pytest.skip(missing)
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
        if row["name"] in LLAMA:
            assert "CPU:" in llama_cpp_peer.describe(row["peer_config"])     # the build that ran is named
    # One Llama served both prompts, from an empty KV cache each time: prompt 2 alone in a new one, the same tokens.
    second = [r for r in rows if r["method"] == "llama_cpp_greedy"][1]
    peer = llama_cpp_peer.runner_for(lm, "llama_cpp_greedy", {}, 1024, "smollm2-135m")
    try:
        assert peer.generate(lm.encode(PROMPTS["code_edit"][1].prompt), 16, lm.eos_token_ids) == \
            second["turns"][0]["token_ids"]
    finally:
        llama_cpp_peer.close_peers(lm)
