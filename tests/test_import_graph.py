"""No import cycles inside src/multidraft (issue #18).

The graph is read from the source with `ast`, without importing anything. Two graphs are checked:
- module-level imports (what runs at import time; a cycle there breaks or half-initialises a module): no cycle at all;
- every import, including those deferred inside functions: no cycle either. A deferred import hides a cycle, it does
  not remove the tangle.

An edge goes to the module named: `from multidraft.a import b` -> `multidraft.a.b` when b is a submodule, else
`multidraft.a`. Importing a module also runs its parent packages' __init__, but that is no edge here: Python
initialises parents first, so only the names imported decide whether an import can see a half-built module.
"""

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "multidraft"


def module_files() -> dict[str, Path]:
    modules = {}
    for path in sorted((SOURCE / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SOURCE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _module_level(statements):
    """Import statements that run when the module is imported (also under if / try at the top level)."""
    for node in statements:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                yield from _module_level(block)


def imports_of(name: str, path: Path, modules, deferred: bool) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    nodes = ([n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))] if deferred
             else list(_module_level(tree.body)))
    targets = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names if alias.name in modules)
            continue
        if node.level:                       # relative import: resolve against this module's package
            package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            package = package[:len(package) - (node.level - 1)]
            base = ".".join(package + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for alias in node.names:
            if f"{base}.{alias.name}" in modules:
                targets.add(f"{base}.{alias.name}")
            elif base in modules:
                targets.add(base)
    targets.discard(name)
    return targets


def import_graph(deferred: bool) -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports_of(name, path, modules, deferred) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan): modules that import each other."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _example_cycle(graph, component: list[str]) -> list[str]:
    """One closed path through a component (breadth-first from its first module back to it), for the message."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node] & members):
            if target == start:
                return paths[node] + [start]
            if target not in paths:
                paths[target] = paths[node] + [target]
                queue.append(target)
    return component


def describe(graph, found) -> str:
    return "\n".join(" -> ".join(_example_cycle(graph, component)) for component in found)


def test_the_graph_sees_the_package():
    graph = import_graph(deferred=False)
    assert "multidraft.api" in graph["multidraft"] and "multidraft.methods" in graph["multidraft.api"]
    assert "multidraft.decoders.loop" in graph["multidraft.api"]


def test_cycle_finder_reports_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert describe(graph, cycles(graph)) == "a -> b -> c -> a"


def test_no_import_cycle_at_module_level():
    graph = import_graph(deferred=False)
    found = cycles(graph)
    assert not found, "import cycles at module level:\n" + describe(graph, found)


def test_no_import_cycle_through_deferred_imports():
    graph = import_graph(deferred=True)
    found = cycles(graph)
    assert not found, "import cycles (counting imports inside functions):\n" + describe(graph, found)
