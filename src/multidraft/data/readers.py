"""Read pulled data sets: plain texts for corpora, structured records for evaluation sets."""

import json
from pathlib import Path
from typing import Iterator

from multidraft.data.registry import get
from multidraft.data.store import path
from multidraft.errors import InvalidOptionError


def _jsonl(file: Path) -> list[dict]:
    with open(file, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def iter_document_paths(name: str) -> Iterator[Path]:
    """Files of a file-tree corpus, in a stable (sorted) order."""
    files = path(name) / "files"
    yield from sorted(p for p in files.rglob("*") if p.is_file())


def iter_documents(name: str, roles=("human", "gpt")) -> Iterator[str]:
    """The texts of a data set, one document at a time (n-grams never cross documents).

    File-tree corpora yield one text per file. ShareGPT yields one text per message whose role is in
    `roles` (e.g. `roles=("gpt",)` for the assistant answers only). Eval sets yield their prompts.
    """
    get(name)
    if name == "sharegpt":
        for conv in load_sharegpt_conversations():
            for message in conv["conversations"]:
                if message["from"] in roles and message["value"]:
                    yield message["value"]
    elif name == "humaneval":
        for problem in load_humaneval():
            yield problem["prompt"] + problem["canonical_solution"]
    elif name in ("mt-bench", "vicuna"):
        for question in _load_chat_bench(name):
            yield from question["turns"]
    else:
        for file in iter_document_paths(name):
            yield file.read_text(encoding="utf-8", errors="replace")


def load_sharegpt_conversations(min_messages: int = 0) -> list[dict]:
    """ShareGPT conversations: `{"id", "conversations": [{"from": "human"|"gpt"|..., "value"}]}`."""
    convs = _jsonl(path("sharegpt") / "conversations.jsonl")
    return [c for c in convs if len(c["conversations"]) >= min_messages] if min_messages else convs


def load_humaneval() -> list[dict]:
    """The 164 HumanEval problems: task_id, prompt, canonical_solution, test, entry_point."""
    return _jsonl(path("humaneval") / "HumanEval.jsonl")


def _load_chat_bench(name: str) -> list[dict]:
    folder = path(name)
    questions = _jsonl(folder / "questions.jsonl")
    references = {r["question_id"]: r["choices"][0]["turns"] for r in _jsonl(folder / "references.jsonl")}
    for question in questions:
        question["reference"] = references.get(question["question_id"])
    return questions


def load_mt_bench(category: str | None = None) -> list[dict]:
    """MT-Bench: 80 questions `{question_id, category, turns: [2 str], reference: [str] | None}`."""
    questions = _load_chat_bench("mt-bench")
    if category is not None:
        known = sorted({q["category"] for q in questions})
        if category not in known:
            raise InvalidOptionError(f"unknown MT-Bench category {category!r}; known: {', '.join(known)}")
        questions = [q for q in questions if q["category"] == category]
    return questions


def load_vicuna() -> list[dict]:
    """Vicuna-80: `{question_id, category, turns: [str], reference: [str] | None}`."""
    return _load_chat_bench("vicuna")
