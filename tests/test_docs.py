"""The documentation stays true to the code: the flag reference is the flag
table's, the macro reference is the macros' docstrings', links resolve,
and the commands it tells users to run name files and targets that exist.

No Bazel: the .bzl files are read as text.
"""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
README = os.path.join(ROOT, "README.md")
README_MAX_LINES = 200

sys.path.insert(0, os.path.join(ROOT, "tools"))
import gen_docs  # noqa: E402


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def doc_pages():
    return sorted(name for name in os.listdir(DOCS) if name.endswith(".md"))


def markdown_files():
    files = [README] + [os.path.join(DOCS, p) for p in doc_pages()]
    for name in ("CONTRIBUTING.md", "CHANGELOG.md"):
        if os.path.exists(os.path.join(ROOT, name)):
            files.append(os.path.join(ROOT, name))
    return files


def _without_fences(text):
    return re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)


def _without_code_blocks(text):
    """The text outside fenced code blocks and inline code spans."""
    return re.sub(r"`[^`\n]*`", "", _without_fences(text))


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def links(path):
    """Relative link targets of a markdown file (outside code blocks)."""
    found = []
    for target in LINK.findall(_without_code_blocks(_read(path))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):   # http:, mailto:
            continue
        found.append(target)
    return found


def slug(heading):
    """The anchor a markdown renderer gives a heading (GitHub's rule)."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    text = _without_fences(_read(path))
    return {slug(h) for h in re.findall(r"^#{1,6}\s+(.*)$", text, re.M)}


# -- README ---------------------------------------------------------------

def test_readme_is_short():
    count = len(_read(README).splitlines())
    assert count <= README_MAX_LINES, (
        f"README.md has {count} lines; keep it at most {README_MAX_LINES} "
        "and move details to docs/")


def test_readme_links_every_docs_page_and_only_existing_ones():
    linked = set()
    for target in links(README):
        path = target.split("#")[0]
        if path.startswith("docs/") and path.endswith(".md"):
            linked.add(path[len("docs/"):])
    missing_files = sorted(p for p in linked if p not in doc_pages())
    assert not missing_files, f"README links missing pages: {missing_files}"
    unlinked = sorted(set(doc_pages()) - linked)
    assert not unlinked, f"docs pages not in README's index: {unlinked}"


def test_readme_set_up_commands_are_true():
    readme = _read(README)
    for command in ("bash .ci/run", "python3 tools/run_example_suite.py",
                    "python3 -m pytest -q tests"):
        assert command in readme, f"README.md lacks `{command}`"
    ci_lines = [line.strip() for line in _read(os.path.join(ROOT, ".ci", "run"))
                .splitlines() if line.strip() and not line.startswith("#")]
    assert ci_lines[-1] == "python3 -m pytest -q tests", (
        ".ci/run no longer ends with README's test command, "
        f"it ends with {ci_lines[-1]!r}")
    assert os.path.isfile(os.path.join(ROOT, "tools", "run_example_suite.py"))


def test_fusion_is_defined_before_it_is_used():
    text = _without_code_blocks(_read(README))
    first_use = re.search(r"\bfusions?\b", text, re.I)
    definition = re.search(r"\*\*fusion\*\*", text, re.I)
    assert definition, "README.md does not define **fusion**"
    assert first_use.start() >= definition.start(), (
        "README.md says 'fusion' before defining it: "
        + text[first_use.start() - 60:first_use.end() + 20])


# -- links ----------------------------------------------------------------

def test_relative_links_resolve():
    broken = []
    for path in markdown_files():
        for target in links(path):
            file_part, _, anchor = target.partition("#")
            resolved = (os.path.normpath(os.path.join(os.path.dirname(path),
                                                      file_part))
                        if file_part else path)
            rel = os.path.relpath(path, ROOT)
            if not os.path.exists(resolved):
                broken.append(f"{rel}: {target} (no such file)")
            elif anchor and resolved.endswith(".md") \
                    and anchor not in anchors(resolved):
                broken.append(f"{rel}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


# -- flags ----------------------------------------------------------------

def test_flags_reference_is_current():
    current = _read(os.path.join(DOCS, "flags.md"))
    assert current == gen_docs.render(), (
        "docs/flags.md is stale: run python3 tools/gen_docs.py")


def test_gen_docs_check_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "flags.md"
    stale.write_text(gen_docs.render().replace("--autotune_workers",
                                               "--autotune_worker"))
    monkeypatch.setattr(gen_docs, "FLAGS_DOC", str(stale))
    assert gen_docs.main(["--check"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "stale" in err, err
    stale.write_text(gen_docs.render())
    assert gen_docs.main(["--check"]) == 0


def test_flags_reference_names_every_flag():
    from autotune.flags import FLAGS
    text = gen_docs.render()
    for spec in FLAGS:
        assert f"`--{spec.name}`" in text
        assert f"configure({gen_docs.api_name(spec)}=" in text


# -- Bazel macro reference --------------------------------------------------

def _split_top_level(text, sep=","):
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def public_macros():
    """{public name: private def name} from rules/defs.bzl."""
    text = _read(os.path.join(ROOT, "rules", "defs.bzl"))
    aliases = dict(re.findall(r'(_\w+)\s*=\s*"(\w+)"', text))
    return {public: aliases.get(alias, alias) for public, alias in
            re.findall(r"^(\w+)\s*=\s*(_\w+)\s*$", text, re.M)}


def macro_definitions():
    """{def name: (signature {param: default or None}, docstring Args
    names)} from every rules/private/*.bzl; a default that names a
    module-level constant is given as the constant's value."""
    found = {}
    private = os.path.join(ROOT, "rules", "private")
    for name in sorted(os.listdir(private)):
        if not name.endswith(".bzl"):
            continue
        text = _read(os.path.join(private, name))
        constants = dict(re.findall(r"^([A-Z_]+) = (.+)$", text, re.M))
        for m in re.finditer(r'^def (\w+)\(((?:(?!\ndef ).)*?)\):\n\s*"""(.*?)"""', text,
                             re.S | re.M):
            params = {}
            for param in _split_top_level(m.group(2)):
                pname, _, default = param.partition("=")
                default = default.strip() or None
                params[pname.strip()] = constants.get(default, default)
            found[m.group(1)] = (params, docstring_args(m.group(3)))
    return found


def docstring_args(doc):
    lines = doc.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == "Args:")
    except StopIteration:
        return []
    names, indent = [], None
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width < indent:
            break
        m = re.match(r"\s*(\*{0,2}\w+):", line)
        if width == indent and m:
            names.append(m.group(1))
    return names


def reference_tables():
    """{macro: {attribute: default cell}} from docs/bazel.md's macro
    reference: a `### `macro`` heading followed by a table."""
    text = _read(os.path.join(DOCS, "bazel-reference.md"))
    tables = {}
    for m in re.finditer(r"^### `(\w+)`\s*$(.*?)(?=^#{1,3} |\Z)", text,
                         re.S | re.M):
        rows = {}
        for row in re.findall(r"^\| `([*\w]+)` \|([^|]*)\|", m.group(2),
                              re.M):
            rows[row[0]] = row[1].strip()
        if rows:
            tables[m.group(1)] = rows
    return tables


def test_every_public_macro_is_documented_by_its_docstring():
    definitions = macro_definitions()
    tables = reference_tables()
    problems = []
    for public, private in public_macros().items():
        if private not in definitions:
            problems.append(f"{public}: no def {private} in rules/private")
            continue
        params, args = definitions[private]
        if set(params) != set(args):
            problems.append(
                f"{public}: the docstring's Args {sorted(args)} differ from "
                f"the parameters {sorted(params)}")
        table = tables.get(public)
        if table is None:
            problems.append(f"{public}: no reference table in docs/bazel.md")
            continue
        for name in sorted(set(args) - set(table)):
            problems.append(f"{public}: `{name}` missing from docs/bazel.md")
        for name in sorted(set(table) - set(args)):
            problems.append(f"{public}: docs/bazel.md documents `{name}`, "
                            "which the docstring does not")
        for name, cell in table.items():
            default = params.get(name)
            expected = "required" if default is None else f"`{default}`"
            if name.startswith("**"):
                expected = "-"
            if name in params and cell != expected:
                problems.append(f"{public}: `{name}` default is {default!r} "
                                f"in the macro, {cell!r} in docs/bazel.md")
    assert public_macros(), "no public macros found in rules/defs.bzl"
    assert not problems, "\n".join(problems)


# -- commands the docs name ---------------------------------------------------

def _commands_text():
    return "\n".join(_read(p) for p in markdown_files()
                     + [os.path.join(ROOT, "CONTRIBUTING.md")]
                     if os.path.exists(p))


def test_scripts_and_modules_named_in_docs_exist():
    text = _commands_text()
    missing = set()
    for script in re.findall(r"(?:python3|bash) ((?:tools|bench|\.ci)/"
                             r"[\w/.-]*\w)", text):
        if not os.path.exists(os.path.join(ROOT, script)):
            missing.add(script)
    for module in re.findall(r"python3 -m (autotune[\w.]*)", text):
        base = os.path.join(ROOT, *module.split("."))
        if not (os.path.exists(base + ".py")
                or os.path.exists(os.path.join(base, "__main__.py"))):
            missing.add(f"-m {module}")
    assert not missing, f"docs name commands that do not exist: {sorted(missing)}"


def test_bazel_targets_named_in_docs_exist():
    text = _commands_text()
    missing = set()
    for package, target in set(re.findall(
            r"@rules_autotune//([\w/]*):(\w[\w.]*\w)", text)):
        build = os.path.join(ROOT, package, "BUILD.bazel")
        body = _read(build) if os.path.exists(build) else ""
        if package == "rules":
            exists = os.path.exists(os.path.join(ROOT, package, target))
        else:
            exists = (f'name = "{target}"' in body
                      or f'"{target}.py"' in body)
        if not exists:
            missing.add(f"@rules_autotune//{package}:{target}")
    assert not missing, f"docs name targets that do not exist: {sorted(missing)}"


def test_cache_tool_commands_named_in_docs_exist():
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "autotune_cache.py"),
         "--help"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    choices = re.search(r"\{([\w,-]+)\}", result.stdout)
    assert choices, result.stdout
    known = set(choices.group(1).split(","))
    used = set(re.findall(r"autotune_cache(?:\.py)? (?:-- )?([a-z]+)\b",
                          _commands_text()))
    unknown = sorted(used - known)
    assert not unknown, (f"docs name cache tool commands it lacks: {unknown} "
                         f"(it has {sorted(known)})")


# -- paths and functions named in backticks ----------------------------------

# Made by a command the docs give, not part of the repository: .ci/run
# makes the virtual environments and installs buildifier under .ci/npm;
# the GPU check's wheels are downloaded into bench/wheels.
GENERATED = (".ci/venv", ".ci/npm", ".ci/venv-pytest-newest", "bench/wheels")
# The package's subpackages: docstrings inside it name their modules
# relative to autotune/ (`runtime/triton_patch.py`).
PACKAGE = os.path.join(ROOT, "autotune")
SPAN = re.compile(r"`([^`\n]+)`")
REFERENCE = re.compile(r"((?:autotune|pytest_autotune|tools|bench)"
                       r"[\w.]*|[\w/]+\.py):([A-Za-z_][\w.]*)")


def _top_level_names():
    return {name for name in os.listdir(ROOT) if not name.startswith(".")} \
        | {".ci"}


def python_sources():
    """The files whose docstrings are read: the package, the pytest entry
    point and the scripts."""
    paths = [os.path.join(ROOT, "pytest_autotune.py")]
    for folder in ("autotune", "tools", "bench"):
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            paths += [os.path.join(dirpath, f) for f in files
                      if f.endswith(".py") and not f.endswith("_pb2.py")]
    return sorted(paths)


def docstrings(path):
    import ast
    tree = ast.parse(_read(path), path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text:
                yield text


def backticked():
    """{span: [where, ...]} of the inline code spans of docs/ (outside
    fenced blocks) and of every docstring."""
    found = {}
    for page in doc_pages():
        path = os.path.join(DOCS, page)
        for span in SPAN.findall(_without_fences(_read(path))):
            found.setdefault(span, []).append(f"docs/{page}")
    for path in python_sources():
        rel = os.path.relpath(path, ROOT)
        for text in docstrings(path):
            for span in SPAN.findall(text):
                found.setdefault(span, []).append(rel)
    return found


def repository_path(span):
    """The path a span names in the repository (None: it names none): one
    word with a slash, starting at a top-level entry or, for the
    package's own modules, at one of its subpackages."""
    if re.search(r"\s|://|^[/@:$~<-]", span) or "/" not in span:
        return None
    path = span.split("#")[0]
    first = path.split("/")[0]
    if first in _top_level_names():
        return path
    if os.path.isdir(os.path.join(PACKAGE, first)):
        return "autotune/" + path
    return None


def _exists(path):
    if any(path == g or path.startswith(g + "/") for g in GENERATED):
        return True
    import glob
    return bool(glob.glob(os.path.join(ROOT, path.rstrip("/"))))


def _module_file(module):
    if module.endswith(".py"):
        candidates = [module, "autotune/" + module]
    else:
        base = module.replace(".", "/")
        candidates = [base + ".py", base + "/__init__.py"]
    for candidate in candidates:
        if os.path.isfile(os.path.join(ROOT, candidate)):
            return os.path.join(ROOT, candidate)
    return None


def defines(path, dotted):
    """Whether the module at `path` defines `dotted` (a function, class or
    name at its top level; Class.method inside a class)."""
    import ast
    body = ast.parse(_read(path), path).body
    for part in dotted.split("."):
        names = {}
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.ClassDef)):
                names[node.name] = getattr(node, "body", [])
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        names[target.id] = []
            elif isinstance(node, ast.AnnAssign) and \
                    isinstance(node.target, ast.Name):
                names[node.target.id] = []
        if part not in names:
            return False
        body = names[part]
    return True


def missing_references(spans):
    missing = []
    for span, where in sorted(spans.items()):
        reference = REFERENCE.fullmatch(span)
        if reference:
            module, name = reference.groups()
            path = _module_file(module)
            if path is None or not defines(path, name):
                missing.append(f"{span} (in {', '.join(sorted(set(where)))})")
            continue
        path = repository_path(span)
        if path is not None and not _exists(path):
            missing.append(f"{span} (in {', '.join(sorted(set(where)))})")
    return missing


def test_paths_and_functions_named_in_backticks_exist():
    missing = missing_references(backticked())
    assert not missing, ("docs and docstrings name paths or functions that "
                         "do not exist:\n" + "\n".join(missing))


def test_the_backtick_check_can_fail():
    # Docstrings are read too (the entry point's names its -p switch).
    assert "pytest_autotune.py" in backticked()["-p no:pytest_autotune"]
    assert missing_references({
        "autotune/runtime/tuning.py": ["x"],
        "runtime/tuning.py": ["x"],
        "tools/*.py": ["x"],
        "docs/design.md#layers": ["x"],
        "autotune.runtime.tuning:Tuning.run": ["x"],
        "autotune/runtime/tuning.py:tune_with_search": ["x"],
        ".ci/venv/bin": ["x"],
        "python3 tools/gone.py": ["x"],  # a command: checked elsewhere
    }) == []
    assert missing_references({
        "autotune/runtime/gone.py": ["a"],
        "measure/gone.py": ["b"],
        "autotune.runtime.tuning:Tuning.gone": ["c"],
        "autotune.runtime.gone:Tuning": ["d"],
    }) == ["autotune.runtime.gone:Tuning (in d)",
           "autotune.runtime.tuning:Tuning.gone (in c)",
           "autotune/runtime/gone.py (in a)", "measure/gone.py (in b)"]


# -- the device key ---------------------------------------------------------

DEVICE_KEY_SENTENCE = (
    "The device key holds the GPU name, compute capability, SM count and "
    "Triton version (`NVIDIA H200/sm_90/sms=132/triton-3.9.0`); after a "
    "Triton, torch or CUDA upgrade the old entries stay hits by default, "
    "counted in the summary, until `pytest --autotune-update=all` or "
    "`regenerate --retune` re-measures them and replaces each with one "
    "entry under the running versions.")
DEVICE_KEY_PAGES = ("README.md", "docs/glossary.md", "docs/pytest.md",
                    "docs/bazel.md", "docs/trusting-caches.md",
                    "docs/stable-caches.md")


def _words(text):
    return " ".join(text.split())


@pytest.mark.parametrize("page", DEVICE_KEY_PAGES)
def test_what_the_device_key_holds_is_said_in_one_sentence(page):
    """The pages that speak of upgrades say in the same words what the
    device key holds and what an upgrade does."""
    assert DEVICE_KEY_SENTENCE in _words(_read(os.path.join(ROOT, page))), (
        f"{page}: say what the device key holds and what an upgrade does "
        f"in the words of tests/test_docs.py DEVICE_KEY_SENTENCE")


def test_no_page_says_an_upgrade_keeps_the_device_key():
    for path in markdown_files():
        text = _words(_read(path)).lower()
        for wrong in ("keeps the device key", "device key matches"):
            assert wrong not in text, (
                f"{os.path.relpath(path, ROOT)}: '{wrong}': a Triton upgrade "
                "changes the device key (it holds the Triton version)")


def test_every_ini_key_of_the_plugin_is_in_pytests_table():
    import pytest_autotune
    table = [line for line in _read(os.path.join(DOCS, "pytest.md")).splitlines()
             if line.startswith("|")]
    missing = [key for key in pytest_autotune.INI_KEYS
               if not any(f"`{key}" in line for line in table)]
    assert not missing, f"docs/pytest.md: the ini key table lacks {missing}"


def test_the_default_lock_directory_is_the_codes():
    from autotune.host import lock_files
    default = lock_files.DEFAULT_LOCK_DIR.replace(str(os.getuid()), "UID")
    for path in markdown_files():
        for found in re.findall(r"/tmp/rules_autotune-locks[\w-]*",
                                _read(path)):
            assert found == default, (
                f"{os.path.relpath(path, ROOT)}: {found}; the default lock "
                f"directory is {default}")
    for page in ("pytest.md", "getting-started.md"):
        text = _read(os.path.join(DOCS, page))
        assert "AUTOTUNE_LOCK_DIR" in text and "one lock" in text, page


# -- docs/design.md names every module and piece of process state --------

def process_state():
    """{module:name} of the package's module-level mutable state: names
    bound at a module's top level to an empty container (filled at run
    time) and names a function rebinds with `global`."""
    import ast
    found = set()
    for path in python_sources():
        rel = os.path.relpath(path, ROOT)
        if not rel.startswith("autotune" + os.sep):
            continue
        module = rel[:-3].replace(os.sep, ".").replace(".__init__", "")
        tree = ast.parse(_read(path), path)
        for node in tree.body:
            if not isinstance(node, ast.Assign):
                continue
            value = node.value
            empty = (isinstance(value, (ast.Dict, ast.List, ast.Set))
                     and not getattr(value, "keys", None)
                     and not getattr(value, "elts", None)) or (
                isinstance(value, ast.Call) and not value.args
                and ast.unparse(value.func) in (
                    "set", "dict", "list", "weakref.WeakSet",
                    "weakref.WeakKeyDictionary", "collections.Counter"))
            if empty:
                found |= {f"{module}:{t.id}" for t in node.targets
                          if isinstance(t, ast.Name) and t.id != "__all__"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                found |= {f"{module}:{name}" for name in node.names}
    return found


def test_design_names_every_piece_of_process_state():
    section = _read(os.path.join(DOCS, "design.md")).split(
        "## Process-wide state", 1)[1]
    unnamed = sorted(name for name in process_state()
                     if f"`{name}`" not in section)
    assert not unnamed, ("docs/design.md's process-wide state omits "
                         + ", ".join(unnamed))


def test_design_names_every_module_of_the_package():
    design = _read(os.path.join(DOCS, "design.md"))
    unnamed = []
    for path in python_sources():
        rel = os.path.relpath(path, ROOT)
        if not rel.startswith("autotune" + os.sep) or \
                os.path.basename(rel) == "__init__.py":
            continue
        name, parent = os.path.basename(rel), os.path.dirname(rel)
        if parent.count(os.sep) > 1 or \
                parent in ("autotune/kernels", "autotune/dropin",
                           "autotune/proto", "autotune/search"):
            continue
        if f"`{rel}`" not in design and f"`{name}`" not in design:
            unnamed.append(rel)
    assert not unnamed, "docs/design.md omits " + ", ".join(sorted(unnamed))
