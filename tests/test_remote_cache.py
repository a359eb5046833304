"""The remote cache tier against a real redis-server on a loopback port."""
import json
import os
import subprocess
import sys
import time

import pytest

import autotune
from autotune import flags
from autotune import keys as keys_module
from autotune.cache import remote as cache_remote
from autotune.codec import binary
from autotune.measure import backends
from autotune.cache.remote import RemoteCache, RemoteCacheError
from autotune.errors import AutotuneError
from autotune.runtime import session as runtime_session

import tiny_kernels as tk
from redis_support import RedisServer
from tests_support import (HOSTILE_URLS, SECRET, assert_no_secret, entry_for,
                           tool)

HERE = os.path.dirname(os.path.abspath(__file__))


def _remote_keys(client):
    return sorted(k.decode() for k in client.keys("*"))


# -- URLs, passwords, key names (no server) ----------------------------------

def test_url_parsing_and_tls():
    url = cache_remote.parse_url("redis://cache.example:7000/3")
    assert (url.host, url.port, url.db, url.tls) == ("cache.example", 7000,
                                                     3, False)
    url = cache_remote.parse_url("rediss://ci@cache.example/")
    assert (url.port, url.db, url.tls, url.username) == (6379, 0, True, "ci")
    assert str(url) == "rediss://ci@cache.example:6379/0"
    url = cache_remote.parse_url("redis://[::1]:6380/1?prefix=team-a")
    assert (url.host, url.prefix, str(url)) == (
        "::1", "team-a", "redis://[::1]:6380/1?prefix=team-a")
    for bad, why in [("http://h:1/0", "expected redis://"),
                     ("redis://h:1/x", "database must be a number"),
                     ("redis://h:99999/0", "not a valid URL"),
                     ("redis:///0", "no host"),
                     ("redis://h/0?db=1", "unknown URL parameter"),
                     ("redis://h/0?prefix=a*b", "key prefix")]:
        with pytest.raises(RemoteCacheError, match=why):
            cache_remote.parse_url(bad)


def test_tls_url_makes_a_tls_client(tmp_path):
    pytest.importorskip("redis")
    client = cache_remote.connect(cache_remote.parse_url(
        "rediss://cache.example:6380/2"), "pw", 0.5, str(tmp_path / "ca.pem"))
    kwargs = client.connection_pool.connection_kwargs
    assert client.connection_pool.connection_class.__name__ == "SSLConnection"
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == (
        "cache.example", 6380, 2)
    assert kwargs["ssl_ca_certs"] == str(tmp_path / "ca.pem")
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == 0.5
    plain = cache_remote.connect(cache_remote.parse_url("redis://h:1/0"))
    assert plain.connection_pool.connection_class.__name__ == "Connection"


def test_tls_server(session_factory, capsys):
    srv = RedisServer(tls=True)
    try:
        # Its self-signed certificate is not among the system's CAs.
        sess = session_factory(autotune_remote_cache=srv.url
                               + "?timeout_s=2.0")
        tk.run(tk.make_tuner(), 40)
        report = sess.cache.remote.report()
        assert sess.stats.tuned == 1 and report["switched_off"]
        assert report["failed_operations"] == 1  # not retried
        assert "certificate verify failed" in capsys.readouterr().err
        # A plain client on the TLS port fails and is switched off too.
        sess = session_factory(autotune_remote_cache=srv.url.replace(
            "rediss:", "redis:") + "?timeout_s=0.3")
        tk.run(tk.make_tuner(), 40)
        tk.run(tk.make_tuner(), 72)
        assert sess.stats.tuned == 2
        report = sess.cache.remote.report()
        assert report["switched_off"] and report["failed_operations"] == 3
        sess = session_factory(autotune_remote_cache=srv.url
                               + f"?ca_file={srv.ca_file}&timeout_s=2.0")
        tk.run(tk.make_tuner(), 40)
        assert sess.cache.remote.report()["published"] == 1
        sess = session_factory(autotune_remote_cache=srv.url
                               + f"?ca_file={srv.ca_file}")
        tk.run(tk.make_tuner(), 40)
        assert (sess.stats.remote_hits, sess.stats.tuned) == (1, 0)
    finally:
        srv.stop()


