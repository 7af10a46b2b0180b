"""`multidraft bench` on a tiny random model saved to a temp folder: rows, report, plots, resume, bad input."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from multidraft.cli import main
from multidraft.errors import InvalidOptionError, UnknownMethodError
from multidraft.eval.bench import BASELINE, BenchConfig, BenchConfigError, read_results, run_bench, run_prompt
from multidraft.eval.report import HISTOGRAM_PNG, REPORT_NAME, SPEEDUP_PNG, summarize, write_report
from multidraft.eval.tasks import TaskPrompt

METHODS = ["greedy", "pld", "sample", "hf_prompt_lookup"]
ALL_LABELS = [BASELINE] + METHODS
PROMPTS = {
    "code_edit": [("c0", "def x ( y ) : return x + 1 def x ( y ) : return"),
                  ("c1", "for x in list : print value for x in list :")],
    "chat": [("m0", ["the cat sat on the mat", "then the dog ran"]),
             ("m1", ["if x = 1 : print x", "and the cat"])],
}


def make_prompts():
    out = {}
    for task, items in PROMPTS.items():
        out[task] = [TaskPrompt(pid, task, prompt=text) if isinstance(text, str)
                     else TaskPrompt(pid, task, messages=[{"role": "user", "content": text[0]}], turns=list(text))
                     for pid, text in items]
    return out


def make_config(folder, **changes):
    # fixed draft length: with the adaptive default, whether a step verifies any drafted token depends on the forward
    # times it measured, so on a loaded machine a run could accept none and write no acceptance histogram (1 run in 5)
    settings = dict(model=folder, tasks=list(PROMPTS), methods=list(METHODS), max_new_tokens=8, limit=2,
                    draft_length="fixed")
    settings.update(changes)
    return BenchConfig(**settings)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    from tests.tiny_models import make_tiny_hf_model, make_tokenizer
    folder = tmp_path_factory.mktemp("tiny-bench-model")
    make_tiny_hf_model("llama", seed=0).save_pretrained(folder)
    tokenizer = make_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"   # two-turn chat prompts
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def tiny_lm(tiny_folder):
    import multidraft
    return multidraft.load_model(tiny_folder)


@pytest.fixture(scope="module")
def full_run(tiny_folder, tmp_path_factory):
    """One complete bench run, models loaded by the bench itself from the folder."""
    out = tmp_path_factory.mktemp("bench-full")
    run_bench(make_config(tiny_folder), out, prompts=make_prompts(), progress=False)
    return out


def _keys(rows):
    return [(r["task"], r["prompt_id"], r["method"]) for r in rows]


def test_full_run_writes_rows_report_and_plots(full_run):
    header, rows = read_results(full_run)
    assert header["identity"]["max_new_tokens"] == 8
    assert [m["label"] for m in header["methods"]] == ALL_LABELS
    expected = [(t, pid, m) for t, items in PROMPTS.items() for pid, _ in items for m in ALL_LABELS]
    assert _keys(rows) == expected                        # interleaved per prompt, baseline first
    for row in rows:
        assert row["error"] is None, row["error"]
        assert 1 <= row["tokens"] <= 8 * len(row["turns"]) and row["seconds"] > 0
        assert row["tokens"] == sum(len(t["token_ids"]) for t in row["turns"])
        assert (row["stats"] is None) == row["peer"]
        # ours time the prompt's forward apart (the prefill); HF's generate() does not
        if row["peer"]:
            assert row["prompt_seconds"] is None and row["decode_tokens"] is None
        else:
            assert row["prompt_seconds"] == sum(t["prompt_seconds"] for t in row["turns"])
            assert 0 < row["prompt_seconds"] < row["seconds"] and row["decode_tokens"] == row["tokens"]
            assert row["prompt_seconds"] == pytest.approx(row["stats"]["prefill_time"])
        # the conditions of every timing: threads, and the load before and after the row (issue #35)
        assert row["threads"] >= 1 and row["load_average"] >= 0 and row["load_average_after"] >= 0
    chat = [r for r in rows if r["task"] == "chat"]
    assert all(len(r["turns"]) == 2 for r in chat)
    pld = next(r for r in chat if r["method"] == "pld")
    assert pld["stats"]["generated_tokens"] == pld["tokens"]      # stats pooled over both turns
    report = (full_run / REPORT_NAME).read_text()
    assert "## code_edit (2 prompts)" in report and "## chat (2 prompts)" in report
    assert "`hf_prompt_lookup` (HF)" in report and "`sample` (sampled)" in report
    for name in (SPEEDUP_PNG, HISTOGRAM_PNG):
        assert (full_run / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Every line of the file is one complete JSON object.
    assert all(json.loads(line) for line in (full_run / "results.jsonl").read_text().splitlines())


def test_equality_flags_match_token_ids(full_run):
    _, rows = read_results(full_run)
    for row in rows:
        reference = next(r for r in rows if r["method"] == BASELINE and r["prompt_id"] == row["prompt_id"])
        same = [t["token_ids"] for t in row["turns"]] == [t["token_ids"] for t in reference["turns"]]
        if row["method"] == "sample":
            assert row["equal_greedy"] is None
        else:
            assert row["equal_greedy"] is same is True      # lossless at temperature 0: identical to HF greedy


def test_equality_flag_false_and_reported(tiny_folder, tiny_lm, tmp_path):
    """A lossless row that differs from the reference is flagged and called out in the report."""
    from multidraft.eval.bench import ResultsFile, resolve_methods
    config = make_config(tiny_folder, methods=["greedy"], tasks=["code_edit"])
    methods, _ = resolve_methods(config.methods, False)
    item = make_prompts()["code_edit"][0]
    [row] = run_prompt(tiny_lm, None, item, methods[1:], config, reference=[[1, 2, 3]])
    assert row["equal_greedy"] is False
    [row_ok] = run_prompt(tiny_lm, None, item, methods[1:], config, reference=[row["turns"][0]["token_ids"]])
    assert row_ok["equal_greedy"] is True
    results = ResultsFile(tmp_path / "results.jsonl")
    results.start({"kind": "header", "identity": config.identity(), "config": vars(config), "tasks": ["code_edit"],
                   "methods": [vars(m) for m in methods], "created": "t", "runs": []})
    results.append(row)
    report = write_report(tmp_path)
    assert "**0/1 ✗**" in report and "## Lossless outputs that differ from greedy" in report


@pytest.mark.parametrize("gguf_runner", [True, False])
def test_lossless_rows_are_checked_against_our_greedy(tiny_folder, tiny_lm, tmp_path, monkeypatch, gguf_runner):
    """Our lossless methods must give our greedy's tokens (the same model and runner); HF greedy runs the stock HF
    weights, another model than the GGUF's blocks our default CPU runner computes: a difference from it is shown,
    not called a loss. From an HF-folder runner the same difference is a loss."""
    from multidraft.eval import bench_run
    from multidraft.eval.bench import ResultsFile, resolve_methods
    from multidraft.eval.report import analyse, differs_from_greedy
    monkeypatch.setattr(bench_run, "_our_model", lambda lm: "gguf" if gguf_runner else "hf")
    config = make_config(tiny_folder, methods=["pld", "greedy"], tasks=["code_edit"])
    methods, _ = resolve_methods(config.methods, False)
    assert [m.label for m in methods] == ["hf_greedy", "greedy", "pld"]      # our greedy right after the baseline
    item = make_prompts()["code_edit"][0]
    hf_tokens = [[1, 2, 3]]                                                  # what HF's model said: another text
    greedy, pld = run_prompt(tiny_lm, None, item, methods[1:], config, reference=hf_tokens)
    assert greedy["checked_against"] == "hf_greedy" and greedy["equal_greedy"] is False
    assert pld["checked_against"] == "greedy" and pld["equal_greedy"] is True and pld["equal_baseline"] is False
    assert greedy["another_model"] is gguf_runner and pld["another_model"] is False
    assert differs_from_greedy(greedy) is not gguf_runner and not differs_from_greedy(pld)
    # a resumed prompt gets our greedy's tokens from the file: a pld that differs from them is a loss either way
    [bad] = run_prompt(tiny_lm, None, item, methods[2:], config, reference=hf_tokens,
                       greedy_reference=[greedy["turns"][0]["token_ids"][:-1] + [0]])
    assert bad["checked_against"] == "greedy" and differs_from_greedy(bad)
    results = ResultsFile(tmp_path / "results.jsonl")
    results.start({"kind": "header", "identity": config.identity(), "config": vars(config), "tasks": ["code_edit"],
                   "methods": [vars(m) for m in methods], "created": "t", "runs": []})
    for row in (greedy, pld):
        results.append(row)
    header, rows = read_results(tmp_path)
    assert [r["method"] for r in analyse(header, rows)["mismatches"]] == ([] if gguf_runner else ["greedy"])
    report = write_report(tmp_path)
    assert ("0/1 (another model)" in report) is gguf_runner and ("**0/1 ✗**" in report) is not gguf_runner


def test_report_regenerates_identically_from_results_alone(full_run, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(full_run / "results.jsonl", copy / "results.jsonl")
    assert main(["bench", "report", str(copy)]) == 0
    for name in (REPORT_NAME, SPEEDUP_PNG, HISTOGRAM_PNG):
        assert (copy / name).read_bytes() == (full_run / name).read_bytes(), name


KILL_SCRIPT = """
import os, signal, sys, json
os.environ["HF_HUB_OFFLINE"] = "1"
sys.path.insert(0, {root!r})
from tests.test_bench import make_config, make_prompts
from multidraft.eval.bench import run_bench
count = [0]
def on_row(row):
    count[0] += 1
    if count[0] == 3:
        os.kill(os.getpid(), signal.SIGKILL)      # killed right after the third row reached the disk
