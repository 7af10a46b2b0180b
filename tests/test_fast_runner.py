"""The fast runner (models/fast_linear.py): the kernel's results, batch invariance, exactness of the lossless
methods, the HF peers staying stock, and the fallbacks (no compiler, no AVX2, bf16, unknown runner).

The kernel is built once per test session into a temporary MULTIDRAFT_HOME (~1 min on 2 busy cores)."""

import os
import shutil
import sys
import warnings

import pytest
import torch

import multidraft
from multidraft.errors import InvalidOptionError
from multidraft.models import fast_linear
from tests.test_decoding import PROMPTS
from tests.tiny_models import make_tiny_lm

# Compiled vs stock logits: fp32 sums in another order; tiny models' logits are O(10).
LOGITS_ATOL, LOGITS_RTOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    if fast_linear.kernel_unavailable_reason() and fast_linear._kernel is None:
        pytest.skip(f"no fast kernel here: {fast_linear.kernel_unavailable_reason()}")
    patch = pytest.MonkeyPatch()
    patch.setenv("MULTIDRAFT_HOME", str(tmp_path_factory.mktemp("home")))
    try:
        op = fast_linear.load_kernel(progress=False)
    finally:
        patch.undo()
    if op is None and shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler: the fast runner falls back to eager (tested below)")
    if op is None:
        pytest.fail(f"the kernel did not build: {fast_linear.kernel_unavailable_reason()}")
    return op


@pytest.fixture(params=["llama", "qwen2"])
def fast_pair(request, kernel):
    """The same tiny model twice: eager and fast (qwen2 has biased projections)."""
    eager = make_tiny_lm(request.param, seed=3)
    fast = make_tiny_lm(request.param, seed=3)
    assert fast.use_runner("fast") == "fast"
    return eager, fast


@pytest.mark.parametrize("n_out,n_in", [(64, 32), (37, 19), (300, 129), (8, 1000)])
def test_kernel_matches_linear_and_is_batch_invariant(kernel, n_out, n_in):
    torch.manual_seed(n_out)
    weight = torch.randn(n_out, n_in)
    x = torch.randn(32, n_in)          # the kernel itself takes any number of rows
    single_rows = [kernel(x[i:i + 1], weight) for i in range(32)]
    for m in (1, 2, 3, 5, 6, 7, 8, 12, 13, 16, 25, 32):
        out = kernel(x[:m], weight)
        torch.testing.assert_close(out, torch.nn.functional.linear(x[:m], weight), atol=1e-4, rtol=1e-5)
        for i in range(m):        # bit-identical whatever the number of rows beside it
            assert torch.equal(out[i:i + 1], single_rows[i])
    batched = kernel(x[:16].view(2, 8, n_in), weight)
    assert batched.shape == (2, 8, n_out)
    assert torch.equal(batched.view(16, n_out), kernel(x[:16], weight))


def test_fast_logits_agree_with_eager(fast_pair):
    eager, fast = fast_pair
    prefix = [5, 9, 11, 4, 7, 3, 20]
    for lm_pair in ((eager, fast),):
        caches = [lm.new_cache() for lm in lm_pair]
        outs = [lm.forward(c, prefix).logits for lm, c in zip(lm_pair, caches)]
        torch.testing.assert_close(outs[1], outs[0], atol=LOGITS_ATOL, rtol=LOGITS_RTOL)
        tree = ([7, 8, 12, 13, 14], [-1, -1, 0, 0, 2])
        outs = [lm.forward(c, tree[0], parents=tree[1]).logits for lm, c in zip(lm_pair, caches)]
        torch.testing.assert_close(outs[1], outs[0], atol=LOGITS_ATOL, rtol=LOGITS_RTOL)


def test_fast_one_token_rows_equal_verify_rows(fast_pair):
    """A token's logits are the same in a 1-token forward and inside an 8-token verify (same cache)."""
    _, fast = fast_pair
    tokens = [7, 8, 12, 13, 14, 9, 30, 31]
    cache = fast.new_cache()
    fast.forward(cache, [5, 9, 11, 4])
    verify = fast.forward(cache, tokens).logits
    cache.crop(4)
    for i, token in enumerate(tokens):
        one = fast.forward(cache, [token]).logits[0]
        torch.testing.assert_close(one, verify[i], atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_lossless_methods_equal_greedy_with_fast_runner(fast_pair, prompt):
    eager, fast = fast_pair
    greedy = multidraft.generate(fast, prompt, method="greedy", max_new_tokens=40)
    assert greedy.token_ids == multidraft.generate(eager, prompt, method="greedy", max_new_tokens=40).token_ids
    for method, options in (("pld", {"num_draft_tokens": 4}), ("pld", {"num_draft_tokens": 10}),
                            ("pld_plus", {}), ("speculative", {"draft_model": make_tiny_lm("llama", seed=7)})):
        if method not in multidraft.available_methods():
            continue
        if method == "speculative" and fast.vocab_size != options["draft_model"].vocab_size:
            continue
        out = multidraft.generate(fast, prompt, method=method, max_new_tokens=40, **options)
        assert out.token_ids == greedy.token_ids, (method, options)


@pytest.mark.skipif(not fast_linear.ONEDNN, reason="this torch build has no oneDNN")
def test_rows_beyond_the_kernel_take_onednn(fast_pair, monkeypatch):
    """Past MAX_ROWS (a prefill, a wide tree) the linears go to oneDNN, not the kernel, and match F.linear."""
    eager, fast = fast_pair
    kernel_rows, onednn_rows = [], []
    real_kernel, real_onednn = fast_linear._kernel, torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(fast_linear, "_kernel", lambda x, w: kernel_rows.append(x.shape[-2]) or real_kernel(x, w))
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise",
                        lambda x, *rest: onednn_rows.append(x.shape[-2]) or real_onednn(x, *rest))
    ids = list(range(3, 3 + fast_linear.MAX_ROWS + 9))
    logits = fast.forward(fast.new_cache(), ids).logits
    reference = eager.forward(eager.new_cache(), ids).logits
    torch.testing.assert_close(logits, reference, atol=LOGITS_ATOL, rtol=LOGITS_RTOL)
    assert onednn_rows and set(onednn_rows) == {len(ids)} and not kernel_rows
    fast.forward(fast.new_cache(), ids[:fast_linear.MAX_ROWS])
    assert kernel_rows and set(kernel_rows) == {fast_linear.MAX_ROWS}


