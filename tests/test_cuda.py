"""Every method, heads training, PLD+ calibration, the n-gram paths, the bench and the server on a real CUDA GPU.

Skipped without one (CI has none): the CPU-side guard is tests/test_device.py, and `multidraft check gpu`
checks a GPU box end to end. In fp32 every lossless method must give greedy's tokens exactly; lossy ones must
run and give valid output. Models are the tiny random ones of the other tests, moved to the GPU.
"""

import numpy as np
import pytest
import torch

import multidraft
from multidraft.verify.multi_draft import SELECTION_SCHEMES
from tests.tiny_models import make_tiny_lm, random_heads

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (CI has none); tests/test_device.py checks device placement "
                                       "on the CPU and `multidraft check gpu` checks a GPU machine end to end")

PROMPTS = ["the cat sat on the mat and the cat sat on the", "def x ( y ) : return x + 1 def x ( y ) :", "a"]
HEADS = [(0, 1), (1, 2), (1, 3)]


def on_cuda(lm):
    lm.model.to("cuda")
    return lm


@pytest.fixture(scope="module")
def lm():
    return on_cuda(make_tiny_lm("llama", seed=2))


@pytest.fixture(scope="module")
def draft():
    return on_cuda(make_tiny_lm("llama", seed=3))


def lossless_cases(lm, draft, ngram):
    cases = [("pld", {}), ("pld", dict(variant="reference", num_draft_tokens=4)), ("pld_plus", {}),
             ("pld_plus", dict(rank_by="attention", induction_heads=HEADS)), ("pld_plus", dict(rank_by="first")),
             ("speculative", dict(draft_model=draft)), ("speculative", dict(draft_model=draft, adaptive=True)),
             ("mtad", dict(draft_model=draft, accept_threshold=1.0)),      # threshold 1 accepts nothing: greedy
             ("superposed", dict(num_drafts=1, alpha=0.0))]                # k = 1, alpha = 0 is greedy
    cases += [("multi_draft", dict(draft_model=draft, num_drafts=3, selection=s)) for s in SELECTION_SCHEMES]
    heads = random_heads(lm)
    cases += [("blockwise", dict(heads=heads, rescoring="none", lattice_k=4, num_paths=2)),
              ("blockwise", dict(heads=heads, rescoring="ngram", ngram=ngram, lattice_k=4, num_paths=2)),
              ("blockwise", dict(heads=heads, rescoring="neural", rescorer=draft, lattice_k=4, num_paths=1))]
    return cases


def test_model_is_on_the_gpu(lm):
    assert lm.device.type == "cuda"
    out = lm.forward(lm.new_cache(), [1, 5, 7])
    assert out.logits.device.type == "cuda"


def test_greedy_on_cuda_equals_greedy_on_cpu(lm):
    cpu = make_tiny_lm("llama", seed=2)
    for prompt in PROMPTS:
        want = multidraft.generate(cpu, prompt, max_new_tokens=24).token_ids
        assert multidraft.generate(lm, prompt, max_new_tokens=24).token_ids == want


def test_every_lossless_method_equals_greedy_in_fp32(lm, draft, tiny_ngram):
    for prompt in PROMPTS:
        want = multidraft.generate(lm, prompt, max_new_tokens=24).token_ids
        for method, options in lossless_cases(lm, draft, tiny_ngram):
            got = multidraft.generate(lm, prompt, method=method, max_new_tokens=24, **options)
            assert got.token_ids == want, (method, options, prompt)


def test_prompt_lookup_methods_equal_sample_with_the_same_seed(lm):
    for prompt in PROMPTS:
        want = multidraft.generate(lm, prompt, method="sample", max_new_tokens=24, temperature=0.8, seed=4).token_ids
        for method, options in (("pld", {}), ("pld_plus", {}),
                                ("pld_plus", dict(rank_by="attention", induction_heads=HEADS))):
            got = multidraft.generate(lm, prompt, method=method, max_new_tokens=24, temperature=0.8, seed=4, **options)
            assert got.token_ids == want, (method, options)