run_bench(make_config({folder!r}), {out!r}, prompts=make_prompts(), progress=False, on_row=on_row)
"""


def test_resume_after_kill_and_truncated_line(tiny_folder, tiny_lm, full_run, tmp_path):
    out = tmp_path / "killed"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = KILL_SCRIPT.format(root=root, folder=tiny_folder, out=str(out))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    _, before = read_results(out)
    assert len(before) == 3
    kept_lines = (out / "results.jsonl").read_text().splitlines()[1:]
    with open(out / "results.jsonl", "a") as handle:        # a crash in the middle of writing a row
        handle.write('{"kind": "row", "task": "code_edit", "prompt_id": "c0", "meth')

    resumed = []
    run_bench(make_config(tiny_folder), out, prompts=make_prompts(), models=(tiny_lm, None), progress=False,
              on_row=resumed.append)
    _, after = read_results(out)
    _, full = read_results(full_run)
    assert len(resumed) == len(full) - 3                     # done rows are not run again
    assert _keys(after) == _keys(full)                       # no duplicates, nothing missing
    assert (out / "results.jsonl").read_text().splitlines()[1:4] == kept_lines
    deterministic = {k: r["turns"] for k, r in zip(_keys(full), full) if r["method"] != "sample"}
    for key, row in zip(_keys(after), after):
        if key in deterministic:
            assert [t["token_ids"] for t in row["turns"]] == [t["token_ids"] for t in deterministic[key]]
        assert row["method"] == "sample" or row["equal_greedy"] is True
    first = (out / REPORT_NAME).read_text()
    assert write_report(out) == first                        # the resumed report regenerates identically


def test_compatible_folder_adds_only_new_methods(tiny_folder, tiny_lm, full_run, tmp_path):
    out = tmp_path / "grow"
    shutil.copytree(full_run, out)
    new_rows = []
    run_bench(make_config(tiny_folder, methods=METHODS + ["beam"], limit=1), out, prompts=make_prompts(),
              models=(tiny_lm, None), progress=False, on_row=new_rows.append)
    assert [(r["prompt_id"], r["method"]) for r in new_rows] == [("c0", "beam"), ("m0", "beam")]
    header, rows = read_results(out)
    assert len(rows) == 4 * 5 + 2 and len(header["runs"]) == 2
    assert "`beam` ⚠ lossy" in (out / REPORT_NAME).read_text()


def test_folder_of_another_configuration_is_refused(tiny_folder, full_run, capsys):
    before = (full_run / "results.jsonl").read_bytes()
    with pytest.raises(BenchConfigError, match="another configuration .*max_new_tokens: 8 there, 9 now"):
        run_bench(make_config(tiny_folder, max_new_tokens=9), full_run, prompts=make_prompts(), progress=False)
    assert main(["bench", "--model", tiny_folder, "--tasks", "code_edit", "--methods", "greedy",
                 "--max-new-tokens", "9", "--out", str(full_run), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("multidraft: error:") and "another configuration" in err[-1]
    assert (full_run / "results.jsonl").read_bytes() == before


def test_not_a_results_file_and_corrupt_middle_line(tmp_path):
    (tmp_path / "results.jsonl").write_text('{"kind": "row"}\n')
    with pytest.raises(BenchConfigError, match="no header"):
        read_results(tmp_path)
    (tmp_path / "results.jsonl").write_text('{"kind": "header"}\nnot json\n{"kind": "row"}\n')
    with pytest.raises(BenchConfigError, match="line 2 is not valid JSON"):
        read_results(tmp_path)
    with pytest.raises(BenchConfigError, match="no bench results"):
        read_results(tmp_path / "missing")


@pytest.mark.parametrize("argv, message", [
    (["--tasks", "nope"], "unknown task 'nope'"),
    (["--methods", "greedy,warp"], "unknown method 'warp'"),
    (["--methods", "speculative"], "needs a draft model; pass --draft"),
    (["-o", "pld.bogus=1"], "has no option 'bogus'"),
    (["-o", "pld=1"], "METHOD.NAME=VALUE"),
    (["--max-new-tokens", "0"], "max_new_tokens must be a positive integer"),
])
def test_bad_input_is_one_line_exit_2(tiny_folder, tmp_path, capsys, argv, message):
    code = main(["bench", "--model", tiny_folder, "--out", str(tmp_path / "o"), "--no-progress"] + argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and message in err[-1] and err[-1].startswith("multidraft: error:")
    assert not (tmp_path / "o").exists()


def test_all_skips_draft_methods_without_draft():
    from multidraft.eval.bench import resolve_methods
    from multidraft.methods import available_methods
    methods, skipped = resolve_methods(["all"], has_draft=False)
    labels = [m.label for m in methods]
    assert labels[0] == BASELINE and "hf_prompt_lookup" in labels and "hf_assisted" not in labels
    assert skipped["hf_assisted"] == "needs --draft"
    for name, spec in available_methods().items():
        assert any(m.name == name for m in methods) or name in skipped
    with pytest.raises(UnknownMethodError):
        resolve_methods(["greedy", "nope"], has_draft=False)
    with pytest.raises(InvalidOptionError, match="not among the methods"):
        resolve_methods(["greedy"], has_draft=False, overrides={"pld": {"num_draft_tokens": 4}})


def test_summary_numbers():
    """Speedup is the per-prompt tok/s ratio to the baseline; acceptance length is pooled over prompts."""
    base = {"p0": {"tokens_per_second": 10.0}, "p1": {"tokens_per_second": 20.0}, "p2": {"tokens_per_second": 5.0}}
    stats = lambda gen, calls, prop, acc: {"generated_tokens": gen, "verification_calls": calls,  # noqa: E731
                                           "proposed_per_position": prop, "accepted_per_position": acc,
                                           "acceptance_histogram": {"1": 1}}
    rows = [{"prompt_id": "p0", "tokens": 10, "seconds": 0.5, "tokens_per_second": 20.0, "stats": stats(10, 5, [4, 2], [2, 1]),
             "equal_greedy": True, "error": None, "turns": [{}]},
            {"prompt_id": "p1", "tokens": 10, "seconds": 1.0, "tokens_per_second": 10.0, "stats": stats(10, 10, [4], [0]),
             "equal_greedy": False, "error": None, "turns": [{}]},
            {"prompt_id": "p2", "tokens": 10, "seconds": 1.0, "tokens_per_second": 10.0, "stats": stats(10, 5, [], []),
             "equal_greedy": True, "error": None, "turns": [{}]}]
    s = summarize(rows, {"lossless": True}, base)
    assert s["speedup"] == (0.5, 2.0, 2.0)
    assert s["mal"] == 30 / 20 and s["per_position"] == [2 / 8, 1 / 2]
    assert s["equal"] == (2, 3) and s["tok_s"] == 30 / 2.5
    assert s["matched_speedup"] is None
    assert s["prompt_s"] is None and s["decode_tok_s"] is None          # rows that do not split their time
    rows[0].update(prompt_seconds=0.25, decode_tokens=9)
    rows[1].update(prompt_seconds=0.5, decode_tokens=10)
    s = summarize(rows, {"lossless": True}, base)
    assert s["prompt_s"] == 0.375 and s["decode_tok_s"] == 19 / 0.75    # the third row has no split: left out


def test_matched_prompts_leave_out_every_prompt_where_a_lossless_row_diverged():
    """The matched-prompts median uses only prompts where all greedy lossless rows did the baseline's work."""
    from multidraft.eval.report import analyse
    header = {"tasks": ["t"], "methods": [{"label": BASELINE, "lossless": True}, {"label": "a", "lossless": True},
                                          {"label": "b", "lossless": True}]}
    speeds = {("p0", BASELINE): 10, ("p0", "a"): 30, ("p0", "b"): 20, ("p1", BASELINE): 10, ("p1", "a"): 15,
              ("p1", "b"): 40, ("p2", BASELINE): 10, ("p2", "a"): 25, ("p2", "b"): 20}
    rows = [{"task": "t", "prompt_id": p, "method": m, "tokens": 8, "seconds": 8 / v, "tokens_per_second": v,
             "error": None, "lossless": True, "temperature": 0.0, "turns": [{}], "stats": None,
             "equal_greedy": not (p == "p1" and m == "b")} for (p, m), v in speeds.items()]
    summaries = analyse(header, rows)["tasks"]["t"]
    assert summaries["a"]["matched_speedup"] == (2.75, 2)       # p0 and p2: b diverged on p1
    assert summaries["b"]["matched_speedup"] == (2.0, 2)
    assert summaries["b"]["speedup"][1] == 2.0 and summaries["b"]["speedup"][2] == 4.0


