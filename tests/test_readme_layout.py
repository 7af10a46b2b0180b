"""The README's layout section names every package and top-level module of src/multidraft, and nothing else; the
results index (benchmarks/results/README.md) links every results folder, and only folders that exist."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "multidraft"


def layout_block() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Layout", 1)[1]
    return section.split("```", 2)[1]


def test_layout_names_every_package_and_top_level_module():
    block = layout_block()
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    # The left column of each line under src/multidraft/ names the entries; the text beside it describes them.
    entries = " ".join(m.group(1) for m in re.finditer(r"^  (\S.*?)(?:\s{2,}|$)", block, re.MULTILINE))
    named_packages = set(re.findall(r"([a-z_]+)/", entries))
    named_modules = set(re.findall(r"\b([a-z_]+\.py)\b", entries))
    assert packages - named_packages == set(), "packages missing from the README layout"
    assert named_packages - packages == set(), "the README layout names packages that do not exist"
    assert modules - named_modules == set(), "top-level modules missing from the README layout"
    assert named_modules - modules == set(), "the README layout names top-level modules that do not exist"


def test_results_index_links_every_results_folder():
    results = ROOT / "benchmarks" / "results"
    index = (results / "README.md").read_text(encoding="utf-8").split("## Every folder", 1)[1]
    linked = re.findall(r"\]\(([^)/]+)/README\.md\)", index)
    folders = {path.name for path in results.iterdir() if path.is_dir()}
    assert all((results / name / "README.md").is_file() for name in folders), "a results folder without README.md"
    assert folders - set(linked) == set(), "results folders missing from benchmarks/results/README.md"
    assert set(linked) - folders == set(), "the results index links folders that do not exist"
    assert len(linked) == len(set(linked)), "a results folder linked twice"
