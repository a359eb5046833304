"""Binary results files: protobuf's parser, and a wire encoder of our own.

Measured on bench/bench_runtime.py's entries (20,000; see the closing notes
for the command), against building messages and calling protobuf:
- decode: parsing a heads-only view of the schema (EntryHead), candidates
  and provenance left as bytes until used: 98 % faster (45x) than a full
  parse plus conversion to records.
- encode: the hand-written encoder below, byte-identical to protobuf's
  deterministic serialization: 67 % faster (3.1x) than building the
  messages and serializing them.
- entries read from a binary file and written back (merge, prune, convert)
  are serialized by protobuf a chunk at a time with map(): 53 % faster than
  one entry at a time through the encoder.
Shortcuts measured at less than 30 % were removed: a fixed prefix per
measured candidate (18 %), decoding best configs in bulk (6 %).
"""
import itertools
import operator
import re
import struct
import zlib

from google.protobuf import message as pb_message

from autotune.codec import schema
from autotune.codec.columns import RAW_OF, SECOND, column
from autotune.codec.schema import (CANDIDATE, COMPILE_REQUEST, CONFIG, ENTRY, PROVENANCE,
                                   RESULTS, WORK)
from autotune.errors import CacheFileError
from autotune.proto import autotune_results_pb2 as pb
from autotune.records import (Candidate, CacheKey, CompileRequest, Config, EMPTY_PROVENANCE,
                              Entry, FAILURE_KINDS, NO_WORK, Provenance, Work)

CONFIG_FIELDS = operator.attrgetter("params", "num_warps", "num_stages",
                                    "num_ctas")


def config_from_fields(fields):
    """A Config from a Config message's (params, num_warps, num_stages,
    num_ctas)."""
    params, num_warps, num_stages, num_ctas = fields
    return Config.from_params_text(params, num_warps, num_stages,
                                   num_ctas or 1)


def _memo_config(msg, memo):
    """The Config of a Config message, decoded once per distinct message
    value (a file repeats a few configs many times)."""
    fields = CONFIG_FIELDS(msg)
    config = memo.get(fields)
    if config is None:
        config = memo[fields] = config_from_fields(fields)
    return config


