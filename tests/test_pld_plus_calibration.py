"""PLD+ calibration: the sweep reads the drafter's vectors, the layer tie rule, the validation split, the record."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import multidraft
from multidraft import data
from multidraft.errors import InvalidOptionError
from multidraft.eval.tasks import VALIDATION_TASKS, load_task, required_data
from multidraft.pldplus import calibration
from multidraft.pldplus import induction
from multidraft.pldplus.layer_choice import bootstrap, choose_layer, middle_band
from multidraft.pldplus.sweep import all_hidden_states
from tests.tiny_models import make_tiny_lm

PROMPT = "the cat sat on the mat and the cat sat on the"


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny_lm(request):
    lm = make_tiny_lm(request.param, seed=2, attn_implementation="eager", num_hidden_layers=3)
    with torch.no_grad():     # a final norm that is not a pure rescaling, so pre- and post-norm vectors differ
        lm.model.model.norm.weight.copy_(torch.linspace(0.2, 3.0, lm.hidden_size))
    return lm


# ----- the sweep and the drafter read the same vector at every layer -----
def test_sweep_reads_what_the_drafter_captures_at_every_layer(tiny_lm):
    seq = tiny_lm.encode(PROMPT) + tiny_lm.encode(PROMPT)
    swept = all_hidden_states(tiny_lm, seq)
    assert swept.shape == (tiny_lm.num_layers + 1, len(seq), tiny_lm.hidden_size)
    for layer in range(tiny_lm.num_layers + 1):
        captured = tiny_lm.forward(tiny_lm.new_cache(), seq, hidden_layer=layer).hidden
        torch.testing.assert_close(swept[layer], captured.cpu(), rtol=0, atol=1e-6)
    # Why the sweep no longer uses HF's output_hidden_states: its last entry is after the final norm.
    hf_last = tiny_lm.model(torch.tensor([seq]), output_hidden_states=True).hidden_states[-1][0]
    assert not torch.allclose(hf_last, swept[-1], atol=1e-3)


def test_drafter_store_equals_the_sweep_rows_at_the_last_layer(tiny_lm):
    from tests.test_pld_plus import Checked, run_loop
    layer = tiny_lm.num_layers
    drafter = Checked(tiny_lm, rank_by="hidden", layer=layer, num_draft_tokens=6)
    ids, tokens, stats = run_loop(tiny_lm, PROMPT, drafter, max_new_tokens=20)
    assert stats.generated_tokens > stats.verification_calls      # some drafts were accepted
    seq = ids + tokens
    rows = drafter.hidden_store.rows                      # positions the loop's forwards covered (its last step's
    assert len(ids) < rows.shape[0] < len(seq)            # bonus token is never fed)
    torch.testing.assert_close(rows, all_hidden_states(tiny_lm, seq[: rows.shape[0]])[layer], rtol=0, atol=1e-4)


# ----- the tie rule -----
def counts_from_aal(per_prompt_aal, steps=1000):
    """(prompts, layers, 2) counts with the given per-prompt acceptance lengths (tokens = aal * steps)."""
    aal = np.asarray(per_prompt_aal, dtype=np.float64)
    return np.stack([np.rint(aal * steps), np.full_like(aal, steps)], axis=-1)


def test_middle_band_is_the_papers_9_to_13_of_32():
    assert middle_band(32) == [9, 10, 11, 12, 13]
    assert middle_band(30) == [9, 10, 11, 12]
    assert middle_band(24) == [7, 8, 9]
    assert middle_band(2) == [1]          # too shallow for the band: the nearest layer


def test_a_layer_within_noise_of_the_best_loses_to_the_middle_band():
    rng = np.random.default_rng(0)
    prompts, layers = 12, 30
    base = 2.5 + rng.normal(0, 0.3, size=(prompts, 1))
    aal = np.repeat(base - 0.2, layers, axis=1)
    aal[:, 10] = base[:, 0]                                       # layer 11 (in the band) ...
    aal[:, 0] = base[:, 0] + np.tile([0.32, -0.28], prompts // 2)  # ... and layer 1, ahead by 0.02 on average,
    choice = choose_layer(counts_from_aal(aal))                    # well within its prompt-to-prompt spread
    assert choice["best"] == 1
    assert choice["layer"] == 11
    assert choice["curve"][11]["tied_with_best"] and not choice["curve"][10]["tied_with_best"]
    assert "within noise" in choice["rule"]


def test_a_layer_measurably_better_than_the_band_wins():
    rng = np.random.default_rng(1)
    prompts, layers = 12, 30
    aal = 2.5 + rng.normal(0, 0.3, size=(prompts, 1)) + rng.normal(0, 0.02, size=(prompts, layers))
    aal[:, 19] += 0.6                                             # layer 20: better on every prompt
    choice = choose_layer(counts_from_aal(aal))
    assert choice["best"] == choice["layer"] == 20
    assert not any(choice["curve"][l]["tied_with_best"] for l in middle_band(layers))


def test_the_best_layer_in_the_band_is_kept():
    aal = np.full((6, 30), 2.0)
    aal[:, 10] = 2.2
    choice = choose_layer(counts_from_aal(aal))
    assert choice["layer"] == choice["best"] == 11


def test_intervals_bracket_the_pooled_estimate_and_shrink_with_more_prompts():
    rng = np.random.default_rng(2)
    few = counts_from_aal(2.5 + rng.normal(0, 0.3, size=(5, 4)))
    many = counts_from_aal(2.5 + rng.normal(0, 0.3, size=(80, 4)))
    for counts in (few, many):
        for point in choose_layer(counts)["curve"].values():
            assert point["low"] <= point["aal"] <= point["high"]
    width = lambda c: np.mean([p["high"] - p["low"] for p in choose_layer(c)["curve"].values()])  # noqa: E731
    assert width(many) < width(few)
    assert bootstrap(few, resamples=50).shape == (50, 4)
    with pytest.raises(InvalidOptionError):
        bootstrap(np.zeros((0, 4, 2)))


# ----- calibrate's record, and older records -----
def test_calibrate_records_the_curve_and_follows_the_rule(tiny_lm, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    prompts = []
    for prompt in (PROMPT, "def x ( y ) : return x + 1 def x ( y ) : return"):
        text = prompt + " " + multidraft.generate(tiny_lm, prompt, max_new_tokens=10).text
        prompts.append(text + " " + text)
    record = induction.calibrate(tiny_lm, prompts, gen_len=16, top_k=5, labels=["a", "b"])
    assert sum(record["events_by_task"].values()) == record["events"] and set(record["events_by_task"]) == {"a", "b"}
    counts = np.asarray(record["layer_counts"])
    assert counts.shape == (2, tiny_lm.num_layers, 2)
    assert record["layer"] == choose_layer(counts)["layer"]
    assert set(record["layer_curve"]) == {str(l) for l in range(1, tiny_lm.num_layers + 1)}
    calibration.save(record)
    assert calibration.default_layer(tiny_lm) == record["layer"]
    with pytest.raises(InvalidOptionError, match="labels"):
        induction.calibrate(tiny_lm, prompts, gen_len=4, labels=["a"])


def test_records_of_the_first_format_still_load(tiny_lm, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    old = {"layer": 2, "layer_sweep": {"1": 2.0, "2": 2.1}, "format": 1, "model": tiny_lm.name,
           "num_layers": tiny_lm.num_layers, "num_heads": tiny_lm.num_heads, "heads": [[0, 1, 5], [1, 2, 3]]}
    path = calibration.cache_file(tiny_lm.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(old))
    assert calibration.default_layer(tiny_lm) == 2
    assert calibration.default_induction_heads(tiny_lm, 5) == [(0, 1), (1, 2)]


# ----- the validation split -----
def _pulled(task):
    return all(data.is_pulled(d) for d in required_data(task))


@pytest.mark.parametrize("task", VALIDATION_TASKS)
def test_validation_prompts_never_appear_in_the_test_split(task):
    if not _pulled(task):
        pytest.skip(f"data for {task} not pulled")
    test = load_task(task)
    validation = load_task(task, split="validation")
    from multidraft.eval import agentic
    size = agentic.EPISODES if task.startswith("agent_") else 40       # agent tasks: episodes of several steps
    assert len(validation) == len(test) == size
    assert not {repr(t.input) for t in test} & {repr(v.input) for v in validation}
    assert not {t.id for t in test} & {v.id for v in validation}
    assert [t.id for t in load_task(task, limit=3)] == [t.id for t in test[:3]]     # default split unchanged


def test_split_errors():
    with pytest.raises(InvalidOptionError, match="unknown split"):
        load_task("code_edit", split="train")
    with pytest.raises(InvalidOptionError, match="no validation split"):
        load_task("chat", split="validation")


def test_shipped_calibrations_load_from_the_renamed_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))       # empty cache: only the package data can answer
    record = calibration.load_record("smollm2-135m")
    assert record is not None and record["source"].endswith("calibrations/smollm2-135m.json")
    assert record["induction_heads"] and all(len(pair) == 2 for pair in record["induction_heads"])


def test_a_record_without_induction_heads_is_a_clear_error(tmp_path, monkeypatch):
    from multidraft.errors import CorruptCacheError
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    path = calibration.cache_file("some-model")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"layer": 3}))
    with pytest.raises(CorruptCacheError, match="calibrate --model some-model"):
        calibration.load_record("some-model")


def test_merging_per_task_runs_equals_one_run_over_all_prompts(tiny_lm, tmp_path):
    prompts = []
    for prompt in (PROMPT, "def x ( y ) : return x + 1 def x ( y ) : return"):
        text = prompt + " " + multidraft.generate(tiny_lm, prompt, max_new_tokens=10).text
        prompts.append(text + " " + text)
    together = induction.calibrate(tiny_lm, prompts, gen_len=16, top_k=1000, labels=["a", "b"])
    parts = [induction.calibrate(tiny_lm, [p], gen_len=16, top_k=1000, labels=[label])
             for p, label in zip(prompts, "ab")]
    merged = induction.merge_records(parts, top_k=1000)
    for key in ("events", "events_by_task", "induction_heads", "layer", "layer_curve", "layer_counts", "num_prompts"):
        assert merged[key] == together[key], key
    with pytest.raises(InvalidOptionError, match="top-k"):
        induction.merge_records([induction.calibrate(tiny_lm, prompts[:1], gen_len=16, top_k=1)])


# ----- the faster calibration path gives what the old one gave -----
def old_calibration_counts(lm, prompts, gen_len):
    """The calibration as it ran before: token-by-token greedy, one forward for the attention argmax, another
    for the hidden states of seq[:-1]; (hits, events, per-prompt layer counts)."""
    from multidraft.pldplus.sweep import sweep_counts
    hits, events, layer_counts = 0, 0, []
    for prompt in prompts:
        ids = lm.encode(prompt)
        seq = ids + multidraft.generate(lm, ids, method="greedy", max_new_tokens=gen_len).token_ids
        prompt_hits, prompt_events = induction.count_hits(induction.attention_argmax(lm, seq), seq, len(ids))
        hits, events = hits + prompt_hits, events + prompt_events
        layer_counts.append(sweep_counts(lm, seq, len(ids)))      # its own forward over seq[:-1]
    return hits, events, np.stack(layer_counts)


@pytest.mark.parametrize("decode_method", ["greedy", "pld"])
def test_one_forward_and_drafted_greedy_give_the_old_calibration(tiny_lm, decode_method):
    prompts = []
    for prompt in (PROMPT, "def x ( y ) : return x + 1 def x ( y ) : return"):
        text = prompt + " " + multidraft.generate(tiny_lm, prompt, max_new_tokens=10).text
        prompts.append(text + " " + text)
    hits, events, counts = old_calibration_counts(tiny_lm, prompts, gen_len=24)
    record = induction.calibrate(tiny_lm, prompts, gen_len=24, top_k=1000, decode_method=decode_method)
    assert events > 10 and record["events"] == events
    assert record["induction_heads"] == [list(h) for h in induction.rank_heads(hits)]
    assert np.array_equal(np.asarray(record["layer_counts"]), counts)
    assert record["layer"] == choose_layer(counts)["layer"]
    assert record["decode"] == {"method": decode_method, "runner": tiny_lm.runner}


def test_one_forward_reads_the_same_argmax_and_hidden_states(tiny_lm):
    seq = tiny_lm.encode(PROMPT) * 2
    argmax, hidden = induction.attention_argmax_and_hidden(tiny_lm, seq)
    assert np.array_equal(argmax, induction.attention_argmax(tiny_lm, seq))
    torch.testing.assert_close(hidden[:, :-1], all_hidden_states(tiny_lm, seq[:-1]), rtol=0, atol=1e-5)


def test_calibration_refuses_a_lossy_decoder(tiny_lm):
    with pytest.raises(InvalidOptionError, match="not lossless"):
        induction.calibrate(tiny_lm, [PROMPT], gen_len=4, decode_method="beam")


# ----- the shipped files (issue #21: >= 1,000 copy events from validation prompts, the tie rule's layer; not every
# registry model ships one yet, e.g. gemma3-270m) -----
SHIPPED = sorted(path.stem for path in (Path(calibration.__file__).parent / "calibrations").glob("*.json"))


@pytest.mark.parametrize("alias", SHIPPED)
def test_every_shipped_calibration_rests_on_enough_validation_events(alias, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))       # empty cache: only the package data can answer
    record = calibration.load_record(alias)
    assert record is not None and record["source"].endswith(f"calibrations/{alias}.json")
    assert record["format"] == induction.FORMAT_VERSION and record["model"] == alias
    assert record["events"] >= 1000 and sum(record["events_by_task"].values()) == record["events"]
    assert set(record["events_by_task"]) == {"code_edit", "text_edit", "summarize"}
    assert record["split"] == "validation" and all("/val-" in p for p in record["prompt_ids"])
    assert len(record["prompt_ids"]) == record["num_prompts"]
    counts = np.asarray(record["layer_counts"])
    assert counts.shape == (record["num_prompts"], record["num_layers"], 2)
    assert record["layer"] == choose_layer(counts)["layer"]          # the tie rule, re-derived from the counts
    assert len(record["induction_heads"]) == 50
