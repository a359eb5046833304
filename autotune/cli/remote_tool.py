"""Cache tool commands for a remote cache: push, pull, and reading a remote
namespace wherever the tool reads a cache (show/stats, diff, merge, verify).

    autotune_cache push testdata/cache.textproto --to redis://ci-cache:6379/0
    autotune_cache pull --from redis://ci-cache:6379/0 -o testdata/cache.textproto
    autotune_cache stats 'redis://ci-cache:6379/0?prefix=team-a'

Unlike the runtime, the tool fails loudly (exit 2) when the server cannot be
reached: it is run by a person or a job that wants to know.
"""
import os
import sys

from autotune.cache import merge
from autotune.cache import remote as cache_remote
from autotune.cache.remote import DEFAULT_PREFIX
from autotune.cache.io import materialize, read_cache, write_cache
from autotune.cache.remote_namespace import Namespace, warn_line



def cmd_push(args):
    namespace = Namespace(args.to, args.prefix, args.password_file)
    namespace.expiry_s = args.expiry_s or None
    try:
        sources = [(p, read_cache(p)) for p in args.inputs]
        for path, entries in sources:
            materialize(entries, path)
        keys = {e.key for _, entries in sources for e in entries}
        bad = []
        there = namespace.read(keys, warn=lambda line: bad.append(line))
        for line in bad:
            warn_line(line + "; replaced by the pushed entry")
        # The server is the first input: prefer-first keeps the fleet's.
        merged, conflicts = merge.merge(
            [(namespace.display, there)] + sources, args.policy)
        if merge.report("push", conflicts, args.policy):
            return 1
        on_server = {e.key: e for e in there}
        new = [e for e in merged if e.key not in on_server]
        replace = {e.key for e in merged
                   if e.key in on_server and e is not on_server[e.key]}
        # A bad value on the server is replaced, not kept by SET NX.
        written, raced = namespace.write(
            new + [e for e in merged if e.key in replace],
            replace | there.bad_keys)
    finally:
        namespace.close()
    print(f"push: {written} entries written to {namespace.display} "
          f"(keys {namespace.prefix}:v*), {len(replace)} of them replacing "
          f"the server's, {len(merged) - len(new) - len(replace)} already "
          "there"
          + (f"; {raced} published by another process meanwhile, kept"
             if raced else "")
          + (f" ({len(conflicts)} conflict(s) resolved by {args.policy})"
             if conflicts else ""), file=sys.stderr)
    return 0


def cmd_pull(args):
    namespace = Namespace(args.source, args.prefix, args.password_file)
    try:
        remote = namespace.read(warn=warn_line)
    finally:
        namespace.close()
    sources = []
    if os.path.exists(args.output):
        # An existing output is the first input: prefer-first keeps it.
        base = read_cache(args.output)
        materialize(base, args.output)
        sources.append((args.output, base))
    sources.append((namespace.display, remote))
    merged, conflicts = merge.merge(sources, args.policy)
    if merge.report("pull", conflicts, args.policy):
        return 1
    write_cache(merged, args.output)
    added = len(merged) - (len(sources[0][1]) if len(sources) > 1 else 0)
    print(f"pull: {len(remote)} entries from {namespace.display}, "
          f"{remote.info['bad_values']} bad values skipped; wrote "
          f"{len(merged)} entries to {args.output} ({added} new)"
          + (f" ({len(conflicts)} conflict(s) resolved by {args.policy})"
             if conflicts else ""), file=sys.stderr)
    return 0


def add_subcommands(sub, policies):
    p = sub.add_parser("push", help="publish results files to a remote "
                       "cache (redis://HOST:PORT/DB); conflicts with the "
                       "server's entries need a policy")
    p.add_argument("inputs", nargs="+", metavar="FILE")
    p.add_argument("--to", required=True, metavar="URL")
    p.add_argument("--policy", choices=policies, default="fail",
                   help="the server's entries count as the first input")
    p.add_argument("--expiry_s", type=int, default=0,
                   help="expire pushed entries after N seconds (0: never)")
    _common(p)
    p.set_defaults(func=cmd_push)

    p = sub.add_parser("pull", help="export a remote cache's entries to a "
                       "results file, merged into it if it exists")
    p.add_argument("--from", dest="source", required=True, metavar="URL")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--policy", choices=policies, default="fail",
                   help="an existing OUTPUT counts as the first input")
    _common(p)
    p.set_defaults(func=cmd_pull)


def _common(p):
    p.add_argument("--prefix", help="key prefix (default: the URL's "
                   f"?prefix=, else {DEFAULT_PREFIX})")
    p.add_argument("--password_file", help="file holding the password "
                   f"(default: ${cache_remote.PASSWORD_FILE_ENV}, else "
                   f"${cache_remote.PASSWORD_ENV})")
