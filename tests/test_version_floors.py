"""The version floors are stated once, in docs/bazel.md#version-floors, and
every other file agrees: MODULE.bazel's bazel_compatibility and pins, the
.bazelversion files (the repository's and e2e/smoke's, which bazelisk
reads), the README, e2e/smoke's MODULE.bazel, the WORKSPACE snippets.
The offline shims are described as what they are (Bazel 4.2.3 in
WORKSPACE mode), and the docs say what regenerate's nested bazel keeps of
the calling one's startup options. The Python package floors (Python,
torch, Triton) are stated once, in docs/gpu.md#versions: pyproject.toml,
the README and CI's Triton version matrix (.ci/matrix) agree. No Bazel:
the files are read as text.
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


# -- the Python package floors: docs/gpu.md#versions -------------------------

def package_floors():
    """{package: version} of docs/gpu.md's floors table."""
    text = read("docs/gpu.md").split("\n## Versions\n", 1)[1]
    found = dict(re.findall(r"^\| (\w+) \| `([\d.]+)` \|", text, re.M))
    assert set(found) == {"Python", "torch", "Triton"}, found
    return found


def matrix_rows():
    """[(triton version, [extra requirements])] of .ci/matrix, in order."""
    text = read(".ci/matrix").split("MATRIX=(", 1)[1].split("\n)", 1)[0]
    rows = [line.strip().strip('"').split()
            for line in text.splitlines() if line.strip().startswith('"')]
    return [(row[0], row[1:]) for row in rows]


def test_pyproject_declares_the_package_floors():
    floors = package_floors()
    project = read("pyproject.toml")
    assert re.search(r'^requires-python = ">=([\d.]+)"$', project,
                     re.M).group(1) == floors["Python"]
    for package in ("torch", "triton"):
        declared = re.findall(rf'^\s*"{package}>=([\d.]+)",$', project, re.M)
        assert declared == [floors[package.capitalize()
                                   if package == "triton" else package]], \
            f"pyproject.toml: {package}>={declared} " \
            f"(docs/gpu.md: {floors})"


def test_the_readme_states_the_package_floors():
    floors = package_floors()
    readme = " ".join(read("README.md").split())  # lines joined
    assert f"Python {floors['Python']}+, torch {floors['torch']}+ and " \
        f"Triton {floors['Triton']}+" in readme
    for name in ("Python", "torch", "Triton"):
        for stated in re.findall(rf"{name} (\d[\d.]*)\+", readme):
            assert stated == floors[name], \
                f"README.md: {name} {stated}+ (floor {floors[name]})"


def test_the_matrix_runs_the_floor_first_and_the_newest_last():
    """The first row of CI's version matrix is a release of the Triton
    floor, and the one torch's floor pins (torch 2.9.0 takes 3.5.0); the
    last is requirements.txt's Triton, the newest; the docs name every
    version that CI runs."""
    rows = matrix_rows()
    versions = [version for version, _ in rows]
    floors = package_floors()
    assert versions[0] == floors["Triton"] + ".0", versions
    pinned = re.search(r"^triton==([\d.]+)$", read("requirements.txt"),
                       re.M).group(1)
    assert versions[-1] == pinned, versions
    assert versions == sorted(
        versions, key=lambda v: tuple(int(p) for p in v.split("."))), versions
    versions_section = read("docs/gpu.md").split("\n## Versions\n", 1)[1]
    ran = re.search(r"CI\s+runs\s+([^:]+):", versions_section)
    named = re.findall(r"\d+\.\d+\.\d+", ran.group(1))
    assert named == versions, f"docs/gpu.md names {named}, .ci/matrix runs " \
        f"{versions}"
    assert "bash .ci/matrix" in read(".ci/run")
