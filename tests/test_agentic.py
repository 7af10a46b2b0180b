"""Agent-style episodes (eval/agentic.py) and the count replay that tunes suffix on them (eval/drafter_replay.py)."""

import argparse
import json

import pytest

import multidraft
from multidraft import data
from multidraft.decoders import loop
from multidraft.drafters.prompt_lookup import PromptLookupDrafter
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.errors import InvalidOptionError
from multidraft.eval import agentic, tasks
from multidraft.eval.bench import check_tasks
from multidraft.eval.drafter_replay import FixedCosts, adaptive_policy, cost_curve, replay
from multidraft.eval.presets import agentic as agentic_preset
from multidraft.eval.tasks import load_task
from multidraft.suffix import SuffixStore
from multidraft.tokenizer_identity import model_vocab_fingerprint
from tests.test_tasks import need


def answers_for(item, marker="ANSWER"):
    return [f"{marker}-{item.id}-{step}" for step in range(item.num_turns)]


@pytest.mark.parametrize("name", agentic.AGENT_TASKS)
def test_episodes_are_deterministic_and_splits_disjoint(name):
    need(name)
    test, validation = load_task(name), load_task(name, split="validation")
    tasks._CACHE.clear()
    if name == "agent_edit":
        tasks._stdlib_functions.cache_clear()
    assert [vars(a) for a in test] == [vars(b) for b in load_task(name)]
    assert [vars(a) for a in validation] == [vars(b) for b in load_task(name, split="validation")]
    assert len(test) == len(validation) == agentic.EPISODES
    assert not {i.source for i in test} & {i.source for i in validation}
    assert not {i.id for i in test} & {i.id for i in validation}
    for item in test + validation:
        assert 4 <= item.num_turns <= 8
        assert item.input == item.turn_messages(0, [])


@pytest.mark.parametrize("name", agentic.AGENT_TASKS)
def test_every_step_quotes_the_previous_answer(name):
    need(name)
    for item in load_task(name, limit=3):
        answers = answers_for(item)
        for step in range(1, item.num_turns):
            text = "\n".join(m["content"] for m in item.turn_messages(step, answers[:step]))
            assert answers[step - 1] in text
            assert item.turns[step].split("\n")[0][:40] in text      # this step's own instruction / failure
            assert answers[step] not in text                          # nothing from the future
        with pytest.raises(InvalidOptionError, match="needs the answers"):
            item.turn_messages(2, answers[:1])


def test_edit_and_fix_prompts_hold_the_code_and_the_tests():
    need("agent_edit")
    need("agent_fix")
    edit = load_task("agent_edit", limit=1)[0]
    assert edit.meta["code"] in edit.input[0]["content"] and "diff" in edit.turns[-1]
    fix = load_task("agent_fix", limit=1)[0]
    text = fix.turn_messages(1, ["previous attempt"])[0]["content"]
    assert fix.meta["code"].rstrip() in text and fix.meta["test"] in text and fix.turns[1] in text
    problem = next(p for p in data.load_humaneval() if p["task_id"] == fix.source)
    assert fix.meta["code"] != problem["prompt"] + problem["canonical_solution"]     # a bug was planted


@pytest.mark.parametrize("name", agentic.AGENT_TASKS)
def test_prompts_fit_the_context_with_full_length_answers(name, smollm):
    """Worst case: every earlier answer as long as a step may be; the prompt plus a full answer still fits."""
    need(name)
    filler = smollm.decode(list(range(1000, 1000 + agentic.MAX_NEW_TOKENS)))
    limit = smollm.model.config.max_position_embeddings
    for item in load_task(name) + load_task(name, split="validation"):
        last = item.num_turns - 1
        ids = smollm.encode(item.turn_messages(last, [filler] * last))
        assert len(ids) + agentic.MAX_NEW_TOKENS <= limit, item.id


def test_agent_tasks_are_bench_tasks():
    check_tasks(list(agentic.AGENT_TASKS))
    assert set(agentic.AGENT_TASKS) <= set(tasks.VALIDATION_TASKS)


