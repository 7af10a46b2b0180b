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
