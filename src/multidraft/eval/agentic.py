"""Agent-style episodes (issue 34): multi-step tasks whose every step re-reads, and mostly re-emits, what the model
wrote in the step before. This is where drafting from earlier text (suffix, PLD, PLD+) pays most.

- agent_edit  a coding agent edits one CPython stdlib function in 5 steps; each step's prompt holds the original
              function and the previous answer, and asks for the whole function again; the last step asks for a
              unified diff from the original to the current version.                   needs: cpython-stdlib
- agent_fix   a fix-the-test loop on a HumanEval solution with one planted bug: each step shows the original code,
              the tests, the previous attempt and one failing assertion, and asks for the whole fixed function
              (4 steps; the failures are fixed lines of the tests, so no model code is ever run). needs: humaneval
- agent_chat  MT-Bench's two turns, then two follow-ups that make the model quote and rework its earlier answers
              (the whole conversation is in every prompt).                                needs: mt-bench

An episode is one `TaskPrompt` with one entry of `turns` per step; `TaskPrompt.turn_messages(step, answers)` builds
step `step`'s prompt from the model's earlier answers (`turn_style` says how). Episodes are deterministic (sorted
data, fixed strides); the validation split holds other functions / problems / questions than the test split.
"""

from __future__ import annotations

import textwrap
from typing import Optional

from multidraft import data
from multidraft.errors import InvalidOptionError

EPISODES = 20                      # episodes per task and split (the bench takes the first `limit`)
MAX_NEW_TOKENS = 512               # the most new tokens a step is sized for (prompts fit the context with it)
AGENT_TASKS = ("agent_edit", "agent_fix", "agent_chat")

EDIT_STEPS = (
    "Add type hints to every parameter and to the return value.",
    "Add a docstring that explains the arguments and the return value.",
    "Give the local variables clearer names.",
    "Add a short comment before each block of the body that explains it.",
)
DIFF_STEP = ("Write a unified diff (in one ```diff block, with --- original and +++ current headers) that turns "
             "the original function into your current version.")
CHAT_FOLLOW_UPS = (
    "Quote your first answer in full, then improve its weakest sentence and mark the change with [changed].",
    "Repeat your previous answer word for word, but as a numbered list with one sentence per item.",
)
FIX_STEPS = 4