def test_password_in_url_is_refused_and_redacted(session_factory):
    with pytest.raises(autotune.AutotuneError) as info:
        session_factory(autotune_remote_cache="redis://ci:s3cret@h:1/0")
    assert "s3cret" not in str(info.value)
    assert "redis://***@h:1/0" in str(info.value)
    assert cache_remote.redact("rediss://:p@ss@h/0") == "rediss://***@h/0"
    assert cache_remote.redact("redis://h:1/0") == "redis://h:1/0"


def test_password_sources(tmp_path):
    path = tmp_path / "pw"
    path.write_text("from-file\n")
    env = {cache_remote.PASSWORD_ENV: "from-env"}
    assert cache_remote.read_password(str(path), env) == "from-file"
    assert cache_remote.read_password(None, env) == "from-env"
    assert cache_remote.read_password(None, {
        **env, cache_remote.PASSWORD_FILE_ENV: str(path)}) == "from-file"
    assert cache_remote.read_password(None, {}) is None
    with pytest.raises(RemoteCacheError, match="nope: cannot read"):
        cache_remote.read_password(str(tmp_path / "nope"), {})
    # No flag carries a password.
    assert not [n for n in flags.flag_names()
                if "password" in n and not n.endswith("_file")]


def test_settings_travel_in_the_url(tmp_path):
    """Every setting is a URL parameter; a path may start with
    TEST_WORKSPACE/."""
    options = flags.parse(
        "--autotune_remote_cache=rediss://h:1/0?mode=read&prefix=x"
        "&expiry_s=60&timeout_s=0.25&password_file=TEST_WORKSPACE/pw"
        "&ca_file=ca.pem",
        {"TEST_SRCDIR": "/r", "TEST_WORKSPACE": "ws"})
    url = cache_remote.parse_url(options.autotune_remote_cache)
    assert (url.mode, url.prefix, url.expiry_s,
            url.timeout_s, url.password_file, url.ca_file) == (
        "read", "x", 60, 0.25, "TEST_WORKSPACE/pw", "ca.pem")
    assert str(url) == "rediss://h:1/0?prefix=x"
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "pw").write_text("from-file\n")
    env = {"TEST_SRCDIR": str(tmp_path), "TEST_WORKSPACE": "ws"}
    remote = RemoteCache.from_options(options, env)
    assert (remote.prefix, remote.expiry_s, remote.mode) == ("x", 60, "read")
    kwargs = remote.client.connection_pool.connection_kwargs
    assert kwargs["password"] == "from-file"
    assert kwargs["socket_timeout"] == 0.25
    assert kwargs["ssl_ca_certs"] == "ca.pem"
    # Unset, each takes its default.
    plain = RemoteCache.from_options(flags.parse(
        "--autotune_remote_cache=redis://h:1/0", {}), {})
    assert (plain.prefix, plain.expiry_s) == ("autotune", 0)
    kwargs = plain.client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 1.0 and kwargs["password"] is None


@pytest.mark.parametrize("query, why", [
    ("mode=write", "mode must be one of update, read"),
    ("expiry_s=-1", "expiry_s must be a whole number >= 0"),
    ("expiry_s=1.5", "expiry_s must be a whole number >= 0"),
    ("timeout_s=0", "timeout_s must be a number > 0"),
    ("timeout_s=nan", "timeout_s must be a number > 0"),
    ("ca_file=", "ca_file is empty"),
    ("prefix=a&prefix=b", "'prefix' is given twice"),
    ("db=1", "unknown URL parameter 'db' (understood: mode, prefix, expiry_s, "
             "timeout_s, password_file, ca_file)"),
])
def test_a_bad_url_setting_is_one_line_naming_it(query, why):
    with pytest.raises(RemoteCacheError) as info:
        cache_remote.parse_url("redis://h:1/0?" + query)
    assert why in str(info.value)


@pytest.mark.parametrize("flag, parameter", sorted(
    flags.REMOVED_FLAGS.items()))
