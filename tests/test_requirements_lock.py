"""The e2e workspace's requirements_lock.txt is what rules_python's
pip.parse expects: every package the top-level ones need, transitively,
pinned once (pip.parse installs each line with --no-deps), and
tools/lock_requirements.py, which makes it, writes such a file.

No network: the lock's packages are checked against the metadata of the
same versions installed here (requirements.txt pins every one of them,
so a fresh install is the environment the lock describes).
"""
import importlib.metadata
import json
import os
import re
import subprocess
import sys

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = os.path.join(ROOT, "e2e", "smoke")
LOCK = os.path.join(SMOKE, "requirements_lock.txt")
REQUIREMENTS_IN = os.path.join(SMOKE, "requirements.in")
TOOL = os.path.join(ROOT, "tools", "lock_requirements.py")

sys.path.insert(0, os.path.join(ROOT, "tools"))
import lock_requirements  # noqa: E402

# The hub the lock is for (MODULE.bazel: python_version = "3.11").
HUB_ENVIRONMENT = dict(default_environment(), python_version="3.11",
                       python_full_version="3.11.0", platform_system="Linux",
                       sys_platform="linux", os_name="posix")


def _name(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path):
    """{normalized name: version} of a lock's `name==version` lines; the
    option lines (--index-url ...) and comments left out."""
    pins = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("-"):
                continue
            match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
            assert match, f"{path}:{number}: not a name==version pin: {line}"
            name = _name(match.group(1))
            assert name not in pins, f"{path}:{number}: {name} pinned twice"
            pins[name] = match.group(2)
    return pins


def _requirements(path):
    with open(path, encoding="utf-8") as f:
        lines = [l.split("#", 1)[0].strip() for l in f]
    return [Requirement(l) for l in lines if l and not l.startswith("-")]


def _installed(name, version):
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return dist if Version(dist.version) == Version(version) else None


def unresolved(pins):
    """What a lock's packages need that it does not pin (or pins at a
    version they do not take), from the installed metadata of the locked
    versions: [text]. Packages not installed here at their locked version
    are returned apart: (problems, unchecked names)."""
    problems, unchecked = [], []
    for name, version in sorted(pins.items()):
        dist = _installed(name, version)
        if dist is None:
            unchecked.append(name)
            continue
        for text in dist.requires or ():
            need = Requirement(text)
            if need.marker is not None and not need.marker.evaluate(
                    dict(HUB_ENVIRONMENT, extra="")):
                continue
            have = pins.get(_name(need.name))
            if have is None:
                problems.append(f"{name}=={version} needs {need}: not in "
                                "the lock")
            elif not need.specifier.contains(have, prereleases=True):
                problems.append(f"{name}=={version} needs {need}: the lock "
                                f"has {have}")
    return problems, unchecked


def test_the_e2e_lock_pins_every_package_its_packages_need():
    pins = _pins(LOCK)
    problems, unchecked = unresolved(pins)
    if "torch" in unchecked:
        pytest.skip(f"torch=={pins['torch']} is not the torch installed here")
    if "triton" in unchecked:  # an environment of the Triton version matrix
        pytest.skip(f"triton=={pins['triton']} is not the Triton installed "
                    "here")
    assert not problems, f"{LOCK}: not fully resolved:\n" + "\n".join(problems)
    assert not unchecked, (f"{LOCK}: these locked versions are not the ones "
                           f"installed here: {unchecked}")


def test_the_e2e_lock_holds_requirements_in_at_the_tested_versions():
    pins = _pins(LOCK)
    for need in _requirements(REQUIREMENTS_IN):
        name = _name(need.name)
        assert name in pins, f"{LOCK}: {need} of requirements.in is missing"
        assert need.specifier.contains(pins[name]), (
            f"{LOCK}: {name}=={pins[name]} does not satisfy {need}")
    # requirements.in pins what the project is tested with.
    tested = {_name(r.name): r for r in _requirements(
        os.path.join(ROOT, "requirements.txt"))}
    for need in _requirements(REQUIREMENTS_IN):
        assert str(need.specifier) == str(tested[_name(need.name)].specifier), (
            f"{REQUIREMENTS_IN}: {need}; requirements.txt has "
            f"{tested[_name(need.name)]}")


def test_requirements_txt_pins_every_locked_package_at_its_version():
    """The test environment is the lock's: a package the lock holds but
    requirements.txt leaves unpinned drifts to whatever is newest on the
    day of a fresh install, and the lock is then checked against another
    version than it names."""
    tested = {_name(r.name): r for r in _requirements(
        os.path.join(ROOT, "requirements.txt"))}
    for name, version in _pins(LOCK).items():
        assert name in tested, f"requirements.txt does not pin {name} " \
            f"({LOCK} has {name}=={version})"
        # ==2.13.0 takes the lock's 2.13.0+cpu (PEP 440 local versions).
        assert tested[name].specifier.contains(version), (
            f"requirements.txt has {tested[name]}, {LOCK} {name}=={version}")


def test_a_lock_of_top_level_packages_only_is_not_resolved(tmp_path):
    short = tmp_path / "requirements_lock.txt"
    short.write_text("absl-py==2.5.1\nnumpy==2.4.6\nprotobuf==7.36.2\n"
                     f"torch=={importlib.metadata.version('torch')}\n"
                     "triton==3.9.0\n")
    problems, _ = unresolved(_pins(str(short)))
    assert any(p.startswith("torch==") and "sympy" in p for p in problems), \
        problems


def test_lock_lines_of_a_pip_report():
    report = {"install": [
        {"metadata": {"name": "Jinja2", "version": "3.1.6"}},
        {"metadata": {"name": "typing_extensions", "version": "4.16.0"}},
        {"metadata": {"name": "torch", "version": "2.13.0+cpu"}}]}
    assert lock_requirements.lock_lines(
        report, "https://download.pytorch.org/whl/cpu",
        ["https://pypi.org/simple"]) == [
        "--index-url https://download.pytorch.org/whl/cpu",
        "--extra-index-url https://pypi.org/simple",
        "jinja2==3.1.6", "torch==2.13.0+cpu", "typing-extensions==4.16.0"]
    with pytest.raises(ValueError):
        lock_requirements.lock_lines({"install": []})


def test_the_tool_names_a_missing_input(tmp_path):
    done = subprocess.run([sys.executable, TOOL, str(tmp_path / "nope.in"),
                           "-o", str(tmp_path / "lock.txt")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"lock_requirements: {tmp_path / 'nope.in'}: no such file")


def test_the_tool_writes_a_lock_from_pips_report(tmp_path, monkeypatch):
    """The resolve itself is pip's (no network here): its report becomes
    the lock, after a header saying how it was made."""
    (tmp_path / "requirements.in").write_text("absl-py==2.5.1\n")
    report = {"install": [{"metadata": {"name": "absl-py",
                                        "version": "2.5.1"}}]}
    seen = {}

    def fake_run(command, **kwargs):
        seen["command"] = command
        return subprocess.CompletedProcess(command, 0, json.dumps(report), "")
    monkeypatch.setattr(lock_requirements.subprocess, "run", fake_run)
    out = tmp_path / "requirements_lock.txt"
    assert lock_requirements.main([str(tmp_path / "requirements.in"), "-o",
                                   str(out), "--index-url", "https://x/simple"]
                                  ) == 0
    assert seen["command"][1:5] == ["-m", "pip", "install", "--dry-run"]
    assert "--report" in seen["command"] and "--index-url" in seen["command"]
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# requirements.in resolved for Python ")
    assert lines[2:] == ["--index-url https://x/simple", "absl-py==2.5.1"]
