"""compile_check: compiles every config of the example kernels (or of given
kernel modules, or every config a results file names) for GPU targets, on
the CPU, and checks each against the target's limits. The library is
autotune.binaries.compile_check."""
import argparse
import json
import os
import sys
import time

from autotune.binaries import compile_check
from autotune.binaries.compile_check import (EXAMPLE_MODULES,
                                             CompileCheckError,
                                             _quiet_fp_fusion_notice,
                                             module_tasks, parse_targets,
                                             run_tasks)


def _print_table(results, out):
    header = (f"{'target':<6} {'kernel':<24} {'signature':<50} "
              f"{'config':<56} {'shared':>7} {'regs':>4} {'spill':>5} "
              f"{'s':>5}  status")
    print(header, file=out)
    for r in results:
        status = "ok" if r["ok"] else f"REJECTED {r['failure']}"
        print(f"{r['target']:<6} {r['kernel'][:24]:<24} "
              f"{r['signature'][:50]:<50} {r['config'][:56]:<56} "
              f"{r['shared']:>7} {r['registers']:>4} {r['stack']:>5} "
              f"{r['seconds']:>5.2f}  {status}", file=out)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="compile_check", description=compile_check.__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="sm_90,sm_80")
    parser.add_argument("--module", action="append", default=[],
                        help="kernel module with COMPILE_SIGNATURES "
                             "(repeatable; default: the example kernels)")
    parser.add_argument("--cache", help="compile every config this results "
                        "file names (for the kernels of --module)")
    parser.add_argument("--jobs", type=int,
                        default=min(4, os.cpu_count() or 1))
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "0"
    _quiet_fp_fusion_notice()
    try:
        targets = parse_targets(args.targets)
        entries = None
        if args.cache:
            from autotune import codec
            entries = codec.load_results(args.cache)
        tasks = []
        for module_name in args.module or EXAMPLE_MODULES:
            tasks += module_tasks(module_name, targets, entries)
    except (CompileCheckError, ImportError, OSError) as e:
        print(f"compile_check: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a results file that does not load, say
        print(f"compile_check: {type(e).__name__}: {e}".splitlines()[0],
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    results = run_tasks(tasks, args.jobs)
    wall = time.perf_counter() - start
    _print_table(results, sys.stdout)
    rejected = [r for r in results if not r["ok"]]
    for t in targets:
        mine = [r for r in results if r["target"] == t.name]
        bad = sum(not r["ok"] for r in mine)
        print(f"{t.name}: {len(mine)} configs, {len(mine) - bad} compiled "
              f"within limits, {bad} rejected, "
              f"{sum(r['seconds'] for r in mine):.1f} s compiling")
    print(f"wall time {wall:.1f} s with {args.jobs} job(s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "wall_seconds": round(wall, 2),
                       "jobs": args.jobs}, f, indent=1)
    for r in rejected:
        print(f"compile_check: {r['target']} {r['kernel']} "
              f"[{r['signature']}] {r['config']}: {r['failure']}: "
              f"{r['reason']}", file=sys.stderr)
    return 1 if rejected else 0


if __name__ == "__main__":
    sys.exit(main())