def test_a_removed_remote_flag_names_the_url_form(flag, parameter,
                                                  session_factory):
    with pytest.raises(autotune.AutotuneError) as info:
        flags.parse(f"--{flag}=/x/secret", {})
    message = str(info.value)
    assert f"--{flag} is gone" in message
    assert f"--autotune_remote_cache=redis://HOST:PORT/DB?{parameter}=" \
        in message
    assert "/x/secret" not in message and "\n" not in message
    with pytest.raises(autotune.AutotuneError, match=f"--{flag} is gone"):
        session_factory(**{flag: 1})


class _FakeClient:
    """Records commands; serves the key-format tests only."""

    def __init__(self):
        self.data, self.calls = {}, []

    def get(self, name):
        self.calls.append(("get", name))
        return self.data.get(name)

    def set(self, name, value, nx=False, ex=None):
        self.calls.append(("set", name, nx, ex))
        if nx and name in self.data:
            return None
        self.data[name] = value
        return True


def test_key_format():
    entry = entry_for(tk.GOOD[0])
    file_name = keys_module.file_name(entry.key)
    digest = file_name.split(".")[1]
    assert cache_remote.key_name(entry.key, "ci") == \
        f"ci:v{entry.key.key_version}:axpb_kernel.{digest}"
    fake = _FakeClient()
    remote = RemoteCache("redis://h:1/0", prefix="team", expiry_s=3600,
                         client=fake)
    assert remote.publish(entry) is entry
    name = f"team:v1:axpb_kernel.{digest}"
    assert fake.calls == [("set", name, True, 3600)]
    # The value is the schema's binary results message with one entry.
    assert binary.decode_binary(fake.data[name], name) == [entry]
    assert remote.lookup(entry.key) == entry
    with pytest.raises(RemoteCacheError, match="differs"):
        RemoteCache("redis://h:1/0?prefix=a", prefix="b", client=fake)


# -- the tier, in one process ------------------------------------------------

def test_prefix_from_the_url(session_factory, server, redis_db):
    """`?prefix=` in the URL names the namespace; a prefix given to
    RemoteCache too and different is an error naming both."""
    sess = session_factory(autotune_remote_cache=server.url + "?prefix=team-a")
    tk.run(tk.make_tuner(), 40)
    assert sess.cache.remote.prefix == "team-a"
    keys = _remote_keys(redis_db)
    assert len(keys) == 1 and keys[0].startswith("team-a:v")
    with pytest.raises(RemoteCacheError,
                       match="prefix differs from prefix=other"):
        RemoteCache(server.url + "?prefix=team-a", prefix="other")


def test_read_mode_writes_nothing(session_factory, server, redis_db,
                                  tmp_path):
    sess = session_factory(autotune_remote_cache=server.url + "?mode=read")
    tuned = tk.make_tuner()
    tk.run(tuned, 40)
    tk.run(tuned, 72)
    assert sess.stats.tuned == 2
    assert _remote_keys(redis_db) == []
    assert sess.cache.remote.report()["published"] == 0
    # Entries published by others are read; the per-fusion directory in read
    # mode is not written either.
    session_factory(autotune_remote_cache=server.url)
    tk.run(tk.make_tuner(), 40)
    assert len(_remote_keys(redis_db)) == 1
    sess = session_factory(autotune_remote_cache=server.url + "?mode=read",
                           per_fusion_autotune_cache_dir=str(tmp_path),
                           autotune_cache_mode="read")
    tk.run(tk.make_tuner(), 40)
    tk.run(tk.make_tuner(), 56)
    assert (sess.stats.remote_hits, sess.stats.tuned) == (1, 1)
    assert len(_remote_keys(redis_db)) == 1 and os.listdir(tmp_path) == []


