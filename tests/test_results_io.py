import os
import random
import zlib

import pytest
from google.protobuf import text_format

from autotune import codec
from autotune.proto import autotune_results_pb2 as pb
from autotune.records import (CacheKey, Candidate, Config, Entry, Provenance)
from autotune.errors import CacheFileError

import tiny_kernels as tk
from tests_support import entry_for

CONFIGS = [Config({"BLOCK_M": m, "BLOCK_N": n, "EVEN_K": m == n}, num_warps=w,
                  num_stages=s)
           for m in (32, 64) for n in (32, 128) for w in (4, 8) for s in (2, 3)]


def make_entries(n, seed=0, device="NVIDIA H200/sm_90/sms=132/triton-3.9.0"):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cands = [Candidate(c, round(rng.uniform(1, 50), 3))
                 for c in rng.sample(CONFIGS, 4)]
        cands.append(Candidate(CONFIGS[0], 0.0, "OUT_OF_RESOURCES",
                               'shared memory "128 KB" > limit\\n'))
        best = min((c for c in cands if c.ok),
                   key=lambda c: (c.run_time_us, c.config.sort_key))
        out.append(Entry(
            CacheKey(device, "matmul", "0123456789abcdef",
                     f"M={64 * (i + 1)},N=128;dtypes=a:float16"),
            best.config, best.run_time_us, cands,
            Provenance("3.9.0", "2.13.0", "12.8", "2026-11-29T10:00:00Z",
                       0.02, "exhaustive", 1.5)))
    return out


TEXT = (".textproto", ".txt", ".pbtxt", ".txtpb", ".prototxt")


@pytest.mark.parametrize("ext", TEXT + (".pb", ".bin"))
def test_round_trip(tmp_path, ext):
    entries = make_entries(50)
    path = tmp_path / ("cache" + ext)
    codec.dump_results(entries, path)
    loaded = codec.load_results(path)
    assert loaded == codec.sort_entries(entries)
    assert codec.is_text_path(path) == (ext in TEXT)
    assert path.read_bytes().startswith(b"# proto-file: ") == (ext in TEXT)


def test_text_writer_output_parses_to_the_binary_message(tmp_path):
    entries = make_entries(40)
    entries[3] = entries[3].replace(best=Config(
        {"ACT": 'leaky "relu"', "SCALE": 0.5, "FLAG": False, "NEG": -3},
        num_ctas=2))
    text = codec.encode(entries, "a.textproto").decode()
    parsed = pb.AutotuneResults()
    text_format.Parse(text, parsed)
    binary = codec.encode(entries, "a.pb")
    # The binary file ends with its crc32 field, which text leaves out.
    parsed.crc32 = zlib.crc32(parsed.SerializeToString(deterministic=True))
    assert parsed.SerializeToString(deterministic=True) == binary
    from_binary = pb.AutotuneResults.FromString(binary)
    assert from_binary == parsed


def test_dump_is_byte_identical_for_the_same_results(tmp_path):
    entries = make_entries(30)
    shuffled = list(entries)
    random.Random(1).shuffle(shuffled)
    for ext in (".textproto", ".pb"):
        a, b = tmp_path / ("a" + ext), tmp_path / ("b" + ext)
        codec.dump_results(entries, a)
        codec.dump_results(shuffled, b)
        assert a.read_bytes() == b.read_bytes()


def test_hand_edited_and_reordered_text_loads(tmp_path):
    entries = make_entries(20)
    msg = pb.AutotuneResults()
    msg.ParseFromString(codec.encode(entries, "x.pb"))
    msg.entries.reverse()
    # text_format's own layout: multi-line submessages, other field order.
    text = "# edited by hand\n" + text_format.MessageToString(msg)
    text = text.replace("version: 1", "version:   1  # still version one")
    path = tmp_path / "edited.textproto"
    path.write_text(text)
    loaded = codec.load_results(path)
    assert codec.sort_entries(loaded) == codec.sort_entries(entries)
    # A fast-path file with one entry made non-canonical still loads right.
    canon = codec.encode(entries, "x.txt").decode()
    odd = canon.replace("  run_time_us: ", "  run_time_us:", 1)
    path.write_text(odd)
    assert codec.sort_entries(codec.load_results(path)) == \
        codec.sort_entries(entries)


