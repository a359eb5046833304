"""The canonical text writer (autotune/codec/text_writer.py): what
text_format makes of its text is the binary writer's message, over every
value the column writer treats apart, in chunks of any size."""
import zlib

from google.protobuf import text_format

from autotune import codec
from autotune.codec import text_writer
from autotune.proto import autotune_results_pb2 as pb
from autotune.records import CacheKey, Candidate, Config, Entry, Provenance

from test_e2e_tools import entry


def test_text_writer_edge_values_match_the_binary_writer(monkeypatch):
    """Values the column writer treats apart: missing or partial provenance,
    zero and negative-zero numbers, failed candidates with and without a
    time, key version 0, quoted signatures; over several chunks."""
    monkeypatch.setattr(text_writer, "TEXT_CHUNK", 3)
    plain = Config({"B": 16}, num_warps=2, num_stages=1)
    odd = Config({"ACT": 'say "hi"', "F": 0.25}, num_ctas=2)
    provenances = [Provenance(), Provenance(timing_spread=0.5),
                   Provenance(tuning_seconds=-0.0), Provenance(tuner="ga"),
                   Provenance("3.9.0", timing_spread=-0.0, tuning_seconds=2.0)]
    candidate_sets = [
        [Candidate(plain, 1.5)],
        [Candidate(plain, 0.0), Candidate(odd, -0.0, "TIMEOUT")],
        [Candidate(odd, 7.0, "WRONG_RESULT", "max error 0.5")],
        [],
        [Candidate(odd, 2.0, "NONE", "warm-up was slow")],
    ]
    entries = []
    for i in range(20):
        entries.append(Entry(
            CacheKey("dev", "k", "fp", f'sig {i} "é"\\' if i % 3 else f"s{i}",
                     key_version=i % 2),
            plain if i % 2 else odd, [1.25, 0.0, -0.0][i % 3],
            candidate_sets[i % 5], provenances[i % 4 + (i % 7 == 0)]))
    text = codec.encode(entries, "a.textproto").decode()
    parsed = pb.AutotuneResults()
    text_format.Parse(text, parsed)
    parsed.crc32 = zlib.crc32(parsed.SerializeToString(deterministic=True))
    assert parsed.SerializeToString(deterministic=True) == \
        codec.encode(entries, "a.pb")
    assert "provenance { }" not in text
    assert codec.decode(text.encode(), "a.textproto") == \
        codec.sort_entries(entries)


def test_the_chunks_make_the_same_text_whatever_their_size(monkeypatch):
    entries = [entry(n, block=16 * n) for n in range(1, 8)]
    whole = b"".join(text_writer.encode_text_chunks(entries))
    monkeypatch.setattr(text_writer, "TEXT_CHUNK", 2)
    chunks = list(text_writer.encode_text_chunks(entries))
    assert len(chunks) > 2 and b"".join(chunks) == whole
    assert codec.decode(whole, "c.textproto") == \
        codec.sort_entries(entries)
