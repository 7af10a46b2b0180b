"""method="blockwise": greedy equality for every rescoring mode, plain BPD at k=1, online == offline, bad input."""

import copy

import numpy as np
import pytest
import torch

import multidraft
from multidraft.blockwise.drafter import BlockwiseStrategy
from multidraft.blockwise.evaluation import OfflineRun, analyse
from multidraft.blockwise.lattice import matched_length, oracle_length
from multidraft.errors import InvalidOptionError, MultidraftError
from multidraft.ngram import NGramModel, build
from multidraft.ngram.corpus import tokenizer_fingerprint
from multidraft.models.runner import LM
from tests.tiny_models import make_tiny_hf_model, make_tiny_lm, make_tokenizer, random_heads

PROMPTS = ["the cat sat on the mat and", "def x ( y ) : return", "a"]


MODES = [dict(rescoring="none", lattice_k=1, num_paths=1), dict(rescoring="none", lattice_k=4, num_paths=3),
         dict(rescoring="ngram", lattice_k=4, num_paths=1), dict(rescoring="ngram", lattice_k=3, num_paths=4, ngram_order=2),
         dict(rescoring="neural", lattice_k=4, num_paths=1), dict(rescoring="neural", lattice_k=4, num_paths=2)]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(str(v) for v in m.values()))
def test_greedy_equality_every_mode(tiny_lm, tiny_ngram, mode):
    heads = random_heads(tiny_lm)
    rescorer = make_tiny_lm("llama", seed=5, hidden_size=16, intermediate_size=32) if mode["rescoring"] == "neural" else None
    for prompt in PROMPTS:
        want = multidraft.generate(tiny_lm, prompt, max_new_tokens=24).token_ids
        got = multidraft.generate(tiny_lm, prompt, method="blockwise", max_new_tokens=24, heads=heads,
                                  ngram=tiny_ngram, rescorer=rescorer, **mode)
        assert got.token_ids == want
        assert got.stats.lossless and got.stats.verification_calls <= len(want)


def test_neural_rescoring_without_a_rescorer_is_an_error(tiny_llama, tiny_ngram):
    """No silent switch to n-gram rescoring: the user asked for a neural rescorer and gave none."""
    with pytest.raises(InvalidOptionError, match="rescorer="):
        multidraft.generate(tiny_llama, PROMPTS[0], method="blockwise", max_new_tokens=5,
                            heads=random_heads(tiny_llama), ngram=tiny_ngram, rescoring="neural", lattice_k=3)


def test_heads_without_a_recorded_layer_still_draft(tiny_llama):
    """Heads whose file records no hidden_layer read the base's last layer from the first step on (the loop
    asks the drafter what to capture before begin(), so a fallback set in begin() captured nothing)."""
    heads = random_heads(tiny_llama, 4, scale=0.05)
    del heads.meta["hidden_layer"]
    got = multidraft.generate(tiny_llama, PROMPTS[0], method="blockwise", max_new_tokens=16, heads=heads,
                              rescoring="none", lattice_k=1, num_paths=1)
    assert got.token_ids == multidraft.generate(tiny_llama, PROMPTS[0], max_new_tokens=16).token_ids
    assert got.stats.draft_tokens_proposed > 0 and got.stats.draft_calls > 0


def test_missing_ngram_files_name_the_build_command(tiny_llama, tmp_path, monkeypatch):
    """Blockwise and Superposed share one n-gram resolver: same error class, same advice."""
    from multidraft.errors import DataNotFoundError
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    heads = random_heads(tiny_llama)
    with pytest.raises(DataNotFoundError, match="multidraft ngram build"):
        multidraft.generate(tiny_llama, "the cat", method="blockwise", max_new_tokens=4, heads=heads,
                            ngram_path=str(tmp_path / "missing.ngram"))
    with pytest.raises(DataNotFoundError, match="multidraft ngram build-default --model"):
        multidraft.generate(tiny_llama, "the cat", method="blockwise", max_new_tokens=4, heads=heads)


