"""autotune_cache report: the report page of one or more caches, compared
with a base cache when given (autotune/report/page.py builds it).

    autotune_cache report testdata/x.textproto \\
        --base <(git show HEAD:testdata/x.textproto) \\
        --base_label HEAD:testdata/x.textproto -o report.html
"""
import os
import sys

from autotune import codec
from autotune.cache.io import materialize, read_cache
from autotune.errors import ToolError
from autotune.report import page


def read_all(path):
    """Every entry of a cache, fully decoded: a bad one is bad input,
    reported (naming the file) before anything is written."""
    entries = read_cache(path, parse_all=True)
    materialize(entries, path, everything=True)
    for entry in entries:
        entry.candidates  # noqa: B018 -- decodes lazily read candidates
    return entries


def _same_file(a, b):
    """Whether two paths name one file once links are resolved (a hard
    link too, when both exist)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output(output, inputs):
    """The page must never replace a cache it reads."""
    for source in inputs:
        if source != "-" and _same_file(output, source):
            raise ToolError(f"report: -o {output}: is also an input "
                            f"({source}); inputs are never modified "
                            "(write the page elsewhere)")


def base_label(path, label=None):
    """How the page names the base: --base_label, else its path, unless
    that is a pipe's (bash's <(git show ...) is /dev/fd/63)."""
    if label:
        return label
    if path and path.startswith(("/dev/fd/", "/proc/self/fd/")) or \
            path == "-":
        return "the --base input (a pipe: name it with --base_label)"
    return path


def cmd_report(args):
    page.require_matplotlib()  # before reading gigabytes of caches
    if args.output == "-":
        raise ToolError("report: -o needs a file name")
    check_output(args.output, list(args.paths) +
                 ([args.base] if args.base else []))
    directory = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(directory):
        raise ToolError(f"report: -o {args.output}: directory {directory} "
                        "does not exist")
    sources = [(path, read_all(path)) for path in args.paths]
    base = read_all(args.base) if args.base else None
    text = page.build_page(sources, base=base,
                           base_name=base_label(args.base, args.base_label),
                           max_charts=args.max_charts)
    codec.atomic_write(args.output, text.encode())
    fusions = sum(len(entries) for _, entries in sources)
    print(f"report: wrote {args.output} ({fusions} fusions, "
          f"{len(text.encode()) / 1024:.0f} KiB)", file=sys.stderr)
    if base is not None:
        comparison = page.Comparison(base, [e for _, es in sources
                                            for e in es])
        if comparison.other_device:
            print(f"report: --base {args.base}: "
                  f"{comparison.device_note()}", file=sys.stderr)
    return 0


def add_subcommand(sub):
    p = sub.add_parser("report", help="a self-contained HTML page: per "
                       "fusion a chart of candidate times and a summary "
                       "table; with --base, what changed first "
                       "(needs matplotlib: rules_autotune[report])")
    p.add_argument("paths", nargs="+")
    p.add_argument("--base", help="an older cache to compare with (for "
                   "example <(git show HEAD:testdata/x.textproto))")
    p.add_argument("--base_label", help="how the page names the base (for "
                   "example HEAD:testdata/x.textproto; default: its path, "
                   "which for <(git show ...) is only a pipe's)")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--max_charts", type=int, default=page.DEFAULT_MAX_CHARTS,
                   help="charts for at most this many fusions (the table "
                   "lists them all)")
    p.set_defaults(func=cmd_report)
