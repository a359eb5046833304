"""Remote cache on Redis: one tuning result for a whole fleet of machines.

The fourth lookup tier, after memory, loaded results files and the
per-fusion directory:

    --autotune_remote_cache=redis://HOST:PORT/DB      (rediss:// for TLS)
    --autotune_remote_cache=redis://HOST:PORT/DB?prefix=team&timeout_s=0.5
    --autotune_remote_cache=redis://HOST:PORT/DB?mode=read   (never write)

Its settings are parameters of the URL (flags.REMOTE_URL_PARAMETERS:
mode, prefix, expiry_s, timeout_s, password_file, ca_file), so one value
configures it.

Keys are `PREFIX:vKEY_VERSION:KERNEL.HASH`, the hash being the one that
names per-fusion files; values are the schema's binary encoding of a results
message holding that one entry, validated on every read. A tuned fusion is
published with SET NX: the first writer wins and every later process adopts
its entry, so a fleet converges on one config per key; a value the lookup
refused (a stale winner) is replaced by compare-and-set instead.

The remote is an accelerator, never a dependency: a server that is down,
refuses, is slow or dies mid-run costs one warning and short timeouts, and
after a few failed operations in a row the tier is switched off for the rest
of the run. The password comes from AUTOTUNE_REMOTE_CACHE_PASSWORD or a
file, never from a flag, and URLs are only ever printed without it.

The redis client is imported only when a remote is configured.
"""
import math
import os
import re
import urllib.parse

from autotune import flags
from autotune import log as logs
from autotune import keys as keys
from autotune.codec import binary
from autotune.records import KEY_VERSION
from autotune.errors import (AutotuneFlagsError, CacheFileError,
                             RemoteCacheError)

SCHEMES = ("redis", "rediss")
MODES = ("update", "read")
DEFAULT_PORT = 6379
DEFAULT_PREFIX = "autotune"
PASSWORD_ENV = "AUTOTUNE_REMOTE_CACHE_PASSWORD"
PASSWORD_FILE_ENV = "AUTOTUNE_REMOTE_CACHE_PASSWORD_FILE"
# Consecutive failed operations after which a run stops asking the server.
MAX_CONSECUTIVE_FAILURES = 3
_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.\-/]{1,64}$")
_PARAMETER_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,32}$")




def redact(url):
    """The URL with its user part, password and parameter values replaced
    by ***, also for URLs that do not parse (see log.redact_url)."""
    return logs.redact_url(url)


class RemoteURL:
    """A parsed redis:// or rediss:// URL and its settings (None: not
    given). str() never shows a password, nor a setting but the prefix."""

    __slots__ = ("scheme", "host", "port", "db", "username", "mode",
                 "prefix", "expiry_s", "timeout_s", "password_file",
                 "ca_file")

    def __init__(self, scheme, host, port, db, username=None, mode=None,
                 prefix=None, expiry_s=None, timeout_s=None,
                 password_file=None, ca_file=None):
        self.scheme, self.host, self.port = scheme, host, port
        self.mode = mode
        self.db, self.username, self.prefix = db, username, prefix
        self.expiry_s, self.timeout_s = expiry_s, timeout_s
        self.password_file, self.ca_file = password_file, ca_file

    @property
    def tls(self):
        return self.scheme == "rediss"

    def __str__(self):
        user = f"{self.username}@" if self.username else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        query = f"?prefix={self.prefix}" if self.prefix else ""
        return f"{self.scheme}://{user}{host}:{self.port}/{self.db}{query}"

    __repr__ = __str__


def is_remote_url(text):
    """Whether `text` is meant as a remote URL: redis: or rediss:, even
    without the // (then parse_url says what is wrong, without quoting
    what may be a password)."""
    return isinstance(text, str) and ":" in text and \
        text.split(":", 1)[0] in SCHEMES


