"""The README's commands and Python example run as written (with SmolLM2 standing in for the 1.5B model), and the
README stays short: the rest lives in docs/, whose links must resolve."""

import re
import shlex
from pathlib import Path

import pytest

from multidraft.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SMALL = "smollm2-135m"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.DOTALL)


def multidraft_commands() -> list[list[str]]:
    """Every `multidraft ...` command line of the README's bash blocks (after a pipe, too), comments removed."""
    commands = []
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("|"):
                words = shlex.split(part, comments=True)
                if words[:1] == ["multidraft"]:
                    commands.append(words[1:])
    return commands


def test_readme_is_short_and_links_resolve():
    assert len(README.splitlines()) <= 200
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        assert (ROOT / target).exists(), f"README links to a missing file: {target}"
    for doc in (ROOT / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+)\)", doc.read_text(encoding="utf-8")):
            assert (doc.parent / target).exists(), f"{doc.name} links to a missing file: {target}"


def test_every_readme_command_parses():
    commands = multidraft_commands()
    assert {"generate", "methods", "bench", "serve", "models"} <= {c[0] for c in commands}
    for command in commands:
        with pytest.raises(SystemExit) as done:       # each subcommand's parser accepts --help
            main(command[:2] + ["--help"] if command[0] == "models" else command[:1] + ["--help"])
        assert done.value.code == 0, command


@pytest.mark.real_model
def test_readme_generate_commands_run(smollm, capsys, monkeypatch):
    import io
    import sys

    for command in multidraft_commands():
        if command[0] != "generate":
            continue
        command = [SMALL if word == "qwen2.5-coder-1.5b" else word for word in command]
        command += ["--max-new-tokens", "8"]
        monkeypatch.setattr(sys, "stdin", io.StringIO("def fibonacci(n):"))
        assert main(command) == 0, command
        assert capsys.readouterr().out.strip()
    assert main(["methods"]) == 0
    assert "pld" in capsys.readouterr().out


@pytest.mark.real_model
def test_readme_python_example_runs(smollm):
    (example,) = blocks("python")
    source = example.replace('"qwen2.5-coder-1.5b"', f'"{SMALL}"').replace("max_new_tokens=64", "max_new_tokens=8")
    namespace: dict = {}
    exec(compile(source, "README.md", "exec"), namespace)
    assert namespace["result"].text and namespace["result"].stats.generated_tokens > 0