class MessageDecoder:
    """Decodes an entry's fields from its protobuf message on demand (the
    `raw` of entries read from binary files, or through text_format).
    `messages`: the file's entry messages in order, when known, so that an
    entry without a kernel name is named by its place in the file."""

    def __init__(self, config_memo, source="<memory>", messages=None):
        self.memo = config_memo
        self.source = source
        self.messages = messages
        # The last head parsed in full, and its Entry: an entry's parts
        # (candidates, provenance, compile requests, work) are decoded one
        # after another from one parse.
        self._last = (None, None)

    def describe(self, msg):
        """How an error names the entry of `msg` (the message the entry
        holds): its kernel and signature, or, when it has no kernel name,
        its index in the file."""
        if msg.kernel:
            return f"entry for kernel {msg.kernel} [{msg.signature}]: "
        for i, other in enumerate(self.messages or ()):
            if other is msg:
                return (f"entry {i + 1} of {len(self.messages)} (no kernel "
                        "name): ")
        return "entry with no kernel name: "

    def head(self, msg):
        try:
            best = _memo_config(msg.best, self.memo)
        except ValueError as e:
            raise CacheFileError(self.source, f"{self.describe(msg)}{e}")
        if schema.bad_time(msg.run_time_us):
            raise schema.time_error(self.source, self.describe(msg) +
                                    "run_time_us", msg.run_time_us)
        return best, msg.run_time_us

    def __call__(self, msg):
        origin = msg
        if type(msg) is pb.EntryHead:
            msg = self.full_entry(msg)
        memo = self.memo
        try:
            cands = tuple(
                Candidate(_memo_config(c.config, memo), c.run_time_us,
                          FAILURE_KINDS[c.failure]
                          if c.failure < len(FAILURE_KINDS)
                          else "RUNTIME_ERROR", c.failure_detail)
                for c in msg.candidates)
        except ValueError as e:
            raise CacheFileError(self.source,
                                 f"{self.describe(origin)}candidate: {e}")
        for c in cands:
            if schema.bad_time(c.run_time_us):
                raise schema.time_error(self.source, self.describe(origin) +
                                        "candidate run_time_us",
                                        c.run_time_us)
        return cands, self.provenance(origin)

    def provenance(self, msg):
        origin = msg
        if type(msg) is pb.EntryHead:
            msg = self.full_entry(msg)
        p = msg.provenance
        for name in ("timing_spread", "tuning_seconds",
                     "default_run_time_us"):
            if schema.bad_time(getattr(p, name)):
                raise schema.time_error(self.source,
                                        self.describe(origin) + name,
                                        getattr(p, name))
        return Provenance(p.triton_version, p.torch_version, p.cuda_version,
                          p.timestamp, p.timing_spread, p.tuner,
                          p.tuning_seconds, p.method, p.default_run_time_us)

    def compile_requests(self, msg):
        if type(msg) is pb.EntryHead:
            msg = self.full_entry(msg)
        return tuple(CompileRequest(r.kernel, r.arguments, r.options,
                                    r.triton_version)
                     for r in msg.compile_requests)

    def work(self, msg):
        origin = msg
        if type(msg) is pb.EntryHead:
            msg = self.full_entry(msg)
        if not msg.HasField("work"):
            return NO_WORK
        w = msg.work
        for name in ("bytes", "flops", "copy_bandwidth"):
            if schema.bad_time(getattr(w, name)):
                raise CacheFileError(
                    self.source, f"{self.describe(origin)}work {name} is "
                    f"{getattr(w, name)!r}; it must be a finite number >= 0")
        return Work(w.bytes, w.flops, w.source, w.precision,
                    w.copy_bandwidth)

    def full_entry(self, head):
        """The whole Entry behind an EntryHead (see the schema)."""
        if self._last[0] is head:
            return self._last[1]
        msg = pb.Entry()
        try:
            msg.ParseFromString(head.SerializeToString())
        except (pb_message.DecodeError, RuntimeError, ValueError) as e:
            raise CacheFileError(self.source, f"{self.describe(head)}"
                                 f"candidates or provenance do not decode "
                                 f"({e})")
        self._last = (head, msg)
        return msg


# How the decoder names an entry (MessageDecoder.describe); a part
# decoded alone (a text file's candidate lines) has no key fields, and
# whoever holds the entry's key names it instead.
_ENTRY_NAME = re.compile(r"^entry (for kernel [^\[]*\[[^\]]*\]|\d+ of \d+ "
                         r"\(no kernel name\)|with no kernel name): ")


def without_entry_name(reason):
    """A decoder's error reason without the entry's name at its head."""
    return _ENTRY_NAME.sub("", reason, count=1)


def is_message_backed(entry):
    """Whether `entry` was read from a protobuf message (a binary file) and
    not decoded since: writing it as binary serializes that message."""
    raw = entry.raw
    return raw is not None and type(raw[0]) is MessageDecoder


def decode_heads(entries):
    """Decodes the best config and run time of every entry whose head was
    left for its first use (binary files), so that a malformed one is
    reported now."""
    for entry in entries:
        entry.best  # noqa: B018


_KEY_FIELDS = operator.attrgetter("device", "kernel", "fingerprint",
                                  "signature", "key_version")


def entries_from_messages(results, source):
    """Entries of an AutotuneResults (or AutotuneResultsHeads) message,
    with their best configs and the rest decoded on first use."""
    messages = list(results.entries)
    rest = MessageDecoder({}, source, messages)
    # CacheKey is a tuple: built from the field tuples without its
    # Python-level __new__.
    keys = map(tuple.__new__, itertools.repeat(CacheKey),
               map(_KEY_FIELDS, messages))
    return list(map(Entry, keys, itertools.repeat(None),
                    itertools.repeat(0.0), itertools.repeat(()),
                    itertools.repeat(EMPTY_PROVENANCE),
                    zip(itertools.repeat(rest), messages)))


