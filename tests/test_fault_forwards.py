"""Forwards stopped part-way (a timeout, a hung-up client, Ctrl-C): stopped at every layer, for every capture mode
and runner, the stop itself propagates (never a KeyError from the capture hooks' cleanup), no hook is left behind,
and the next forward gives the same result as if nothing had happened."""

import pytest
import torch

from tests.tiny_models import make_tiny_lm_with


class Stop(BaseException):
    """Stands for JobCancelled / JobTimedOut / KeyboardInterrupt: a BaseException raised inside a layer."""


CAPTURES = {
    "none": {},
    "hidden": {"hidden_layer": 2},
    "attention": {"attention_heads": [(0, 1), (1, 0), (1, 3)], "attention_rows": [0, 2]},
}
PROMPT = [3, 9, 4, 17, 8, 22, 5]


def hook_counts(lm):
    modules = [lm.model, *lm.model.modules()]
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in modules)


def stop_at_layer(lm, layer):
    def stop(_module, _args):
        raise Stop()
    return lm._decoder_layers[layer].register_forward_pre_hook(stop)


@pytest.mark.parametrize("runner", ["eager", "static"])
@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_a_forward_stopped_at_any_layer_raises_the_stop(runner, kernel, capture):
    lm = make_tiny_lm_with(runner, "llama", seed=5, attn_implementation=kernel)
    options = CAPTURES[capture]
    hooks_before = hook_counts(lm)
    cache = lm.new_cache()
    expected = lm.forward(cache, PROMPT, **options)
    for layer in range(lm.num_layers):
        for past in (0, len(PROMPT) - 2):          # a prefill and a later step
            cache = lm.new_cache()
            if past:
                lm.forward(cache, PROMPT[:past])
            handle = stop_at_layer(lm, layer)
            try:
                with pytest.raises(Stop):
                    lm.forward(cache, PROMPT[past:], **options)
            finally:
                handle.remove()
            assert hook_counts(lm) == hooks_before, "a capture hook was left on the model"
    again = lm.forward(lm.new_cache(), PROMPT, **options)
    torch.testing.assert_close(again.logits, expected.logits)
    if capture == "hidden":
        torch.testing.assert_close(again.hidden, expected.hidden)
    if capture == "attention":
        if isinstance(expected.attention, torch.Tensor):
            torch.testing.assert_close(again.attention, expected.attention)
        else:
            columns = list(range(expected.attention.num_keys))
            for row in range(2):
                torch.testing.assert_close(again.attention.weights(row, columns),
                                           expected.attention.weights(row, columns))


@pytest.mark.parametrize("options", [["-o", "rank_by=attention", "-o", "induction_head_set=all"],
                                     ["-o", "rank_by=hidden", "-o", "layer=1"]])
def test_ctrl_c_inside_a_capturing_forward_is_one_line_and_exit_130(tiny_folder, capsys, monkeypatch, options):
    """Ctrl-C lands inside a forward that captures attention or hidden states: `interrupted`, exit 130."""
    import multidraft.models.runner as runner
    calls = {"n": 0}
    real_forward = runner.LM.forward

    def forward(self, cache, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] < 3:
            return real_forward(self, cache, *args, **kwargs)
        handle = stop_at_layer_with(self, self.num_layers - 1, KeyboardInterrupt)
        try:
            return real_forward(self, cache, *args, **kwargs)
        finally:
            handle.remove()
    monkeypatch.setattr(runner.LM, "forward", forward)
    from multidraft.cli import main
    code = main(["generate", "--model", tiny_folder, "--method", "pld_plus", *options, "--max-new-tokens", "30",
                 "the cat sat on the mat and the cat sat on the mat and the cat"])
    err = capsys.readouterr().err.strip().splitlines()
    assert calls["n"] >= 3 and code == 130, err
    assert err[-1] == "multidraft: interrupted" and not any("Traceback" in line or "Error" in line for line in err)


def stop_at_layer_with(lm, layer, exception):
    def stop(_module, _args):
        raise exception()
    return lm._decoder_layers[layer].register_forward_pre_hook(stop)
