"""Evaluation tasks built deterministically from pulled data (`multidraft data pull NAME`).

    from multidraft.eval.tasks import load_task, TASKS
    for item in load_task("code_edit", limit=5):
        multidraft.generate(lm, item.messages, ...)

Input-guided tasks (the answer copies long stretches of the input; PLD/PLD+ territory):
- code_edit   a real CPython stdlib function + an instruction (rename, type hints, docstring, convert a loop,
              fix a planted bug)                                               needs: cpython-stdlib
- code_edit_long  the same edits, the function shown inside ~9,000 characters of its module (a long prompt: ~2,000-
              3,000 tokens)                                                    needs: cpython-stdlib
- summarize   Linux kernel documentation sections, and ShareGPT "summarize" requests   needs: linux-doc, sharegpt
- text_edit   rewrite / correct a real documentation paragraph                 needs: linux-doc
- chat        MT-Bench two-turn questions (`turns`; see `TaskPrompt.turn_messages`)    needs: mt-bench
Agent episodes (several steps, each prompt re-reading the earlier answers; SuffixDecoding territory, eval/agentic.py):
`agent_edit` (cpython-stdlib), `agent_fix` (humaneval), `agent_chat` (mt-bench).
Other tasks: `humaneval` (raw code completion, needs humaneval) and `autocomplete` (short prefixes of real
prose and code, for superposed decoding; needs linux-doc and cpython-stdlib).
The same data always gives the same prompts in the same order (sorted files, fixed strides, fixed seeds).
"""

from __future__ import annotations

import ast
import functools
import random
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from multidraft import data
from multidraft.eval import agentic
from multidraft.errors import InvalidOptionError

SIZE = 40            # prompts per task (>= 20 each), before `limit`


@dataclass
class TaskPrompt:
    """One evaluation prompt. Chat-style tasks fill `messages`; raw-completion tasks fill `prompt`.

    Multi-turn tasks list every user turn in `turns`; turn i's messages are built with `turn_messages(i, answers)`
    from the model's earlier answers (turn 1's text is then part of turn 2's prompt, as in Spec-Bench).
    """

    id: str
    task: str
    messages: Optional[list[dict]] = None
    prompt: Optional[str] = None
    turns: list[str] = field(default_factory=list)
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    turn_style: str = "chat"     # how later turns are built: "chat" (history), or an agent episode's (eval/agentic.py)

    @property
    def input(self):
        """What to pass to `multidraft.generate` for the first (or only) turn."""
        return self.messages if self.messages is not None else self.prompt

    @property
    def num_turns(self) -> int:
        return max(1, len(self.turns))

    def turn_messages(self, turn: int, answers: list[str]) -> list[dict]:
        """Messages for user turn `turn` (0-based) given the model's answers to the earlier turns."""
        if self.turn_style != "chat":
            return agentic.turn_messages(self, turn, answers)
        if not self.turns:
            if turn != 0 or self.messages is None:
                raise InvalidOptionError(f"task prompt {self.id} has a single turn")
            return self.messages
        if not 0 <= turn < len(self.turns) or len(answers) < turn:
            raise InvalidOptionError(f"task prompt {self.id}: turn {turn} needs the answers of turns 0..{turn - 1}")
        messages = []
        for i in range(turn):
            messages += [{"role": "user", "content": self.turns[i]}, {"role": "assistant", "content": answers[i]}]
        return messages + [{"role": "user", "content": self.turns[turn]}]


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# ----- splits -----
# "test" is what benchmarks run (the original 40 prompts per task, unchanged). "validation" holds other prompts of
# the same sources, disjoint from the test ones, for tuning and calibration (PLD+ layer and heads, issue #21),
# so no hyperparameter is chosen on the prompts it is then measured on.
SPLITS = ("test", "validation")
VALIDATION_TASKS = ("code_edit", "code_edit_long", "summarize", "text_edit", "agent_edit", "agent_fix", "agent_chat")