def test_remote_hit_is_its_own_kind_and_lands_in_the_directory(
        session_factory, server, redis_db, tmp_path):
    first = session_factory(autotune_remote_cache=server.url)
    tk.run(tk.make_tuner(), 40)
    published = next(iter(first.cache.memory.values()))
    report_path = tmp_path / "report.json"
    cache_dir = tmp_path / "dir"
    cache_dir.mkdir()
    sess = session_factory(autotune_remote_cache=server.url,
                           per_fusion_autotune_cache_dir=str(cache_dir),
                           autotune_report_to=str(report_path))
    tuned = tk.make_tuner()
    assert tuned.lookup_config(*tk.run(tuned, 40), 40, 2.0) == published.best
    assert sess.stats.candidate_benchmarks == 0
    assert "0 hit, 1 remote hit, 0 tuned" in sess.summary_line()
    assert os.listdir(cache_dir) == [keys_module.file_name(published.key)]
    sess.finish()
    report = json.loads(report_path.read_text())
    assert (report["hits"], report["remote_hits"]) == (0, 1)
    assert report["fusions"][0]["status"] == "remote_hit"
    assert report["fusions"][0]["source"] == server.url
    assert report["remote"]["hits"] == 1
    # Next run: the per-fusion directory answers before the remote.
    sess = session_factory(autotune_remote_cache=server.url,
                           per_fusion_autotune_cache_dir=str(cache_dir))
    tk.run(tk.make_tuner(), 40)
    assert (sess.stats.hits, sess.stats.remote_hits) == (1, 0)
    assert sess.cache.remote.report()["hits"] == 0


def test_set_if_absent_adopts_the_first_writers_entry(server, redis_db):
    winner = entry_for(tk.GOOD[0], device="cpu/x")
    loser = entry_for(tk.GOOD[1], device="cpu/x")
    a = RemoteCache(server.url, expiry_s=600)
    b = RemoteCache(server.url)
    assert a.publish(winner) is winner
    assert 0 < redis_db.ttl(a.key_name(winner.key)) <= 600
    assert b.publish(loser) == winner
    assert (a.published, b.published, b.adopted) == (1, 0, 1)
    assert b.lookup(loser.key) == winner


def test_a_refused_value_is_replaced_by_compare_and_set(server, redis_db):
    stale = entry_for(tk.GOOD[0], device="cpu/x")
    fresh = entry_for(tk.GOOD[1], device="cpu/x")
    other = entry_for(tk.WRONG, device="cpu/x")
    a = RemoteCache(server.url)
    assert a.publish(stale) is stale
    assert a.publish(fresh, stale) is fresh
    assert a.lookup(fresh.key) == fresh
    # Another process's value: adopted, unless this caller refuses it too
    # (then not adopted, and kept: it is not the value refused).
    assert a.publish(other, stale, lambda e: e.best == tk.GOOD[0]) == fresh
    assert a.publish(other, stale, lambda e: e.best == tk.GOOD[1]) is other
    assert a.lookup(fresh.key) == fresh
    assert (a.published, a.adopted) == (2, 1)


def test_an_update_replaces_a_remote_winner_no_longer_offered(
        session_factory, server, redis_db):
    A, B = tk.GOOD
    C = autotune.Config({"BLOCK": 64, "BUG": 0}, num_warps=4)
    session_factory(autotune_remote_cache=server.url)
    first = tk.make_tuner([A, B])
    tk.run(first, 40)
    remaining = [c for c in (A, B) if c != first.best_config] + [C]
    sess = session_factory(autotune_remote_cache=server.url)
    tuned = tk.make_tuner(remaining)
    x, y = tk.run(tuned, 40)
    assert sess.stats.miss_reasons == {"config no longer offered": 1}
    assert tuned.lookup_config(x, y, 40, 2.0) in remaining
    [name] = _remote_keys(redis_db)
    value = cache_remote.decode_value(redis_db.get(name), name)
    assert value.best in remaining
    sess = session_factory(autotune_remote_cache=server.url)
    tk.run(tk.make_tuner(remaining), 40)
    assert (sess.stats.remote_hits, sess.stats.tuned) == (1, 0)


class _OnDevice(backends.InterpreterBackend):
    """The interpreter, named as a GPU of a fleet: entries tuned with it
    are keyed by that device."""

    def __init__(self, device):
        super().__init__(repetitions=1)
        self.device_name = device

    def device_key(self):
        return self.device_name