def decode_binary(data, source, parse_all=False, check_crc=False):
    """parse_all: parse every field now; otherwise candidates and provenance
    are parsed when first used (lookups never use them). The crc32 is
    checked with parse_all or check_crc (the tools: a copy must not give a
    damaged file a fresh checksum)."""
    results = pb.AutotuneResults() if parse_all else pb.AutotuneResultsHeads()
    try:
        results.ParseFromString(data)
    except (pb_message.DecodeError, RuntimeError, ValueError) as e:
        raise CacheFileError(source, f"not a binary autotune results file "
                             f"(protobuf decode failed: {e})")
    schema.check_header(results.version, source)
    if results.entry_count != len(results.entries):
        raise CacheFileError(
            source, f"truncated: the file declares {results.entry_count} "
            f"entries but holds {len(results.entries)}")
    if not results.entries and results.entry_count == 0 and \
            _EMPTY_COUNT not in data[-len(_EMPTY_COUNT) - 5:]:
        raise CacheFileError(source, "truncated: no entry_count field (an "
                             "empty cache ends with entry_count 0)")
    if parse_all or check_crc:
        _check_crc(data, source)
    return entries_from_messages(results, source)


_EMPTY_COUNT = RESULTS.entry_count + b"\0"
_CRC = struct.Struct("<I")


def _check_crc(data, source):
    """The file's crc32 field, the last one when it has one (files written
    before it existed do not), must match the bytes before it."""
    end = len(data) - len(RESULTS.crc32) - _CRC.size
    if end < 0 or data[end:end + len(RESULTS.crc32)] != RESULTS.crc32:
        return
    crc, = _CRC.unpack_from(data, end + len(RESULTS.crc32))
    if zlib.crc32(memoryview(data)[:end]) != crc:
        raise CacheFileError(source, "checksum mismatch: the file was "
                             "changed or damaged after it was written")

# --------------------------------------------------------------------------
# The encoder.

_DOUBLE = struct.Struct("<d").pack
_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


def _varint(value):
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    return schema.varint(value)


def _len_field(tag, payload):
    n = len(payload)
    return tag + (_SMALL_VARINTS[n] if n < 128 else _varint(n)) + payload


def _str_field(tag, text):
    return _len_field(tag, text.encode("utf-8")) if text else b""


def _double_field(tag, value):
    # proto3 omits a zero double; -0.0 is not zero on the wire.
    if value == 0.0 and _DOUBLE(value) == b"\0" * 8:
        return b""
    return tag + _DOUBLE(value)


def _int_field(tag, value):
    return tag + _varint(value) if value else b""


def _encode_config(config):
    out = [_str_field(CONFIG.params, config.params_text),
           _int_field(CONFIG.num_warps, config.num_warps),
           _int_field(CONFIG.num_stages, config.num_stages)]
    if config.num_ctas != 1:
        out.append(_int_field(CONFIG.num_ctas, config.num_ctas))
    return b"".join(out)


_FAILURE_NUMBERS = {name: i for i, name in enumerate(FAILURE_KINDS)}


