"""Bulk access to one remote namespace (every key under a prefix on one
server), for the tools: read all of it, write many entries at once.
Unlike the runtime's remote tier, it fails loudly (RemoteToolError): it is
run by a person or a job that wants to know."""
from autotune import log as logs
from autotune.cache import remote as cache_remote
from autotune.cache.remote import (DEFAULT_PREFIX, RemoteCacheError,
                                   decode_value, encode_value, key_name)
from autotune.errors import CacheFileError, RemoteToolError

log = logs.get("remote")
BATCH = 1000


class RemoteEntries(list):
    """Entries read from a remote namespace, with what the read found."""

    info = None
    bad_keys = frozenset()


def _tool_error(message):
    return RemoteToolError(message)


def _glob_escape(text):
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class Namespace:
    """The keys under one prefix on one server."""

    def __init__(self, url, prefix=None, password_file=None, timeout_s=10.0):
        try:
            self.url = cache_remote.parse_url(url)
            if prefix and self.url.prefix and prefix != self.url.prefix:
                raise RemoteCacheError(f"{self.url}: the URL's prefix "
                                       f"differs from --prefix={prefix}")
            self.prefix = cache_remote.check_prefix(
                prefix or self.url.prefix or DEFAULT_PREFIX, "--prefix")
            # The URL's settings, unless the tool's options give them.
            password = cache_remote.read_password(
                password_file or self.url.password_file)
            self.client = cache_remote.connect(
                self.url, password, self.url.timeout_s or timeout_s,
                self.url.ca_file)
        except RemoteCacheError as e:
            raise _tool_error(str(e))
        self.display = str(self.url)

    def call(self, what, fn):
        try:
            return fn()
        except Exception as e:  # any server fault: one line, exit 2
            raise _tool_error(
                f"{self.display}: {what} failed: "
                + logs.redact_text(f"{type(e).__name__}: {e}")
                + cache_remote.failure_hint(e, "--password_file",
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


def warn_line(line):
    log.warning("autotune_cache: warning: %s", line)


def read_remote(url, warn=None):
    """Entries of a remote namespace, for any command that reads a cache.
    A value that is not an entry of its key is skipped and given to
    `warn` (a warning on stderr by default)."""
    namespace = Namespace(url)
    try:
        return namespace.read(warn=warn or warn_line)
    finally:
        namespace.close()
