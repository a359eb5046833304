"""How stable tuned caches are: fresh-tune agreement and diff sizes.

    TRITON_INTERPRET=1 python3 bench/bench_stability.py [--runs 5] [--diffs]
        [--source DIR]

1. Agreement: tunes the example suite (examples/fused_kernels_test.py)
   --runs times, each in a fresh process with no cache and no incumbents,
   and prints, per fusion, how many runs picked its most common winner;
   then the share of fusions on which every run agreed and the pairwise
   agreement rate (of all pairs of runs, over all fusions, the share that
   picked the same winner), and each run's tuning seconds (the cost of
   the selection rule shows there).
2. --diffs: in a temporary copy of the source tree, tunes the suite once
   (the base cache), then again for three changes, each with the base
   cache as incumbents: (a) nothing changed, (b) one kernel edited (a
   comment line in softmax_kernel: a new fingerprint, the same code),
   (c) one new shape (a test added). Prints the changed lines of each
   diff against the base (insertions + deletions, as git diff --stat
   counts them) and the cache's size, with and without the candidate
   lines.

--source DIR runs another checkout's suite and runtime (for example the
commit before stable caches:
`mkdir /tmp/before && git archive 202c34d | tar -x -C /tmp/before`);
a runtime without --autotune_incumbents_from is run without it. Timings
on a shared machine vary a lot: the figures are what this machine did.
"""
import argparse
import collections
import difflib
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join("examples", "fused_kernels_test.py")
NEW_SHAPE_TEST = '''
    def test_softmax_new_shape(self):
        x = torch.randn(5, 40)
        torch.testing.assert_close(softmax.softmax(x), softmax.reference(x))
'''


def supports_incumbents(source):
    with open(os.path.join(source, "autotune", "flags.py")) as f:
        return "autotune_incumbents_from" in f.read()


def tune(source, dump, incumbents=None):
    flags = f"--dump_autotune_results_to={dump}"
    if incumbents and supports_incumbents(source):
        flags += f" --autotune_incumbents_from={incumbents}"
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=source,
               AUTOTUNE_FLAGS=flags)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, os.path.join(source, SUITE)],
                          cwd=source, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_stability: the suite failed in {source}:\n"
                 + proc.stderr[-2000:])
    match = re.search(r"([0-9.]+) s tuning", proc.stderr)
    return time.perf_counter() - start, float(match.group(1)) if match \
        else float("nan")


def winners(path):
    sys.path.insert(0, ROOT)
    from autotune import codec
    return {(e.key.kernel, e.key.signature): e.best.short()
            for e in codec.load_results(path)}


def agreement(source, runs, workdir):
    picks = collections.defaultdict(list)
    seconds, tuning = [], []
    for i in range(runs):
        dump = os.path.join(workdir, f"fresh{i}.textproto")
        wall, tuned = tune(source, dump)
        seconds.append(wall)
        tuning.append(tuned)
        for fusion, best in winners(dump).items():
            picks[fusion].append(best)
    print(f"fresh tunes: {runs} runs of {SUITE} "
          f"({min(seconds):.1f} to {max(seconds):.1f} s each; tuning "
          f"seconds per run: {', '.join(f'{t:.1f}' for t in tuning)})")
    all_agree = same = pairs = 0
    for (kernel, signature), bests in sorted(picks.items()):
        top, count = collections.Counter(bests).most_common(1)[0]
        all_agree += count == len(bests)
        for a, b in itertools.combinations(bests, 2):
            same += a == b
            pairs += 1
        print(f"  {kernel} [{signature.split(';')[0]}]: {count}/{len(bests)}"
              f" runs picked {top}")
    rate = f" = {100.0 * same / pairs:.0f}%" if pairs else ""
    print(f"fusions on which all {runs} runs agreed: {all_agree}/"
          f"{len(picks)}; pairwise agreement: {same}/{pairs}{rate}")


def without_candidates(path, out):
    sys.path.insert(0, ROOT)
    from autotune import codec
    entries = [e.replace(candidates=()) for e in
               codec.load_results(path)]
    codec.dump_results(entries, out)
    return out


def changed_lines(a, b):
    with open(a) as f:
        old = f.read().splitlines()
    with open(b) as f:
        new = f.read().splitlines()
    return sum(1 for line in difflib.unified_diff(old, new, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---")))


def diffs(source, workdir):
    tree = os.path.join(workdir, "tree")
    shutil.copytree(source, tree, ignore=shutil.ignore_patterns(
        ".git", "bazel-*", "__pycache__"))
    base = os.path.join(workdir, "base.textproto")
    tune(tree, base, os.path.join(workdir, "no_incumbents_yet.textproto"))
    results = {}
    unchanged = os.path.join(workdir, "unchanged.textproto")
    tune(tree, unchanged, base)
    results["(a) nothing changed"] = unchanged

    kernel_file = os.path.join(tree, "autotune", "kernels", "softmax.py")
    with open(kernel_file) as f:
        original = f.read()
    marker = "def softmax_kernel("
    head, tail = original.split(marker, 1)
    signature_end = tail.index(":\n") + 2
    edited = (head + marker + tail[:signature_end]
              + "    # edited: a new fingerprint, the same code\n"
              + tail[signature_end:])
    with open(kernel_file, "w") as f:
        f.write(edited)
    kernel_edit = os.path.join(workdir, "kernel_edit.textproto")
    tune(tree, kernel_edit, base)
    results["(b) one kernel edited"] = kernel_edit
    with open(kernel_file, "w") as f:
        f.write(original)

    suite_file = os.path.join(tree, SUITE)
    with open(suite_file) as f:
        suite = f.read()
    anchor = "    def test_layernorm(self):"
    with open(suite_file, "w") as f:
        f.write(suite.replace(anchor, NEW_SHAPE_TEST.lstrip("\n") + "\n"
                              + anchor, 1))
    new_shape = os.path.join(workdir, "new_shape.textproto")
    tune(tree, new_shape, base)
    results["(c) one new shape"] = new_shape

    base_slim = without_candidates(base, base + ".slim.textproto")
    print(f"cache size: {os.path.getsize(base)} bytes, "
          f"{len(open(base).read().splitlines())} lines with candidates; "
          f"{os.path.getsize(base_slim)} bytes, "
          f"{len(open(base_slim).read().splitlines())} lines without")
    for name, path in results.items():
        slim = without_candidates(path, path + ".slim.textproto")
        print(f"{name}: {changed_lines(base, path)} changed lines "
              f"with candidates, {changed_lines(base_slim, slim)} without")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--diffs", action="store_true")
    parser.add_argument("--source", default=ROOT)
    args = parser.parse_args(argv)
    source = os.path.abspath(args.source)
    print(f"source: {source}; incumbents: "
          f"{'yes' if supports_incumbents(source) else 'not supported'}")
    with tempfile.TemporaryDirectory() as workdir:
        if args.runs:
            agreement(source, args.runs, workdir)
        if args.diffs:
            diffs(source, workdir)


if __name__ == "__main__":
    main()