def test_superposed_sweep_latency_plot_and_draft_quality(tiny_folder, tiny_lm, tmp_path):
    """superposed is swept over k on autocomplete only; its drafts get Self-BLEU and best-of-k perplexity."""
    from multidraft.eval.bench import SPD_K_VALUES
    from multidraft.eval.report import SPD_PNG
    prompts = {**make_prompts(), "autocomplete": [TaskPrompt("a0", "autocomplete", prompt="the cat sat on"),
                                                  TaskPrompt("a1", "autocomplete", prompt="def x ( y ) :")]}
    config = make_config(tiny_folder, tasks=["code_edit", "autocomplete"], methods=["superposed", "sample"], limit=1,
                         options={"superposed": {"alpha": 0}})          # no n-gram model for the tiny vocabulary
    run_bench(config, tmp_path, prompts=prompts, models=(tiny_lm, None), progress=False)
    _, rows = read_results(tmp_path)
    spd = [r for r in rows if r["name"] == "superposed"]
    assert {r["task"] for r in spd} == {"autocomplete"}
    assert sorted({r["options"]["num_drafts"] for r in spd}) == list(SPD_K_VALUES)
    for row in spd:
        assert row["error"] is None, row["error"]
        drafts = row["turns"][0]["drafts"]
        assert len(drafts) == row["options"]["num_drafts"]
        assert row["turns"][0]["best_of_k_perplexity"] == min(d["perplexity"] for d in drafts)
    report = (tmp_path / REPORT_NAME).read_text()
    assert "`superposed[num_drafts=3]` ⚠ lossy" in report and "best of k" in report
    assert (tmp_path / SPD_PNG).read_bytes()[:4] == b"\x89PNG"


