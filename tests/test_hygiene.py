"""What a review would catch by eye, checked: no merge or patch leftovers
tracked, every repository path a comment or docstring names (backticked
or not) exists, and the read-side EntryHead keeps Entry's field numbers."""
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Paths of the project's own files, as comments and docstrings name them.
PATH = re.compile(r"(?<![\w/.-])((?:autotune|tools|bench|rules|docs)/"
                  r"[\w./-]*\w\.(?:py|bzl|md|sh))")
# Files whose paths are made-up examples (the checks' own test data).
EXAMPLES = {"tests/test_docs.py", "tests/test_layers.py",
            "tests/test_hygiene.py"}


def tracked():
    return subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.split()


def test_no_merge_or_patch_leftovers_are_tracked():
    leftovers = [f for f in tracked() if f.endswith((".orig", ".rej"))]
    assert not leftovers, leftovers


def test_no_link_leaves_the_repository():
    """A tracked symbolic link must point inside the checkout: one to a
    machine's own folder (a local virtual environment) breaks every clean
    clone, and the ignore rules of a folder do not catch a link."""
    listing = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT,
                             capture_output=True, text=True,
                             check=True).stdout.splitlines()
    outside = []
    for line in listing:
        mode, _, rest = line.partition(" ")
        if mode != "120000":
            continue
        name = rest.split("\t", 1)[1]
        target = os.readlink(os.path.join(ROOT, name))
        resolved = os.path.normpath(os.path.join(
            ROOT, os.path.dirname(name), target))
        if os.path.isabs(target) or not resolved.startswith(ROOT + os.sep):
            outside.append(f"{name} -> {target}")
    assert not outside, outside


def test_the_ci_folders_are_ignored_as_links_too():
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", ".ci/venv", ".ci/npm"],
        cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert ignored == [".ci/venv", ".ci/npm"]


def stale_paths(files):
    found = {}
    for name in files:
        if not name.endswith((".py", ".bzl", ".sh")) or name in EXAMPLES:
            continue
        with open(os.path.join(ROOT, name), errors="replace") as f:
            for number, line in enumerate(f, 1):
                for match in PATH.finditer(line):
                    path = match.group(1)
                    if re.search(r"[A-Z]{3,}", path):  # tools/NAME.py
                        continue
                    if not os.path.exists(os.path.join(ROOT, path)):
                        found.setdefault(path, []).append(f"{name}:{number}")
    return found


def test_paths_named_in_comments_and_docstrings_exist():
    stale = stale_paths(tracked())
    assert not stale, stale


def test_the_path_check_can_fail(tmp_path, monkeypatch):
    import test_hygiene
    monkeypatch.setattr(test_hygiene, "ROOT", str(tmp_path))
    (tmp_path / "autotune").mkdir()
    (tmp_path / "autotune" / "here.py").write_text(
        "# see autotune/here.py and autotune/gone.py\n")
    assert stale_paths(["autotune/here.py"]) == {
        "autotune/gone.py": ["autotune/here.py:1"]}


def test_entry_head_keeps_entry_field_numbers():
    """A binary file parsed as EntryHead must give back the whole Entry:
    every EntryHead field has Entry's number, name and type."""
    from autotune.proto import autotune_results_pb2 as pb
    entry = {f.name: f for f in pb.Entry.DESCRIPTOR.fields}
    for field in pb.EntryHead.DESCRIPTOR.fields:
        assert field.name in entry, field.name
        twin = entry[field.name]
        shape = (lambda f: (f.number, f.type, getattr(f, "is_repeated",
                                                       None)))
        assert shape(field) == shape(twin), field.name
    heads = {f.name: f.number for f in pb.AutotuneResultsHeads.DESCRIPTOR.fields}
    results = {f.name: f.number for f in pb.AutotuneResults.DESCRIPTOR.fields}
    assert heads == results


# A class past this many lines holds more than one concern: what is not
# its own goes to the module where that concern lives (docs/design.md).
MAX_CLASS_LINES = 500


def long_classes(paths):
    import ast
    found = []
    for path in paths:
        with open(os.path.join(ROOT, path)) as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    found.append(f"{path}:{node.lineno} {node.name}: "
                                 f"{lines} lines")
    return found


def test_no_class_of_the_package_is_over_500_lines():
    package = [f for f in tracked()
               if f.startswith("autotune/") and f.endswith(".py")]
    assert package and not long_classes(package), long_classes(package)


def test_the_class_length_check_can_fail(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_CLASS_LINES))
    (tmp_path / "big.py").write_text("class Big:\n" + body)
    assert long_classes([str(tmp_path / "big.py")]) == [
        f"{tmp_path / 'big.py'}:1 Big: {MAX_CLASS_LINES + 1} lines"]
