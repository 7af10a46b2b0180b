"""Device and dtype discipline without a GPU: every method, heads training and PLD+ calibration run with the model
on a fake CUDA device (tests/fake_accelerator.py), which fails, as a GPU does, on a tensor made on the wrong device;
host syncs per step stay bounded; every method runs with the model in bfloat16 and in float64.

(Before the fixes of issue 17, `beam` and `superposed` failed here exactly where they crashed on an H100.)
"""

import pytest
import torch

import multidraft
from multidraft.verify.multi_draft import SELECTION_SCHEMES
from tests.fake_accelerator import DeviceError, fake_cuda
from tests.tiny_models import make_tiny_lm, random_heads

PROMPT = "the cat sat on the mat and the cat sat on the"
HEADS = [(0, 1), (1, 2)]
SAMPLED = dict(temperature=0.8, seed=3)


@pytest.fixture(scope="module")
def lm():
    return make_tiny_lm("llama", seed=2)


@pytest.fixture(scope="module")
def draft():
    return make_tiny_lm("llama", seed=3)


# (id, method, options); "DRAFT", "NGRAM" and "HEADS" are filled in per test. Every method and every code path
# that builds tensors on its own: sampling draws, trees, beams, n-gram mixtures, heads, rescorers.
CASES = [
    ("greedy", "greedy", {}), ("sample", "sample", SAMPLED), ("beam", "beam", dict(num_beams=3)),
    ("pld", "pld", {}), ("pld-sampled", "pld", SAMPLED),
    ("pld_plus-hidden", "pld_plus", {}),
    ("pld_plus-attention", "pld_plus", dict(rank_by="attention", induction_heads=HEADS)),
    ("pld_plus-sampled", "pld_plus", dict(SAMPLED, rank_by="attention", induction_heads=HEADS)),
    ("speculative", "speculative", dict(draft_model="DRAFT")),
    ("speculative-sampled", "speculative", dict(SAMPLED, draft_model="DRAFT", stop_below=0.2)),
    ("mtad", "mtad", dict(SAMPLED, draft_model="DRAFT")),
    ("mtad-greedy", "mtad", dict(draft_model="DRAFT")),
    ("superposed", "superposed", dict(alpha=0.0)),
    ("superposed-ngram", "superposed", dict(num_drafts=3, ngram="NGRAM")),
    ("superposed-reset", "superposed", dict(num_drafts=3, ngram="NGRAM", reset_every=3)),
    ("blockwise-none", "blockwise", dict(heads="HEADS", rescoring="none", lattice_k=4, num_paths=2)),
    ("blockwise-ngram", "blockwise", dict(heads="HEADS", ngram="NGRAM", lattice_k=4, num_paths=2)),
    ("blockwise-neural", "blockwise", dict(heads="HEADS", rescoring="neural", rescorer="DRAFT", lattice_k=4)),
] + [(f"multi_draft-{s}", "multi_draft", dict(SAMPLED, draft_model="DRAFT", num_drafts=3, selection=s))
     for s in SELECTION_SCHEMES] + [("multi_draft-greedy", "multi_draft", dict(draft_model="DRAFT", num_drafts=2))]
# The fake device runs every op through Python: variants that add no new tensor-building code run in the slow suite.
SLOW = {"multi_draft-spectr", "multi_draft-is", "multi_draft-is_lp", "multi_draft-is_lp_truncated", "mtad",
        "blockwise-neural", "superposed-reset", "speculative-sampled"}
PARAMS = [pytest.param(c, id=c[0], marks=[pytest.mark.slow] if c[0] in SLOW else []) for c in CASES]


def fill(options, lm, draft, ngram):
    values = {"DRAFT": draft, "NGRAM": ngram}
    out = {k: values.get(v, v) if isinstance(v, str) else v for k, v in options.items()}
    if out.get("heads") == "HEADS":
        out["heads"] = random_heads(lm)
    return out


@pytest.mark.parametrize("case", PARAMS)
def test_every_method_keeps_its_tensors_on_the_model_device(lm, draft, tiny_ngram, case):
    _, method, options = case
    on_cpu = multidraft.generate(lm, PROMPT, method=method, max_new_tokens=12, **fill(options, lm, draft, tiny_ngram))
    with fake_cuda(lm, draft):
        options = fill(options, lm, draft, tiny_ngram)          # heads bind inside: they must follow the model
        on_gpu = multidraft.generate(lm, PROMPT, method=method, max_new_tokens=12, **options)
    assert on_gpu.token_ids == on_cpu.token_ids            # the fake device changes placement, never values