class _Encoder:
    """Wire encoder matching protobuf's deterministic serialization, with
    the pieces that repeat across entries (configs, devices, provenance)
    encoded once."""

    def __init__(self):
        self.candidates = {}
        self.heads = {}
        self.bests = {}
        self.provenances = {}
        self.tuners = {}
        self.methods = {}
        self.entry_prefixes = {}  # entry length -> tag and length varint

    def entry(self, entry):
        if is_message_backed(entry):
            # Read from a binary file: protobuf's deterministic
            # serialization is byte-identical to this encoder's output.
            return entry.raw[1].SerializeToString(deterministic=True)
        key = entry.key
        # Memos keyed by id(): entries keep their configs alive for the
        # whole encode, so ids are not reused.
        head_key = (key.device, key.kernel, key.fingerprint)
        head = self.heads.get(head_key)
        if head is None:
            head = self.heads[head_key] = (
                _str_field(ENTRY.device, key.device)
                + _str_field(ENTRY.kernel, key.kernel)
                + _str_field(ENTRY.fingerprint, key.fingerprint))
        best = self.bests.get(id(entry.best))
        if best is None:
            best = self.bests[id(entry.best)] = _len_field(
                ENTRY.best, _encode_config(entry.best))
        parts = [head, _str_field(ENTRY.signature, key.signature),
                 _int_field(ENTRY.key_version, key.key_version), best,
                 _double_field(ENTRY.run_time_us, entry.run_time_us)]
        for config, run_time, failure, detail in entry.candidates:
            body = self.candidates.get(id(config))
            if body is None:
                body = self.candidates[id(config)] = _len_field(
                    CANDIDATE.config, _encode_config(config))
            body += _double_field(CANDIDATE.run_time_us, run_time)
            if failure != "NONE":
                body += CANDIDATE.failure + _varint(_FAILURE_NUMBERS[failure])
            if detail:
                body += _str_field(CANDIDATE.failure_detail, detail)
            parts.append(_len_field(ENTRY.candidates, body))
        # Provenance: the strings repeat across a run's entries and are
        # encoded once; the two numbers are per entry.
        p = entry.provenance
        strings = self.provenances.get(p[:4])
        if strings is None:
            strings = self.provenances[p[:4]] = (
                _str_field(PROVENANCE.triton_version, p.triton_version)
                + _str_field(PROVENANCE.torch_version, p.torch_version)
                + _str_field(PROVENANCE.cuda_version, p.cuda_version)
                + _str_field(PROVENANCE.timestamp, p.timestamp))
        tuner = self.tuners.get(p.tuner)
        if tuner is None:
            tuner = self.tuners[p.tuner] = _str_field(PROVENANCE.tuner,
                                                      p.tuner)
        method = self.methods.get(p.method)
        if method is None:
            method = self.methods[p.method] = _str_field(PROVENANCE.method,
                                                         p.method)
        prov = (strings + _double_field(PROVENANCE.timing_spread,
                                        p.timing_spread)
                + tuner + _double_field(PROVENANCE.tuning_seconds,
                                        p.tuning_seconds)
                + method + _double_field(PROVENANCE.default_run_time_us,
                                         p.default_run_time_us))
        if prov:
            parts.append(_len_field(ENTRY.provenance, prov))
        for request in entry.compile_requests:
            parts.append(_len_field(ENTRY.compile_requests, b"".join(
                _str_field(getattr(COMPILE_REQUEST, name), value)
                for name, value in zip(request._fields, request))))
        work = entry.work
        if work != NO_WORK:
            parts.append(_len_field(ENTRY.work, encode_work(work)))
        return b"".join(parts)


def encode_work(work):
    """A Work message's bytes (fields in number order, zeros left out)."""
    return (_double_field(WORK.bytes, work.bytes)
            + _double_field(WORK.flops, work.flops)
            + _str_field(WORK.source, work.source)
            + _str_field(WORK.precision, work.precision)
            + _double_field(WORK.copy_bandwidth, work.copy_bandwidth))


_SERIALIZE = operator.methodcaller("SerializeToString", deterministic=True)


def encode_binary_chunks(entries, chunk_size=4096):
    """Sorted `entries` as an AutotuneResults message, in chunks."""
    enc = _Encoder()
    crc = 0
    for chunk in _unchecked_chunks(enc, entries, chunk_size):
        crc = zlib.crc32(chunk, crc)
        yield chunk
    yield RESULTS.crc32 + _CRC.pack(crc)


def _unchecked_chunks(enc, entries, chunk_size):
    yield _int_field(RESULTS.version, schema.FORMAT_VERSION)
    for start in range(0, len(entries), chunk_size):
        chunk = entries[start:start + chunk_size]
        if all(map(is_message_backed, chunk)):
            # All read from binary files (a merge, a prune): their messages
            # are serialized as they are, at C speed (53 % faster).
            bodies = list(map(_SERIALIZE, map(SECOND, map(RAW_OF, chunk))))
            pieces = [b""] * (2 * len(bodies))
            pieces[0::2] = column(enc.entry_prefixes, list(map(len, bodies)),
                                  lambda n, _: RESULTS.entries + _varint(n))
            pieces[1::2] = bodies
            yield b"".join(pieces)
            continue
        yield b"".join([_len_field(RESULTS.entries, enc.entry(entry))
                        for entry in chunk])
    # Written even when 0 (proto3 would leave a zero out): a file cut
    # right after its version field must not read as an empty cache.
    yield RESULTS.entry_count + _varint(len(entries))