H100 = "NVIDIA H100 80GB HBM3/sm_90/sms=132/triton-3.9.0"
A100 = "NVIDIA A100-SXM4-80GB/sm_80/sms=108/triton-3.9.0"


def test_runners_of_two_devices_share_one_server_without_mixing(
        session_factory, server, redis_db, tmp_path, capsys):
    """An H100 runner and an A100 runner tune the same fusion against one
    server: the A100 one does not take the H100's winner (it tunes), the
    server holds one entry per device, and each device's next runner gets
    its own device's winner (here the two differ by construction)."""
    A, B = tk.GOOD
    # Each is offered one config that runs (and one that crashes).
    for device, offered in ((H100, [A, tk.CRASH]), (A100, [B, tk.CRASH])):
        sess = session_factory(backend=_OnDevice(device),
                               autotune_remote_cache=server.url)
        tk.run(tk.make_tuner(offered), 40)
        assert (sess.stats.tuned, sess.stats.remote_hits) == (1, 0), device
    names = _remote_keys(redis_db)
    assert len(names) == 2, names
    stored = {}
    for name in names:
        entry = cache_remote.decode_value(redis_db.get(name), name)
        stored[entry.key.device] = entry
    assert sorted(stored) == sorted([H100, A100])
    assert (stored[H100].best, stored[A100].best) == (A, B)
    assert stored[H100].key.signature == stored[A100].key.signature
    for device, winner in ((H100, A), (A100, B)):
        sess = session_factory(backend=_OnDevice(device),
                               autotune_remote_cache=server.url)
        tuned = tk.make_tuner([A, B])
        x, y = tk.run(tuned, 40)
        assert (sess.stats.remote_hits, sess.stats.tuned,
                sess.stats.candidate_benchmarks) == (1, 0, 0), device
        assert tuned.lookup_config(x, y, 40, 2.0) == winner, device
    capsys.readouterr()
    assert tool("stats", "--json", server.url) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["by_device"] == {H100: 1, A100: 1}, info


def test_corrupt_and_foreign_values_are_reported_once_and_ignored(
        session_factory, server, redis_db, capsys):
    first = session_factory(autotune_remote_cache=server.url)
    tuned = tk.make_tuner()
    tk.run(tuned, 40)
    tk.run(tuned, 72)
    key40, key72 = list(first.cache.memory)
    name40, name72 = (cache_remote.key_name(k) for k in (key40, key72))
    assert _remote_keys(redis_db) == sorted([name40, name72])
    good72 = redis_db.get(name72)
    redis_db.set(name40, b"\x08\x01garbage that is no entry")
    redis_db.set(name72, good72[:-3])  # truncated
    capsys.readouterr()
    sess = session_factory(autotune_remote_cache=server.url)
    tuned = tk.make_tuner()
    tk.run(tuned, 40)
    tk.run(tuned, 72)
    err = capsys.readouterr().err
    assert (sess.stats.tuned, sess.stats.remote_hits) == (2, 0)
    assert sess.cache.remote.report()["corrupt_values"] == 2
    assert err.count("autotune: warning: remote cache") == 1
    assert name40 in err and "redis-cli DEL" in err
    # Bad values are never overwritten by a run (only the tool replaces).
    assert redis_db.get(name40).startswith(b"\x08\x01garbage")
    # A valid entry stored under another key's name is foreign.
    redis_db.set(name40, good72)
    remote = RemoteCache(server.url, log=lambda line: None)
    assert remote.lookup(key40) is None
    assert remote.lookup(key72) is None  # still truncated
    assert (remote.corrupt, remote.hits) == (2, 0)
    redis_db.set(name72, good72)
    assert remote.lookup(key72).key == key72