def test_the_fake_device_fails_where_a_gpu_fails(lm):
    with fake_cuda(lm):
        assert lm.device.type == "cuda"
        logits = lm.forward(lm.new_cache(), [1, 5, 7]).logits
        assert logits.device.type == "cuda"
        with pytest.raises(DeviceError):
            logits[-1] + torch.zeros(lm.vocab_size)                      # host tensor + device tensor
        logits[-1] + torch.zeros(lm.vocab_size, device=logits.device)      # fine
        logits[-1] + torch.tensor(1.0)                                     # a 0-dim host tensor is a scalar: fine
        with pytest.raises(DeviceError):
            logits.numpy()
        with pytest.raises(DeviceError):
            torch.multinomial(logits[-1].softmax(-1), 1, generator=torch.Generator())
        assert logits[-1][torch.tensor([1, 2])].device.type == "cuda"    # host indices into a device tensor: fine
        host = logits.cpu()
        assert host.device.type == "cpu" and logits.device.type == "cuda"
        with pytest.raises(DeviceError):
            torch.cat([host, logits])
    assert lm.device.type == "cpu"


def test_heads_training_and_pld_plus_calibration_follow_the_model_device(lm, tmp_path):
    from multidraft.blockwise import load_heads
    from multidraft.blockwise.heads_data import hidden_rows
    from multidraft.blockwise.heads_train import TrainConfig, train_heads
    from multidraft.pldplus import induction as pldplus_induction

    eager = make_tiny_lm("llama", seed=2)
    eager.model.set_attn_implementation("eager")
    with fake_cuda(lm, eager):
        sequences = [lm.encode(PROMPT) + multidraft.generate(lm, PROMPT, max_new_tokens=30).token_ids] * 4
        data = hidden_rows(lm, sequences)
        config = TrainConfig(num_heads=3, ffn_size=16, shortlist_size=0, batch_size=16, minutes=0, max_steps=3,
                             val_fraction=0.5)
        train_heads(lm, data, config, tmp_path / "heads.pt", log=lambda *a: None, corpus="test")
        heads = load_heads(lm, tmp_path / "heads.pt")
        assert heads.w1.device.type == "cuda"
        multidraft.generate(lm, PROMPT, method="blockwise", max_new_tokens=8, heads=heads, rescoring="none")
        record = pldplus_induction.calibrate(eager, [PROMPT], gen_len=12, top_k=3)
    assert record["num_prompts"] == 1


# Host syncs (.item(), .tolist(), int(), .cpu() of a device tensor) per target forward, at temperature 0: a fixed
# number per step whatever the draft length, never one per draft node. Measured: greedy 2, pld / blockwise 2-3,
# beam 3, superposed 3; the bounds leave one spare.
SYNC_BOUNDS = [("greedy", {}, 3), ("pld", dict(num_draft_tokens=16), 4), ("beam", dict(num_beams=3), 4),
               ("superposed", dict(alpha=0.0), 4), ("pld_plus", dict(num_draft_tokens=16), 4)]


@pytest.mark.parametrize("method,options,bound", SYNC_BOUNDS, ids=[b[0] for b in SYNC_BOUNDS])
def test_host_syncs_per_step_do_not_grow_with_the_draft(lm, method, options, bound):
    prompt = " ".join([PROMPT] * 3)                  # long copies: drafts of many nodes get accepted
    with fake_cuda(lm) as fake:
        gen = multidraft.generate(lm, prompt, method=method, max_new_tokens=24, **options)
    assert fake.syncs <= bound * gen.stats.target_calls, fake.sync_sites


@pytest.mark.parametrize("dtype,names", [
    (torch.bfloat16, ("beam", "superposed-ngram", "pld_plus-attention", "speculative", "blockwise-none")),
    pytest.param(torch.bfloat16, None, marks=pytest.mark.slow), pytest.param(torch.float64, None, marks=pytest.mark.slow)],
    ids=["bfloat16-trees-beams-heads", "bfloat16-all", "float64-all"])
def test_every_method_runs_in_the_model_dtype(dtype, names, tiny_ngram):
    lm = make_tiny_lm("llama", seed=2)
    draft = make_tiny_lm("llama", seed=3)
    lm.model.to(dtype)
    draft.model.to(dtype)
    for name, method, options in CASES:
        if names is not None and name not in names:
            continue
        gen = multidraft.generate(lm, PROMPT, method=method, max_new_tokens=8, **fill(options, lm, draft, tiny_ngram))
        assert 0 < len(gen.token_ids) <= 8 and all(0 <= t < lm.vocab_size for t in gen.token_ids), name


def test_device_names_are_checked_before_loading():
    from multidraft.errors import InvalidOptionError
    from multidraft.models.device import parse_device

    assert parse_device("cpu") == "cpu"
    assert parse_device(None) == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(InvalidOptionError, match="cpu, cuda or cuda:N"):
        parse_device("gpu0")
    with pytest.raises(InvalidOptionError, match="meta"):
        parse_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(InvalidOptionError, match="sees no CUDA GPU"):
            parse_device("cuda")