def valid(gen, lm, max_new_tokens):
    assert 0 < len(gen.token_ids) <= max_new_tokens
    assert all(0 <= t < lm.vocab_size for t in gen.token_ids)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_lossy_and_sampling_methods_run_and_give_valid_output(lm, draft, tiny_ngram, temperature):
    cases = [("speculative", dict(draft_model=draft)), ("mtad", dict(draft_model=draft)),
             ("multi_draft", dict(draft_model=draft, num_drafts=2, selection="spectr"))]
    if temperature == 0:
        cases += [("beam", dict(num_beams=3)), ("superposed", dict(num_drafts=3, ngram=tiny_ngram)),
                  ("superposed", dict(num_drafts=3, alpha=0.0, reset_every=4))]
    else:
        cases += [("sample", {}), ("multi_draft", dict(draft_model=draft, num_drafts=3, selection="is_lp"))]
    for method, options in cases:
        gen = multidraft.generate(lm, PROMPTS[0], method=method, max_new_tokens=16, temperature=temperature, seed=1,
                                  **options)
        valid(gen, lm, 16)
        if method in ("beam", "superposed"):
            assert gen.drafts and all(d.token_ids for d in gen.drafts)


def test_bf16_runs_every_kind_of_forward(draft):
    lm16 = on_cuda(make_tiny_lm("llama", seed=2))
    lm16.model.to(torch.bfloat16)
    for method, options in (("pld", {}), ("pld_plus", {}), ("beam", {}), ("superposed", dict(alpha=0.0)),
                            ("multi_draft", dict(draft_model=draft, num_drafts=2))):
        valid(multidraft.generate(lm16, PROMPTS[0], method=method, max_new_tokens=12, **options), lm16, 12)


def test_heads_train_on_the_gpu_and_drafts_stay_exact(lm, tmp_path):
    from multidraft.blockwise import load_heads
    from multidraft.blockwise.heads_data import hidden_rows
    from multidraft.blockwise.heads_train import TrainConfig, train_heads

    sequences = [multidraft.generate(lm, p, max_new_tokens=40).token_ids + lm.encode(p) for p in PROMPTS] * 4
    data = hidden_rows(lm, sequences)
    config = TrainConfig(num_heads=3, ffn_size=32, shortlist_size=0, batch_size=32, minutes=0, max_steps=10,
                         val_fraction=0.5)
    history = train_heads(lm, data, config, tmp_path / "heads.pt", log=lambda *a: None, corpus="test")
    assert history["steps"] == 10 and np.isfinite(history["final_val_loss"])
    heads = load_heads(lm, tmp_path / "heads.pt")
    assert heads.w1.device.type == "cuda"
    want = multidraft.generate(lm, PROMPTS[0], max_new_tokens=20).token_ids
    got = multidraft.generate(lm, PROMPTS[0], method="blockwise", max_new_tokens=20, heads=heads, rescoring="none")
    assert got.token_ids == want


def test_pld_plus_calibration_on_the_gpu():
    from multidraft.pldplus import induction as pldplus_induction

    eager = on_cuda(make_tiny_lm("llama", seed=2))
    eager.model.set_attn_implementation("eager")
    record = pldplus_induction.calibrate(eager, PROMPTS[:2], gen_len=16, top_k=5)
    assert record["num_prompts"] == 2 and 1 <= record["layer"] <= eager.num_layers


def test_bench_runs_on_the_gpu(lm, tmp_path):
    from multidraft.eval.bench import BenchConfig, read_results, run_bench
    from multidraft.eval.tasks import TaskPrompt

    prompts = {"code_edit": [TaskPrompt("c0", "code_edit", prompt=PROMPTS[1])]}
    config = BenchConfig(model="tiny-cuda", tasks=["code_edit"], methods=["greedy", "pld", "hf_prompt_lookup"],
                         max_new_tokens=12, limit=1)
    run_bench(config, tmp_path, prompts=prompts, models=(lm, None), progress=False)
    rows = read_results(tmp_path)[1]
    assert {row["method"] for row in rows} >= {"greedy", "pld", "hf_prompt_lookup"}
    assert all(row["error"] is None and row["device"].startswith("cuda") for row in rows), rows
    assert all(row["equal_greedy"] for row in rows if row["method"] == "pld")


