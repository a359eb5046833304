"""The GPU runner doctor: what a GPU test needs, checked where it runs.

    bazel test @rules_autotune//tools:gpu_doctor_test --test_output=all
    python3 -m autotune.cli.doctor [--client_env=TEXT] [--compiled_kernels DIR]
    autotune_cache doctor

Inside `bazel test` it sees what a `gpu_autotuned_test` sees: the same
sandbox (a read-only /dev, a home it cannot write), the same environment
(`CUDA_VISIBLE_DEVICES` inherited from the client, `--test_env` values,
nothing else of the client's shell). One line per check: its status (ok,
warn, FAIL, skip), what was found and, where something is wrong, the fix
(docs/gpu-runners.md has the set-up step behind each line):

- `gpus`: the GPUs torch sees, and `CUDA_VISIBLE_DEVICES`;
- `device_nodes`: /dev/nvidiactl, /dev/nvidiaN, /dev/nvidia-uvm, and
  whether /dev is writable (under the sandbox it is not: the nodes must
  exist before the test, made at boot);
- `libcuda`: libcuda.so.1 and how Triton finds it (TRITON_LIBCUDA_PATH,
  else the ldconfig cache, else LD_LIBRARY_PATH), as Triton looks;
- `driver_ptxas`: the driver's version against the CUDA release of the
  ptxas Triton builds the device's target with; which ptxas that is, and
  the variable that points Triton at another, are asked of the installed
  Triton (its get_ptxas, with its knobs watched): versions differ (3.6
  reads TRITON_PTXAS_BLACKWELL_PATH only from sm_100, 3.9 from sm_90);
- `c_compiler`, `python_headers`: what Triton builds its CUDA launcher
  (`cuda_utils`) with when the driver starts (CC, else gcc, else clang;
  Python.h of the Python the tests run), checked by compiling a file that
  includes Python.h;
- `triton_cache`: the folder Triton writes binaries to, written to;
- `lock_dir`: the device lock folder (AUTOTUNE_LOCK_DIR) a tuning takes
  its turn in; inside bazel test the default is a warning (a sandbox with
  a private /tmp gives each test its own), and so is a folder other than
  the client's (the one regenerate hands its dump targets);
- `triton_env`: the TRITON_* variables that differ between the client's
  shell and the test (Triton's numerics and cache keys follow them). A
  test cannot see the client's shell: pass its set with
  `--test_arg=--client_env="$(env | grep -E '^(TRITON_|AUTOTUNE_LOCK_DIR=)')"`;
  outside Bazel the process's own environment is the client's;
- `runner_stamp`: AUTOTUNE_RUNNER_STAMP against this process (the field
  that differs: a stale stamp fails every GPU test);
- `compiled`: with --compiled_kernels, whether this process would be
  served from those directories, by the runtime's own check of their
  build identity against this process (triton_cache.identity_problem, called in one
  place: _serving_verdict);
- `kernel`: one tiny kernel compiled for the local GPU's target (sm_90
  without a GPU, with the ptxas Triton would use) and, on a GPU, launched
  and its result checked.

On a machine without a GPU it says so and checks the rest (the GPU-only
parts are `skip`, the build tools a `warn` when missing). Exit status 1
when any check FAILs, else 0.
"""
import argparse
import sys

from autotune.cli.doctor_checks import (
    CLIENT_ENV_ARG, CLIENT_ENV_PREFIXES, DOCS, FAIL, OK, SKIP, WARN, Line,
    check_c_compiler, check_compiled, check_device_nodes, check_driver_ptxas,
    check_gpus, check_kernel, check_libcuda, check_lock_dir,
    check_python_headers, check_runner_stamp, check_triton_cache,
    check_triton_env)
from autotune.cli.doctor_machine import Machine, State
from autotune.log import printable

# The checks, in the order they run and print.
CHECKS = (check_gpus, check_device_nodes, check_libcuda, check_driver_ptxas,
          check_c_compiler, check_python_headers, check_triton_cache,
          check_lock_dir, check_triton_env, check_runner_stamp,
          check_compiled, check_kernel)

def run_checks(machine=None, checks=None):
    """[Line] of every check (CHECKS by default), in order; a check that
    raises is a FAIL line naming the exception."""
    machine = machine or Machine()
    checks = CHECKS if checks is None else checks
    state = State()
    lines = []
    for check in checks:
        name = check.__name__.removeprefix("check_")
        try:
            lines.append(check(machine, state))
        except Exception as e:
            text = f"{type(e).__name__}: {e}".strip().splitlines()[0][:200]
            lines.append(Line(FAIL, name, f"the check itself failed: {text}"))
    return lines


def summary(lines):
    counts = {s: sum(1 for ln in lines if ln.status == s)
              for s in (OK, WARN, FAIL, SKIP)}
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def parse_client_env(text):
    """{NAME: VALUE} of the TRITON_* and AUTOTUNE_LOCK_DIR lines of `text`
    (`env` output); other lines are ignored. ValueError naming a TRITON_
    line without `=`."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(CLIENT_ENV_PREFIXES):
            continue
        name, eq, value = line.partition("=")
        if not eq:
            raise ValueError(f"--client_env: {printable(line)[:80]!r} is "
                             "not NAME=VALUE")
        found[name] = value
    return found


def add_arguments(parser):
    parser.add_argument(
        "--client_env", default=None, metavar="TEXT",
        help="the client shell's TRITON_* as NAME=VALUE lines (`env | grep "
        "^TRITON_`), to compare with what this process sees; under bazel "
        f"test: {CLIENT_ENV_ARG}")
    parser.add_argument(
        "--compiled_kernels", action="append", default=[], metavar="DIR",
        help="a compiled-kernel directory (`autotune_cache compile -o`): "
        "check whether this process would be served from it (repeatable)")
    parser.add_argument("--no_launch", action="store_true",
                        help="compile the tiny kernel, do not launch it")


def cmd_doctor(args):
    try:
        client = None if args.client_env is None else \
            parse_client_env(args.client_env)
    except ValueError as e:
        print(f"doctor: error: {e}", file=sys.stderr)
        return 2
    machine = Machine(client_env=client, launch=not args.no_launch,
                      compiled_kernels=tuple(args.compiled_kernels))
    where = "inside bazel test" if machine.in_bazel_test() else \
        "outside Bazel"
    print(f"GPU runner doctor ({where}; Python "
          f"{'.'.join(map(str, sys.version_info[:3]))} {sys.executable}):",
          flush=True)
    lines = []
    for line in run_checks(machine):
        lines.append(line)
        print(line.text(), flush=True)
    failed = any(ln.status == FAIL for ln in lines)
    print(f"doctor: {summary(lines)}"
          + (f"; fix the FAIL lines ({DOCS})" if failed else ""), flush=True)
    return 1 if failed else 0


def add_subcommand(sub):
    p = sub.add_parser("doctor", help="check what a GPU test needs on this "
                       "machine: one line per check, with the fix")
    add_arguments(p)
    p.set_defaults(func=cmd_doctor)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m autotune.cli.doctor",
        description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return cmd_doctor(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
