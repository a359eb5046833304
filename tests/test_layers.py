"""The package's layers (docs/design.md), enforced on everything that
imports the package: the modules of `autotune/`, the pytest entry point
`pytest_autotune.py` and the scripts `tools/*.py` and `bench/*.py`. Every
import, function-level ones included, goes down the layer order or stays
inside its own layer, and no group of modules imports itself in a cycle.
A new module must be given a layer here.

Function-level imports hide a dependency from the reader of the module's
head, so they are only for a heavy or optional import, and each says why
in a comment (on its line, or right above it and the imports grouped with
it; an import inside `try: ... except ImportError` is optional by its
form). Checked for imports of the package's own modules and of the
standard library; third-party ones (torch, triton, redis, numpy) are the
heavy and optional kind the rule is for.
"""
import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Foundation first. A module may import from its own layer (without a cycle)
# and from the layers before it, except where ALLOWED narrows that.
LAYERS = (
    ("errors and logging", ("autotune.contract", "autotune.errors",
                            "autotune.log")),
    ("records", ("autotune.records",)),
    ("keys and flags", ("autotune.keys", "autotune.flags",
                        "autotune.unwrap")),
    ("codec", ("autotune.codec", "autotune.proto")),
    ("cache", ("autotune.cache",)),
    # Timing and choosing beside the binaries they time: the tuner asks
    # the read-through cache whether a failure was the cache's, a failed
    # compile is classified as the backend classifies a failure. One
    # layer, two folders; no module cycle between them.
    ("measure and binaries", ("autotune.measure", "autotune.binaries")),
    # The host, above the backend it stamps: the lock files, one tuner per
    # device, the runner stamp (which reads the backend's device key).
    ("host", ("autotune.host",)),
    ("search", ("autotune.search",)),
    ("report", ("autotune.report",)),
    ("runtime", ("autotune.runtime",)),
    ("tools", ("autotune.cli", "autotune.pytest_result",
               "autotune.pytest_settings", "autotune.pytest_terminal",
               "autotune.pytest_plugin")),
    ("face", ("autotune.__init__", "autotune.dropin", "autotune.kernels")),
    # Outside the package: nothing in it may import these.
    ("entry points", ("pytest_autotune", "tools", "bench")),
)
# The search strategies are pure: the objective is injected, so they see
# only the foundation and each other.
ALLOWED = {"search": {"errors and logging", "records", "keys and flags",
                      "search"}}
# The scripts import each other by bare name, as run from their folder
# (which is first on sys.path) or after putting the other folder there.
SCRIPT_DIRS = ("tools", "bench")

# Files whose function-level imports do not all say why yet. Each is to be
# explained (a heavy or optional import) or moved to the module's head by
# whoever next edits the file; the test fails once one is clean, so that it
# leaves this list.
NOT_YET_EXPLAINED = {
    "autotune/cli/cache_tool.py",
    "autotune/kernels/matmul.py", "autotune/measure/backends.py",
    "autotune/binaries/compile_check.py", "autotune/pytest_plugin.py",
    "autotune/runtime/parallel.py",
    "autotune/search/simulate.py", "tools/gen_docs.py",
    "bench/bench_device_lock.py", "bench/bench_distributed.py",
    "bench/bench_parallel.py", "bench/bench_parallel_compile.py",
    "bench/bench_report.py", "bench/bench_runtime.py",
    "bench/bench_stability.py", "bench/gpu_check.py",
}


def module_name(path, root=ROOT):
    rel = path.relative_to(root).with_suffix("")
    return ".".join(rel.parts)


def layer_of(module):
    for index, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                return index, name
    return None


def source_files(root=ROOT):
    """{module name: path} of everything the layers cover."""
    paths = list((root / "autotune").rglob("*.py"))
    entry = root / "pytest_autotune.py"
    if entry.exists():
        paths.append(entry)
    for folder in SCRIPT_DIRS:
        paths += (root / folder).glob("*.py")
    return {module_name(p, root): p for p in paths
            if "__pycache__" not in p.parts}


