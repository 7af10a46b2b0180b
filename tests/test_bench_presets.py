"""`multidraft bench <preset>`, `bench micro`, `bench serve` and `multidraft check`: every preset's options parse
(with the shared model / dtype / runner / threads / device options and their library defaults), bad options are
one line and exit 2, and the cheap presets run end to end on the tiny random model of test_bench. No timings are
asserted: only what the runs print and write, and that lossless rows give greedy's tokens."""

import json

import pytest

from multidraft.cli import main
from multidraft.eval import presets
from multidraft.eval.bench import run_bench
from tests.installed import require_quantized_kernels
from tests.test_bench import make_config, make_prompts, tiny_folder  # noqa: F401  (fixture)

# The least each preset needs on its command line (a positional, a required --out, a sub-command).
REQUIRED = {
    ("", "agentic"): ["collect", "--out", "OUT"],
    ("", "pld_plus_replay"): ["replay", "--data", "DIR"],
    ("", "paired"): ["DIR"],
    ("", "quantized_e2e"): ["--out", "OUT"],
    ("", "static_graphs"): ["--out", "OUT"],
    ("serve", "load"): ["--url", "http://127.0.0.1:1"],
    ("check", "gpu"): ["--out", "OUT"],
    ("check", "quantized-bits"): ["write", "DIR"],
}
ALL = [(group, name) for group, names in presets.GROUPS.items() for name in names]


@pytest.mark.parametrize("group,name", ALL, ids=[f"{g or 'bench'}:{n}" for g, n in ALL])
def test_every_preset_parses_with_the_shared_defaults(group, name):
    args = presets.parse(group, name, REQUIRED.get((group, name), []))
    # The shared options keep the library's defaults wherever a preset has them.
    assert getattr(args, "dtype", "auto") == "auto"
    assert getattr(args, "threads", None) is None
    if (group, name) != ("check", "batch-bits"):        # that check's point is the eager runner: it says so
        assert getattr(args, "runner", "auto") == "auto"
    assert getattr(args, "device", None) is None
    assert callable(presets.module(group, name).run)


@pytest.mark.parametrize("argv", [["bench", "foundation", "--bogus"], ["bench", "micro", "ngram", "--vocab", "x"],
                                  ["check", "quantized-bits", "read", "DIR"], ["bench", "foundation", "--dtype", "fp8"]])
def test_bad_preset_options_are_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error" in err


def test_group_without_a_name_prints_its_presets(capsys):
    assert main(["bench", "micro"]) == 2
    out = capsys.readouterr().out
    assert all(name in out for name in ("forward-cost", "kernels", "ngram", "selection"))
    assert main(["check"]) == 2 and "quantized-bits" in capsys.readouterr().out


def test_forward_cost_keeps_its_old_name():
    from multidraft.cli import build_parser
    parser = build_parser()
    old = parser.parse_args(["bench", "forward-cost", "--linear"])
    new = parser.parse_args(["bench", "micro", "forward-cost", "--linear"])
    assert old.func is new.func and old.linear and new.linear


def test_main_bench_still_runs_without_a_preset():
    from multidraft.cli import build_parser
    args = build_parser().parse_args(["bench", "--limit", "1"])
    assert args.bench_command is None and args.limit == 1


# ----------------------------------------------------------------------------- end to end, tiny model


def run_cli(argv, capsys) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_foundation_rows_equal_hf_greedy(tiny_folder, capsys):
    out = run_cli(["bench", "foundation", "--model", tiny_folder, "--prompts", "2", "--max-new-tokens", "6"], capsys)
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert {"hf_greedy", "greedy", "hf_prompt_lookup", "pld"} <= set(rows)
    assert all(rows[m].rstrip().endswith("| 2/2 |") for m in ("greedy", "hf_prompt_lookup", "pld"))


def test_pld_plus_and_suffix_rows_equal_greedy(tiny_folder, tmp_path, capsys):
    run_cli(["bench", "pld_plus", "--model", tiny_folder, "--tasks", "code_edit", "--prompts", "1",
             "--max-new-tokens", "6", "--methods", "greedy,pld,pld_reference,hf_pld", "--out",
             str(tmp_path / "pld.json")], capsys)
    rows = json.loads((tmp_path / "pld.json").read_text())["rows"]
    assert {r["method"] for r in rows} == {"greedy", "pld", "pld_reference", "hf_pld"} and all(r["equal"] for r in rows)
    run_cli(["bench", "suffix", "--model", tiny_folder, "--requests", "2", "--max-new-tokens", "6", "--workloads",
             "edit_module,agent_loop", "--methods", "greedy,suffix,pld", "--out", str(tmp_path / "suffix.json")], capsys)
    rows = json.loads((tmp_path / "suffix.json").read_text())["rows"]
    assert len(rows) == 2 * 2 * 3 and all(r["equal"] for r in rows)


def test_draft_model_rows(tiny_folder, tmp_path, capsys):
    path = tmp_path / "draft.json"
    run_cli(["bench", "draft_model", "--model", tiny_folder, "--draft", tiny_folder, "--prompts", "2",
             "--max-new-tokens", "6", "--methods", "greedy,speculative,multi_draft2,hf_assisted", "--json", str(path)],
            capsys)
    results = json.loads(path.read_text())["results"]
    assert all(results[m]["equal"] == 2 for m in ("greedy", "speculative", "multi_draft2", "hf_assisted"))