def test_server_answers_on_the_gpu(lm):
    import httpx

    from multidraft.server import ServerConfig, ServerThread, create_app

    app = create_app(lm, ServerConfig(max_queue=2, max_n=2, max_tokens=16, max_prompt_tokens=100))
    with ServerThread(app) as running, httpx.Client(base_url=running.url, timeout=60) as client:
        body = {"model": "tiny", "prompt": PROMPTS[0], "max_tokens": 8, "method": "pld"}
        reply = client.post("/v1/completions", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["text"] is not None


def test_cuda_load_disables_cudnn_attention_unless_asked(monkeypatch):
    from multidraft.models.device import CUDNN_ENV, configure_cuda

    if not hasattr(torch.backends.cuda, "cudnn_sdp_enabled"):
        pytest.skip("this torch has no cuDNN SDPA switch")
    try:
        configure_cuda("cuda")
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        monkeypatch.setenv(CUDNN_ENV, "1")
        configure_cuda("cuda")
        assert torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        monkeypatch.delenv(CUDNN_ENV, raising=False)
        configure_cuda("cuda")


# ----- the static runner: static KV cache + one CUDA graph per shape bucket (models/static_runner.py) -----

@pytest.fixture(scope="module")
def static_pair():
    """The same tiny model twice on the GPU, fp32: HF's dynamic cache ("fast") and the static runner's graphs."""
    import warnings

    from multidraft.models import static_runner
    eager = on_cuda(make_tiny_lm("llama", seed=2))
    eager.use_runner("fast")
    static = on_cuda(make_tiny_lm("llama", seed=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # a fallback would make every test below vacuous
        assert static.use_runner("static", progress=False) == "static"
    assert sorted(static._static.graphs) == sorted(static_runner.BUCKETS)
    return eager, static


def test_graph_replays_equal_eager_logits(static_pair):
    eager, static = static_pair
    caches = eager.new_cache(), static.new_cache()
    replays = static._static.graphs[4].graph
    for step, (length, parents) in enumerate([(7, None), (1, None), (3, None), (70, None), (5, [-1, 0, 0, 1, -1]),
                                              (64, [-1 if i % 8 == 0 else i - 1 for i in range(64)])]):
        ids = [(step * 11 + i) % 60 + 3 for i in range(length)]
        past = caches[0].length
        outs = [lm.forward(cache, ids, parents=parents).logits for lm, cache in zip(static_pair, caches)]
        torch.testing.assert_close(outs[1], outs[0], atol=1e-4, rtol=1e-4)
        if parents is not None:
            for cache in caches:
                cache.keep(past, [past, past + 1])
    assert replays is static._static.graphs[4].graph      # the same captured graphs served every step


def test_lossless_methods_equal_greedy_on_graphs(static_pair):
    eager, static = static_pair
    for prompt in PROMPTS:
        greedy = multidraft.generate(eager, prompt, max_new_tokens=32).token_ids
        assert multidraft.generate(static, prompt, max_new_tokens=32).token_ids == greedy
        for method in ("pld", "pld_plus"):
            assert multidraft.generate(static, prompt, method=method, max_new_tokens=32).token_ids == greedy
        attention = multidraft.generate(static, prompt, method="pld_plus", rank_by="attention", induction_heads=HEADS,
                                        max_new_tokens=32)
        assert attention.token_ids == greedy                # hooks: those forwards run without graphs


def test_every_lossless_method_equals_greedy_on_the_static_runner(static_pair, draft, ngram):
    eager, static = static_pair
    for prompt in PROMPTS:
        want = multidraft.generate(eager, prompt, max_new_tokens=24).token_ids
        for method, options in lossless_cases(static, draft, ngram):
            got = multidraft.generate(static, prompt, method=method, max_new_tokens=24, **options)
            assert got.token_ids == want, (method, options, prompt)


def test_graph_capture_failure_warns_once_and_runs_eagerly(monkeypatch):
    class Broken:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("capture is not possible here\nsecond line")
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Broken)
    lm = on_cuda(make_tiny_lm("llama", seed=2))
    with pytest.warns(RuntimeWarning, match="static runner cannot serve.*capture is not possible here") as caught:
        assert lm.use_runner("static", progress=False) == "fast"
    ours = [w for w in caught if "static runner" in str(w.message)]
    assert len(ours) == 1 and "second line" not in str(ours[0].message)
    assert multidraft.generate(lm, PROMPTS[0], method="pld", max_new_tokens=8).token_ids == \
        multidraft.generate(lm, PROMPTS[0], max_new_tokens=8).token_ids
