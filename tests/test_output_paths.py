"""Output paths and early refusals: a file never replaces a folder (and its files), a place that takes no file is
refused before the work with a one-line error, and option values that cannot work are refused before a model
loads (found by a bad-input sweep of the command line, 2026-12-03)."""

import os
import subprocess
import sys

import pytest

from multidraft.cli import main as cli_main
from multidraft.errors import InvalidOptionError, ModelNotFoundError, OutputPathError
from multidraft.fsutil import atomic_path, check_output_file

NOT_A_MODEL = "no-such-model-alias-xyz"        # a run that got past the early checks would fail on this name


def _folder_with_a_file(tmp_path):
    folder = tmp_path / "results"
    (folder / "sub").mkdir(parents=True)
    (folder / "keep.txt").write_text("precious")
    return folder


def test_a_file_never_replaces_a_folder(tmp_path):
    folder = _folder_with_a_file(tmp_path)
    with pytest.raises(OutputPathError, match="existing folder"):
        with atomic_path(folder) as target:
            target.write_text("new")
    assert (folder / "keep.txt").read_text() == "precious" and (folder / "sub").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]          # no temporary, no aside copy left


def test_a_folder_still_replaces_a_folder(tmp_path):
    folder = _folder_with_a_file(tmp_path)
    with atomic_path(folder) as target:
        target.mkdir()
        (target / "new.txt").write_text("new")
    assert sorted(p.name for p in folder.iterdir()) == ["new.txt"]


def test_check_output_file(tmp_path):
    folder = _folder_with_a_file(tmp_path)
    with pytest.raises(OutputPathError, match="existing folder"):
        check_output_file(folder, "--json")
    with pytest.raises(OutputPathError, match="cannot be written"):
        check_output_file(folder / "keep.txt" / "under_a_file.json", "--json")
    with pytest.raises(OutputPathError, match="empty path"):
        check_output_file("", "--json")
    fresh = tmp_path / "new" / "deeper" / "out.json"
    assert check_output_file(fresh, "--json") == fresh
    assert list(fresh.parent.iterdir()) == []                                # the probe leaves nothing
    with pytest.raises(OutputPathError, match="cannot be written"):
        with atomic_path(folder / "keep.txt" / "x.json") as target:
            target.write_text("{}")


def _run(argv, capsys):
    code = cli_main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("extra, match", [
    (["--reps", "0"], "--reps must be an integer >= 1"),
    (["--prefix", "-5"], "--prefix must be an integer >= 0"),
    (["--threads", "0"], "--threads must be a positive integer, at most"),
    (["--dtype", "bogus"], "--dtype must be float32"),
    (["--json", "FOLDER"], "is an existing folder"),
])
def test_forward_cost_refuses_bad_values_before_loading(extra, match, tmp_path, capsys):
    extra = [str(_folder_with_a_file(tmp_path)) if e == "FOLDER" else e for e in extra]
    code, err = _run(["bench", "forward-cost", "--model", NOT_A_MODEL, "--no-bandwidth", *extra], capsys)
    assert code == 2 and match in err and "Traceback" not in err


def test_forward_cost_random_weights_need_an_hf_runner(capsys):
    code, err = _run(["bench", "forward-cost", "--random", "qwen2.5-1.5b", "--runners", "quantized-q8"], capsys)
    assert code == 2 and "only the eager and fast runners" in err


def test_stage_timer_without_the_kernels_times_nothing():
    # a fresh process where no GGUF runner ever loaded the kernels (an eager-only forward-cost run)
    code = ("import torch; from multidraft.eval import forward_cost\n"
            "assert not hasattr(torch.ops.multidraft_gguf, 'stage_times')\n"
            "with forward_cost.stage_timer() as spent: pass\n"
            "print(sorted(spent.items()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[('attention', 0.0), ('layer steps', 0.0), ('linears', 0.0)]"


def test_generate_refuses_json_with_stream_and_an_empty_prompt_before_loading(capsys):
    code, err = _run(["generate", "--model", NOT_A_MODEL, "--json", "--stream", "def f(x):"], capsys)
    assert code == 2 and "--json and --stream cannot go together" in err
    code, err = _run(["generate", "--model", NOT_A_MODEL, ""], capsys)
    assert code == 2 and "the prompt is empty" in err


def test_threads_have_a_ceiling_and_argparse_says_why(capsys):
    from multidraft.models import threads
    with pytest.raises(SystemExit):
        cli_main(["generate", "--model", NOT_A_MODEL, "--threads", str(threads.max_threads() + 1), "x"])
    err = capsys.readouterr().err
    assert f"at most {threads.max_threads()}" in err and "parse_threads" not in err


def test_bench_out_that_takes_no_file_fails_before_the_model(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    code, err = _run(["bench", "--model", NOT_A_MODEL, "--tasks", "code_edit", "--methods", "pld", "--limit", "1",
                      "--out", ""], capsys)
    assert code == 2 and "--out is empty" in err
    with pytest.raises(OutputPathError, match="cannot be written"):
        from multidraft.fsutil import check_output_folder
        check_output_folder(str(blocker / "below"), "--out")


def test_bench_paired_on_a_missing_folder(tmp_path, capsys):
    code, err = _run(["bench", "paired", str(tmp_path / "never_ran")], capsys)
    assert code == 2 and "no bench results at" in err and "Traceback" not in err


@pytest.mark.parametrize("content, match", [(b"", "is empty"), (b"NOTGGUF" + bytes(300), "magic bytes")])
def test_a_file_that_is_not_gguf_is_refused(content, match, tmp_path):
    from multidraft.models.pulling import check_gguf_file
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelNotFoundError, match=match):
        check_gguf_file(path)
    with pytest.raises(ModelNotFoundError, match="is not a file"):
        check_gguf_file(tmp_path)


def test_suffix_store_folder_that_takes_no_file_is_refused_at_start(tmp_path):
    from multidraft.suffix.registry import StoreRegistry
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(OutputPathError, match="cannot be written"):
        StoreRegistry(1000, False).load(blocker / "stores", lm=None)
    fresh = tmp_path / "stores"
    assert StoreRegistry(1000, False).load(fresh, lm=None) == 0 and fresh.is_dir()


def test_check_quantized_bits_folder_errors(tmp_path, capsys):
    code, err = _run(["check", "quantized-bits", "check", str(tmp_path / "missing")], capsys)
    assert code == 2 and "is not a folder" in err
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    code, err = _run(["check", "quantized-bits", "write", str(blocker / "below")], capsys)
    assert code == 2 and "cannot be written" in err
    assert not os.path.exists(blocker / "below")


def test_heads_and_ngram_readers_say_a_folder_is_not_their_file(tmp_path):
    from multidraft.blockwise.heads_store import read_meta
    from multidraft.errors import DataNotFoundError
    from multidraft.ngram.fileformat import read_header
    with pytest.raises(ModelNotFoundError, match="is a folder, not a heads file"):
        read_meta(tmp_path)
    with pytest.raises(DataNotFoundError, match="is a folder, not an n-gram file"):
        read_header(tmp_path)


@pytest.mark.parametrize("extra, match", [(["--batches", "abc"], "--batches takes positive integers"),
                                          (["--batches", "4,0"], "--batches takes positive integers"),
                                          (["--prompts", "0"], "--prompts must be a positive integer")])
def test_check_batch_bits_refuses_bad_values_before_loading(extra, match, capsys):
    code, err = _run(["check", "batch-bits", "--model", NOT_A_MODEL, *extra], capsys)
    assert code == 2 and match in err