def resolve(module, node, is_package, known):
    """The modules one import statement names (the innermost that exists:
    `from autotune.cache import tiers` is autotune.cache.tiers); a bare
    name a script imports from a script folder is that script."""
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
        first = name.partition(".")[0]
        if first not in known and first != "autotune" and \
                not (isinstance(node, ast.ImportFrom) and node.level):
            # A bare script name: the importer's own folder first.
            own = module.partition(".")[0]
            folders = ([own] if own in SCRIPT_DIRS else []) + \
                list(SCRIPT_DIRS)
            name = next((f"{folder}.{first}" for folder in folders
                         if f"{folder}.{first}" in known), name)
        while name and name not in known and name + ".__init__" not in known:
            name = name.rpartition(".")[0]
        if name:
            found.append(name if name in known else name + ".__init__")
    return found


def imports(path):
    """(node, in_function, parents) for every import statement of a file."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, in_function, parents):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, in_function, parents))
            visit(child, in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef)),
                parents + (child,))
    visit(tree, False, ())
    return found


def import_edges(root=ROOT):
    """(importer, imported, line, function_level) for every import of a
    covered module by another."""
    known = source_files(root)
    edges = []
    for module, path in known.items():
        is_package = path.name == "__init__.py"
        for node, in_function, _ in imports(path):
            for target in resolve(module, node, is_package, known):
                if target != module:
                    edges.append((module, target, node.lineno, in_function))
    return known, edges


def layer_violations(edges):
    wrong = []
    for importer, imported, line, in_function in edges:
        (low_index, low_name) = layer_of(imported)
        (high_index, high_name) = layer_of(importer)
        allowed = ALLOWED.get(high_name)
        if low_index > high_index or (allowed and low_name not in allowed):
            kind = "function-level " if in_function else ""
            wrong.append(f"{importer}:{line} ({high_name}) {kind}imports "
                         f"{imported} ({low_name})")
    return wrong


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


def _imported_top_names(node):
    if isinstance(node, ast.ImportFrom):
        return [] if node.level else [node.module.partition(".")[0]]
    return [alias.name.partition(".")[0] for alias in node.names]


def _optional_by_form(parents):
    """Inside try: ... except ImportError (or ModuleNotFoundError)."""
    for parent in parents:
        if isinstance(parent, ast.Try):
            for handler in parent.handlers:
                caught = handler.type
                names = [getattr(e, "id", None) for e in (
                    caught.elts if isinstance(caught, ast.Tuple)
                    else [caught])]
                if {"ImportError", "ModuleNotFoundError"} & set(names):
                    return True
    return False


def _says_why(lines, lineno):
    """A comment on the import's line, or right above it and the imports
    grouped with it (a `noqa` marker is not a reason)."""
    def reason(text):
        comment = text.partition("#")[2].strip()
        return bool(comment) and not comment.lower().startswith("noqa")
    if "#" in lines[lineno - 1] and reason(lines[lineno - 1]):
        return True
    above = lineno - 2
    while above >= 0:
        text = lines[above].strip()
        if text.startswith(("import ", "from ")):
            above -= 1
            continue
        return text.startswith("#") and reason(text)
    return False


def unexplained_function_imports(root=ROOT):
    """{relative path: ["line: statement", ...]} of function-level imports
    of the package's modules or of the standard library without a reason."""
    found = {}
    own = {"autotune", "pytest_autotune"} | {
        p.stem for folder in SCRIPT_DIRS for p in (root / folder).glob("*.py")}
    for path in source_files(root).values():
        lines = path.read_text().splitlines()
        for node, in_function, parents in imports(path):
            if not in_function or _optional_by_form(parents):
                continue
            names = _imported_top_names(node) or ["(relative)"]
            if not any(n in own or n in sys.stdlib_module_names
                       or n == "(relative)" for n in names):
                continue
            if not _says_why(lines, node.lineno):
                rel = path.relative_to(root).as_posix()
                found.setdefault(rel, []).append(
                    f"{node.lineno}: {lines[node.lineno - 1].strip()}")
    return found