def parse_url(url):
    """Parses redis://[USER@]HOST[:PORT][/DB][?NAME=VALUE&...] (rediss://
    for TLS), NAME one of flags.REMOTE_URL_PARAMETERS. A password in the
    URL is refused: it would be printed in logs.
    No message quotes the URL as given, only redact(url) or the parsed
    form: a password may hold any character (/ @ : ? #) and so end up in
    any part of a URL that does not parse as its writer meant."""
    url = str(url)
    shown = redact(url)
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise RemoteCacheError(
            f"{shown}: expected redis://HOST:PORT/DB, or rediss:// for TLS")
    # The user part ends at the last @, whatever precedes it.
    userinfo = rest[:rest.rindex("@")] if "@" in rest else None
    if userinfo is not None and (":" in userinfo or set(userinfo) & set(
            "/?#@")):
        raise RemoteCacheError(
            f"{shown}: the URL holds a password, which would be printed in "
            f"test logs; set {PASSWORD_ENV} or a password file "
            "(?password_file=PATH) instead")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as e:
        # The parser's own words quote the part it failed on.
        reason = ("the port must be a number from 0 to 65535"
                  if "port" in str(e).lower() else "the host cannot be read")
        raise RemoteCacheError(f"{shown}: not a valid URL ({reason})") \
            from None
    if parts.fragment or url.endswith("#"):
        raise RemoteCacheError(f"{shown}: a URL fragment (#...) is not "
                               "understood")
    if not parts.hostname:
        raise RemoteCacheError(f"{shown}: no host")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise RemoteCacheError(
            f"{shown}: database must be a number (redis://HOST:PORT/0)")
    settings = {}
    known = {p.name: p for p in flags.REMOTE_URL_PARAMETERS}
    for item in parts.query.split("&") if parts.query else ():
        name, equals, value = item.partition("=")
        if name not in known:
            named = (f" {name!r}" if equals and _PARAMETER_NAME_RE.match(name)
                     else "")
            raise RemoteCacheError(
                f"{shown}: unknown URL parameter{named} (understood: "
                + ", ".join(known) + ")")
        if name in settings:
            raise RemoteCacheError(f"{shown}: URL parameter {name!r} is "
                                   "given twice")
        settings[name] = _setting(known[name], urllib.parse.unquote(value),
                                  shown)
    return RemoteURL(parts.scheme, parts.hostname, port or DEFAULT_PORT,
                     int(path or 0), urllib.parse.unquote(parts.username)
                     if parts.username else None, **settings)


def _setting(parameter, value, shown):
    """One URL parameter's value, checked: RemoteCacheError naming the
    parameter (never quoting a path or a value that does not parse)."""
    if parameter.name == "prefix":
        return check_prefix(value, shown)
    if parameter.kind == "enum":
        if value not in parameter.enum_values:
            raise RemoteCacheError(f"{shown}: {parameter.name} must be one "
                                   f"of {', '.join(parameter.enum_values)}")
        return value
    if parameter.kind == "integer":
        if not value.isdigit():
            raise RemoteCacheError(f"{shown}: {parameter.name} must be a "
                                   "whole number >= 0")
        return int(value)
    if parameter.kind == "float":
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number <= 0:
            raise RemoteCacheError(f"{shown}: {parameter.name} must be a "
                                   "number > 0")
        return number
    if not value:
        raise RemoteCacheError(f"{shown}: {parameter.name} is empty")
    return value


def check_prefix(prefix, where="prefix"):
    if not _PREFIX_RE.match(prefix or ""):
        raise RemoteCacheError(
            f"{where}: key prefix {prefix!r} must be 1 to 64 letters, digits "
            "or _ . - /")
    return prefix


