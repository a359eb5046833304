"""The package's layers (docs/design.md), enforced: every import inside
`autotune/`, function-level ones included, goes down the layer order or
stays inside its own layer, and no group of modules imports itself in a
cycle. A new module must be given a layer here."""
import ast
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "autotune"

# Foundation first. A module may import from its own layer (without a cycle)
# and from the layers before it, except where ALLOWED narrows that.
LAYERS = (
    ("errors and logging", ("autotune.contract", "autotune.errors",
                            "autotune.log")),
    ("records", ("autotune.records",)),
    ("keys and flags", ("autotune.keys", "autotune.flags", "autotune.unwrap")),
    ("codec", ("autotune.codec", "autotune.proto")),
    ("cache", ("autotune.cache",)),
    ("measure", ("autotune.measure",)),
    ("search", ("autotune.search",)),
    ("report", ("autotune.report",)),
    ("runtime", ("autotune.runtime",)),
    ("tools", ("autotune.cli", "autotune.pytest_plugin")),
    ("face", ("autotune.__init__", "autotune.dropin", "autotune.kernels")),
)
# The search strategies are pure: the objective is injected, so they see
# only the foundation and each other.
ALLOWED = {"search": {"errors and logging", "records", "keys and flags", "search"}}


def module_name(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts)


def layer_of(module):
    for index, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                return index, name
    return None


def package_modules():
    return {module_name(p): p for p in PACKAGE.rglob("*.py")
            if "__pycache__" not in p.parts}


def resolve(module, node, is_package, known):
    """The package modules one import statement names (the innermost that
    exists: `from autotune.cache import tiers` is autotune.cache.tiers)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".")
            if not is_package:
                base = base[:-1]
            base = base[:len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module
        names = [f"{stem}.{alias.name}" for alias in node.names] or [stem]
        names = [n if n in known or n + ".__init__" in known else stem
                 for n in names]
    found = []
    for name in names:
        while name and name not in known and name + ".__init__" not in known:
            name = name.rpartition(".")[0]
        if name:
            found.append(name if name in known else name + ".__init__")
    return found


def import_edges():
    """(importer, imported, line, function_level) for every import of a
    package module by another."""
    known = package_modules()
    edges = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"

        def visit(node, in_function):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in resolve(module, child, is_package, known):
                        if target != module:
                            edges.append((module, target, child.lineno,
                                          in_function))
                visit(child, in_function or isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef)))
        visit(tree, False)
    return known, edges


def cycles(nodes, edges):
    """Strongly connected components of more than one module."""
    graph = {n: set() for n in nodes}
    for a, b, _, _ in edges:
        graph[a].add(b)
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_every_module_has_a_layer():
    missing = [m for m in package_modules() if layer_of(m) is None]
    assert not missing, f"give these modules a layer in {__file__}: {missing}"


def test_imports_follow_the_layer_order():
    _, edges = import_edges()
    wrong = []
    for importer, imported, line, in_function in edges:
        (low_index, low_name) = layer_of(imported)
        (high_index, high_name) = layer_of(importer)
        allowed = ALLOWED.get(high_name)
        if low_index > high_index or (allowed and low_name not in allowed):
            kind = "function-level " if in_function else ""
            wrong.append(f"{importer}:{line} ({high_name}) {kind}imports "
                         f"{imported} ({low_name})")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_no_import_cycles():
    known, edges = import_edges()
    found = cycles(known, edges)
    assert not found, f"import cycles: {found}"


def test_the_checker_sees_function_level_imports_and_cycles():
    # The checker itself must be able to fail.
    edges = [("a", "b", 1, False), ("b", "c", 2, True), ("c", "a", 3, True)]
    assert cycles({"a", "b", "c", "d"}, edges) == [["a", "b", "c"]]
    _, real = import_edges()
    assert any(in_function for *_, in_function in real)


@pytest.mark.parametrize("module", ["autotune.search.evolutionary",
                                    "autotune.records"])
def test_layers_are_known_for_core_modules(module):
    assert layer_of(module) is not None