def test_wrong_password(session_factory, tmp_path, capsys, monkeypatch):
    srv = RedisServer(password="right-one")
    try:
        monkeypatch.setenv(cache_remote.PASSWORD_ENV, "wrong-one")
        sess = session_factory(autotune_remote_cache=srv.url,
                               autotune_report_to=str(tmp_path / "r.json"))
        tuned = tk.make_tuner()
        tk.run(tuned, 40)
        tk.run(tuned, 72)
        sess.finish()
        err = capsys.readouterr().err
        assert sess.stats.tuned == 2
        report = sess.cache.remote.report()
        assert report["failed_operations"] == 1 and report["switched_off"]
        assert err.count("warning: remote cache") == 1
        assert "AUTOTUNE_REMOTE_CACHE_PASSWORD" in err
        assert "switched off now (retrying cannot fix this)" in err
        text = err + (tmp_path / "r.json").read_text()
        assert "wrong-one" not in text and "right-one" not in text
        # The right password, from a file, works.
        monkeypatch.delenv(cache_remote.PASSWORD_ENV)
        (tmp_path / "pw").write_text("right-one\n")
        sess = session_factory(
            autotune_remote_cache=srv.url
            + f"?password_file={tmp_path / 'pw'}")
        tk.run(tk.make_tuner(), 40)
        assert sess.cache.remote.report()["published"] == 1
        assert len(srv.client().keys("*")) == 1
    finally:
        srv.stop()


def test_server_stopped_mid_run_is_slow_then_switched_off(
        session_factory, capsys):
    srv = RedisServer()
    try:
        sess = session_factory(autotune_remote_cache=srv.url
                               + "?timeout_s=0.3")
        tuned = tk.make_tuner()
        tk.run(tuned, 8)
        assert sess.cache.remote.published == 1
        srv.pause()  # SIGSTOP: connections hang until the read timeout
        start = time.monotonic()
        for n in (16, 24, 40, 56, 72):
            tk.run(tuned, n)
        elapsed = time.monotonic() - start
        report = sess.cache.remote.report()
        assert sess.stats.tuned == 6
        assert report["failed_operations"] == 3 and report["switched_off"]
        assert "Timeout" in report["unreachable"]
        # Three timeouts, then no more waiting (plus tuning time).
        assert elapsed < 3 * 0.3 + 10, elapsed
        assert capsys.readouterr().err.count("warning: remote cache") == 1
        assert "switched off" in sess.cache.remote.summary_line()
    finally:
        srv.stop()


def test_server_killed_mid_run(session_factory, tmp_path, capsys):
    srv = RedisServer()
    try:
        cache_dir = tmp_path / "dir"
        cache_dir.mkdir()
        sess = session_factory(autotune_remote_cache=srv.url
                               + "?timeout_s=0.3",
                               per_fusion_autotune_cache_dir=str(cache_dir))
        tuned = tk.make_tuner()
        tk.run(tuned, 8)
        srv.kill()  # SIGKILL
        for n in (8, 16, 24, 40, 56):
            x, y = tk.run(tuned, n)
            assert (y == x * 2.0 + 1.0).all()
        report = sess.cache.remote.report()
        assert sess.stats.tuned == 5
        assert report["published"] == 1
        assert report["failed_operations"] == 3 and report["switched_off"]
        assert capsys.readouterr().err.count("warning: remote cache") == 1
        # Local behaviour: every fusion is in the per-fusion directory.
        assert len(os.listdir(cache_dir)) == 5
        # Require-complete: a fusion only the unreachable remote might
        # hold is missing, and the message names the remote.
        sess = session_factory(autotune_remote_cache=srv.url
                               + "?timeout_s=0.3",
                               per_fusion_autotune_cache_dir=str(cache_dir),
                               require_complete_autotune_results=True)
        tk.run(tk.make_tuner(), 8)  # the directory answers
        with pytest.raises(autotune.AutotuneCacheMissError) as info:
            tk.run(tk.make_tuner(), 72)
        assert f"the remote cache {srv.url} was unreachable" in \
            str(info.value)
        assert "unreachable" in sess.report()["missing"][0]["note"]
    finally:
        srv.stop()


# -- real processes ------------------------------------------------------------

def _workers(url, dirs_and_sizes):
    procs = [subprocess.Popen(
        [sys.executable, os.path.join(HERE, "workers", "remote_worker.py"),
         url, str(cache_dir)] + [str(s) for s in sizes],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, TRITON_INTERPRET="1"))
        for cache_dir, sizes in dirs_and_sizes]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        out.append(json.loads(stdout.splitlines()[-1]))
    return out