# The builders take (split, make, stdlib_functions): tasks.py passes its TaskPrompt class and its stdlib reader, so
# this module never imports tasks.py (which imports it) and load_task has already checked the split.
def _split(pool: list, split: str) -> list:
    """Test: every other item from the start; validation: the items test skipped (disjoint by construction)."""
    stride = max(2, len(pool) // (2 * EPISODES))
    offset = 0 if split == "test" else stride // 2
    return pool[offset::stride][:EPISODES]


# ----- agent_edit -----
def _edit(split: str, make, stdlib_functions) -> list:
    functions = [(m, n, textwrap.dedent(s)) for m, n, s in stdlib_functions(min_lines=12, max_lines=30)]
    steps = [f"{instruction} Return the complete function in one ```python block." for instruction in EDIT_STEPS]
    prefix = "agent_edit/" if split == "test" else "agent_edit/val-"
    return [_first_step(make(id=f"{prefix}{i:03d}", task="agent_edit", turns=steps + [DIFF_STEP],
                                     turn_style="edit", source=f"cpython-stdlib:{module}:{node.name}",
                                     meta={"module": module, "function": node.name, "code": source}))
            for i, (module, node, source) in enumerate(_split(functions, split))]


def _first_step(item):
    """The episode with `messages` = its first step's prompt (what `TaskPrompt.input` gives, as for every task)."""
    item.messages = TURN_BUILDERS[item.turn_style](item, 0, [])
    return item


def _edit_messages(item, step: int, answers: list[str]) -> list[dict]:
    meta = item.meta
    text = (f"You are a coding agent editing the function `{meta['function']}` of `{meta['module']}`, one step at a "
            f"time.\n\nThe original function:\n\n```python\n{meta['code']}\n```\n")
    if step > 0:
        text += f"\nYour answer to the previous step (the current version):\n\n{answers[step - 1]}\n"
    text += f"\nStep {step + 1} of {len(item.turns)}: {item.turns[step]}"
    return [{"role": "user", "content": text}]


# ----- agent_fix -----
_BUGS = ((" < ", " <= "), (" > ", " >= "), (" == ", " != "), (" + 1", " - 1"), (" and ", " or "), ("[0]", "[1]"),
         (" - 1", " + 1"), (" += ", " -= "))


def _planted(solution: str) -> Optional[str]:
    """The solution with one operator swapped (the first that occurs, in _BUGS's order), or None."""
    for old, new in _BUGS:
        index = solution.find(old)
        if index >= 0:
            return solution[:index] + new + solution[index + len(old):]
    return None


def _assertions(test: str) -> list[str]:
    return [line.strip() for line in test.splitlines() if line.strip().startswith("assert ") and len(line) < 300]


def _fix(split: str, make, stdlib_functions) -> list:
    problems = []
    for problem in data.load_humaneval():
        buggy = _planted(problem["canonical_solution"])
        failures = _assertions(problem["test"])
        if buggy is not None and len(failures) >= 2:
            problems.append((problem, problem["prompt"] + buggy, failures))
    prefix = "agent_fix/" if split == "test" else "agent_fix/val-"
    out = []
    for i, (problem, code, failures) in enumerate(_split(problems, split)):
        shown = [failures[(step * 3) % len(failures)] for step in range(FIX_STEPS)]    # spread over the tests
        out.append(_first_step(make(id=f"{prefix}{i:03d}", task="agent_fix", turns=shown, turn_style="fix",
                                            source=problem["task_id"],
                                            meta={"code": code, "test": problem["test"].strip(),
                                                  "entry_point": problem["entry_point"]})))
    return out


def _fix_messages(item, step: int, answers: list[str]) -> list[dict]:
    meta = item.meta
    text = (f"You are a coding agent fixing `{meta['entry_point']}` until its tests pass.\n\nThe code in the "
            f"repository:\n\n```python\n{meta['code'].rstrip()}\n```\n\nThe tests (`candidate` is "
            f"`{meta['entry_point']}`):\n\n```python\n{meta['test']}\n```\n")
    if step > 0:
        text += f"\nYour previous attempt:\n\n{answers[step - 1]}\n"
    text += (f"\nRunning the tests on the {'current code' if step == 0 else 'previous attempt'} failed:\n\n```\n"
             f"{item.turns[step]}\nAssertionError\n```\n\nFix the function so that every test passes. Return the "
             "complete function, with its imports, in one ```python block.")
    return [{"role": "user", "content": text}]


# ----- agent_chat -----
def _chat(split: str, make, stdlib_functions) -> list:
    questions = sorted(data.load_mt_bench(), key=lambda q: q["question_id"])
    prefix = "agent_chat/" if split == "test" else "agent_chat/val-"
    return [make(id=f"{prefix}{i:03d}", task="agent_chat", messages=[{"role": "user", "content": q["turns"][0]}],
                         turns=list(q["turns"]) + list(CHAT_FOLLOW_UPS), source=f"mt-bench:{q['question_id']}",
                         meta={"category": q["category"]})
            for i, q in enumerate(_split(questions, split))]


BUILDERS = {"agent_edit": (_edit, ("cpython-stdlib",)), "agent_fix": (_fix, ("humaneval",)),
            "agent_chat": (_chat, ("mt-bench",))}
TURN_BUILDERS = {"edit": _edit_messages, "fix": _fix_messages}


def turn_messages(item, step: int, answers: list[str]) -> list[dict]:
    """Step `step`'s messages of an agent episode whose `turn_style` is not plain chat."""
    builder = TURN_BUILDERS.get(item.turn_style)
    if builder is None:
        raise InvalidOptionError(f"task prompt {item.id}: unknown turn style {item.turn_style!r}")
    if not 0 <= step < len(item.turns) or len(answers) < step:
        raise InvalidOptionError(f"task prompt {item.id}: step {step} needs the answers of steps 0..{step - 1}")
    return builder(item, step, answers)


