"""Cache tool push / pull / stats against a real redis-server."""
import json

from autotune.cli import cache_tool
from autotune.cache import remote as cache_remote
from autotune.codec import dump_results, load_results
from autotune.records import Config

from redis_support import RedisServer
from tests_support import entry_for

FAST = Config({"BLOCK": 16}, num_warps=2)
SLOW = Config({"BLOCK": 32}, num_warps=4)


def _file(path, entries):
    dump_results(entries, str(path))
    return str(path)


def _entries(n, config=FAST, run_time_us=10.0):
    return [entry_for(config, signature=f"n={i};dtypes=x:float32",
                      run_time_us=run_time_us) for i in range(n)]


def test_push_stats_pull_round_trip(server, redis_db, tmp_path, capsys):
    src = _file(tmp_path / "a.textproto", _entries(5))
    assert cache_tool.main(["push", src, "--to", server.url,
                            "--expiry_s", "3600"]) == 0
    names = sorted(k.decode() for k in redis_db.keys("*"))
    assert len(names) == 5 and all(n.startswith("autotune:v1:axpb_kernel.")
                                   for n in names)
    assert 0 < redis_db.ttl(names[0]) <= 3600
    # Pushing again writes nothing.
    assert cache_tool.main(["push", src, "--to", server.url]) == 0
    assert "0 entries written" in capsys.readouterr().err
    assert cache_tool.main(["stats", "--json", server.url]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["entries"] == 5 and info["remote"]["bad_values"] == 0
    assert info["by_device"] == {"cpu/test": 5}
    out = tmp_path / "pulled.textproto"
    assert cache_tool.main(["pull", "--from", server.url, "-o",
                            str(out)]) == 0
    assert out.read_bytes() == open(src, "rb").read()  # canonical text
    # Another namespace is another cache.
    assert cache_tool.main(["stats", "--json",
                            server.url + "?prefix=other"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0


def test_push_conflicts_follow_merge_policies(server, redis_db, tmp_path,
                                              capsys):
    first = _file(tmp_path / "first.textproto", _entries(3, SLOW, 20.0))
    assert cache_tool.main(["push", first, "--to", server.url]) == 0
    faster = _file(tmp_path / "faster.binpb", _entries(4, FAST, 10.0))
    before = {k: redis_db.get(k) for k in redis_db.keys("*")}
    assert cache_tool.main(["push", faster, "--to", server.url]) == 1
    err = capsys.readouterr().err
    assert err.count("conflict:") == 3 and "nothing written" in err
    assert {k: redis_db.get(k) for k in redis_db.keys("*")} == before
    # prefer-first: the server's entries stay, the new key is added.
    assert cache_tool.main(["push", faster, "--to", server.url,
                            "--policy", "prefer-first"]) == 0
    assert "1 entries written" in capsys.readouterr().err
    assert len(redis_db.keys("*")) == 4
    assert all(redis_db.get(k) == v for k, v in before.items())
    # prefer-faster: the server's slower entries are replaced.
    assert cache_tool.main(["push", faster, "--to", server.url,
                            "--policy", "prefer-faster"]) == 0
    pulled = tmp_path / "all.textproto"
    assert cache_tool.main(["pull", "--from", server.url, "-o",
                            str(pulled)]) == 0
    assert {e.best for e in load_results(str(pulled))} == {FAST}


def test_pull_merges_into_an_existing_file(server, redis_db, tmp_path,
                                           capsys):
    remote_file = _file(tmp_path / "r.textproto", _entries(3, FAST, 10.0))
    cache_tool.main(["push", remote_file, "--to", server.url])
    out = tmp_path / "out.textproto"
    _file(out, _entries(2, SLOW, 20.0)[1:] + [
        entry_for(SLOW, signature="n=99;dtypes=x:float32")])
    before = out.read_bytes()
    assert cache_tool.main(["pull", "--from", server.url, "-o",
                            str(out)]) == 1
    assert out.read_bytes() == before  # nothing written on conflict
    assert cache_tool.main(["pull", "--from", server.url, "-o", str(out),
                            "--policy", "prefer-first"]) == 0
    entries = {e.key.signature.split(";")[0]: e.best
               for e in load_results(str(out))}
    assert entries == {"n=0": FAST, "n=1": SLOW, "n=2": FAST, "n=99": SLOW}


def test_bad_remote_values_are_skipped_by_pull_and_replaced_by_push(
        server, redis_db, tmp_path, capsys):
    src = _file(tmp_path / "a.textproto", _entries(2))
    cache_tool.main(["push", src, "--to", server.url])
    name = sorted(redis_db.keys("*"))[0]
    redis_db.set(name, b"not an entry")
    out = tmp_path / "out.textproto"
    assert cache_tool.main(["pull", "--from", server.url, "-o",
                            str(out)]) == 0
    err = capsys.readouterr().err
    assert name.decode() in err and "1 bad values skipped" in err
    assert len(load_results(str(out))) == 1
    assert cache_tool.main(["push", src, "--to", server.url]) == 0
    assert "replaced by the pushed entry" in capsys.readouterr().err
    assert cache_remote.decode_value(redis_db.get(name), name.decode())


def test_verify_counts_bad_remote_values_as_findings(server, redis_db,
                                                     tmp_path, capsys):
    src = _file(tmp_path / "a.textproto", _entries(2))
    cache_tool.main(["push", src, "--to", server.url])
    assert cache_tool.main(["verify", server.url]) == 0
    capsys.readouterr()
    name = sorted(redis_db.keys("*"))[0]
    redis_db.set(name, b"not an entry")
    assert cache_tool.main(["verify", server.url]) == 1
    out = capsys.readouterr().out
    assert f"{server.url}: " in out and name.decode() in out


def test_a_url_as_an_output_points_to_push(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a URL taken for a path would land here
    src = _file(tmp_path / "a.textproto", _entries(1))
    for argv in (["convert", src, "redis://127.0.0.1:1/0"],
                 ["merge", src, src, "-o", "rediss://127.0.0.1:1/0/"]):
        assert cache_tool.main(argv) == 2
        assert "a remote cache is written with `push`" in \
            capsys.readouterr().err
    assert not list(tmp_path.glob("redis*"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.textproto"]


def test_unreachable_server_and_secrets(tmp_path, capsys, monkeypatch):
    srv = RedisServer(password="letmein")
    try:
        src = _file(tmp_path / "a.textproto", _entries(1))
        monkeypatch.setenv(cache_remote.PASSWORD_ENV, "wrong")
        assert cache_tool.main(["push", src, "--to", srv.url]) == 2
        err = capsys.readouterr().err
        assert "autotune_cache: error:" in err and srv.url in err
        assert "AUTOTUNE_REMOTE_CACHE_PASSWORD" in err and \
            "--password_file)" in err
        (tmp_path / "pw").write_text("letmein\n")
        assert cache_tool.main(["push", src, "--to", srv.url,
                                "--password_file",
                                str(tmp_path / "pw")]) == 0
        monkeypatch.setenv(cache_remote.PASSWORD_FILE_ENV,
                           str(tmp_path / "pw"))
        assert cache_tool.main(["stats", srv.url]) == 0
        assert "1 entries" in capsys.readouterr().out
        assert cache_tool.main(["stats", "redis://u:letmein@127.0.0.1:1/0"]
                               ) == 2
        err = capsys.readouterr().err
        assert "letmein" not in err and "redis://***@127.0.0.1:1/0" in err
    finally:
        srv.kill()
    assert cache_tool.main(["stats", srv.url]) == 2
    assert "Connection refused" in capsys.readouterr().err
    srv.stop()