def test_two_processes_with_separate_directories_share_a_fusion(
        server, redis_db, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    [first] = _workers(server.url, [(a, [40])])
    [second] = _workers(server.url, [(b, [40])])
    assert first["stats"]["tuned"] == 1 and first["remote"]["published"] == 1
    assert second["stats"]["candidate_benchmarks"] == 0
    assert second["stats"]["remote_hits"] == 1
    assert second["used"] == first["used"]
    assert os.listdir(a) == os.listdir(b)  # written into b's directory
    assert (a / os.listdir(a)[0]).read_bytes() == \
        (b / os.listdir(b)[0]).read_bytes()


def test_eight_processes_agree_on_one_config_per_key(server, redis_db):
    sizes = [8, 16, 24, 40, 56, 72]
    runs = _workers(server.url, [("-", sizes[i % 3:] + sizes[:i % 3])
                                 for i in range(8)])
    used = {}
    for run in runs:
        for n, config in run["used"].items():
            used.setdefault(n, set()).add(config)
    assert all(len(configs) == 1 for configs in used.values()), used
    names = _remote_keys(redis_db)
    assert len(names) == len(sizes)
    for name in names:
        entry = cache_remote.decode_value(redis_db.get(name), name)
        n = entry.key.signature.split(";")[0].split("=")[1]
        assert used[n] == {entry.best.short()}
    assert sum(r["remote"]["published"] for r in runs) == len(sizes)
    assert sum(r["remote"]["failed_operations"] for r in runs) == 0


def test_runtime_imports_redis_only_when_the_flag_is_set(tmp_path):
    code = ("import sys, autotune, tiny_kernels as tk; autotune.configure();"
            "tk.run(tk.make_tuner(), 8); print('redis' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, cwd=HERE, timeout=120,
                         env=dict(os.environ, TRITON_INTERPRET="1",
                                  PYTHONPATH=os.path.dirname(HERE)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# -- no password in any message -------------------------------------------

@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_no_password_in_runtime_messages(url, session_factory, capsys):
    with pytest.raises(AutotuneError) as info:
        session_factory(autotune_remote_cache=url)
    assert "--autotune_remote_cache" in str(info.value)
    captured = capsys.readouterr()
    assert_no_secret(str(info.value), captured.out, captured.err)


def test_redacted_url_keeps_what_helps():
    redact = autotune.cache.remote.redact
    assert redact(f"redis://bob:{SECRET}/cd@host:6379/0") == \
        "redis://***@host:6379/0"
    assert redact(f"redis://h:1/0?prefix=team&password={SECRET}") == \
        "redis://h:1/0?prefix=team&password=***"
    assert redact("redis://h:1/0") == "redis://h:1/0"
    assert redact("redis://[::1]:6380/0") == "redis://[::1]:6380/0"


@pytest.mark.redis
def test_no_password_in_the_report_or_summary(tmp_path, monkeypatch,
                                              capsys):
    from redis_support import RedisServer
    srv = RedisServer(password="the-right-one")
    try:
        monkeypatch.setenv("AUTOTUNE_REMOTE_CACHE_PASSWORD", SECRET)
        report = tmp_path / "report.json"
        url = srv.url.replace("redis://", "redis://bob@")
        sess = autotune.configure(autotune_remote_cache=url,
                                  autotune_report_to=str(report))
        tk.run(tk.make_tuner(), 40)
        sess.finish()
        data = report.read_bytes()
        assert json.loads(data)["remote"]["switched_off"]
        assert "bob@127.0.0.1" in json.loads(data)["remote"]["url"]
        captured = capsys.readouterr()
        assert "remote cache" in captured.err
        assert_no_secret(data, captured.out, captured.err)
        # The tool's messages for the same server.
        assert tool("stats", url) == 2
        captured = capsys.readouterr()
        assert "bob@127.0.0.1" in captured.err
        assert_no_secret(captured.out, captured.err)
    finally:
        runtime_session._SESSION = None
        srv.stop()