def test_bench_runs_an_episode_and_feeds_each_method_its_own_answers(smollm, tmp_path):
    from multidraft.eval.bench import BenchConfig, read_results, run_bench
    need("agent_fix")
    item = load_task("agent_fix", limit=1)[0]
    config = BenchConfig(model="smollm2-135m", tasks=["agent_fix"], methods=["suffix", "pld"], max_new_tokens=6,
                         limit=1)
    run_bench(config, tmp_path, prompts={"agent_fix": [item]}, models=(smollm, None), progress=False, report=False)
    _header, rows = read_results(tmp_path)
    for row in rows:
        assert row["error"] is None and len(row["turns"]) == item.num_turns
        answers = [t["text"] for t in row["turns"]]
        for step in range(1, item.num_turns):
            assert row["turns"][step]["prompt_tokens"] == len(smollm.encode(item.turn_messages(step, answers[:step])))
    assert all(r["equal_greedy"] for r in rows if r["method"] != "hf_greedy")


@pytest.mark.parametrize("options", [{}, {"max_draft_tokens": 5, "min_token_prob": 0.3, "tree": False},
                                     {"alpha": 1.0, "max_draft_tokens": 3}])
def test_replay_counts_equal_the_loop(tiny_lm, options):
    """The replay's verification count and drafted tokens are the loop's, store growth included."""
    prompts = [[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6], [7, 8, 9, 5, 6, 7, 8], [30, 31, 32, 30, 31]]
    loop_store, replay_store = SuffixStore(lm=tiny_lm), SuffixStore(lm=tiny_lm)
    for prompt in prompts:
        gen = multidraft.generate(tiny_lm, prompt, method="suffix", max_new_tokens=24, draft_length="fixed",
                                  store=loop_store, **options)
        counts = replay(SuffixDrafter(tiny_lm, store=replay_store, **options), tiny_lm, prompt, list(gen.token_ids), 24)
        assert counts["calls"] == gen.stats.verification_calls
        assert counts["drafted"] == gen.stats.draft_tokens_proposed
        assert counts["tokens"] == len(gen.token_ids)
        gen = multidraft.generate(tiny_lm, prompt, method="pld", max_new_tokens=24, draft_length="fixed")
        counts = replay(PromptLookupDrafter(), tiny_lm, prompt, list(gen.token_ids), 24)
        assert (counts["calls"], counts["drafted"]) == (gen.stats.verification_calls, gen.stats.draft_tokens_proposed)


def test_adaptive_replay_counts_equal_the_loop(tiny_lm, monkeypatch):
    """On a fixed cost curve the adaptive draft length is a function of the tokens alone: the replay's calls and
    verified draft tokens are the loop's, for both cuttable drafters, and a steeper curve verifies fewer."""
    prompts = [[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6], [7, 8, 9, 5, 6, 7, 8], [30, 31, 32, 30, 31]]
    drafted = {}
    for name, table in (("flat", {1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2, 16: 1.4}), ("steep", {1: 1.0, 2: 1.9, 4: 3.6})):
        monkeypatch.setattr(loop, "forward_costs", lambda lm, past=0, table=table: FixedCosts(table))
        loop_store, replay_store = SuffixStore(lm=tiny_lm), SuffixStore(lm=tiny_lm)
        drafted[name] = 0
        for prompt in prompts:
            for method in ("suffix", "pld"):
                suffix = method == "suffix"
                gen = multidraft.generate(tiny_lm, prompt, method=method, max_new_tokens=24, draft_length="adaptive",
                                          **({"store": loop_store, "alpha": 4.0} if suffix else {}))
                drafter = SuffixDrafter(tiny_lm, store=replay_store, alpha=4.0) if suffix else PromptLookupDrafter()
                counts = replay(drafter, tiny_lm, prompt, list(gen.token_ids), 24, policy=adaptive_policy(table))
                assert (counts["calls"], counts["drafted"]) == (gen.stats.verification_calls,
                                                                gen.stats.draft_tokens_proposed), (name, method, prompt)
                drafted[name] += counts["drafted"]
    assert drafted["steep"] < drafted["flat"]