def _spread(pool: list, count: int, split: str, key: Callable = repr) -> list:
    """`count` items spread evenly over `pool` (test), or spread over the items the test pick left out (validation).

    Validation also drops items whose `key` (their text) equals a test item's: sources repeat texts (ShareGPT).
    """
    stride = max(1, len(pool) // count)
    if split == "test":
        return pool[::stride][:count]
    taken = {key(item) for item in pool[::stride][:count]}
    rest = [item for item in pool if key(item) not in taken]
    return rest[:: max(1, len(rest) // count)][:count]


# ----- code_edit -----
_SKIP_DIRS = ("test", "tests", "idlelib", "lib2to3", "site-packages", "turtledemo", "ensurepip", "__phello__")


@functools.lru_cache(maxsize=None)
def _stdlib_functions(min_lines: int = 6, max_lines: int = 30, stride: int = 5) -> list[tuple[str, ast.FunctionDef, str]]:
    """(module path, node, source) of plain top-level functions from every `stride`-th stdlib file."""
    found = []
    root = data.path("cpython-stdlib") / "files"
    files = [p for p in data.iter_document_paths("cpython-stdlib")
             if p.suffix == ".py" and not any(part in _SKIP_DIRS for part in p.relative_to(root).parts)]
    for file in files[::stride]:
        text = file.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines()
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.decorator_list or node.name.startswith("__"):
                continue
            length = node.end_lineno - node.lineno + 1
            if min_lines <= length <= max_lines:
                source = "\n".join(lines[node.lineno - 1: node.end_lineno])
                found.append((str(file.relative_to(root)), node, source))
    return found


def _has_loop(node) -> bool:
    return any(isinstance(n, ast.For) for n in ast.walk(node))


_BUGS = [(" < ", " <= "), (" > ", " >= "), (" == ", " != "), (" + 1", " - 1"), (" and ", " or "),
         (" is None", " is not None"), ("[0]", "[1]")]


def _plant_bug(source: str) -> Optional[tuple[str, str, str]]:
    """Swap one operator in the body (not the signature); (buggy source, original, replacement)."""
    header_end = source.find(":\n")
    for old, new in _BUGS:
        index = source.find(old, header_end)
        if index > 0:
            return source[:index] + new + source[index + len(old):], old.strip(), new.strip()
    return None


def _code_edits(split: str = "test") -> list[tuple[str, ast.FunctionDef, str, Callable[[str], str], dict]]:
    """(module, node, code, instruction, meta) of the split's code edits: `code` is the function as the prompt shows
    it (a planted bug in it for fix_bug), `instruction(target)` the request with `target` naming the function."""
    functions = _stdlib_functions()
    wanted = SIZE if split == "test" else 2 * SIZE       # validation: the next SIZE functions after the test ones
    kinds = ["rename", "type_hints", "docstring", "convert_loop", "fix_bug"]
    out: list = []
    for module, node, source in functions:
        kind = kinds[len(out) % len(kinds)]
        code = source
        meta: dict[str, Any] = {"module": module, "function": node.name, "edit": kind}
        if kind == "rename":
            new_name = node.name.lstrip("_") + "_v2"
            instruction = functools.partial(
                "Rename the function `{old}` to `{new}` and give its local variables clearer names. Return the "
                "complete edited function.".format, old=node.name, new=new_name)
        elif kind == "type_hints":
            instruction = ("Add type hints to every parameter and to the return value of {}. Return the complete "
                           "function.").format
        elif kind == "docstring":
            if ast.get_docstring(node):
                continue
            instruction = ("Add a docstring that explains what {} does, its arguments and its return value. Return "
                           "the complete function.").format
        elif kind == "convert_loop":
            if not _has_loop(node):
                continue
            instruction = ("Convert the for loop in {} into a while loop without changing its behaviour. Return the "
                           "complete function.").format
        else:
            planted = _plant_bug(source)
            if planted is None:
                continue
            code, meta["original"], meta["planted"] = planted
            meta["fixed_source"] = source
            instruction = (lambda target: f"{target[0].upper()}{target[1:]} contains one bug. Find it, fix it and "
                           "return the complete corrected function.")
        out.append((module, node, code, instruction, meta))
        if len(out) == wanted:
            break
    return out if split == "test" else out[SIZE:]


def _code_edit(split: str = "test") -> list[TaskPrompt]:
    prefix = "code_edit/" if split == "test" else "code_edit/val-"
    return [TaskPrompt(f"{prefix}{i:03d}", "code_edit",
                       messages=_user(f"{instruction('this function')}\n\n```python\n{textwrap.dedent(code)}\n```"),
                       source=f"cpython-stdlib:{module}:{node.name}", meta=meta)
            for i, (module, node, code, instruction, meta) in enumerate(_code_edits(split))]


# ----- code_edit_long: the same edits, the function shown inside its module -----
LONG_CONTEXT_CHARS = 9000       # of the module around the function: ~2,000-3,000 tokens (Qwen2.5's tokenizer)


def _module_excerpt(module: str, node: ast.FunctionDef, code: str, budget: int = LONG_CONTEXT_CHARS) -> str:
    """The module's lines around the function (shown as `code`), a line above and a line below in turn while the
    excerpt stays within `budget` characters: a real file's context, as an editor plugin sends it."""
    lines = (data.path("cpython-stdlib") / "files" / module).read_text(encoding="utf-8", errors="replace").splitlines()
    above, below = lines[:node.lineno - 1], lines[node.end_lineno:]
    first, last, size = len(above), 0, len(code) + 1
    while first > 0 or last < len(below):
        grew = False
        if first > 0 and size + len(above[first - 1]) + 1 <= budget:
            first, size, grew = first - 1, size + len(above[first - 1]) + 1, True
        if last < len(below) and size + len(below[last]) + 1 <= budget:
            last, size, grew = last + 1, size + len(below[last]) + 1, True
        if not grew:
            break
    return "\n".join(above[first:] + [code] + below[:last])


def _code_edit_long(split: str = "test") -> list[TaskPrompt]:
    prefix = "code_edit_long/" if split == "test" else "code_edit_long/val-"
    out = []
    for i, (module, node, code, instruction, meta) in enumerate(_code_edits(split)):
        excerpt = _module_excerpt(module, node, code)
        text = (f"Here is part of the Python module `{module}`:\n\n```python\n{excerpt}\n```"
                f"\n\n{instruction(f'the function `{node.name}`')} Return only that function.")
        out.append(TaskPrompt(f"{prefix}{i:03d}", "code_edit_long", messages=_user(text),
                              source=f"cpython-stdlib:{module}:{node.name}", meta=meta))
    return out


# ----- Linux documentation: sections and paragraphs -----
_UNDERLINE = re.compile(r"^([=\-~^*+#\"'`])\1{3,}\s*$")


@functools.lru_cache(maxsize=None)
def _doc_sections(stride: int = 11) -> list[tuple[str, str, str]]:
    """(file, title, body) of RST sections from every `stride`-th linux-doc file; titles are underlined lines."""
    root = data.path("linux-doc") / "files"
    sections = []
    for file in list(data.iter_document_paths("linux-doc"))[::stride]:
        lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
        starts = [i - 1 for i in range(1, len(lines)) if _UNDERLINE.match(lines[i]) and lines[i - 1].strip()
                  and not _UNDERLINE.match(lines[i - 1])]
        for a, b in zip(starts, starts[1:] + [len(lines)]):
            body = "\n".join(lines[a + 2: b - (1 if b < len(lines) else 0)]).strip()
            body = "\n".join(l for l in body.splitlines() if not _UNDERLINE.match(l))
            sections.append((str(file.relative_to(root)), lines[a].strip(), body))
    return sections


def _prose_ratio(text: str) -> float:
    letters = sum(c.isalpha() or c == " " for c in text)
    return letters / max(len(text), 1)


@functools.lru_cache(maxsize=None)
def _paragraphs(min_chars: int = 300, max_chars: int = 900) -> list[tuple[str, str]]:
    out = []
    for file, _title, body in _doc_sections():
        for para in re.split(r"\n\s*\n", body):
            para = " ".join(line.strip() for line in para.splitlines())
            if (min_chars <= len(para) <= max_chars and _prose_ratio(para) > 0.9 and not para.startswith(("..", ":", "|", "*", "-"))
                    and "::" not in para and para.endswith(".")):
                out.append((file, para))
    return out


def _summarize(split: str = "test") -> list[TaskPrompt]:
    docs = []
    for file, title, body in _doc_sections():
        if 1200 <= len(body) <= 3500 and _prose_ratio(body) > 0.85:
            text = (f"Summarize the following section of the Linux kernel documentation (\"{title}\") in a short "
                    f"paragraph, reusing its key terms:\n\n{body}")
            docs.append(TaskPrompt("", "summarize", messages=_user(text), source=f"linux-doc:{file}:{title}"))
    chats = []
    for conv in data.load_sharegpt_conversations():
        turns = conv["conversations"]
        if not turns or turns[0]["from"] != "human":
            continue
        first = turns[0]["value"]
        if re.search(r"\bsummari[sz]e\b", first, re.I) and 800 <= len(first) <= 4000:
            chats.append(TaskPrompt("", "summarize", messages=_user(first), source=f"sharegpt:{conv['id']}"))
    half = SIZE // 2
    text = lambda item: repr(item.messages)    # noqa: E731
    picked = _spread(docs, half, split, text) + _spread(chats, half, split, text)
    prefix = "summarize/" if split == "test" else "summarize/val-"
    for index, item in enumerate(picked):
        item.id = f"{prefix}{index:03d}"
    return picked


_EDITS = [
    ("correct", "The following paragraph contains spelling mistakes. Correct them and return the whole corrected paragraph, changing nothing else."),
    ("formal", "Rewrite the following paragraph in a more formal tone, keeping all of its technical content."),
    ("simplify", "Rewrite the following paragraph in simpler English for a beginner, keeping its technical terms."),
    ("concise", "Make the following paragraph more concise without losing information. Return the edited paragraph."),
    ("active_voice", "Rewrite the following paragraph so that every sentence uses the active voice."),
]


def _misspell(text: str, rng: random.Random, count: int = 4) -> str:
    """Swap two inner letters in `count` longer words (deterministic for a seeded rng)."""
    words = text.split(" ")
    choices = [i for i, w in enumerate(words) if len(w) >= 6 and w.isalpha()]
    for i in sorted(rng.sample(choices, min(count, len(choices)))):
        w = words[i]
        j = rng.randrange(1, len(w) - 2)
        words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    return " ".join(words)


def _text_edit(split: str = "test") -> list[TaskPrompt]:
    paragraphs = _paragraphs()
    rng = random.Random(1234 if split == "test" else 4321)
    prefix = "text_edit/" if split == "test" else "text_edit/val-"
    out = []
    for index, (file, para) in enumerate(_spread(paragraphs, SIZE, split, key=lambda fp: fp[1])):
        kind, instruction = _EDITS[index % len(_EDITS)]
        meta = {"edit": kind}
        text = para
        if kind == "correct":
            text = _misspell(para, rng)
            meta["original"] = para
        out.append(TaskPrompt(f"{prefix}{index:03d}", "text_edit", messages=_user(f"{instruction}\n\n{text}"),
                              source=f"linux-doc:{file}", meta=meta))
    return out


# ----- chat, humaneval, autocomplete -----
def _chat() -> list[TaskPrompt]:
    out = []
    for q in data.load_mt_bench():
        turns = list(q["turns"])
        out.append(TaskPrompt(f"chat/{q['question_id']}", "chat", messages=_user(turns[0]), turns=turns,
                              source=f"mt-bench:{q['question_id']}", meta={"category": q["category"]}))
    return out


def _humaneval() -> list[TaskPrompt]:
    return [TaskPrompt(p["task_id"].replace("HumanEval/", "humaneval/"), "humaneval", prompt=p["prompt"],
                       source=p["task_id"], meta={"entry_point": p["entry_point"], "test": p["test"],
                                                   "canonical_solution": p["canonical_solution"]})
            for p in data.load_humaneval()]


def _autocomplete() -> list[TaskPrompt]:
    prose = [(f, " ".join(p.split()[:8])) for f, p in _paragraphs()]
    code = [(m, s.splitlines()[0] + "\n" + s.splitlines()[1]) for m, _n, s in _stdlib_functions()]
    half = SIZE // 2
    picked = ([("prose", *x) for x in prose[:: max(1, len(prose) // half)][:half]]
              + [("code", *x) for x in code[:: max(1, len(code) // half)][:half]])
    return [TaskPrompt(f"autocomplete/{i:03d}", "autocomplete", prompt=text, source=f"{src}:{kind}", meta={"kind": kind})
            for i, (kind, src, text) in enumerate(picked)]


def _agent_episodes(name: str, split: str = "test") -> list[TaskPrompt]:
    return agentic.BUILDERS[name][0](split, TaskPrompt, _stdlib_functions)


_BUILDERS: dict[str, tuple[Callable[[], list[TaskPrompt]], tuple[str, ...]]] = {
    "code_edit": (_code_edit, ("cpython-stdlib",)),
    "code_edit_long": (_code_edit_long, ("cpython-stdlib",)),
    "summarize": (_summarize, ("linux-doc", "sharegpt")),
    "text_edit": (_text_edit, ("linux-doc",)),
    "chat": (_chat, ("mt-bench",)),
    "humaneval": (_humaneval, ("humaneval",)),
    "autocomplete": (_autocomplete, ("linux-doc", "cpython-stdlib")),
    # Agent episodes (eval/agentic.py): several steps, each prompt holding the earlier answers.
    **{name: (functools.partial(_agent_episodes, name), sources) for name, (_, sources) in agentic.BUILDERS.items()},
}
TASKS = tuple(_BUILDERS)
INPUT_GUIDED_TASKS = ("code_edit", "summarize", "text_edit", "chat")
_CACHE: dict[str, list[TaskPrompt]] = {}


def required_data(name: str) -> tuple[str, ...]:
    """The data sets (`multidraft data pull NAME`) a task is built from."""
    _check(name)
    return _BUILDERS[name][1]


def _check(name: str) -> None:
    if name not in _BUILDERS:
        raise InvalidOptionError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")


def load_task(name: str, limit: Optional[int] = None, split: str = "test") -> list[TaskPrompt]:
    """The prompts of task `name`, always the same ones in the same order; the first `limit` if given.

    `split="validation"` (VALIDATION_TASKS) gives prompts from the same sources that the test
    split (the default, what benchmarks run) never contains: tune and calibrate there.
    Raises DataNotFoundError naming the `multidraft data pull` command when a source has not been pulled.
    """
    _check(name)
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise InvalidOptionError(f"limit must be a positive integer or None, got {limit!r}")
    if split not in SPLITS:
        raise InvalidOptionError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    if split == "validation" and name not in VALIDATION_TASKS:
        raise InvalidOptionError(f"task {name!r} has no validation split; tasks with one: {', '.join(VALIDATION_TASKS)}")
    builder, sources = _BUILDERS[name]
    for source in sources:
        data.path(source)        # a clear DataNotFoundError before any work
    key = name if split == "test" else f"{name}:{split}"
    if key not in _CACHE:
        _CACHE[key] = builder() if split == "test" else builder(split)
    items = _CACHE[key]
    return [TaskPrompt(**vars(item)) for item in (items if limit is None else items[:limit])]
