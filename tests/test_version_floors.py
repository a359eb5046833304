"""The version floors are stated once, in docs/bazel.md#version-floors, and
every other file agrees: MODULE.bazel's bazel_compatibility and pins, the
.bazelversion files (the repository's and e2e/smoke's, which bazelisk
reads), the README, e2e/smoke's MODULE.bazel, the WORKSPACE snippets.
The offline shims are described as what they are (Bazel 4.2.3 in
WORKSPACE mode), and the docs say what regenerate's nested bazel keeps of
the calling one's startup options. No Bazel: the files are read as text.
"""
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = "docs/bazel.md"


def read(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return f.read()


def floors():
    """{what: version} of the version-floors table."""
    text = read(PAGE).split("### Version floors", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| ([^|]+?) \| `([^`]+)` \|", text, re.M)
    found = dict(rows)
    assert {"Bazel, Bzlmod", "Bazel, run here", "rules_python",
            "rules_shell", "bazel_skylib"} <= set(found), text
    return found


def tracked(*patterns):
    listed = subprocess.run(["git", "ls-files", "--", *patterns], cwd=ROOT,
                            capture_output=True, text=True, check=True)
    return [p for p in listed.stdout.split() if not p.startswith("tests/")]


def test_the_bazel_floor_is_the_modules_and_bazelversions():
    floor = floors()["Bazel, Bzlmod"]
    assert re.search(r"bazel_compatibility = \[\">=([\d.]+)\"\]",
                     read("MODULE.bazel")).group(1) == floor
    for rel in (".bazelversion", "e2e/smoke/.bazelversion"):
        assert read(rel).strip() == floor, rel
    # The e2e workspace's launcher falls back to the installed Bazel
    # offline, as the repository's does.
    assert os.path.realpath(os.path.join(ROOT, "e2e/smoke/tools/bazel")) \
        == os.path.realpath(os.path.join(ROOT, "tools/bazel"))


def test_every_statement_of_the_floor_names_it():
    """"Bazel N+" in the README and the module files is the floor; a bare
    major ("Bazel 7+") is nowhere (it reads as a floor and is none)."""
    floor = floors()["Bazel, Bzlmod"]
    for rel in ("README.md", "MODULE.bazel", "e2e/smoke/MODULE.bazel",
                "docs/getting-started.md"):
        for stated in re.findall(r"Bazel (\d[\d.]*)\+", read(rel)):
            assert stated == floor, f"{rel}: Bazel {stated}+ (floor {floor})"
    assert f"Bazel {floor}+" in read("README.md")
    for rel in tracked("*.md", "*.bazel", "WORKSPACE", "*.bzl", ".bazelrc"):
        bare = re.findall(r"Bazel \d+\+", read(rel))
        assert not bare, f"{rel}: {bare}: say the floor, {floor}"


@pytest.mark.parametrize("module, archive", [
    ("rules_python", r"rules_python-([\d.]+)\.tar\.gz"),
    ("rules_shell", r"rules_shell-v([\d.]+)\.tar\.gz"),
    ("bazel_skylib", r"bazel-skylib-([\d.]+)\.tar\.gz"),
])
def test_every_pin_of_a_module_is_its_floor(module, archive):
    version = floors()[module]
    seen = []
    for rel in tracked("*.md", "*.bazel", "WORKSPACE"):
        text = read(rel)
        for found in re.findall(
                rf'bazel_dep\(name = "{module}", version = "([^"]+)"', text):
            seen.append(rel)
            assert found == version, f"{rel}: {module} {found} ({version})"
        for found in re.findall(archive, text):
            seen.append(rel)
            assert found == version, f"{rel}: {module} {found} ({version})"
    assert seen, module


def test_rules_python_2_is_named_and_the_shims_are_for_4_2_3():
    page = read(PAGE)
    row = [line for line in page.splitlines()
           if line.startswith("| rules_python |")][0]
    assert "2.x is not tested" in row, row
    shims = read("tools/bazel_offline/README.md")
    assert "Bazel 4.2.3 in WORKSPACE mode only" in shims
    assert "Bazel 9 (no" not in shims and "bazel vendor" in shims
    module = read("MODULE.bazel")
    assert "--override_module" not in module
    assert "4.2.3 in WORKSPACE mode only" in module.replace("\n# ", " ")


def test_regenerates_nested_bazel_and_the_output_base_are_documented():
    page = read(PAGE)
    floors_text = page.split("### Version floors", 1)[1]
    assert "--output_base" in floors_text and \
        "--bazel_startup_arg" in floors_text
    regenerate = page.split("**Bazel arguments.**", 1)[1].split("\n## ", 1)[0]
    assert "`--output_base`" in regenerate