# Calls that run a file by its path, which an import statement does not
# show: the layer rule cannot see what such a call loads.
PATH_LOADERS = {"spec_from_file_location", "SourceFileLoader",
                "SourcelessFileLoader", "run_path", "load_source", "exec"}


def _names_tools(node):
    """A string in `node` that names the scripts' folders as a path part."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            parts = sub.value.replace("\\", "/").split("/")
            if any(part in SCRIPT_DIRS for part in parts):
                return True
    return False


def script_path_loads(root=ROOT):
    """["path:line"] of the package's calls that load a file of `tools/`
    or `bench/` by its path (or put the folder on sys.path): an upward
    dependency no import statement shows. A name given to such a call
    counts when the module assigns it a value naming the folder."""
    found = []
    for path in sorted((root / "autotune").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        tainted = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and \
                    node.value is not None and _names_tools(node.value):
                targets = node.targets if isinstance(node, ast.Assign) \
                    else [node.target]
                for target in targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            tainted.add(sub.id)
                        elif isinstance(sub, ast.Attribute):
                            tainted.add(sub.attr)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = getattr(func, "attr", None) or getattr(func, "id", None)
            on_sys_path = isinstance(func, ast.Attribute) and \
                func.attr in ("insert", "append") and \
                ast.unparse(func.value) == "sys.path"
            if name not in PATH_LOADERS and not on_sys_path:
                continue
            arguments = node.args + [k.value for k in node.keywords]
            used = {getattr(sub, "id", None) or getattr(sub, "attr", None)
                    for a in arguments for sub in ast.walk(a)}
            if any(_names_tools(a) for a in arguments) or used & tainted:
                rel = path.relative_to(root).as_posix()
                found.append(f"{rel}:{node.lineno}")
    return found


def test_every_module_has_a_layer():
    missing = [m for m in source_files() if layer_of(m) is None]
    assert not missing, f"give these modules a layer in {__file__}: {missing}"


def test_imports_follow_the_layer_order():
    _, edges = import_edges()
    wrong = layer_violations(edges)
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_no_import_cycles():
    known, edges = import_edges()
    found = cycles(known, edges)
    assert not found, f"import cycles: {found}"


def test_function_level_imports_say_why():
    found = unexplained_function_imports()
    new = {path: lines for path, lines in found.items()
           if path not in NOT_YET_EXPLAINED}
    assert not new, (
        "function-level imports without a reason (hoist them to the "
        "module's head, or say in a comment which heavy or optional import "
        f"they avoid): {new}")
    cleaned = sorted(NOT_YET_EXPLAINED - set(found))
    assert not cleaned, (f"these files explain every function-level import "
                         f"now: take them off NOT_YET_EXPLAINED: {cleaned}")


def test_no_package_module_loads_a_script_by_its_path():
    found = script_path_loads()
    assert not found, (
        "package modules loading tools/ or bench/ by path (move what they "
        f"need into the package and import it): {found}")


def test_the_checker_sees_a_script_loaded_by_its_path(tmp_path):
    _write(tmp_path, {
        "autotune/__init__.py": "",
        # A lazy loader of tools/NAME.py, as the package once had.
        "autotune/cli/lazy.py": (
            "import importlib.util, os\n"
            "ROOT = os.path.dirname(__file__)\n"
            "class _Tool:\n"
            "    def __getattr__(self, attribute):\n"
            "        spec = importlib.util.spec_from_file_location(\n"
            "            'x', os.path.join(ROOT, 'tools', 'x.py'))\n"),
        # The path in a name first.
        "autotune/cli/named.py": (
            "import os, runpy, sys\n"
            "SCRIPT = os.path.join('..', 'bench', 'b.py')\n"
            "runpy.run_path(SCRIPT)\n"
            "sys.path.insert(0, 'tools')\n"),
        # A user's file by its path, and a label naming tools/: fine.
        "autotune/cli/fine.py": (
            "import importlib.util, os\n"
            "LABEL = os.path.join('tools', 'gpu_slot.py')\n"
            "def load(user_file):\n"
            "    return importlib.util.spec_from_file_location('m', "
            "user_file)\n"),
    })
    assert script_path_loads(tmp_path) == [
        "autotune/cli/lazy.py:5", "autotune/cli/named.py:3",
        "autotune/cli/named.py:4"]


def test_the_checker_sees_function_level_imports_and_cycles():
    # The checker itself must be able to fail.
    edges = [("a", "b", 1, False), ("b", "c", 2, True), ("c", "a", 3, True)]
    assert cycles({"a", "b", "c", "d"}, edges) == [["a", "b", "c"]]
    _, real = import_edges()
    assert any(in_function for *_, in_function in real)


def test_the_checker_reads_the_entry_points_and_scripts():
    known, edges = import_edges()
    assert {"pytest_autotune", "tools.autotune_cache",
            "bench.bench_runtime"} <= set(known)
    pairs = {(a, b) for a, b, _, _ in edges}
    # A function-level import of the package by the entry point; a script
    # importing the package, and one importing another by bare name.
    assert ("pytest_autotune", "autotune.pytest_plugin") in pairs
    assert ("tools.autotune_cache", "autotune.cli.cache_tool") in pairs
    assert ("bench.bench_cache_tool", "bench.bench_runtime") in pairs


def _write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_package_module_importing_the_entry_point_is_caught(tmp_path):
    # The loop the plugin and its entry point once had: the entry point
    # loads the plugin in a function, the plugin imports the entry point's
    # names at its head.
    _write(tmp_path, {
        "autotune/__init__.py": "",
        "autotune/pytest_plugin.py": "from pytest_autotune import INI_CACHE\n",
        "pytest_autotune.py": ("def pytest_configure(config):\n"
                               "    from autotune import pytest_plugin\n"),
        "tools/regenerate.py": "import gpu_slot\n",
        "tools/gpu_slot.py": "",
    })
    known, edges = import_edges(tmp_path)
    assert cycles(known, edges) == [["autotune.pytest_plugin",
                                     "pytest_autotune"]]
    assert layer_violations(edges) == [
        "autotune.pytest_plugin:1 (tools) imports pytest_autotune "
        "(entry points)"]
    assert ("tools.regenerate", "tools.gpu_slot", 1, False) in edges
    # The entry point's import gives no reason.
    assert unexplained_function_imports(tmp_path) == {
        "pytest_autotune.py": ["2: from autotune import pytest_plugin"]}


def test_a_reason_or_the_optional_form_explains_a_function_level_import(
        tmp_path):
    _write(tmp_path, {
        "autotune/__init__.py": "",
        "autotune/a.py": (
            "def f():\n"
            "    # torch through b: heavy, only on the GPU path\n"
            "    from autotune import b\n"
            "    import json\n"
            "\n"
            "def g():\n"
            "    try:\n"
            "        import tomllib\n"
            "    except ImportError:\n"
            "        pass\n"
            "\n"
            "def h():\n"
            "    import json  # noqa: F401\n"
            "    import torch\n"),
        "autotune/b.py": "",
    })
    assert unexplained_function_imports(tmp_path) == {
        "autotune/a.py": ["13: import json  # noqa: F401"]}


@pytest.mark.parametrize("module", ["autotune.search.evolutionary",
                                    "autotune.records", "pytest_autotune",
                                    "autotune.binaries.triton_cache",
                                    "autotune.host.stamp",
                                    "tools.regenerate", "bench.gpu_check"])
def test_layers_are_known_for_core_modules(module):
    assert layer_of(module) is not None
