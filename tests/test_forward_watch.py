"""forward_watch.py: the checks a server's deadline and the engine's cancel rely on run before every forward and
every decoder layer, whichever runner runs the model: HF's modules (forward pre-hooks) or the native forward (its own
layer loop, which calls the LM's watch points). Counted, never timed."""

import pytest

from multidraft.forward_watch import watch_forwards, watch_layers
from multidraft.models import gguf_kernels
from tests.tiny_gguf import tiny_gguf_lm

pytestmark = pytest.mark.skipif(not gguf_kernels.load(progress=False),
                                reason=f"quantized kernels unavailable: {gguf_kernels.unavailable_reason()}")

RUNNERS = ["native", "quantized-q8"]        # the native loop, and the same model on HF's modules
PROMPT = [5, 9, 14, 3, 27, 8]


@pytest.fixture(scope="module", params=RUNNERS)
def lm(request):
    lm = tiny_gguf_lm("qwen2", "Q4_K", seed=2, runner=request.param)
    assert lm.runner == request.param
    return lm


class Stop(Exception):
    pass


def test_every_forward_and_every_layer_is_checked(lm):
    calls = []
    handles = watch_forwards([lm], before_forward=lambda: calls.append("forward"),
                             before_layer=lambda: calls.append("layer"))
    try:
        cache = lm.new_cache()
        lm.forward(cache, PROMPT)
        lm.forward(cache, [11, 12, 13])                  # a verify of three rows
    finally:
        for handle in handles:
            handle.remove()
    assert calls == (["forward"] + ["layer"] * lm.num_layers) * 2
    lm.forward(lm.new_cache(), PROMPT)                    # removed: nothing more is called
    assert len(calls) == 2 * (1 + lm.num_layers)


def test_a_check_that_raises_stops_the_forward_inside_its_layer(lm):
    seen = []

    def check():
        seen.append(len(seen))
        if len(seen) == 3:                               # the forward, layer 0, then stop before layer 1
            raise Stop()
    handles = watch_layers([lm], check)
    try:
        with pytest.raises(Stop):
            lm.forward(lm.new_cache(), PROMPT)
    finally:
        for handle in handles:
            handle.remove()
    assert len(seen) == 3 and lm.num_layers >= 2          # layer 1 never started
    assert lm.forward(lm.new_cache(), PROMPT).logits.shape[0] == len(PROMPT)   # the LM still serves