def read_password(password_file=None, env=None):
    """The password: from password_file, else the file named by
    AUTOTUNE_REMOTE_CACHE_PASSWORD_FILE, else AUTOTUNE_REMOTE_CACHE_PASSWORD;
    None when none is set. One trailing newline of a file is dropped."""
    env = os.environ if env is None else env
    path = password_file or env.get(PASSWORD_FILE_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise RemoteCacheError(f"{path}: cannot read the remote cache "
                                   f"password file: {e.strerror}")
        return text[:-1] if text.endswith("\n") else text
    return env.get(PASSWORD_ENV) or None


def key_name(key, prefix=DEFAULT_PREFIX):
    """The Redis key of a cache key: namespaced by prefix and key version,
    named like the per-fusion file (kernel name for people, hash of the whole
    key for uniqueness)."""
    name = keys.file_name(key)
    return f"{prefix}:v{key.key_version}:{name[:name.rindex('.')]}"


def namespace(prefix=DEFAULT_PREFIX, key_version=KEY_VERSION):
    return f"{prefix}:v{key_version}:"


def encode_value(entry):
    return b"".join(binary.encode_binary_chunks([entry]))


def decode_value(data, name, key=None):
    """The entry a value holds; CacheFileError naming the key when the value
    is not one valid entry stored under its own name."""
    try:
        entries = binary.decode_binary(bytes(data), name, parse_all=True)
        if len(entries) != 1:
            raise CacheFileError(name, f"holds {len(entries)} entries, "
                                 "expected 1")
        entry = entries[0]
        # Every field is decoded now: a value is never trusted half-read.
        entry.best, entry.candidates, entry.provenance  # noqa: B018
    except CacheFileError:
        raise
    except (ValueError, IndexError, TypeError, KeyError) as e:
        raise CacheFileError(name, f"malformed entry ({e})")
    if key is not None and entry.key != key:
        raise CacheFileError(name, f"holds {entry.key.describe()}, not the "
                             "key its name says")
    if key is None and not name.endswith(key_name(entry.key, "")[1:]):
        raise CacheFileError(name, f"holds {entry.key.describe()}, whose "
                             "hash is not the key's name")
    return entry


def connect(url, password=None, timeout_s=1.0, ca_file=None):
    """A redis client for `url` (a RemoteURL): short timeouts, no retries
    (the caller counts failures), connections made on first use."""
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError:
        raise RemoteCacheError(
            "the remote cache needs the redis client: pip install "
            "'rules_autotune[redis]' (or the redis pin in requirements.txt)")
    options = dict(host=url.host, port=url.port, db=url.db,
                   username=url.username, password=password,
                   socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                   retry=Retry(NoBackoff(), 0), health_check_interval=0)
    if url.tls:
        options.update(ssl=True, ssl_ca_certs=ca_file)
    return redis.Redis(**options)


# Compare-and-set: KEYS[1] takes ARGV[2] only while it holds ARGV[1] (or
# nothing); ARGV[3] is the expiry in seconds, 0 for none.
_REPLACE_IF_EQUAL = """
local now = redis.call('GET', KEYS[1])
if now ~= false and now ~= ARGV[1] then
  return 0
end
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
"""


class _Unavailable(Exception):
    """An operation that did not reach the server (already reported)."""


class RemoteCache:
    """The remote tier of one run: lookups and set-if-absent publishing,
    with every fault turned into local behaviour and counted."""

    def __init__(self, url, mode=None, prefix=None, expiry_s=None,
                 timeout_s=None, password=None, ca_file=None, client=None,
                 log=None):
        """The URL's settings, unless given here (a test's or a tool's)."""
        if mode is not None and mode not in MODES:
            raise RemoteCacheError(f"unknown remote cache mode {mode!r}; "
                                   f"expected one of {', '.join(MODES)}")
        self.url = url if isinstance(url, RemoteURL) else parse_url(url)
        if prefix and self.url.prefix and prefix != self.url.prefix:
            raise RemoteCacheError(
                f"{self.url}: the URL's prefix differs from prefix={prefix}")
        self.prefix = check_prefix(prefix or self.url.prefix
                                   or DEFAULT_PREFIX)
        self.display = str(self.url)
        self.mode = _first(mode, self.url.mode, MODES[0])
        self.expiry_s = int(_first(expiry_s, self.url.expiry_s, 0))
        if self.expiry_s < 0:
            raise RemoteCacheError("remote cache expiry must be >= 0 seconds")
        self.log = log or logs.get("remote").warning
        self.client = client if client is not None else connect(
            self.url, password, _first(timeout_s, self.url.timeout_s, 1.0),
            _first(ca_file, self.url.ca_file, None))
        self.hits = self.misses = self.published = self.adopted = 0
        self.corrupt = 0
        self.corrupt_keys = set()
        self.failed_operations = 0
        self.consecutive_failures = 0
        self.unreachable = None  # the first failure, for messages
        self.switched_off = False
        self.last_lookup_failed = False

    @classmethod
    def from_options(cls, options, env=None):
        """The remote cache --autotune_remote_cache names, its settings
        from the URL; a path setting may start with TEST_WORKSPACE/."""
        url = parse_url(options.autotune_remote_cache)
        try:
            for name in ("password_file", "ca_file"):
                setattr(url, name, flags.resolve_path(
                    getattr(url, name), env, f"autotune_remote_cache ({name})"))
        except AutotuneFlagsError as e:
            raise RemoteCacheError(f"{url}: {e}") from None
        return cls(url, password=read_password(url.password_file, env))

    def key_name(self, key):
        return key_name(key, self.prefix)

    # -- faults ------------------------------------------------------------
    def _call(self, what, fn):
        if self.switched_off:
            raise _Unavailable
        try:
            result = fn()
        except Exception as e:  # any fault of the remote is local behaviour
            self._failed(what, e)
            raise _Unavailable from None
        self.consecutive_failures = 0
        return result

    def _failed(self, what, error):
        self.failed_operations += 1
        self.consecutive_failures += 1
        reason = logs.redact_text(f"{type(error).__name__}: {error}").strip()
        fatal = _permanent_failure(error)
        reason += failure_hint(error)
        if self.unreachable is None:
            self.unreachable = reason
            then = ("the remote tier is switched off now (retrying cannot "
                    "fix this)" if fatal else "the remote tier is switched "
                    f"off after {MAX_CONSECUTIVE_FAILURES} failures in a row")
            self.log(f"autotune: warning: remote cache {self.display}: "
                     f"{what} failed ({reason}); running on the local "
                     f"caches, {then}")
        if fatal or self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES:
            # Retrying cannot fix a wrong password or an untrusted server.
            self.switched_off = True
            self.close()

    def _bad_value(self, error, name):
        if name in self.corrupt_keys:  # counted once per key
            return
        self.corrupt += 1
        self.corrupt_keys.add(name)
        if self.corrupt == 1:
            self.log(f"autotune: warning: remote cache {self.display}: "
                     f"{error}; ignored (later bad values are only counted; "
                     f"delete with: redis-cli DEL {name})")

    # -- the tier ------------------------------------------------------------
    def lookup(self, key):
        """The entry the server holds for `key`, or None (a miss, a bad value
        or an unreachable server; last_lookup_failed tells the last)."""
        self.last_lookup_failed = False
        name = self.key_name(key)
        try:
            data = self._call("GET", lambda: self.client.get(name))
        except _Unavailable:
            self.last_lookup_failed = True
            return None
        if data is None:
            self.misses += 1
            return None
        try:
            entry = decode_value(data, name, key)
        except CacheFileError as e:
            self._bad_value(e, name)
            return None
        self.hits += 1
        return entry

    def publish(self, entry, refused=None, refuses=None):
        """Publishes a freshly tuned entry unless the key is there already;
        returns the entry to use: ours, or the one published first.
        refused: an entry the caller refused (its key and winner): a value
        holding it is replaced by ours while it is still the value read
        (compare-and-set), never adopted; refuses: None, or a test of the
        entry found: one it refuses is not adopted either (ours is
        returned)."""
        if self.mode == "read" or self.switched_off:
            return entry
        name = self.key_name(entry.key)
        value = encode_value(entry)
        expiry = self.expiry_s or None
        for _ in range(3):
            try:
                if self._call("SET NX", lambda: self.client.set(
                        name, value, nx=True, ex=expiry)):
                    self.published += 1
                    return entry
                data = self._call("GET", lambda: self.client.get(name))
            except _Unavailable:
                return entry
            if data is None:  # expired in between: ours stays local
                return entry
            try:
                first = decode_value(data, name, entry.key)
            except CacheFileError as e:
                self._bad_value(e, name)
                return entry
            if refused is None or first.key != refused.key or \
                    not first.same_result(refused):
                if refuses is not None and refuses(first):
                    return entry  # never an entry the caller refuses
                self.adopted += 1
                return first
            try:
                if self._call("SET IF EQUAL", lambda: self.client.eval(
                        _REPLACE_IF_EQUAL, 1, name, data, value,
                        self.expiry_s)):
                    self.published += 1
                    return entry
            except _Unavailable:
                return entry
            # Another process changed the value since it was read: look
            # at what it holds now.
        return entry

    def close(self):
        try:
            self.client.close()
        except Exception:  # a broken connection may fail to close
            pass

    # -- reporting -------------------------------------------------------------
    def unreachable_note(self):
        return (f"the remote cache {self.display} was unreachable "
                f"({self.unreachable}) and might hold it")

    def report(self):
        return {"url": self.display, "mode": self.mode,
                "namespace": namespace(self.prefix),
                "expiry_s": self.expiry_s, "hits": self.hits,
                "misses": self.misses, "published": self.published,
                "adopted": self.adopted, "corrupt_values": self.corrupt,
                "corrupt_keys": sorted(self.corrupt_keys)[:20],
                "failed_operations": self.failed_operations,
                "switched_off": self.switched_off,
                "unreachable": self.unreachable}

    def summary_line(self):
        line = (f"autotune: remote cache {self.display} ({self.mode}, keys "
                f"{namespace(self.prefix)}*): {self.hits} hit, "
                f"{self.misses} missed, {self.published} published, "
                f"{self.adopted} adopted, {self.corrupt} bad values ignored, "
                f"{self.failed_operations} failed operations")
        if self.switched_off:
            line += f"; switched off ({self.unreachable})"
        return line


def _first(*values):
    """The first value that is not None (None when all are)."""
    return next((v for v in values if v is not None), None)


def failure_hint(error, password_flag="the URL's ?password_file=",
                 ca_flag="the URL's ?ca_file="):
    """What to check after a failure that retrying cannot fix, as
    " (check ...)", or "" for any other failure."""
    fatal = _permanent_failure(error)
    if fatal == "auth":
        return (f" (check {PASSWORD_ENV}, {PASSWORD_FILE_ENV} or "
                f"{password_flag})")
    if fatal == "tls":
        return f" (check {ca_flag})"
    return ""


def _permanent_failure(error):
    """"auth" or "tls" for failures that retrying cannot fix, else None."""
    text = str(error)
    if type(error).__name__ == "AuthenticationError" or \
            text.startswith(("WRONGPASS", "NOAUTH", "NOPERM")) or \
            "invalid username-password" in text or \
            "Authentication required" in text:
        return "auth"
    if "CERTIFICATE_VERIFY_FAILED" in text or "WRONG_VERSION_NUMBER" in text:
        return "tls"
    return None
