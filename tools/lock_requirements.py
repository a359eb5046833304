"""Writes a fully resolved lock file for rules_python's pip.parse.

    python3 tools/lock_requirements.py REQUIREMENTS_IN -o requirements_lock.txt \\
        [--index-url URL] [--extra-index-url URL ...] [--pip-arg ARG ...]

pip.parse installs every line of its `requirements_lock` as it stands
(`--no-deps`): the lock must name each package the top-level ones need,
transitively, at one version. This resolves REQUIREMENTS_IN with the
running interpreter's pip (`pip install --dry-run --ignore-installed
--report`: nothing is installed) and writes one `name==version` line per
package, sorted, after the index lines the resolve used, which pip.parse
passes on to pip. Run it with the Python version and on the platform the
hub is for (pip resolves markers such as `platform_system == "Linux"` for
the interpreter that runs it).

torch's index decides which build the hub gets: PyPI's Linux wheels are
CUDA builds (with their `nvidia-*` and `cuda-*` wheels, and the Triton
version torch pins); `--index-url https://download.pytorch.org/whl/cpu
--extra-index-url https://pypi.org/simple` gives the CPU build
(docs/bazel.md#the-lock-file). Standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys


def _normalized(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_lines(report, index_url=None, extra_index_urls=()):
    """The lock file's lines for a `pip install --report` JSON document."""
    pins = {}
    for item in report.get("install", ()):
        meta = item["metadata"]
        pins[_normalized(meta["name"])] = meta["version"]
    if not pins:
        raise ValueError("the resolve installed nothing")
    lines = []
    if index_url:
        lines.append(f"--index-url {index_url}")
    lines += [f"--extra-index-url {url}" for url in extra_index_urls]
    lines += [f"{name}=={version}" for name, version in sorted(pins.items())]
    return lines


def resolve(requirements_in, index_url=None, extra_index_urls=(),
            pip_args=()):
    """pip's report of a dry-run install of requirements_in."""
    command = [sys.executable, "-m", "pip", "install", "--dry-run",
               "--ignore-installed", "--quiet", "--report", "-",
               "-r", requirements_in]
    if index_url:
        command += ["--index-url", index_url]
    for url in extra_index_urls:
        command += ["--extra-index-url", url]
    command += list(pip_args)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines()
                  if line.startswith("ERROR")] or done.stderr.splitlines()[-1:]
        raise RuntimeError(f"pip could not resolve {requirements_in}: "
                           + " ".join(errors))
    return json.loads(done.stdout)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="lock_requirements.py",
        description="a fully resolved requirements lock for pip.parse")
    parser.add_argument("requirements_in")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--index-url")
    parser.add_argument("--extra-index-url", action="append", default=[])
    parser.add_argument("--pip-arg", action="append", default=[],
                        help="passed on to pip install (repeat it)")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.requirements_in):
        print(f"lock_requirements: {args.requirements_in}: no such file",
              file=sys.stderr)
        return 2
    try:
        report = resolve(args.requirements_in, args.index_url,
                         args.extra_index_url, args.pip_arg)
        lines = lock_lines(report, args.index_url, args.extra_index_url)
    except (RuntimeError, ValueError) as e:
        print(f"lock_requirements: {e}", file=sys.stderr)
        return 1
    command = " ".join(
        ["python3 <rules_autotune>/tools/lock_requirements.py",
         os.path.basename(args.requirements_in), "-o",
         os.path.basename(args.output)]
        + ([f"--index-url {args.index_url}"] if args.index_url else [])
        + [f"--extra-index-url {u}" for u in args.extra_index_url])
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    header = [f"# {os.path.basename(args.requirements_in)} resolved for "
              f"Python {py} on {sys.platform}: every package, as pip.parse "
              "expects. Made with", f"#   {command}"]
    with open(args.output, "w", encoding="utf-8") as f:
        f.write("\n".join(header + lines) + "\n")
    print(f"lock_requirements: {args.output}: "
          f"{sum(1 for l in lines if '==' in l)} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
