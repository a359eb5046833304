"""How much `git diff testdata/` a regenerate produces, for three changes.

    python3 bench/bench_regenerate_diff.py [--tree DIR] [--bazel BAZEL]

In a temporary git copy of DIR (default: this checkout), for each change
below: make it, run `python3 tools/regenerate.py //examples/...`, print
the changed lines of `git diff --numstat testdata/` (added + removed), and
reset the copy:

  unchanged    nothing
  kernel_edit  a comment line in softmax_kernel's body: the fingerprint
               changes, the code (and so the winners) do not
  new_shape    one more softmax shape in the example suite

Point --tree at an older checkout (git worktree add /tmp/old COMMIT) to
compare. Timings on the interpreter are noisy; so, before incumbents were
kept, were the diffs.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

KERNEL = "autotune/kernels/softmax.py"
SUITE = "examples/fused_kernels_test.py"


def insert_before(ws, rel, anchor, text, what):
    path = os.path.join(ws, rel)
    with open(path) as f:
        content = f.read()
    assert anchor in content, f"{what} changed; update the benchmark"
    with open(path, "w") as f:
        f.write(content.replace(anchor, text + anchor))


def kernel_edit(ws):
    insert_before(ws, KERNEL,
                  "    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)\n",
                  "    # rows of this program\n", "softmax kernel")


def new_shape(ws):
    insert_before(ws, SUITE, "    def test_layernorm(self):\n",
                  "    def test_softmax_new_shape(self):\n"
                  "        x = torch.randn(5, 40)\n"
                  "        torch.testing.assert_close(softmax.softmax(x), "
                  "softmax.reference(x))\n\n", "example suite")


CHANGES = [("unchanged", None), ("kernel_edit", kernel_edit),
           ("new_shape", new_shape)]


def git(ws, *args):
    return subprocess.run(["git"] + list(args), cwd=ws, check=True,
                          capture_output=True, text=True).stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", default=ROOT)
    parser.add_argument("--bazel", default=os.environ.get("BAZEL", "bazel"))
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="regenerate_diff_")
    ws = os.path.join(tmp, "ws")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=args.tree,
                           check=True, capture_output=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = os.path.join(args.tree, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(ws, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(ws, rel))
    subprocess.run(["bash", "tools/bazel_offline/configure.sh"], cwd=ws,
                   check=True, capture_output=True)
    git(ws, "init", "-q")
    git(ws, "add", "-A")
    git(ws, "-c", "user.name=bench", "-c", "user.email=bench@localhost",
        "commit", "-qm", "tree")
    try:
        for name, change in CHANGES:
            if change:
                change(ws)
            result = subprocess.run(
                [sys.executable, "tools/regenerate.py", "--bazel", args.bazel,
                 "//examples/..."], cwd=ws, capture_output=True, text=True)
            if result.returncode != 0:
                print(result.stdout[-3000:], result.stderr[-3000:])
                return 1
            numstat = git(ws, "diff", "--numstat", "testdata/")
            lines = sum(int(a) + int(b) for a, b, _ in
                        (row.split("\t") for row in numstat.splitlines()))
            per_file = ", ".join(f"{p.split('/')[-1]}: {int(a) + int(b)}"
                                 for a, b, p in (row.split("\t") for row in
                                                 numstat.splitlines()))
            print(f"{name:12s} {lines:4d} changed lines in testdata/"
                  + (f" ({per_file})" if per_file else ""), flush=True)
            git(ws, "reset", "-q", "--hard")
            git(ws, "clean", "-qfd", "--", "testdata", "examples",
                "autotune")
    finally:
        subprocess.run([args.bazel, "shutdown"], cwd=ws, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