def test_draft_methods_and_hf_assisted_with_draft(tiny_folder, tiny_lm, tmp_path):
    """--draft feeds draft_model= to registry methods and assistant_model= to HF; both stay equal to greedy."""
    config = make_config(tiny_folder, draft=tiny_folder, tasks=["code_edit"], methods=["speculative", "hf_assisted"],
                         limit=1)
    run_bench(config, tmp_path, prompts=make_prompts(), models=(tiny_lm, tiny_lm), progress=False)
    _, rows = read_results(tmp_path)
    assert [r["method"] for r in rows] == [BASELINE, "speculative", "hf_assisted"]
    for row in rows:
        assert row["error"] is None and row["equal_greedy"] is True, row["error"]
    assert rows[1]["stats"]["draft_calls"] > 0


def test_attention_switch_restores_the_kernel(tiny_lm):
    """Both PLD+ rankers run on the default kernel; a method's kernel switch is undone even when it fails."""
    from multidraft.eval.bench import attention_implementation, resolve_methods
    methods, _ = resolve_methods(["pld_plus"], has_draft=False)
    assert {m.label: m.attention for m in methods} == {
        BASELINE: None, "pld_plus[rank_by=hidden]": None, "pld_plus[rank_by=attention]": None}
    before = tiny_lm.attn_implementation
    with pytest.raises(RuntimeError):
        with attention_implementation(tiny_lm, "eager"):
            assert tiny_lm.attn_implementation == "eager"
            raise RuntimeError("a failing method")
    assert tiny_lm.attn_implementation == before