def test_runners_and_batch_offline(tiny_folder, tmp_path, capsys):
    out = run_cli(["bench", "runners", "--model", tiny_folder, "--prompts", "1", "--tokens", "6", "--runners",
                   "eager"], capsys)
    rows = [line for line in out.splitlines() if line.startswith("| greedy [eager]") or line.startswith("| pld [eager]")]
    assert len(rows) == 2 and all(line.rstrip().endswith("| yes |") for line in rows)
    path = tmp_path / "batch.json"
    run_cli(["bench", "batch_offline", "--model", tiny_folder, "--prompts", "3", "--max-tokens", "6", "--methods",
             "greedy", "--batch", "2", "--no-hf", "--json", str(path)], capsys)
    rows = json.loads(path.read_text())["rows"]
    assert [r["row"] for r in rows] == ["one_by_one", "generate_batch/2"] and all(r["tokens"] > 0 for r in rows)


def test_paired_reads_a_bench_folder(tiny_folder, tmp_path, capsys):
    run_bench(make_config(tiny_folder), tmp_path, prompts=make_prompts(), progress=False)
    out = run_cli(["bench", "paired", str(tmp_path), "--method", "pld", "--against", "greedy,hf_prompt_lookup"], capsys)
    assert "pld" in out and "hf_prompt_lookup" in out and "code_edit" in out


def test_paired_measures_against_the_runs_own_baseline(tiny_folder, tmp_path, capsys):
    """A run with `--baseline greedy` has no hf_greedy rows: paired divides by its greedy (it once divided by zero)."""
    run_bench(make_config(tiny_folder, methods=["greedy", "pld"], baseline="greedy"), tmp_path, prompts=make_prompts(),
              progress=False)
    out = run_cli(["bench", "paired", str(tmp_path), "--method", "pld", "--against", "greedy"], capsys)
    greedy_line = next(line for line in out.splitlines() if "| `greedy` |" in line)
    assert greedy_line.split("|")[3].strip().startswith("1.00x")   # the baseline over itself
    with pytest.raises(SystemExit, match="never ran: hf_prompt_lookup"):
        main(["bench", "paired", str(tmp_path), "--method", "pld", "--against", "hf_prompt_lookup"])


def test_micro_selection_ngram_and_suffix_draft(tiny_folder, tmp_path, capsys):
    out = run_cli(["bench", "micro", "selection", "--vocab", "300", "--calls", "1", "--rounds", "1"], capsys)
    assert "specinfer" in out and "non-identical" in out
    path = tmp_path / "ngram.json"
    run_cli(["bench", "micro", "ngram", "--random-tokens", "30000", "--vocab", "300", "--max-order", "6",
             "--repeats", "20", "--out", str(tmp_path / "t.ngram"), "--json", str(path)], capsys)
    assert path.is_file() and json.loads(path.read_text())
    out = run_cli(["bench", "micro", "suffix-draft", "--tokenizer", tiny_folder, "--store-functions", "4",
                   "--runs", "2"], capsys)
    assert "store:" in out


def test_checks_on_the_cpu(tiny_folder, tmp_path, capsys):
    out = run_cli(["check", "batch-bits", "--model", tiny_folder, "--prompts", "1", "--max-new-tokens", "4",
                   "--batches", "2"], capsys)
    assert "identical" in out and "greedy batch 2" in out
    out = run_cli(["check", "engine-cuda", "--device", "cpu"], capsys)
    assert "summary:" in out and "200/200 equal" in out
    run_cli(["check", "gpu", "--device", "cpu", "--model", "tiny-random", "--dtypes", "float32", "--prompts", "1",
             "--max-new-tokens", "4", "--skip", "forward,kernels,sampling,cudnn", "--out", str(tmp_path / "gpu")],
            capsys)
    report = json.loads((tmp_path / "gpu" / "gpu_check.json").read_text())
    methods = report["runs"][0]["methods"]
    assert methods["greedy"][0]["equal_greedy"] and methods["pld"][0]["equal_greedy"]


def test_quantized_bits_write_then_check(tmp_path, capsys):
    require_quantized_kernels()
    run_cli(["check", "quantized-bits", "write", str(tmp_path)], capsys)
    out = run_cli(["check", "quantized-bits", "check", str(tmp_path)], capsys)
    models = [json.loads(line) for line in out.splitlines() if line.startswith('{"model"')]
    assert len(models) == len(presets.module("check", "quantized-bits").MODELS)
    assert all(m["chain_equals_singles"] and m["tree_equals_singles"] for m in models)


def test_foundation_table_counts_a_row_that_differs(capsys):
    """Negative control of the equality column the end-to-end test reads: a differing row is counted, not assumed."""
    from multidraft.eval.presets import foundation
    row = lambda equal: {m: {"tokens": 4, "seconds": 1.0, "mal": 1.0, "equal": equal}
                         for m in ("hf_greedy", "greedy", "hf_prompt_lookup", "pld")}
    rows = [row(True), row(True)]
    rows[1]["pld"]["equal"] = False
    foundation.print_summary(rows)
    table = {line.split("|")[1].strip(): line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
    assert table["pld"].rstrip().endswith("| 1/2 |") and table["greedy"].rstrip().endswith("| 2/2 |")
