"""User mistakes give a MultidraftError subclass with a message that says what to do."""

import pytest
import torch

import multidraft
from multidraft.cli import main as cli_main
from multidraft.errors import (InvalidOptionError, MultidraftError, NumericalError, PromptError,
                               UnknownMethodError)


def test_empty_prompt(tiny_llama):
    with pytest.raises(PromptError, match="empty"):
        multidraft.generate(tiny_llama, "")
    with pytest.raises(PromptError):
        multidraft.generate(tiny_llama, [])


def test_prompt_longer_than_context(tiny_llama):
    with pytest.raises(PromptError, match="context"):
        multidraft.generate(tiny_llama, "the " * 300, max_new_tokens=4)
    with pytest.raises(PromptError, match="max_new_tokens"):
        multidraft.generate(tiny_llama, "the cat " * 100, max_new_tokens=100)


@pytest.mark.parametrize("value", [0, -3, 2.5, "10"])
def test_bad_max_new_tokens(tiny_llama, value):
    with pytest.raises(InvalidOptionError, match="max_new_tokens"):
        multidraft.generate(tiny_llama, "the cat", max_new_tokens=value)


@pytest.mark.parametrize("kwargs,match", [
    ({"temperature": -0.5}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": 1.0, "top_p": 0.0}, "top_p"),
    ({"temperature": 1.0, "top_p": 1.5}, "top_p"),
    ({"temperature": 1.0, "top_k": -1}, "top_k"),
])
def test_bad_sampling_params(tiny_llama, kwargs, match):
    with pytest.raises(InvalidOptionError, match=match):
        multidraft.generate(tiny_llama, "the cat", method="sample", **kwargs)


def test_unknown_method_and_option(tiny_llama):
    with pytest.raises(UnknownMethodError, match="choose one of"):
        multidraft.generate(tiny_llama, "the cat", method="telepathy")
    with pytest.raises(InvalidOptionError, match="no option 'num_draft'"):
        multidraft.generate(tiny_llama, "the cat", method="pld", num_draft=3)
    with pytest.raises(InvalidOptionError, match="num_draft_tokens"):
        multidraft.generate(tiny_llama, "the cat", method="pld", num_draft_tokens=0)
    with pytest.raises(InvalidOptionError, match="variant"):
        multidraft.generate(tiny_llama, "the cat", method="pld", variant="fuzzy")
    with pytest.raises(InvalidOptionError, match="temperature > 0"):
        multidraft.generate(tiny_llama, "the cat", method="sample", temperature=0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_or_inf_logits(bad):
    from tests.tiny_models import make_tiny_lm
    lm = make_tiny_lm("llama", seed=4)
    with torch.no_grad():
        lm.model.lm_head.weight[3, 0] = bad
    for method in ("greedy", "pld"):
        with pytest.raises(NumericalError, match="NaN or infinite"):
            multidraft.generate(lm, "the cat sat", method=method, max_new_tokens=4)


def test_bad_messages(tiny_llama):
    with pytest.raises(PromptError):
        multidraft.generate(tiny_llama, [{"text": "hi"}])
    with pytest.raises(PromptError, match="chat template"):
        multidraft.generate(tiny_llama, [{"role": "user", "content": "hi"}])


def test_errors_are_multidraft_errors():
    for cls in (InvalidOptionError, NumericalError, PromptError, UnknownMethodError):
        assert issubclass(cls, MultidraftError)


def test_cli_prints_one_line_and_exits_nonzero(capsys):
    assert cli_main(["generate", "--method", "nope", "hello"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("multidraft: error: unknown method") and err.count("\n") == 1
    assert cli_main(["generate", "--method", "pld", "-o", "bogus=1", "hello"]) == 2
    assert "no option 'bogus'" in capsys.readouterr().err
    assert cli_main(["generate", "--model", "no-such-model-anywhere", "hello"]) == 2
    assert "no-such-model-anywhere" in capsys.readouterr().err


# ---------------------------------------------------------------- issue #16: every class of bad input is a typed error

import math
import os
import subprocess
import sys

from multidraft import validation
from multidraft.errors import ModelNotFoundError


@pytest.mark.parametrize("ids", [[10 ** 6], [-1], [2 ** 63], [3, True], [3, 2 ** 64]])
def test_token_ids_outside_the_vocabulary(tiny_llama, ids):
    ids = [tiny_llama.vocab_size if t == 10 ** 6 else t for t in ids]
    with pytest.raises(PromptError, match="vocabulary"):
        multidraft.generate(tiny_llama, ids, max_new_tokens=2)


def test_token_ids_at_the_edges_of_the_vocabulary_work(tiny_llama):
    out = multidraft.generate(tiny_llama, [0, tiny_llama.vocab_size - 1], max_new_tokens=2)
    assert len(out.token_ids) == 2


@pytest.mark.parametrize("model", ["smollm2-135m", os.path.join("some", "folder")])
def test_generate_with_a_model_name_says_load_it_first(model):
    with pytest.raises(InvalidOptionError, match=r"multidraft.load_model\(.*\) first"):
        multidraft.generate(model, "the cat")


@pytest.mark.parametrize("model", [None, 3, ["smollm2-135m"]])
def test_load_model_with_a_non_name(model):
    with pytest.raises(InvalidOptionError, match="alias, a path or an HF id"):
        multidraft.load_model(model)


def test_load_model_with_an_invalid_utf8_name():
    with pytest.raises(ModelNotFoundError, match="invalid UTF-8"):
        multidraft.load_model("smollm\udcff")


@pytest.mark.parametrize("kwargs,match", [
    ({"temperature": 1e-300}, "temperature must be 0 \\(greedy\\) or at least"),
    ({"temperature": 1e-3}, "temperature must be 0 \\(greedy\\) or at least"),
    ({"temperature": float("inf")}, "temperature"),
    ({"temperature": -math.inf}, "temperature"),
    ({"temperature": True}, "temperature"),
    ({"temperature": "0.7"}, "temperature"),
    ({"top_p": float("nan")}, "top_p"),
    ({"top_p": float("inf")}, "top_p"),
    ({"top_k": True}, "top_k"),
    ({"top_k": 2.0}, "top_k"),
    ({"seed": "a"}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"seed": True}, "seed"),
    ({"seed": 2 ** 64}, "seed"),
    ({"stop": 5}, "stop"),
    ({"stop": ["ok", 5]}, "stop"),
    ({"stop": [""]}, "stop"),
    ({"stop": "\ud800"}, "stop"),
    ({"max_new_tokens": True}, "max_new_tokens"),
    ({"chat": "yes"}, "chat"),
    ({"on_token": 5}, "on_token"),
    ({"method": 5}, "method"),
])
def test_bad_generate_arguments(tiny_llama, kwargs, match):
    kwargs = {"method": "sample", "temperature": 1.0, "max_new_tokens": 2, **kwargs}
    with pytest.raises(InvalidOptionError, match=match):
        multidraft.generate(tiny_llama, "the cat", **kwargs)


def test_tiny_top_p_keeps_the_most_likely_token(tiny_llama):
    """top_p = 1e-300 rounds to 0 in float32; it used to drop every token (NaN probabilities)."""
    greedy = multidraft.generate(tiny_llama, "the cat sat", max_new_tokens=6)
    for top_p in (1e-300, 1e-9):
        tiny = multidraft.generate(tiny_llama, "the cat sat", method="sample", temperature=1.0, top_p=top_p, seed=3,
                                   max_new_tokens=6)
        assert tiny.token_ids == greedy.token_ids


def test_the_temperature_floor_keeps_the_math_finite(tiny_llama):
    out = multidraft.generate(tiny_llama, "the cat sat", method="sample", temperature=validation.MIN_TEMPERATURE,
                              seed=1, max_new_tokens=6)
    assert len(out.token_ids) == 6


def test_greedy_with_a_temperature_samples_and_says_so(tiny_llama):
    sampled = multidraft.generate(tiny_llama, "the cat sat", method="greedy", temperature=1.0, seed=5,
                                  max_new_tokens=8)
    plain = multidraft.generate(tiny_llama, "the cat sat", method="sample", temperature=1.0, seed=5, max_new_tokens=8)
    assert sampled.stats.method == "sample" and sampled.token_ids == plain.token_ids
    assert multidraft.generate(tiny_llama, "the cat sat", max_new_tokens=2).stats.method == "greedy"


@pytest.mark.parametrize("prompt", ["\ud800", "the cat \udcff sat", [{"role": "user", "content": "hi \udfff"}]])
def test_lone_surrogates_are_a_prompt_error(tiny_llama, prompt):
    with pytest.raises(PromptError, match="not valid Unicode"):
        multidraft.generate(tiny_llama, prompt, max_new_tokens=2)


@pytest.mark.parametrize("messages,match", [
    ([{"role": "wizard", "content": "hi"}], "role 'wizard'"),
    ([{"role": "user", "content": 5}], "content must be a string"),
    ([{"role": "user", "content": "hi"}, "hello"], "message 1"),
])
def test_bad_chat_messages(tiny_llama, messages, match):
    with pytest.raises(PromptError, match=match):
        multidraft.generate(tiny_llama, messages, max_new_tokens=2)


def test_chat_roles_follow_the_template():
    class Tokenizer:
        chat_template = "{% if message.role == 'tool' %}...{% endif %}"
    assert validation.chat_roles(Tokenizer()) == ("system", "user", "assistant", "tool")
    Tokenizer.chat_template = "{{ message['role'] }}"
    assert validation.chat_roles(Tokenizer()) == ("system", "user", "assistant")


@pytest.mark.parametrize("method,options,match", [
    ("pld", {"max_ngram": True}, "max_ngram"),
    ("pld", {"num_draft_tokens": "abc"}, "num_draft_tokens"),
    ("pld", {"variant": ["hf"]}, "variant"),
    ("beam", {"length_penalty": "x"}, "length_penalty"),
    ("beam", {"length_penalty": float("nan")}, "length_penalty"),
    ("beam", {"num_beams": True}, "num_beams"),
    ("blockwise", {"heads": [1, 2]}, "heads must be"),
    ("blockwise", {"alpha": float("nan")}, "alpha"),
    ("blockwise", {"num_heads": True}, "num_heads"),
    ("pld_plus", {"theta": float("nan")}, "theta"),
    ("pld_plus", {"induction_heads": "x"}, "induction_heads"),
    ("pld_plus", {"induction_heads": [(0, 1)]}, "rank_by='attention' only"),      # rank_by="hidden" ignored them
    ("pld_plus", {"induction_heads": [], "rank_by": "first"}, "would be ignored"),
    ("pld_plus", {"heads": [(0, 1)]}, "now 'induction_heads'"),
    ("pld_plus", {"num_draft_tokens": True}, "num_draft_tokens"),
    ("superposed", {"tau": float("nan"), "alpha": 0.0}, "tau"),
    ("superposed", {"ngram_weights": ["x"], "alpha": 0.0}, "ngram_weights"),
    ("superposed", {"ngram": 5, "alpha": 0.0}, "ngram"),
    ("speculative", {"num_draft_tokens": "abc"}, "num_draft_tokens"),
    ("speculative", {"draft_model": 3}, "draft_model must be"),
    ("multi_draft", {"draft_temperatures": 1e-300}, "draft temperatures"),
    ("multi_draft", {"num_drafts": True}, "num_drafts"),
    ("mtad", {"accept_threshold": float("nan")}, "accept_threshold"),
    ("mtad", {"deterministic": "yes"}, "deterministic"),
])
def test_bad_method_options_fail_before_any_model_work(tiny_llama, method, options, match):
    from multidraft.methods import get_method
    with pytest.raises(InvalidOptionError, match=match):
        get_method(method).resolve_options(options)          # what the CLI, bench and server call up front
    with pytest.raises(InvalidOptionError, match=match):
        multidraft.generate(tiny_llama, "the cat", method=method, max_new_tokens=2, **options)


def test_validators_refuse_bools_nan_and_infinity():
    for bad in (True, float("nan"), float("inf"), "1"):
        with pytest.raises(InvalidOptionError):
            validation.number("x", bad)
    for bad in (True, 1.0, "1", None):
        with pytest.raises(InvalidOptionError):
            validation.integer("x", bad)
    assert validation.integer("x", None, allow_none=True) is None
    assert validation.number("x", 3, minimum=0) == 3.0
    with pytest.raises(InvalidOptionError, match="x must be one of 'a', 'b'"):
        validation.choice("x", ["a"], ("a", "b"))
    with pytest.raises(InvalidOptionError, match="true or false"):
        validation.boolean("x", 1)


def test_check_port_is_an_argparse_type():
    import argparse
    assert validation.check_port("8080") == 8080 and validation.check_port(1) == 1
    for bad in ("99999", "0", "-1", "http"):
        with pytest.raises(argparse.ArgumentTypeError, match="port must be an integer in 1..65535"):
            validation.check_port(bad)
    with pytest.raises(InvalidOptionError):
        validation.check_port(70000)


# ---------------------------------------------------------------- CLI: one line on stderr, exit 2, no traceback


def run_cli(args, stdin: bytes = b"", tmp_home=None):
    """`multidraft ARGS` in a fresh process (argv and stdin as raw bytes)."""
    env = dict(os.environ)
    if tmp_home is not None:
        env["MULTIDRAFT_HOME"] = str(tmp_home)
    return subprocess.run([sys.executable.encode(), b"-m", b"multidraft.cli",
                           *[a if isinstance(a, bytes) else a.encode() for a in args]],
                          input=stdin, capture_output=True, env=env, timeout=300)


def assert_one_line_error(result, fragment: str):
    err = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 2, err
    assert "Traceback" not in err and err.count("\n") == 1 and fragment in err, err


def test_cli_invalid_utf8_prompt_argument(tiny_folder):
    assert_one_line_error(run_cli(["generate", "--model", tiny_folder, b"the \xff cat"]), "not valid Unicode")


def test_cli_invalid_utf8_on_stdin(tiny_folder):
    assert_one_line_error(run_cli(["generate", "--model", tiny_folder], stdin=b"the \xff\xfe cat"),
                          "standard input is not valid UTF-8")


def test_cli_tiny_temperature_fails_before_loading_the_model(tmp_path):
    assert_one_line_error(run_cli(["generate", "--model", "no-such-model", "--method", "sample", "--temperature",
                                   "1e-300", "hi"], tmp_home=tmp_path), "temperature must be 0 (greedy) or at least")


def test_cli_bench_negative_threads(tmp_path):
    assert_one_line_error(run_cli(["bench", "--threads", "-3"], tmp_home=tmp_path), "--threads")


@pytest.mark.parametrize("argv,fragment", [
    (["generate", "--method", "sample", "--temperature", "nan", "hi"], "temperature"),
    (["generate", "--top-p", "0", "hi"], "--top-p"),
    (["generate", "--seed", "1.5", "hi"], "--seed"),
    (["generate", "--method", "beam", "-o", "length_penalty=\"x\"", "hi"], "length_penalty"),
    (["generate", "--method", "pld", "-o", "max_ngram=true", "hi"], "max_ngram"),
    (["bench", "--workers", "0", "--ray", "local"], "--workers"),
    (["bench", "--workers", "3"], "--workers sets the number of Ray workers and needs --ray"),
    (["bench", "--methods", "pld", "-o", "pld.num_draft_tokens=abc"], "num_draft_tokens must be an integer >= 1"),
    (["bench", "--methods", "pld", "-o", "pld.max_ngram=NaN"], "max_ngram"),
])
def test_cli_user_errors_print_one_line_and_exit_2(argv, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    try:
        code = cli_main([*argv[:1], "--model", "no-such-model-anywhere", *argv[1:]])
    except SystemExit as exc:          # argparse's usage errors exit (status 2) from parse_args
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "no-such-model-anywhere" not in err, err


def test_cli_bench_out_that_is_a_file_is_refused_and_kept(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    target = tmp_path / "results.txt"
    target.write_text("precious")
    assert cli_main(["bench", "--model", "no-such-model-anywhere", "--methods", "pld", "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert "is an existing file" in err and err.count("\n") == 1
    assert target.read_text() == "precious"
    assert cli_main(["bench", "--model", "no-such-model-anywhere", "--methods", "pld",
                     "--out", str(target / "sub")]) == 2
    assert "is a file" in capsys.readouterr().err
