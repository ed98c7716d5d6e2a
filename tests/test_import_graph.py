"""No import circles anywhere: the import graph of every package of the repository has no cycle.

The graph is read from the source with :mod:`ast`, so it sees every import a module can make: at the
top, inside a function (the usual way a circle is dodged), under ``TYPE_CHECKING`` or in a ``try``.
An edge goes to the module an import names: ``from a.b import c`` reaches ``a.b.c`` when that is a
module, else ``a.b`` (its ``__init__``). The parents Python initialises on the way (``a`` for
``import a.b``) are not edges: a package's ``__init__`` re-exporting its own submodules is a circle
only when that submodule imports the package back. Cycles are the strongly connected components
(Tarjan's algorithm) of more than one module, or of one that imports itself.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Every top-level folder of the repository that is a package (scripts/ is a folder of programs, not one).
PACKAGES = sorted(path.parent.name for path in ROOT.glob("*/__init__.py") if path.parent.name != "tests")
Graph = Mapping[str, Iterable[str]]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def repository_modules(packages: Iterable[str]) -> dict[str, Path]:
    return {
        module_name(path): path
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The repository modules ``name`` (at ``path``) imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            targets = [f"{source}.{alias.name}" for alias in node.names]
            targets = [target if target in known else source for target in targets]
        else:
            continue
        found |= {target for target in targets if target in known}
    return found


def import_graph(packages: Iterable[str]) -> dict[str, set[str]]:
    modules = repository_modules(packages)
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def strongly_connected_components(graph: Graph) -> list[list[str]]:
    """Tarjan's algorithm, iterative (an import chain may be deeper than Python's recursion limit)."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = lowlink[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = lowlink[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    lowlink[node] = min(lowlink[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowlink[parent] = min(lowlink[parent], lowlink[node])
                if lowlink[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def cycles(graph: Graph) -> list[list[str]]:
    """The components that are circles: two modules or more, or one importing itself."""
    return sorted(
        component
        for component in strongly_connected_components(graph)
        if len(component) > 1 or component[0] in graph.get(component[0], ())
    )


def circle_through(component: list[str], graph: Graph) -> list[str]:
    """One import path around ``component`` from its first module back to it (breadth first, inside it)."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph.get(node, ())):
                if successor == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if successor in members and successor not in came_from:
                    came_from[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{component} is no circle of the graph")


def test_the_component_finder_finds_circles_and_only_circles() -> None:
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},  # a → b → c → a
        "d": {"e"},
        "e": set(),
        "f": {"f"},  # imports itself
        "g": {"h", "e"},
        "h": {"g"},  # g ⇄ h
        "i": {"a"},  # reaches the circle, is not in it
    }
    assert cycles(graph) == [["a", "b", "c"], ["f"], ["g", "h"]]
    assert [circle_through(cycle, graph) for cycle in cycles(graph)] == [
        ["a", "b", "c", "a"],
        ["f", "f"],
        ["g", "h", "g"],
    ]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    # A chain far deeper than the recursion limit still ends, closing into one component.
    chain = {str(n): {str(n + 1)} for n in range(5000)} | {"5000": {"0"}}
    assert [len(component) for component in cycles(chain)] == [5001]


def test_imports_inside_functions_and_relative_ones_are_edges(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text(
        "from __future__ import annotations\n"
        "import cli.main\n"
        "from lambdas.aws import stop_path, environment as env\n"
        "from guardrails.settings import Settings\n"
        "def later():\n"
        "    from . import sibling\n"
        "    from .sibling import thing\n"
    )
    known = {"cli.main", "lambdas.aws", "lambdas.aws.stop_path", "lambdas.aws.environment",
             "guardrails.settings", "pkg.sibling"}  # fmt: skip
    assert imported_modules("pkg.module", source, known) == known - {"lambdas.aws"}


def test_every_package_is_in_the_graph() -> None:
    assert {"cli", "lambdas", "guardrails", "stacks", "components", "policies", "services"} <= set(PACKAGES)
    graph = import_graph(PACKAGES)
    assert "cli.host.job_wrapper" in graph["cli.run"]  # an import inside a function is an edge


def test_no_module_imports_itself_back() -> None:
    graph = import_graph(PACKAGES)
    found = [" → ".join(circle_through(cycle, graph)) for cycle in cycles(graph)]
    assert not found, (
        f"import circles (move what both sides need into a module of its own): {'; '.join(found)}"
    )