def test_tune_replays_recorded_steps_under_both_draft_lengths(tiny_lm, tmp_path):
    """`multidraft bench agentic tune` end to end on recorded steps (a stand-in model: EOS ids and the vocabulary's
    fingerprint from meta.json): one row per grid point, pld, and the best without the store."""
    rows = []
    for episode, prompt in enumerate([[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6], [30, 31, 32, 30, 31]]):
        gen = multidraft.generate(tiny_lm, prompt, method="greedy", max_new_tokens=24)
        rows.append({"task": "agent_fix", "id": f"agent_fix/{episode}", "step": 0, "prompt_ids": prompt,
                     "tokens": list(gen.token_ids)})
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "meta.json").write_text(json.dumps({"eos_token_ids": sorted(tiny_lm.eos_token_ids),
                                                    "fingerprint": model_vocab_fingerprint(tiny_lm)}))
    results = {}
    for mode in ("adaptive", "fixed"):
        args = argparse.Namespace(data=str(tmp_path), cost='{"1": 1.0, "2": 1.9, "4": 3.6}', top=5,
                                  grid="[[12], [1.0, 4.0], [0.7], [true]]", max_new_tokens=24, draft_length=mode)
        agentic_preset.tune(args)
        results[mode] = json.loads((tmp_path / "tune.json").read_text())
        total = sum(len(row["tokens"]) for row in rows)
        assert len(results[mode]) == 2 + 1 + 2 and all(r["tokens"] == total for r in results[mode])
        assert sum(1 for r in results[mode] if r.get("pld")) == 1
    drafted = {mode: sum(r["drafted_per_call"] for r in found) for mode, found in results.items()}
    assert drafted["adaptive"] < drafted["fixed"]      # the steep curve cuts drafts that "fixed" verifies


def test_cost_curve_interpolates_and_extrapolates():
    cost = cost_curve({1: 1.0, 2: 1.5, 4: 2.5})
    assert cost(1) == 1.0 and cost(3) == 2.0 and cost(6) == 3.5
    with pytest.raises(ValueError):
        cost_curve({1: 1.0})


def test_chain_drafts_one_path_and_stays_lossless(tiny_lm):
    store = SuffixStore(lm=tiny_lm)
    store.add([1, 2, 3, 4, 1, 2, 5, 6, 1, 2, 3, 7])
    drafter = SuffixDrafter(tiny_lm, store=store, tree=False, min_token_prob=0.0, alpha=4.0)
    from multidraft.drafters.base import LoopState
    state = LoopState(seq=[9, 1, 2], prompt_length=3, lm=tiny_lm, sampler=None, stats=None)
    drafter.begin(state, None)
    draft = drafter.propose(state, 8)
    assert draft.parents == list(range(-1, len(draft.parents) - 1)) and draft.token_ids[0] == 3
    tree = SuffixDrafter(tiny_lm, store=store, min_token_prob=0.0, alpha=4.0)
    tree.begin(state, None)
    assert len(set(tree.propose(state, 8).parents)) < len(tree.propose(state, 8).parents)   # branches somewhere
    prompt = [5, 6, 7, 5, 6, 7, 5]
    greedy = multidraft.generate(tiny_lm, prompt, method="greedy", max_new_tokens=16).token_ids
    assert multidraft.generate(tiny_lm, prompt, method="suffix", max_new_tokens=16, tree=False).token_ids == greedy
    with pytest.raises(InvalidOptionError, match="tree"):
        multidraft.generate(tiny_lm, prompt, method="suffix", tree="no")


def test_suffix_defaults_equal_greedy_over_an_agent_episode(smollm):
    """The shipped (tuned) defaults, with a store shared across the steps, are token-identical to greedy."""
    need("agent_edit")
    item = load_task("agent_edit", split="validation", limit=1)[0]
    store = SuffixStore(lm=smollm)
    answers = []
    for step in range(2):
        ids = smollm.encode(item.turn_messages(step, answers))
        greedy = multidraft.generate(smollm, ids, method="greedy", max_new_tokens=24)
        out = multidraft.generate(smollm, ids, method="suffix", max_new_tokens=24, store=store)
        assert out.token_ids == greedy.token_ids, step
        answers.append(greedy.text)
    assert store.num_documents == 2