def test_hf_generate_stays_stock(fast_pair, monkeypatch):
    """Outside the runner (e.g. a benchmark's HF generate() peers) the model's linears take the stock path."""
    _, fast = fast_pair
    calls = []
    real = fast_linear._kernel
    monkeypatch.setattr(fast_linear, "_kernel", lambda x, w: calls.append(1) or real(x, w))
    ids = torch.tensor([[5, 9, 11, 4]])
    fast.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False)
    assert calls == []
    fast.forward(fast.new_cache(), [5])               # a 1-token forward: within the kernel's rows
    assert calls


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_static_runner_takes_the_kernel_and_stays_exact(kernel, monkeypatch, arch):
    """On CPU the static runner runs over what "auto" picks: the kernel on an AVX2-only CPU in fp32."""
    eager, static = make_tiny_lm(arch, seed=3), make_tiny_lm(arch, seed=3)
    assert static.use_runner("static", progress=False) == "static"
    calls = []
    real = fast_linear._kernel
    monkeypatch.setattr(fast_linear, "_kernel", lambda x, w: calls.append(x.shape) or real(x, w))
    for prompt in PROMPTS:
        greedy = multidraft.generate(eager, prompt, max_new_tokens=30).token_ids
        for method in ("greedy", "pld", "pld_plus"):
            assert multidraft.generate(static, prompt, method=method, max_new_tokens=30).token_ids == greedy
    assert bool(calls) == (str(torch.backends.cpu.get_cpu_capability()) == "AVX2")


def test_eager_runner_uninstalls(kernel):
    lm = make_tiny_lm("llama", seed=3)
    lm.use_runner("fast")
    assert any("forward" in m.__dict__ for m in lm.model.modules())
    assert lm.use_runner("eager") == "eager"
    assert not any("forward" in m.__dict__ for m in lm.model.modules())


def test_unknown_runner_is_a_clear_error():
    with pytest.raises(InvalidOptionError, match="unknown runner"):
        make_tiny_lm("llama").use_runner("turbo")


def test_each_environment_builds_into_its_own_folder(monkeypatch):
    # ninja rebuilds when the compile command changes, and it names the environment's include folders: two
    # virtual environments sharing one folder would rebuild the kernel whenever a process of the other one started.
    here = fast_linear.build_dir()
    monkeypatch.setattr(sys, "prefix", "/some/other/venv")
    assert fast_linear.build_dir() != here
    assert os.path.dirname(fast_linear.build_dir()) == os.path.dirname(here)


def test_build_failure_warns_once_and_stays_eager(monkeypatch):
    monkeypatch.setattr(fast_linear, "_kernel", None)
    monkeypatch.setattr(fast_linear, "_failure", None)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")

    def no_compiler(progress):
        raise RuntimeError("Error building extension: c++: command not found\nmore lines")
    monkeypatch.setattr(fast_linear, "_build_or_find", no_compiler)
    lm = make_tiny_lm("llama")
    with pytest.warns(RuntimeWarning, match="could not be built.*command not found") as record:
        assert lm.use_runner("fast") == "eager"
    assert len(record) == 1 and "\n" not in str(record[0].message)
    with pytest.warns(RuntimeWarning, match="could not be built"):
        assert make_tiny_lm("llama").use_runner("auto") == "eager"     # auto says so too, and stays eager
    assert multidraft.generate(lm, "a b", max_new_tokens=3).token_ids   # still generates


def test_no_avx2_or_bf16_falls_back_with_a_warning(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    lm = make_tiny_lm("llama")
    with pytest.warns(RuntimeWarning, match="no AVX2"):
        assert lm.use_runner("fast") == "eager"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lm.use_runner("auto") == "eager"          # auto: silent
    bf16 = make_tiny_lm("llama")
    bf16.model.to(torch.bfloat16)
    with pytest.warns(RuntimeWarning, match="fp32 only"):
        assert bf16.use_runner("fast") == "eager"


@pytest.mark.real_model
def test_smollm_pld_equals_greedy_with_fast_runner(smollm, kernel):
    try:
        assert smollm.use_runner("fast") == "fast"
        prompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"
        greedy = multidraft.generate(smollm, prompt, method="greedy", max_new_tokens=24)
        pld = multidraft.generate(smollm, prompt, method="pld", max_new_tokens=24)
        assert pld.token_ids == greedy.token_ids
    finally:
        smollm.use_runner("eager")