def test_k1_is_plain_bpd(tiny_llama, tiny_ngram):
    """k=1: every strategy proposes each head's argmax after the certain token."""
    heads = random_heads(tiny_llama, 5)
    out = tiny_llama.forward(tiny_llama.new_cache(), [1, 4, 8, 9], hidden_layer=tiny_llama.num_layers)
    logits = heads.draft_logits(out.hidden[-1])
    argmax = logits.argmax(-1).tolist()
    for strategy in (BlockwiseStrategy("none", 1, 1), BlockwiseStrategy("ngram", 1, 3, 2.0, tiny_ngram, 3)):
        lattice = strategy.lattice(9, logits, heads.token_ids)
        assert lattice.num_paths() == 1 and strategy.drafts(lattice, [1, 4, 8, 9]) == [argmax]


def test_offline_evaluator_matches_online_loop(tiny_llama, tiny_ngram):
    """Same per-step gains online and offline (bpd.md §8 7). float64: heads close to head 1 make near-tied
    lattice paths, and fp32 noise between the incremental and the full forward would reorder them."""
    lm = make_tiny_lm("llama", seed=2)
    lm.model.double()
    heads = random_heads(lm, 4, seed=1, scale=0.05).double().bind(lm)    # close to head 1: some drafts accepted
    for mode in (dict(rescoring="none", lattice_k=1, num_paths=1), dict(rescoring="ngram", lattice_k=4, num_paths=3)):
        strategy = BlockwiseStrategy(mode["rescoring"], mode["lattice_k"], mode["num_paths"], 1.0, tiny_ngram, 3)
        for prompt in PROMPTS:
            online = multidraft.generate(lm, prompt, method="blockwise", max_new_tokens=40, heads=heads,
                                         ngram=tiny_ngram, draft_length="fixed", **mode)   # the offline model
            run = OfflineRun(lm, heads, lm.encode(prompt), 40, greedy_ids=online.token_ids)
            offline = run.run(strategy)
            hist = {n: offline.steps.count(n) for n in set(offline.steps)}
            assert offline.calls == online.stats.verification_calls
            assert hist == online.stats.acceptance_histogram
            assert offline.block_efficiency == pytest.approx(online.stats.mean_acceptance_length)
    report = analyse(run, BlockwiseStrategy("ngram", 4, 1, 1.0, tiny_ngram, 2), ks=(1, 2, 4))
    assert report["oracle"][1] == pytest.approx(run.run(BlockwiseStrategy()).block_efficiency)
    # Oracle block efficiency need not grow with k over a whole sequence (different steps follow, A10), but at any
    # one step a wider lattice matches at least as far: its columns hold the narrower one's tokens.
    for decided in range(1, run.total):
        gains = [oracle_length(run.lattice(decided, k), run.future(decided)) for k in (1, 2, 4)]
        assert gains == sorted(gains), (decided, gains)
    # ... and the oracle path of a lattice matches at least as far as any strategy's drafts through that lattice.
    strategies = [BlockwiseStrategy("none", 4, 3), BlockwiseStrategy("ngram", 4, 3, 1.0, tiny_ngram, 3),
                  BlockwiseStrategy("ngram", 2, 1, 1.0, tiny_ngram, 2)]
    checked = 0
    for decided in range(run.total):
        future = run.future(decided)
        for strategy in strategies:
            lattice = run.lattice(decided, strategy.lattice_k)
            if lattice is None:
                continue
            drafts = strategy.drafts(lattice, run.context(decided))
            best = max(matched_length(draft, future) for draft in drafts)
            assert oracle_length(lattice, future) >= best, (decided, strategy.rescoring)
            checked += 1
    assert checked >= len(strategies) * (run.total - 1)
    wtl = report["win_tie_loss"]
    assert wtl["wins"] + wtl["ties"] + wtl["losses"] == report["steps"] - (1 if len(lm.encode(PROMPTS[-1])) < 2 else 0)


def test_always_right_heads_accept_whole_blocks(tiny_llama):
    """A strategy that always proposes the true greedy future gains h tokens per call (bpd.md §8 4)."""
    lm = tiny_llama
    greedy = multidraft.generate(lm, PROMPTS[0], max_new_tokens=25).token_ids
    run = OfflineRun(lm, random_heads(lm, 4), lm.encode(PROMPTS[0]), 25, greedy_ids=greedy)
    steps = run.run_oracle(k=lm.vocab_size).steps      # every true token is in a full-vocabulary lattice
    assert steps[:-1] == [4] * (len(steps) - 1) and sum(steps) == 25


