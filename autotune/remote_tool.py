"""Cache tool commands for a remote cache: push, pull, and reading a remote
namespace wherever the tool reads a cache (show/stats, diff, merge, verify).

    autotune_cache push testdata/cache.textproto --to redis://ci-cache:6379/0
    autotune_cache pull --from redis://ci-cache:6379/0 -o testdata/cache.textproto
    autotune_cache stats 'redis://ci-cache:6379/0?prefix=team-a'

Unlike the runtime, the tool fails loudly (exit 2) when the server cannot be
reached: it is run by a person or a job that wants to know.
"""
import sys

from autotune import remote_cache
from autotune.remote_cache import (DEFAULT_PREFIX, RemoteCacheError,
                                   decode_value, encode_value, key_name)
from autotune.errors import CacheFileError

BATCH = 1000
is_remote_url = remote_cache.is_remote_url


class RemoteEntries(list):
    """Entries read from a remote namespace, with what the read found."""

    info = None
    bad_keys = frozenset()


class RemoteToolError(Exception):
    """A remote that cannot be read or written: exit 2, one line."""


def _tool_error(message):
    return RemoteToolError(message)


def _glob_escape(text):
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class Namespace:
    """The keys under one prefix on one server."""

    def __init__(self, url, prefix=None, password_file=None, timeout_s=10.0):
        try:
            self.url = remote_cache.parse_url(url)
            if prefix and self.url.prefix and prefix != self.url.prefix:
                raise RemoteCacheError(f"{self.url}: the URL's prefix "
                                       f"differs from --prefix={prefix}")
            self.prefix = remote_cache.check_prefix(
                prefix or self.url.prefix or DEFAULT_PREFIX, "--prefix")
            password = remote_cache.read_password(password_file)
            self.client = remote_cache.connect(self.url, password, timeout_s)
        except RemoteCacheError as e:
            raise _tool_error(str(e))
        self.display = str(self.url)

    def call(self, what, fn):
        try:
            return fn()
        except Exception as e:  # any server fault: one line, exit 2
            raise _tool_error(
                f"{self.display}: {what} failed: {type(e).__name__}: {e}"
                + remote_cache.failure_hint(e, "--password_file",
                                            "the server's certificate"))

    def names(self):
        """Every key of the namespace, any key version, sorted."""
        pattern = _glob_escape(self.prefix) + ":v*:*"
        return sorted(self.call("SCAN", lambda: [
            n.decode() for n in self.client.scan_iter(match=pattern,
                                                      count=BATCH)]))

    def get_many(self, names):
        out = []
        for start in range(0, len(names), BATCH):
            batch = names[start:start + BATCH]
            out.extend(self.call("MGET", lambda: self.client.mget(batch)))
        return out

    def read(self, keys=None, warn=None):
        """RemoteEntries of the namespace (or of these cache keys only); bad
        values are reported through warn and skipped."""
        if keys is None:
            names, wanted = self.names(), None
        else:
            wanted = {key_name(k, self.prefix): k for k in keys}
            names = sorted(wanted)
        entries = RemoteEntries()
        nbytes = 0
        entries.bad_keys = set()
        for name, data in zip(names, self.get_many(names)):
            if data is None:
                continue
            nbytes += len(data)
            try:
                entries.append(decode_value(
                    data, name, wanted[name] if wanted else None))
            except CacheFileError as e:
                entries.bad_keys.add(wanted[name] if wanted else name)
                if warn:
                    warn(f"{e}; skipped")
        entries.info = {"url": self.display,
                        "namespace": f"{self.prefix}:v*:",
                        "keys": len(names),
                        "bad_values": len(entries.bad_keys),
                        "bytes": nbytes}
        return entries

    def write(self, entries, replace):
        """SET NX for new keys; SET for the keys in `replace` (chosen over
        the server's value). Returns (written, lost races)."""
        written = raced = 0
        for start in range(0, len(entries), BATCH):
            batch = entries[start:start + BATCH]

            def send():
                pipe = self.client.pipeline(transaction=False)
                for entry in batch:
                    pipe.set(key_name(entry.key, self.prefix),
                             encode_value(entry),
                             nx=entry.key not in replace, ex=self.expiry_s)
                return pipe.execute()
            for ok in self.call("SET", send):
                written += bool(ok)
                raced += not ok
        return written, raced

    expiry_s = None

    def close(self):
        try:
            self.client.close()
        except Exception:  # closing a broken connection may fail
            pass


def _warn(line):
    print(f"autotune_cache: warning: {line}", file=sys.stderr)


def read_remote(url, warn=None):
    """Entries of a remote namespace, for any command that reads a cache.
    A value that is not an entry of its key is skipped and given to
    `warn` (a warning on stderr by default)."""
    namespace = Namespace(url)
    try:
        return namespace.read(warn=warn or _warn)
    finally:
        namespace.close()


def _print_conflicts(conflicts):
    for c in conflicts:
        print(f"conflict: {c['kernel']} [{c['signature']}] on {c['device']}: "
              f"{c['first']['source']} has {c['first']['best']} "
              f"({c['first']['run_time_us']:.3f} us), {c['second']['source']}"
              f" has {c['second']['best']} "
              f"({c['second']['run_time_us']:.3f} us)", file=sys.stderr)


def cmd_push(args):
    from autotune import cache_tool
    namespace = Namespace(args.to, args.prefix, args.password_file)
    namespace.expiry_s = args.expiry_s or None
    try:
        sources = [(p, cache_tool.read_cache(p)) for p in args.inputs]
        for path, entries in sources:
            cache_tool.materialize(entries, path)
        keys = {e.key for _, entries in sources for e in entries}
        bad = []
        there = namespace.read(keys, warn=lambda line: bad.append(line))
        for line in bad:
            _warn(line + "; replaced by the pushed entry")
        # The server is the first input: prefer-first keeps the fleet's.
        merged, conflicts = cache_tool.merge_entries(
            [(namespace.display, there)] + sources, args.policy)
        _print_conflicts(conflicts)
        if conflicts and args.policy == "fail":
            print(f"push: {len(conflicts)} conflict(s); nothing written. "
                  "Choose --policy=prefer-faster, prefer-newer or "
                  "prefer-first", file=sys.stderr)
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
    import os

    from autotune import cache_tool
    namespace = Namespace(args.source, args.prefix, args.password_file)
    try:
        remote = namespace.read(warn=_warn)
    finally:
        namespace.close()
    sources = []
    if os.path.exists(args.output):
        # An existing output is the first input: prefer-first keeps it.
        base = cache_tool.read_cache(args.output)
        cache_tool.materialize(base, args.output)
        sources.append((args.output, base))
    sources.append((namespace.display, remote))
    merged, conflicts = cache_tool.merge_entries(sources, args.policy)
    _print_conflicts(conflicts)
    if conflicts and args.policy == "fail":
        print(f"pull: {len(conflicts)} conflict(s); nothing written. Choose "
              "--policy=prefer-faster, prefer-newer or prefer-first",
              file=sys.stderr)
        return 1
    cache_tool.write_cache(merged, args.output)
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
                   f"(default: ${remote_cache.PASSWORD_FILE_ENV}, else "
                   f"${remote_cache.PASSWORD_ENV})")
