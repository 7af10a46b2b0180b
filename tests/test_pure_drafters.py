"""Drafters are pure proposers (issue #18): they receive ready objects (a draft LM, a calibration's heads, a suffix
store) and never load a file or a model. The artifact packages resolve those (models.draft_models,
pldplus.calibration, ngram.resolve, blockwise.heads_store), wired in by methods.py before a drafter is built."""

import ast
import re

from tests.test_import_graph import SOURCE, import_graph

DRAFTERS = SOURCE / "multidraft" / "drafters"
# Drafters that live with their method's package (one home per concept) are held to the same rule.
OTHER_DRAFTER_MODULES = ("multidraft.blockwise.drafter",)
# Modules that read or write artifact files, or load models: none of them may be reachable from drafters/.
LOADERS = ("multidraft.models.loader", "multidraft.models.draft_models", "multidraft.models.pulling",
           "multidraft.models.model_store", "multidraft.pldplus.calibration", "multidraft.pldplus.induction",
           "multidraft.ngram.resolve", "multidraft.ngram.fileformat", "multidraft.blockwise.heads_store",
           "multidraft.data", "multidraft.api", "multidraft.methods")
# Calls that read files or load weights, by the called function's name.
LOADING_CALL = re.compile(r"^(open|from_pretrained|load|load_\w+|read_text|read_bytes|exists|is_file|resolve_\w+)$")


def reachable(graph, start):
    seen, todo = set(), [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_no_drafter_module_reaches_a_loader():
    graph = import_graph(deferred=True)
    drafters = [name for name in graph if name.startswith("multidraft.drafters")] + list(OTHER_DRAFTER_MODULES)
    assert len(drafters) >= 9
    for name in drafters:
        bad = sorted(m for m in reachable(graph, name) if m.startswith(LOADERS))
        assert not bad, f"{name} imports (directly or through others) modules that load files: {bad}"


def test_no_drafter_module_calls_a_loader():
    others = [SOURCE / (name.replace(".", "/") + ".py") for name in OTHER_DRAFTER_MODULES]
    for path in sorted(DRAFTERS.glob("*.py")) + others:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                assert not LOADING_CALL.match(called), f"{path.name}:{node.lineno} loads something: {called}(...)"