def test_bad_options(tiny_llama, tiny_ngram):
    heads = random_heads(tiny_llama, 3)
    generate = lambda **kw: multidraft.generate(tiny_llama, "the cat", method="blockwise", max_new_tokens=5,
                                                heads=heads, ngram=tiny_ngram, **kw)
    with pytest.raises(InvalidOptionError, match="lattice_k"):
        BlockwiseStrategy("none", 0, 1)
    for bad in (dict(lattice_k=0), dict(lattice_k=-1), dict(num_paths=0), dict(lattice_k=1.5), dict(rescoring="bogus"),
                dict(num_heads=4), dict(ngram_order=9), dict(alpha=-1.0)):
        with pytest.raises(InvalidOptionError):
            generate(**bad)
    other_tokenizer = copy.deepcopy(make_tokenizer())
    other_tokenizer.add_tokens(["zebra"])
    with pytest.raises(MultidraftError, match="tokenizer"):
        generate(rescoring="neural", rescorer=LM(make_tiny_hf_model("llama", 3), other_tokenizer))
    with pytest.raises(InvalidOptionError, match="temperature"):
        multidraft.generate(tiny_llama, "the cat", method="blockwise", temperature=0.7, heads=heads)
    with pytest.raises(InvalidOptionError, match="trained for base model"):
        multidraft.generate(make_tiny_lm("llama", seed=9), "the cat", method="blockwise", heads=_saved(heads, tiny_llama))


_SAVED = {}


def _saved(heads, lm):
    import tempfile

    from multidraft.blockwise import save_heads
    if "path" not in _SAVED:
        _SAVED["path"] = save_heads(heads, tempfile.mkdtemp() + "/h.pt", lm)
    return str(_SAVED["path"])


@pytest.mark.real_model
def test_smollm_trained_heads_greedy_equality(smollm, tmp_path):
    """Heads trained by the real training code on SmolLM2's own hidden states (a short run: equality must hold
    whatever their quality), an n-gram counted on real text, and a neural rescorer: every mode equals greedy."""
    import inspect

    from multidraft.blockwise import load_heads
    from multidraft.blockwise.heads_data import hidden_rows
    from multidraft.blockwise.heads_train import TrainConfig, train_heads

    texts = [inspect.getsource(module) for module in (copy, inspect)]
    data = hidden_rows(smollm, [smollm.encode(text)[:192] for text in texts])
    config = TrainConfig(num_heads=4, ffn_size=64, shortlist_size=512, batch_size=64, minutes=0, max_steps=30,
                         val_fraction=0.5)
    train_heads(smollm, data, config, tmp_path / "heads.pt", corpus="test")
    heads = load_heads(smollm, tmp_path / "heads.pt")
    ngram_path = tmp_path / "smol.ngram"
    build([np.asarray(smollm.encode(text), dtype=np.uint32) for text in texts], smollm.vocab_size, ngram_path,
          max_order=4, tokenizer_fingerprint=tokenizer_fingerprint(smollm.tokenizer))
    ngram = NGramModel.load(ngram_path, tokenizer=smollm.tokenizer)
    rescorer = smollm   # no smaller model shares its tokenizer; the scorer keeps a KV cache of its own
    prompt = "def fibonacci(n):\n"
    want = multidraft.generate(smollm, prompt, max_new_tokens=24).token_ids
    modes = [dict(rescoring="none", lattice_k=1, num_paths=1), dict(rescoring="none", lattice_k=4, num_paths=2),
             dict(rescoring="ngram", lattice_k=4, num_paths=2), dict(rescoring="neural", lattice_k=4, num_paths=1)]
    for mode in modes:
        got = multidraft.generate(smollm, prompt, method="blockwise", max_new_tokens=24, heads=heads, ngram=ngram,
                                  rescorer=rescorer if mode["rescoring"] == "neural" else None, **mode)
        assert got.token_ids == want, mode
        assert got.stats.verification_calls <= len(want)
