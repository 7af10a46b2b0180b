"""multidraft.eval.tasks: deterministic prompts built from pulled data, >= 20 per task."""

import os

import pytest

from multidraft import data
from multidraft.errors import DataNotFoundError, InvalidOptionError
from multidraft.eval import tasks
from multidraft.eval.tasks import TASKS, load_task, required_data


def need(name):
    missing = [d for d in required_data(name) if not data.is_pulled(d)]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must pull {missing} (multidraft data pull ...)")
        pytest.skip(f"data not pulled: {missing}")


@pytest.mark.parametrize("name", TASKS)
def test_task_is_deterministic_and_large_enough(name):
    need(name)
    first = load_task(name)
    tasks._CACHE.clear()
    for builder in (tasks._stdlib_functions, tasks._doc_sections, tasks._paragraphs):
        builder.cache_clear()
    again = load_task(name)
    assert len(first) >= 20
    assert [vars(a) for a in first] == [vars(b) for b in again]
    assert len({item.id for item in first}) == len(first)
    for item in first:
        assert item.task == name and item.source
        assert (item.messages is None) != (item.prompt is None)
        text = item.prompt if item.prompt is not None else item.messages[-1]["content"]
        assert isinstance(text, str) and text.strip()
    assert [vars(a) for a in load_task(name, limit=3)] == [vars(a) for a in first[:3]]


def test_code_edit_covers_every_edit_and_plants_real_bugs():
    need("code_edit")
    items = load_task("code_edit")
    assert {i.meta["edit"] for i in items} == {"rename", "type_hints", "docstring", "convert_loop", "fix_bug"}
    for item in items:
        assert "```python\n" in item.messages[0]["content"]
        if item.meta["edit"] == "fix_bug":
            assert item.meta["fixed_source"] not in item.messages[0]["content"]


@pytest.mark.parametrize("split", tasks.SPLITS)
def test_code_edit_long_asks_the_same_edits_inside_the_module(split):
    need("code_edit_long")
    short, long = load_task("code_edit", split=split), load_task("code_edit_long", split=split)
    assert len(long) == len(short) and [i.meta for i in long] == [i.meta for i in short]
    for brief, item in zip(short, long):
        text, function = item.messages[0]["content"], item.meta["function"]
        shown = brief.messages[0]["content"].split("```python\n")[1].removesuffix("\n```")
        excerpt = text.split("```python\n")[1].split("\n```")[0]
        assert shown in excerpt and len(excerpt) > len(shown)           # the function as code_edit shows it, in context
        assert len(excerpt) <= tasks.LONG_CONTEXT_CHARS and f"`{function}`" in text.split("```")[-1]
        module = (data.path("cpython-stdlib") / "files" / item.meta["module"]).read_text(encoding="utf-8",
                                                                                       errors="replace")
        lines = excerpt.splitlines()
        if item.meta["edit"] == "fix_bug":          # the planted bug replaces the function; the rest is the file
            assert item.meta["fixed_source"] not in text
            module = module.replace(item.meta["fixed_source"], shown)
        assert "\n".join(lines) in module                 # consecutive lines of the file
    # a long prompt: most modules fill the excerpt
    filled = [i for i in long if len(i.messages[0]["content"]) > tasks.LONG_CONTEXT_CHARS * 0.9]
    assert len(filled) >= len(long) // 2


def test_summarize_mixes_docs_and_sharegpt():
    need("summarize")
    sources = {i.source.split(":")[0] for i in load_task("summarize")}
    assert sources == {"linux-doc", "sharegpt"}


def test_chat_turns_build_the_second_prompt_from_the_first_answer():
    need("chat")
    item = load_task("chat", limit=1)[0]
    assert item.num_turns == 2 and item.input == [{"role": "user", "content": item.turns[0]}]
    second = item.turn_messages(1, ["my first answer"])
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"] == "my first answer" and second[2]["content"] == item.turns[1]
    with pytest.raises(InvalidOptionError):
        item.turn_messages(1, [])


def test_unknown_task_bad_limit_and_missing_data(tmp_path, monkeypatch):
    with pytest.raises(InvalidOptionError, match="code_edit"):
        load_task("translation")
    with pytest.raises(InvalidOptionError):
        load_task("chat", limit=0)
    monkeypatch.setenv("MULTIDRAFT_HOME", str(tmp_path))
    monkeypatch.setattr(tasks, "_CACHE", {})
    with pytest.raises(DataNotFoundError, match="multidraft data pull"):
        load_task("text_edit")