def test_failed_rows_are_run_again_on_resume(tiny_folder, tiny_lm, full_run, tmp_path):
    out = tmp_path / "failed"
    out.mkdir()
    lines = (full_run / "results.jsonl").read_text().splitlines()
    broken = json.loads(lines[3])
    broken.update(error="RuntimeError: boom", equal_greedy=None)
    lines[3] = json.dumps(broken)
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    rerun = []
    run_bench(make_config(tiny_folder), out, prompts=make_prompts(), models=(tiny_lm, None), progress=False,
              on_row=rerun.append)
    assert [(r["task"], r["prompt_id"], r["method"]) for r in rerun] == [(broken["task"], broken["prompt_id"],
                                                                         broken["method"])]
    _, rows = read_results(out)
    assert sorted(_keys(rows)) == sorted(_keys(read_results(full_run)[1]))
    assert all(r["error"] is None for r in rows)


def test_our_greedy_as_the_baseline(tiny_folder, tiny_lm, tmp_path):
    """--baseline greedy: our greedy runs first and is what equality and speedups are measured against; no HF row."""
    from multidraft.eval.bench import resolve_methods
    from multidraft.eval.demo_table import demo_table
    config = make_config(tiny_folder, methods=["pld", "greedy"], tasks=["code_edit"], baseline="greedy")
    run_bench(config, tmp_path, prompts=make_prompts(), models=(tiny_lm, None), progress=False)
    header, rows = read_results(tmp_path)
    assert header["config"]["baseline"] == "greedy"
    assert [r["method"] for r in rows] == ["greedy", "pld"] * 2 and all(r["equal_greedy"] for r in rows)
    # The reference is the greedy row's tokens: a pld row checked against a changed reference is flagged.
    greedy_turns = {r["prompt_id"]: r["turns"][0]["token_ids"] for r in rows if r["method"] == "greedy"}
    item = make_prompts()["code_edit"][0]
    pld = [m for m in resolve_methods(["pld"], False, baseline="greedy")[0] if m.name == "pld"]
    [bad] = run_prompt(tiny_lm, None, item, pld, config, reference=[greedy_turns[item.id][:-1] + [0]])
    assert bad["equal_greedy"] is False
    report = (tmp_path / REPORT_NAME).read_text()
    assert "median speedup over our greedy" in report and "baseline `greedy` = our greedy" in report
    table = demo_table(rows, "greedy").splitlines()
    assert table[0].startswith("| method | tok/s | vs greedy | acceptance length")
    assert "the output equals our greedy's" in table[-1]


def test_unknown_baseline_is_refused(tiny_folder):
    with pytest.raises(InvalidOptionError, match="unknown baseline 'llama'; choose from: hf_greedy, greedy"):
        make_config(tiny_folder, baseline="llama").validate()