@pytest.mark.parametrize("ext", [".textproto", ".pb"])
def test_truncated_file_is_an_error_naming_the_file(tmp_path, ext):
    path = tmp_path / ("cache" + ext)
    codec.dump_results(make_entries(10), path)
    data = path.read_bytes()
    for cut in (len(data) // 3, len(data) - 3, data.rfind(b"entry_count")):
        path.write_bytes(data[:cut])
        with pytest.raises(CacheFileError) as err:
            codec.load_results(path)
        assert str(path) in str(err.value)


def test_text_without_entry_count_the_advice_works(tmp_path):
    """A hand-edited text file that lost its entry_count line: the error
    says what to restore or delete, and doing either makes it load."""
    path = tmp_path / "cache.textproto"
    codec.dump_results(make_entries(10), path)
    text = path.read_text()
    tail = text.index("entry_count")
    path.write_text(text[:tail])
    with pytest.raises(CacheFileError, match="entry_count: N") as err:
        codec.load_results(path)
    assert "'# proto-file:' and '# proto-message:'" in str(err.value)
    path.write_text(text[:tail] + "entry_count: 10\n")
    assert len(codec.load_results(path)) == 10
    first_two = text.split("\n", 2)[2]
    assert text.startswith("# proto-file:") and \
        text.split("\n")[1].startswith("# proto-message:")
    path.write_text(first_two[:first_two.index("entry_count")])
    assert len(codec.load_results(path)) == 10


def test_binary_cut_at_entry_boundary_is_detected(tmp_path):
    path = tmp_path / "cache.pb"
    data = codec.encode(make_entries(3), "x.pb")
    msg = pb.AutotuneResults.FromString(data)
    del msg.entries[-1]
    msg.ClearField("entry_count")  # as if the tail was lost
    path.write_bytes(msg.SerializeToString())
    with pytest.raises(CacheFileError, match="truncated"):
        codec.load_results(path)


@pytest.mark.parametrize("name,data,reason", [
    ("garbage.textproto", b"\x00\xff\xfe garbage", "not UTF-8"),
    ("garbage.txt", b"this is { not a cache", "not a valid text"),
    ("garbage.pb", b"\xff\xff\xff\xff\xff", "protobuf decode failed"),
    ("empty.pb", b"", "no format version"),
    ("future.textproto", b"version: 7\n", "unknown format version 7"),
])
def test_bad_files(tmp_path, name, data, reason):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(CacheFileError, match=reason) as err:
        codec.load_results(path)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(CacheFileError, match="no such file"):
        codec.load_results(tmp_path / "nope.textproto")


def test_duplicate_keys_in_one_file(tmp_path):
    entries = make_entries(2)
    dup = entries[0].replace(best=CONFIGS[-1])
    text = codec.encode(entries, "a.txt").decode()
    extra = codec.encode([dup], "a.txt").decode()
    body = extra.split("version: 1\n", 1)[1].split("entry_count")[0]
    text = text.replace("entry_count: 2", body + "entry_count: 3")
    path = tmp_path / "dup.textproto"
    path.write_text(text)
    with pytest.raises(CacheFileError, match="duplicate key with different"):
        codec.load_results(path)


def test_dump_into_missing_directory_is_an_error(tmp_path):
    with pytest.raises(CacheFileError, match="does not exist"):
        codec.dump_results(make_entries(1), tmp_path / "no" / "c.pb")


def test_failed_dump_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "cache.textproto"
    codec.dump_results(make_entries(5), path)
    before = path.read_bytes()

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(CacheFileError, match=r"cache\.textproto: cannot "
                       "write: No space left on device"):
        codec.dump_results(make_entries(9), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["cache.textproto"]


def test_lazy_fields_of_fast_path_match_slow_path(tmp_path):
    entries = make_entries(25, seed=3)
    text = codec.encode(entries, "a.txt").decode()
    fast = codec.decode_text(text, "a.txt")
    slow = codec.decode_text_slow(text, "a.txt")
    assert fast == slow


def test_crc_line_marks_unedited_text_as_trusted():
    entries = make_entries(5)
    data = codec.encode(entries, "c.textproto")
    assert data.splitlines()[-1].startswith(b"# crc32: ")
    loaded = codec.decode(data, "c.textproto")
    assert all(codec.copyable_rest(e) is not None for e in loaded)
    assert loaded[0].raw[0].trusted
    # One edited line: the crc no longer matches, lines are checked one by
    # one, and a malformed one is caught.
    at = data.index(b"run_time_us: ", data.index(b"  candidates {"))
    edited = data[:at] + b"run_time_us: 1_0 " + data[at + 13:]
    loaded = codec.decode(edited, "c.textproto")
    assert not loaded[0].raw[0].trusted
    assert not all(codec.copyable_rest(e) is not None for e in loaded)
    # Without the crc line (another writer, or an edit), every line is
    # accounted for: one that is neither a key, a candidate nor a
    # provenance sends the file to text_format, which names it.
    rogue = data.replace(b"  provenance {", b"  bogus: 1\n  provenance {", 1)
    rogue = rogue[:rogue.rindex(b"# crc32: ")]
    with pytest.raises(CacheFileError, match=r"^c\.textproto: .*bogus"):
        codec.decode(rogue, "c.textproto")


@pytest.mark.parametrize("parse_all", [False, True])
def test_binary_entries_are_copied_byte_for_byte(parse_all):
    data = codec.encode(make_entries(30), "c.pb")
    loaded = codec.decode(data, "c.pb", parse_all=parse_all)
    assert codec.encode(loaded, "c.pb") == data
    # Decoding the lazy fields gives the entries that were written.
    assert loaded == codec.sort_entries(make_entries(30))


def test_corrupt_candidate_bytes_are_reported_when_read():
    entries = make_entries(3)
    data = codec.encode(entries, "c.pb")
    # Proto3 strings must be UTF-8: break one inside a candidate's detail.
    at = data.index(b"shared memory")
    bad = data[:at] + b"\xff" + data[at + 1:]
    with pytest.raises(CacheFileError, match=r"^c\.pb: .*decode"):
        codec.decode(bad, "c.pb", parse_all=True)
    # A load that parses only what lookups need (the runtime's, the tools'
    # but verify's) reports the bad candidate, naming the file, when
    # something reads it.
    loaded = codec.decode(bad, "c.pb")
    codec.decode_heads(loaded)
    assert [e.best for e in loaded] == [e.best for e in
                                        codec.sort_entries(entries)]
    with pytest.raises(CacheFileError, match=r"^c\.pb: entry for kernel "
                       r"matmul .*do not decode"):
        [e.candidates for e in loaded]


def _decode_fully(data, path, parse_all=False):
    """Entries with every lazy field decoded, or the CacheFileError."""
    try:
        entries = codec.decode(data, path, parse_all=parse_all)
        for entry in entries:
            entry.candidates  # noqa: B018
        return entries
    except CacheFileError as e:
        return e


@pytest.mark.parametrize("keep_crc", [False, True])
@pytest.mark.parametrize("layout", ["standard", "zero run time"])
def test_fast_text_reader_agrees_with_text_format_on_edited_files(keep_crc,
                                                                  layout):
    """Lines deleted, repeated, swapped or replaced: whatever the fast
    reader accepts, text_format reads the same way, and what text_format
    rejects the fast reader rejects too (naming the file). MUTATIONS and
    SEED in the environment run more of them."""
    entries = make_entries(6, seed=4)
    if layout != "standard":
        # One entry without its run_time_us line: read block by block.
        entries[2] = entries[2].replace(run_time_us=0.0)
    data = codec.encode(entries, "e.textproto")
    if not keep_crc:
        data = data[:data.rindex(b"# crc32: ")]
    lines = data.decode().split("\n")[:-1]
    rng = random.Random(int(os.environ.get("SEED", 7)))
    junk = ["  bogus: 1", "}", "entries {", "  provenance { tuner: \"x\" }",
            '  candidates { config { params: "A=1" num_warps: 4 '
            'num_stages: 2 } run_time_us: 2.5 }', "# comment", "",
            "  key_version: 3"]
    for _ in range(int(os.environ.get("MUTATIONS", 300))):
        edited = list(lines)
        for _ in range(rng.randint(1, 2)):
            at = rng.randrange(len(edited))
            action = rng.randrange(4)
            if action == 0:
                del edited[at]
            elif action == 1:
                edited.insert(at, edited[at])
            elif action == 2:
                other = rng.randrange(len(edited))
                edited[at], edited[other] = edited[other], edited[at]
            else:
                edited.insert(at, rng.choice(junk))
        text = "\n".join(edited) + "\n"
        fast = _decode_fully(text.encode(), "e.textproto")
        try:
            slow = codec.decode_text_slow(text, "e.textproto")
            codec.check_duplicates(slow, "e.textproto")
        except CacheFileError:
            assert isinstance(fast, CacheFileError), text
            assert str(fast).startswith("e.textproto: ")
            continue
        assert fast == slow, text
        # Written back, the lines read (and maybe copied) are canonical.
        canonical = codec.encode(slow, "out.textproto")
        assert codec.encode(fast, "out.textproto") == canonical
        lazy = codec.decode(text.encode(), "e.textproto")
        # The provenance read on its own (show, stats) is the same too.
        assert [e.provenance for e in lazy] == [e.provenance for e in slow]
        assert codec.encode(lazy, "out.textproto") == canonical


def test_lazy_binary_reader_agrees_with_a_full_parse_on_damaged_files():
    """Bytes flipped or cut: the heads-only load plus decoding on first use
    gives what a full parse gives, or an error naming the file."""
    # Without its crc32 field (files from before it existed), so that the
    # full parse compares decoding, not the checksum.
    data = codec.encode(make_entries(5, seed=2), "d.pb")[:-5]
    rng = random.Random(int(os.environ.get("SEED", 3)))
    for _ in range(int(os.environ.get("MUTATIONS", 400))):
        damaged = bytearray(data)
        if rng.random() < 0.2:
            damaged = damaged[:rng.randrange(len(damaged))]
        for _ in range(rng.randint(1, 3)):
            if damaged:
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        damaged = bytes(damaged)
        try:
            provenances = [e.provenance for e in codec.decode(damaged,
                                                                   "d.pb")]
        except CacheFileError:
            provenances = None
        lazy = _decode_fully(damaged, "d.pb")
        full = _decode_fully(damaged, "d.pb", parse_all=True)
        if not isinstance(lazy, CacheFileError):
            assert provenances == [e.provenance for e in lazy]
        if isinstance(full, CacheFileError):
            assert isinstance(lazy, CacheFileError)
            assert str(lazy).startswith("d.pb: ")
        else:
            assert lazy == full


def _reference_message(entries):
    """AutotuneResults built field by field and serialized by protobuf:
    what the binary writer must match byte for byte."""
    results = pb.AutotuneResults(version=codec.FORMAT_VERSION,
                                 entry_count=len(entries))
    for entry in entries:
        msg = results.entries.add(
            device=entry.key.device, kernel=entry.key.kernel,
            fingerprint=entry.key.fingerprint,
            signature=entry.key.signature,
            key_version=entry.key.key_version,
            run_time_us=entry.run_time_us)
        for config, target in [(entry.best, msg.best)] + [
                (c.config, msg.candidates.add(
                    run_time_us=c.run_time_us,
                    failure=pb.FailureKind.Value(c.failure),
                    failure_detail=c.failure_detail))
                for c in entry.candidates]:
            config_msg = target if target is msg.best else target.config
            config_msg.params = config.params_text
            config_msg.num_warps = config.num_warps
            config_msg.num_stages = config.num_stages
            config_msg.num_ctas = config.num_ctas if config.num_ctas != 1 else 0
        provenance = pb.Provenance(**entry.provenance._asdict())
        if provenance.ByteSize():  # an empty one is left out (-0.0 is not)
            msg.provenance.CopyFrom(provenance)
    data = results.SerializeToString(deterministic=True)
    return data + b"\x25" + zlib.crc32(data).to_bytes(4, "little")


def test_binary_writer_matches_protobuf_serialization():
    plain = Config({"B": 16}, num_warps=2, num_stages=1)
    odd = Config({"ACT": 'say "hi"', "F": 0.25}, num_ctas=2)
    entries = make_entries(30)
    for i, value in enumerate([0.0, -0.0, 1.5, float("inf")]):
        entries.append(Entry(
            CacheKey("dév", "k", "fp", f'sig {i} "é"\\', key_version=i % 2),
            odd if i % 2 else plain, value,
            [Candidate(plain, value), Candidate(odd, value, "TIMEOUT"),
             Candidate(plain, 3.0, "NONE", "slow warm-up")],
            Provenance(timing_spread=value, tuning_seconds=-value,
                       tuner="ga" if i % 2 else "")))
    entries = codec.sort_entries(entries)
    assert codec.encode(entries, "x.pb") == _reference_message(entries)


def test_provenance_alone_leaves_candidates_undecoded():
    entries = make_entries(4)
    for path in ("p.textproto", "p.pb"):
        loaded = codec.decode(codec.encode(entries, path), path)
        assert [e.provenance for e in loaded] == \
            [e.provenance for e in codec.sort_entries(entries)]
        assert all(e._candidates is None for e in loaded)
        assert loaded == codec.sort_entries(entries)


def test_every_file_the_writer_produces_loads_on_the_fast_path(monkeypatch):
    """Quotes, backslashes, control and non-ASCII characters in any string
    field, and string-valued config params (EVICTION="evict_last"), are
    read without text_format, and the lines are copied when written back."""
    rng = random.Random(5)
    alphabet = ['a', ' ', '"', '\\', "'", '\n', '\t', '\x01', '\x7f', 'é',
                '}', '{', ':', '=', '\u2028']

    def text(n=8):
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, n)))
    entries = []
    for i in range(40):
        best = Config({"BLOCK": 32, "EVICTION": "evict_last", "ACT": text()},
                      num_warps=4, num_stages=2 + i % 2)
        other = Config({"NOTE": text(), "SCALE": 1.5})
        entries.append(Entry(
            CacheKey("dev" + text(), "k" + text(), "fp", f"s{i}" + text()),
            best, 1.5, [Candidate(best, 1.5),
                        Candidate(other, 0.0, "TIMEOUT", text()),
                        Candidate(other, 2.0, "NONE", text())],
            Provenance(text(), "2.13.0", "", "t", 0.5, text(), 1.0)))
    data = codec.encode(entries, "a.textproto")
    reference = codec.decode_text_slow(data.decode(), "a.textproto")

    def slow_path(*args, **kwargs):
        raise AssertionError("text_format used")
    monkeypatch.setattr(text_format, "Parse", slow_path)
    for blob in (data, data[:data.rindex(b"# crc32: ")]):
        loaded = codec.decode(blob, "a.textproto")
        assert all(codec.copyable_rest(e) is not None for e in loaded)
        assert codec.encode(loaded, "a.textproto") == data
        assert loaded == reference == codec.sort_entries(entries)


def test_binary_file_cut_to_its_header(tmp_path):
    path = tmp_path / "c.pb"
    codec.dump_results(make_entries(2), path)
    path.write_bytes(path.read_bytes()[:2])
    with pytest.raises(CacheFileError, match="truncated"):
        codec.load_results(path)
    codec.dump_results([], path)  # an empty cache still loads
    assert codec.load_results(path) == []


def test_unknown_failure_kind_in_text_is_an_error_naming_the_file():
    text = codec.encode(make_entries(2), "c.textproto")
    bad = text.replace(b"failure: OUT_OF_RESOURCES", b"failure: BOGUS", 1)
    bad = bad[:bad.rindex(b"# crc32: ")]
    with pytest.raises(CacheFileError, match=r"^c\.textproto: .*BOGUS"):
        [e.candidates for e in codec.decode(bad, "c.textproto")]


def test_binary_lengths_around_one_varint_byte():
    # Lengths 127 and 128 take one and two varint bytes (a mutant that
    # moved the boundary survived the rest of the suite).
    entries = codec.sort_entries([
        entry_for(tk.GOOD[0], signature="s" * n)
        for n in (100, 125, 126, 127, 128, 129, 300)])
    assert codec.encode(entries, "x.pb") == _reference_message(entries)

