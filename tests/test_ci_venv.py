"""README's main-job command, `python3 tools/run_example_suite.py`, on a
machine whose python3 lacks the packages (Debian 12's, which refuses
system-wide installs): it runs itself again under the virtual environment
.ci/run made."""
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_venv(path, with_packages):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)],
                   check=True)
    if with_packages:  # this Python's packages, behind the venv's own
        site = subprocess.run(
            [str(path / "bin" / "python3"), "-c",
             "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True).stdout.strip()
        with open(os.path.join(site, "packages.pth"), "w") as f:
            f.write(sysconfig.get_paths()["purelib"] + "\n")


@pytest.fixture
def checkout(tmp_path):
    """The main job's scripts in a checkout of their own, with its .ci/venv
    holding the packages."""
    root = tmp_path / "checkout"
    (root / "tools").mkdir(parents=True)
    for name in ("run_example_suite.py", "regenerate.py", "gpu_slot.py"):
        shutil.copy(os.path.join(ROOT, "tools", name), root / "tools" / name)
    os.symlink(os.path.join(ROOT, "autotune"), root / "autotune")
    make_venv(root / ".ci" / "venv", with_packages=True)
    return root


@pytest.mark.slow
def test_main_job_runs_itself_under_the_ci_venv(checkout, tmp_path):
    bare = tmp_path / "bare"
    make_venv(bare, with_packages=False)  # a python3 without torch
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [str(bare / "bin" / "python3"),
               str(checkout / "tools" / "run_example_suite.py"), "--help"]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "--in_place" in result.stdout
    # Without the environment the same command cannot start.
    shutil.rmtree(checkout / ".ci")
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    # (import autotune names the missing package and where it comes from)
    assert "the Python package 'absl' cannot be imported" in result.stderr
