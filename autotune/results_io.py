"""Results files: load and dump, text or binary protobuf by file extension.

Both formats follow autotune/proto/autotune_results.proto. protobuf's Python
text_format is far too slow for large caches (about 1 MB/s to parse), so text
goes through a codec of our own:

- The writer prints canonical text format: entries sorted by cache key, one
  scalar field per line, each config / candidate / provenance on one line.
  text_format parses it to exactly the message the binary writer produces
  (tests/test_results_io.py checks this).
- The reader takes the canonical layout on a fast path and hands anything
  else (hand-edited, reordered, comments in odd places) to text_format, so
  every valid text file loads.

Binary files are parsed by the protobuf runtime (C), through a heads-only
view of the schema unless everything is asked for, and encoded by a small
wire encoder here whose output is byte-identical to protobuf's deterministic
serialization. Candidates and provenance are decoded lazily in both formats:
lookups need only keys and best configs. Entries read from a file are
written back in the same format by copying their bytes or lines.

Speed comes from working column by column (map() over C-level getters,
strings shared across entries) rather than one Python statement per field;
files are written in chunks as they are encoded.
"""
import contextlib
import gc
import itertools
import math
import operator
import os
import re
import struct
import zlib
import tempfile

from google.protobuf import message as pb_message
from google.protobuf import text_encoding
from google.protobuf import text_format

from autotune.proto import autotune_results_pb2 as pb
from autotune.records import (Candidate, CacheKey, Config, EMPTY_PROVENANCE,
                              Entry, FAILURE_KINDS, Provenance)

FORMAT_VERSION = 1
TEXT_EXTENSIONS = (".txt", ".textproto", ".pbtxt")
TEXT_HEADER = ("# proto-file: autotune/proto/autotune_results.proto\n"
               "# proto-message: rules_autotune.AutotuneResults\n")


class CacheFileError(Exception):
    """A cache file that cannot be used; the message names the file."""

    def __init__(self, path, reason):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def is_text_path(path):
    return str(path).endswith(TEXT_EXTENSIONS)


# --------------------------------------------------------------------------
# Conversion between records and protobuf messages.

_CONFIG_FIELDS = operator.attrgetter("params", "num_warps", "num_stages",
                                     "num_ctas")


def _config_from_fields(fields):
    """A Config from a Config message's (params, num_warps, num_stages,
    num_ctas)."""
    params, num_warps, num_stages, num_ctas = fields
    return Config.from_params_text(params, num_warps, num_stages,
                                   num_ctas or 1)


def _memo_config_pb(msg, memo):
    """The Config of a Config message, decoded once per distinct message
    value (a file repeats a few configs many times)."""
    fields = _CONFIG_FIELDS(msg)
    config = memo.get(fields)
    if config is None:
        config = memo[fields] = _config_from_fields(fields)
    return config


class _PbRestDecoder:
    """Decodes the candidates and provenance of a binary entry on demand."""

    def __init__(self, config_memo, source="<memory>"):
        self.memo = config_memo
        self.source = source

    def head(self, msg):
        try:
            return _memo_config_pb(msg.best, self.memo), msg.run_time_us
        except ValueError as e:
            raise CacheFileError(self.source, f"entry for kernel "
                                 f"{msg.kernel} [{msg.signature}]: {e}")

    def __call__(self, msg):
        if type(msg) is pb.EntryHead:
            msg = self.full_entry(msg)
        memo = self.memo
        try:
            cands = tuple(
                Candidate(_memo_config_pb(c.config, memo), c.run_time_us,
                          FAILURE_KINDS[c.failure]
                          if c.failure < len(FAILURE_KINDS)
                          else "RUNTIME_ERROR", c.failure_detail)
                for c in msg.candidates)
        except ValueError as e:
            raise CacheFileError(self.source, f"entry for kernel {msg.kernel} "
                                 f"[{msg.signature}]: candidate: {e}")
        return cands, self.provenance(msg)

    def provenance(self, msg):
        if type(msg) is pb.EntryHead:
            msg = self.full_entry(msg)
        p = msg.provenance
        return Provenance(p.triton_version, p.torch_version, p.cuda_version,
                          p.timestamp, p.timing_spread, p.tuner,
                          p.tuning_seconds)

    def full_entry(self, head):
        """The whole Entry behind an EntryHead (see the schema)."""
        msg = pb.Entry()
        try:
            msg.ParseFromString(head.SerializeToString())
        except (pb_message.DecodeError, RuntimeError, ValueError) as e:
            raise CacheFileError(self.source, f"entry for kernel {head.kernel} "
                                 f"[{head.signature}]: candidates or "
                                 f"provenance do not decode ({e})")
        return msg

    def decode_heads(self, entries):
        """head() for many entries of this decoder at once, at C speed
        where it can be (tools compare the best configs of whole files)."""
        messages = list(map(_SECOND, map(_RAW_OF, entries)))
        raws = list(map(_CONFIG_FIELDS, map(_BEST_FIELD, messages)))

        def make(fields, _):
            try:
                return _config_from_fields(fields)
            except ValueError as e:
                raise CacheFileError(self.source, f"best config: {e}")
        configs = _column(self.memo, raws, make)
        for _ in map(Entry.set_head, entries, configs,
                     map(_RUN_TIME_FIELD, messages)):
            pass


_BEST_FIELD = operator.attrgetter("best")
_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)
_RUN_TIME_FIELD = operator.attrgetter("run_time_us")


def decode_heads(entries):
    """Decodes the best config and run time of every lazily loaded binary
    entry in `entries` (others decode theirs on first use)."""
    # Only entries_from_pb makes entries without a decoded head.
    pending = list(itertools.compress(
        entries, map(operator.not_, map(Entry.has_head, entries))))
    decoders = list(map(_FIRST, map(_RAW_OF, pending)))
    if len(set(decoders)) == 1:  # one file: the usual case
        decoders[0].decode_heads(pending)
        return
    by_decoder = {}
    for entry, decoder in zip(pending, decoders):
        by_decoder.setdefault(decoder, []).append(entry)
    for decoder, group in by_decoder.items():
        decoder.decode_heads(group)


_KEY_FIELDS = operator.attrgetter("device", "kernel", "fingerprint",
                                  "signature", "key_version")


def entries_from_pb(results, source):
    rest = _PbRestDecoder({}, source)
    messages = list(results.entries)
    # CacheKey is a tuple: built from the field tuples without its
    # Python-level __new__.
    keys = map(tuple.__new__, itertools.repeat(CacheKey),
               map(_KEY_FIELDS, messages))
    return list(map(Entry, keys, itertools.repeat(None),
                    itertools.repeat(0.0), itertools.repeat(()),
                    itertools.repeat(EMPTY_PROVENANCE),
                    zip(itertools.repeat(rest), messages)))


# --------------------------------------------------------------------------
# Binary: protobuf's parser, and a deterministic wire encoder.

_DOUBLE = struct.Struct("<d").pack
_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


def _varint(value):
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
    out = [_str_field(b"\x0a", config.params_text),
           _int_field(b"\x10", config.num_warps),
           _int_field(b"\x18", config.num_stages)]
    if config.num_ctas != 1:
        out.append(_int_field(b"\x20", config.num_ctas))
    return b"".join(out)


class _Encoder:
    """Wire encoder matching protobuf's deterministic serialization, with
    the pieces that repeat across entries (configs, devices, provenance)
    encoded once."""

    def __init__(self):
        self.fields = {}
        self.ok_prefixes = {}
        self.heads = {}
        self.bests = {}
        self.provenances = {}
        self.tuners = {}
        self.entry_prefixes = {}  # entry length -> tag and length varint

    def _memo(self, kind, value, make):
        # Keyed by identity where values are shared objects; entries keep
        # them alive for the whole encode, so ids are not reused.
        memo_key = (kind, id(value)) if kind in ("cfg", "cand") else (kind, value)
        raw = self.fields.get(memo_key)
        if raw is None:
            raw = self.fields[memo_key] = make(value)
        return raw

    def entry(self, entry):
        raw = entry.raw
        if raw is not None and type(raw[0]) is _PbRestDecoder:
            # Read from a binary file: protobuf's deterministic
            # serialization is byte-identical to this encoder's output.
            return raw[1].SerializeToString(deterministic=True)
        key = entry.key
        memo = self._memo
        head_key = (key.device, key.kernel, key.fingerprint)
        head = self.heads.get(head_key)
        if head is None:
            head = self.heads[head_key] = (
                _str_field(b"\x0a", key.device)
                + _str_field(b"\x12", key.kernel)
                + _str_field(b"\x1a", key.fingerprint))
        best = self.bests.get(id(entry.best))
        if best is None:
            best = self.bests[id(entry.best)] = _len_field(
                b"\x32", _encode_config(entry.best))
        parts = [head, _str_field(b"\x22", key.signature),
                 _int_field(b"\x28", key.key_version), best,
                 _double_field(b"\x39", entry.run_time_us)]
        ok_prefixes = self.ok_prefixes
        for config, run_time, failure, detail in entry.candidates:
            if failure == "NONE" and not detail and run_time:
                # A measured candidate: a fixed prefix per config + 8 bytes.
                prefix = ok_prefixes.get(id(config))
                if prefix is None:
                    body = _len_field(b"\x0a", _encode_config(config))
                    prefix = ok_prefixes[id(config)] = (
                        b"\x42" + _varint(len(body) + 9) + body + b"\x11")
                parts.append(prefix + _DOUBLE(run_time))
                continue
            body = memo("cand", config,
                        lambda c: _len_field(b"\x0a", _encode_config(c)))
            body += _double_field(b"\x11", run_time)
            if failure != "NONE":
                body += b"\x18" + _varint(FAILURE_KINDS.index(failure))
            if detail:
                body += _str_field(b"\x22", detail)
            parts.append(_len_field(b"\x42", body))
        # Provenance: the strings repeat across a run's entries and are
        # encoded once; the two numbers are per entry (fields 5 and 7).
        p = entry.provenance
        strings = self.provenances.get(p[:4])
        if strings is None:
            strings = self.provenances[p[:4]] = (
                _str_field(b"\x0a", p.triton_version)
                + _str_field(b"\x12", p.torch_version)
                + _str_field(b"\x1a", p.cuda_version)
                + _str_field(b"\x22", p.timestamp))
        tuner = self.tuners.get(p.tuner)
        if tuner is None:
            tuner = self.tuners[p.tuner] = _str_field(b"\x32", p.tuner)
        prov = (strings + _double_field(b"\x29", p.timing_spread) + tuner
                + _double_field(b"\x39", p.tuning_seconds))
        if prov:
            parts.append(_len_field(b"\x4a", prov))
        return b"".join(parts)


def encode_binary_chunks(entries, chunk_size=4096):
    """Sorted `entries` as an AutotuneResults message, in chunks."""
    enc = _Encoder()
    yield _int_field(b"\x08", FORMAT_VERSION)
    for start in range(0, len(entries), chunk_size):
        chunk = entries[start:start + chunk_size]
        raws = list(map(_RAW_OF, chunk))
        if None not in raws and set(map(type, map(_FIRST, raws))) == {
                _PbRestDecoder}:
            # All read from binary files (a merge, a prune): their messages
            # are serialized as they are, at C speed.
            bodies = list(map(_SERIALIZE, map(_SECOND, raws)))
            pieces = [b""] * (2 * len(bodies))
            pieces[0::2] = _column(enc.entry_prefixes,
                                   list(map(len, bodies)),
                                   lambda n, _: b"\x12" + _varint(n))
            pieces[1::2] = bodies
            yield b"".join(pieces)
            continue
        yield b"".join([_len_field(b"\x12", enc.entry(entry))
                        for entry in chunk])
    yield _int_field(b"\x18", len(entries))


_SERIALIZE = operator.methodcaller("SerializeToString", deterministic=True)


def encode_binary(entries):
    return b"".join(encode_binary_chunks(entries))


def decode_binary(data, source, parse_all=False):
    """parse_all: parse every field now; otherwise candidates and provenance
    are parsed when first used (lookups never use them)."""
    results = pb.AutotuneResults() if parse_all else pb.AutotuneResultsHeads()
    try:
        results.ParseFromString(data)
    except (pb_message.DecodeError, RuntimeError, ValueError) as e:
        raise CacheFileError(source, f"not a binary autotune results file "
                             f"(protobuf decode failed: {e})")
    _check_header(results.version, source)
    if results.entry_count != len(results.entries):
        raise CacheFileError(
            source, f"truncated: the file declares {results.entry_count} "
            f"entries but holds {len(results.entries)}")
    return entries_from_pb(results, source)


def _check_header(version, source):
    if version == 0:
        raise CacheFileError(source, "no format version: empty, truncated, or "
                             "not an autotune results file")
    if version != FORMAT_VERSION:
        raise CacheFileError(
            source, f"unknown format version {version} (this rules_autotune "
            f"reads version {FORMAT_VERSION})")


# --------------------------------------------------------------------------
# Text: canonical writer, fast reader with text_format as the fallback.

def _quote(text):
    if text.isascii() and text.isprintable() and '"' not in text \
            and "\\" not in text:
        return '"' + text + '"'
    return '"' + text_encoding.CEscape(text, as_utf8=True) + '"'


def _unquote(token):
    if len(token) < 2 or token[0] != '"' or token[-1] != '"':
        raise _NotCanonical()
    body = token[1:-1]
    if "\\" in body or '"' in body:
        raise _NotCanonical()
    return body


def _format_config(config):
    text = f"params: {_quote(config.params_text)} num_warps: " \
        f"{config.num_warps} num_stages: {config.num_stages}"
    if config.num_ctas != 1:
        text += f" num_ctas: {config.num_ctas}"
    return text


_KEY_OF = operator.attrgetter("key")
_BEST_OF = operator.attrgetter("best")
_RUN_TIME_OF = operator.attrgetter("run_time_us")
_CANDIDATES_OF = operator.attrgetter("candidates")
_PROVENANCE_OF = operator.attrgetter("provenance")
_RAW_OF = operator.attrgetter("raw")
_HEAD_FIELDS = operator.itemgetter(0, 1, 2)  # device, kernel, fingerprint
_SIGNATURE_OF = operator.itemgetter(3)
_KEY_VERSION_OF = operator.itemgetter(4)
_CONFIG_OF = operator.itemgetter(0)
_TIME_OF = operator.itemgetter(1)
_FAILURE_OF = operator.itemgetter(2)
_DETAIL_OF = operator.itemgetter(3)
_PROVENANCE_STRINGS_OF = operator.itemgetter(0, 1, 2, 3, 5)
_SPREAD_OF = operator.itemgetter(4)
_SECONDS_OF = operator.itemgetter(6)
_BARE_PROVENANCE = "  provenance {"


def _present(number):
    """Whether proto3 writes a double: any value but +0.0 (-0.0 differs
    on the wire)."""
    return number != 0.0 or math.copysign(1.0, number) < 0


def _is_plain(text):
    return (text.isascii() and text.isprintable() and '"' not in text
            and "\\" not in text)


def _column(memo, keys, make, objects=None):
    """memo[key] for each key; make(key, object) formats the ones not seen
    yet, once per distinct key (objects: what each key stands for, when the
    key is only an id)."""
    try:
        return list(map(memo.__getitem__, keys))  # all seen before
    except KeyError:
        pass
    missing = set(keys).difference(memo)
    if missing:
        if objects is None:
            by_key = dict.fromkeys(missing)
        elif len(missing) < 256:
            # Few distinct values (configs): find each one's first use.
            by_key = {key: objects[keys.index(key)] for key in missing}
        else:
            by_key = dict(zip(keys, objects))
        for key in missing:
            memo[key] = make(key, by_key[key])
    return list(map(memo.__getitem__, keys))


class _TextWriter:
    """Canonical text, built column by column.

    A 100,000-entry dump has 700,000 candidate lines; formatting them one
    Python statement at a time costs seconds. Instead every column (config
    heads, run times, ...) is produced by map() over C-level getters, the
    pieces that repeat across entries (devices, configs, provenance strings,
    rounded numbers) are formatted once and shared, and the output is one
    join over a flat list of pieces.
    """

    def __init__(self):
        self.heads = {}
        self.bests = {}
        self.cand_heads = {}     # id(config) -> text before its run time
        self.configs = {}        # id(config) -> candidate line without time
        self.ends = {}           # (failure, detail) -> end of a line
        self.prov_prefixes = {}
        self.spreads = {}
        self.seconds = {}

    @staticmethod
    def _head(fields, _):
        device, kernel, fingerprint = fields
        return (f"entries {{\n  device: {_quote(device)}\n"
                f"  kernel: {_quote(kernel)}\n"
                f"  fingerprint: {_quote(fingerprint)}\n  signature: \"")

    @staticmethod
    def _best(key, config):
        key_version = key[0]
        text = '"'
        if key_version:
            text += f"\n  key_version: {key_version}"
        return text + f"\n  best {{ {_format_config(config)} }}"

    @staticmethod
    def _cand_head(_, config):
        return (f"  candidates {{ config {{ {_format_config(config)} }} "
                "run_time_us: ")

    @staticmethod
    def _prov_prefix(strings, _):
        prefix = _BARE_PROVENANCE
        for name, value in zip(_PROVENANCE_STRING_ORDER, strings):
            if value:
                prefix += f" {name}: {_quote(value)}"
        return prefix

    def pieces(self, entries):
        """The text of `entries` (sorted) as a list of strings to join."""
        keys = list(map(_KEY_OF, entries))
        heads = _column(self.heads, list(map(_HEAD_FIELDS, keys)),
                        self._head)
        sigs = list(map(_SIGNATURE_OF, keys))
        if not _is_plain("".join(sigs)):
            sigs = [s if _is_plain(s) else _quote(s)[1:-1] for s in sigs]
        best_configs = list(map(_BEST_OF, entries))
        bests = _column(self.bests, list(zip(map(_KEY_VERSION_OF, keys),
                                             map(id, best_configs))),
                        self._best, best_configs)
        run_times = list(map(_RUN_TIME_OF, entries))
        run_time_lines = list(map(operator.add,
                                  itertools.repeat("\n  run_time_us: "),
                                  map(repr, run_times)))
        if 0.0 in run_times:
            # proto3 leaves a zero out.
            for i in itertools.compress(itertools.count(),
                                        map(operator.not_, run_times)):
                if not _present(run_times[i]):
                    run_time_lines[i] = ""

        copies = list(map(_RAW_OF, entries))
        if copies.count(None) != len(copies):
            copies = list(map(_copyable_rest, entries))
        if copies.count(None) == len(copies):
            fresh = entries
        else:
            fresh = [e for e, c in zip(entries, copies) if c is None]
        cand_lists = list(map(_CANDIDATES_OF, fresh))
        counts = list(map(len, cand_lists))
        cand_pieces = self._candidate_pieces(
            list(itertools.chain.from_iterable(cand_lists)))
        prov_pieces = self._provenance_pieces(
            list(map(_PROVENANCE_OF, fresh)))

        if fresh is entries and counts \
                and counts.count(counts[0]) == len(counts):
            # As many candidates in every entry (one config list): the
            # pieces interleave with a fixed stride, by slice assignment.
            width = 3 * counts[0]
            stride = 5 + width + 4
            out = ["\n"] * (stride * len(entries))
            for offset, column in enumerate((heads, sigs, bests,
                                             run_time_lines)):
                out[offset::stride] = column
            for j in range(width):
                out[5 + j::stride] = cand_pieces[j::width]
            for j in range(4):
                out[5 + width + j::stride] = prov_pieces[j::4]
            return out
        out = []
        extend = out.extend
        at = 0
        fresh_index = 0
        for head, sig, best, run_time, copy in zip(
                heads, sigs, bests, run_time_lines, copies):
            extend((head, sig, best, run_time, "\n"))
            if copy is not None:
                extend((copy, "\n"))
                continue
            end = at + 3 * counts[fresh_index]
            extend(cand_pieces[at:end])
            at = end
            extend(prov_pieces[4 * fresh_index:4 * fresh_index + 4])
            fresh_index += 1
        return out

    def _candidate_pieces(self, flat):
        """Three pieces per candidate: text up to the run time, the run
        time, the line's end."""
        n = len(flat)
        configs = list(map(_CONFIG_OF, flat))
        ids = list(map(id, configs))
        times = list(map(_TIME_OF, flat))
        pieces = [" }\n"] * (3 * n)
        pieces[0::3] = _column(self.cand_heads, ids, self._cand_head, configs)
        pieces[1::3] = list(map(repr, times))
        # Failed candidates, details and missing times: patched one by one.
        failures = list(map(_FAILURE_OF, flat))
        details = list(map(_DETAIL_OF, flat))
        odd = set()
        if 0.0 in times:
            odd.update(itertools.compress(range(n), map(operator.not_, times)))
        if failures.count("NONE") != n or details.count("") != n:
            odd.update(itertools.compress(range(n), map(
                operator.or_, map(operator.ne, failures,
                                  itertools.repeat("NONE")),
                map(bool, details))))
        ends = self.ends
        for i in odd:
            if not _present(times[i]):
                # No run time: the line stops after the config.
                text = self.configs.get(ids[i])
                if text is None:
                    text = self.configs[ids[i]] = (
                        f"  candidates {{ config {{ "
                        f"{_format_config(configs[i])} }}")
                pieces[3 * i] = text
                pieces[3 * i + 1] = ""
            tail = failures[i], details[i]
            end = ends.get(tail)
            if end is None:
                end = ends[tail] = self._line_end(*tail)
            pieces[3 * i + 2] = end
        return pieces

    @staticmethod
    def _line_end(failure, detail):
        text = ""
        if failure != "NONE":
            text += f" failure: {failure}"
        if detail:
            text += f" failure_detail: {_quote(detail)}"
        return text + " }\n"

    def _provenance_pieces(self, provs):
        """Four pieces per entry: the string fields, the two numbers (both
        rounded when measured, so few distinct values), the end."""
        prefixes = _column(self.prov_prefixes,
                           list(map(_PROVENANCE_STRINGS_OF, provs)),
                           self._prov_prefix)
        columns = []
        for name, getter, memo in (("timing_spread", _SPREAD_OF, self.spreads),
                                   ("tuning_seconds", _SECONDS_OF,
                                    self.seconds)):
            numbers = list(map(getter, provs))
            texts = _column(memo, numbers, lambda v, _, name=name: (
                f" {name}: {float(v)!r}" if _present(v) else ""))
            if 0.0 in numbers:
                # -0.0 == 0.0 as a dict key, but not on the wire.
                for i, v in enumerate(numbers):
                    if v == 0.0:
                        texts[i] = f" {name}: -0.0" if _present(v) else ""
            columns.append(texts)
        spread_texts, seconds_texts = columns
        pieces = [" }\n}\n"] * (4 * len(provs))
        pieces[0::4] = prefixes
        pieces[1::4] = spread_texts
        pieces[2::4] = seconds_texts
        if _BARE_PROVENANCE in prefixes:
            # An empty provenance message is left out.
            for i, (p, a, b) in enumerate(zip(prefixes, spread_texts,
                                              seconds_texts)):
                if p == _BARE_PROVENANCE and not a and not b:
                    pieces[4 * i:4 * i + 4] = ("", "", "", "}\n")
        return pieces


_PROVENANCE_STRING_ORDER = ("triton_version", "torch_version",
                            "cuda_version", "timestamp", "tuner")


def _copyable_rest(entry):
    """The candidate and provenance lines of an entry read from canonical
    text, to be copied as they are; None when they must be re-encoded."""
    return entry.raw[1] if check_text_rest(entry) else None


# Entries per chunk of a streamed text file: a few MB, small enough to stay
# in the CPU caches while it is joined, encoded, checksummed and written.
_TEXT_CHUNK = 512


def encode_text_chunks(entries):
    """Canonical text of sorted `entries`, as UTF-8 chunks."""
    writer = _TextWriter()
    yield (TEXT_HEADER + f"version: {FORMAT_VERSION}\n").encode("utf-8")
    for start in range(0, len(entries), _TEXT_CHUNK):
        yield "".join(writer.pieces(
            entries[start:start + _TEXT_CHUNK])).encode("utf-8")
    yield f"entry_count: {len(entries)}\n".encode("utf-8")



class _NotCanonical(Exception):
    pass


def _parse_config_fast(text):
    """Parses `params: "..." num_warps: 4 num_stages: 2 [num_ctas: 2]`."""
    if not text.startswith('params: "'):
        raise _NotCanonical()
    end = text.index('" num_warps: ')
    params = text[9:end]
    if "\\" in params or '"' in params:
        raise _NotCanonical()
    launch = {"num_warps": 0, "num_stages": 0, "num_ctas": 0}
    tokens = text[end + 2:].split(" ")
    if len(tokens) % 2:
        raise _NotCanonical()
    for i in range(0, len(tokens), 2):
        field = tokens[i][:-1]
        if tokens[i][-1:] != ":" or field not in launch:
            raise _NotCanonical()
        launch[field] = int(tokens[i + 1])
    return Config.from_params_text(params, launch["num_warps"],
                                   launch["num_stages"],
                                   launch["num_ctas"] or 1)


def _memo_config_text(text, memo):
    config = memo.get(text)
    if config is None:
        config = memo[text] = _parse_config_fast(text)
    return config


_CAND_PREFIX = "  candidates { config { "


def _parse_candidate_fast(line, memo):
    # `  candidates { config { <cfg> } [run_time_us: T] [failure: K]
    #   [failure_detail: "..."] }`
    if not line.startswith(_CAND_PREFIX) or not line.endswith(" }"):
        raise _NotCanonical()
    body = line[len(_CAND_PREFIX):-2]
    cut = body.find('" num_warps: ')
    end = body.find(" }", cut)
    if cut < 0 or end < 0:
        raise _NotCanonical()
    config = _memo_config_text(body[:end], memo)
    rest = body[end + 2:].strip()
    run_time, failure, detail = 0.0, "NONE", ""
    if rest.startswith("run_time_us: "):
        value, _, rest = rest[len("run_time_us: "):].partition(" ")
        run_time = float(value)
    if rest.startswith("failure: "):
        value, _, rest = rest[len("failure: "):].partition(" ")
        if value not in FAILURE_KINDS:
            raise _NotCanonical()
        failure = value
    if rest.startswith("failure_detail: "):
        detail = _unquote(rest[len("failure_detail: "):])
        rest = ""
    if rest:
        raise _NotCanonical()
    return Candidate(config, run_time, failure, detail)


_PROVENANCE_STRINGS = ("triton_version", "torch_version", "cuda_version",
                       "timestamp", "tuner")
_PROVENANCE_FLOATS = ("timing_spread", "tuning_seconds")
_FIELD_RE = re.compile(r'(\w+): ("[^"\\]*"|[^ "]+)')


def _parse_provenance_fast(line):
    if not line.startswith("  provenance { ") or not line.endswith(" }"):
        raise _NotCanonical()
    body = line[len("  provenance { "):-2]
    pairs = _FIELD_RE.findall(body)
    if " ".join(f"{n}: {v}" for n, v in pairs) != body:
        raise _NotCanonical()
    fields = {}
    for name, value in pairs:
        if name in fields:
            raise _NotCanonical()
        if name in _PROVENANCE_STRINGS:
            fields[name] = _unquote(value)
        elif name in _PROVENANCE_FLOATS:
            fields[name] = float(value)
        else:
            raise _NotCanonical()
    return Provenance(**fields)


# Possessive quantifiers (Python 3.11+): the pattern never backtracks.
_FLOAT = r"-?\d++(?:\.\d*+)?+(?:[eE][-+]?\d++)?+"
_QUOTED = r'"[^"\\\n]*+"'
_PARAM_VALUE = (r"(?:-?\d++(?:\.\d*+)?+(?:[eE][-+]?\d++)?+|true|false|inf"
                r"|-inf|nan)")
_PARAMS = r"(?:\w++=" + _PARAM_VALUE + r"(?: \w++=" + _PARAM_VALUE + r")*+)?+"
_CAND_LINE = (r'  candidates \{ config \{ params: "' + _PARAMS + r'" num_warps: '
              r"\d++ num_stages: \d++(?: num_ctas: \d++)?+ \}"
              r"(?: run_time_us: " + _FLOAT + r")?+"
              r"(?: failure: (?:" + "|".join(FAILURE_KINDS[1:]) + r"))?+"
              r"(?: failure_detail: " + _QUOTED + r")?+ \}\n")
_PROV_LINE = (r"  provenance \{(?: (?:triton_version|torch_version|"
              r"cuda_version|timestamp|tuner): " + _QUOTED +
              r"| (?:timing_spread|tuning_seconds): " + _FLOAT + r")++ \}\n")
# The candidate and provenance lines of one canonical text entry, checked
# in one C-speed match (what the writer produces; anything else is decoded
# line by line; so do configs with string-valued parameters).
_REST_RE = re.compile(r"(?:" + _CAND_LINE + r")*+(?:" + _PROV_LINE + r")?+\}")


def check_text_rest(entry):
    """True when `entry` was read from canonical text whose candidate and
    provenance lines are well formed, so that writing it as text may copy
    them; records the check on the entry."""
    raw = entry.raw
    if raw is None or type(raw[0]) is not _TextRestDecoder:
        return False
    if len(raw) == 3 or raw[0].trusted:
        return True
    if _REST_RE.fullmatch(raw[1]) is None:
        return False
    entry.raw = (raw[0], raw[1], True)
    return True


class _TextRestDecoder:
    """Decodes the candidate and provenance lines of a text entry on demand;
    lines outside the canonical layout go through text_format."""

    def __init__(self, config_memo, source, trusted=False):
        self.memo = config_memo
        self.source = source
        # The file's crc32 line matched: every line is as the writer
        # produced it, so copies need no line-by-line check.
        self.trusted = trusted

    def __call__(self, rest):
        lines = rest.split("\n")[:-1]
        prov_line = None
        if lines and lines[-1].startswith("  provenance { "):
            prov_line = lines.pop()
        try:
            cands = tuple(_parse_candidate_fast(l, self.memo) for l in lines)
            prov = (_parse_provenance_fast(prov_line) if prov_line
                    else EMPTY_PROVENANCE)
            return cands, prov
        except (_NotCanonical, ValueError, IndexError, TypeError):
            pass
        msg = pb.Entry()
        try:
            text_format.Parse("\n".join(lines + [prov_line or ""]), msg)
        except text_format.ParseError as e:
            raise CacheFileError(self.source,
                                 f"bad candidate or provenance: {e}")
        return _PbRestDecoder(self.memo, self.source)(msg)

    def provenance(self, rest):
        """The provenance alone: the canonical layout puts it on the last
        line before the closing brace."""
        body = rest[:-2] if rest.endswith("\n}") else ""
        last = body.rpartition("\n")[2]
        if last.startswith("  provenance { "):
            try:
                return _parse_provenance_fast(last)
            except (_NotCanonical, ValueError, IndexError, TypeError):
                pass
        elif "provenance" not in body and rest.endswith("}"):
            return EMPTY_PROVENANCE
        return self(rest)[1]


def _parse_preamble(lines, state):
    for line in lines:
        if not line or line[0] == "#":
            continue
        field, sep, value = line.partition(": ")
        if not sep or field not in ("version", "entry_count") \
                or state.get(field) is not None:
            raise _NotCanonical()
        state[field] = int(value)


def _parse_text_fast(text, source, trusted=False):
    """The canonical layout only; raises _NotCanonical on anything else.

    Splits the file into entry blocks and each block into its lines (C
    speed), then decodes the key fields column by column; lines that repeat
    across entries (device, kernel, fingerprint, configs) are decoded once.
    Candidate and provenance lines are only counted here, and decoded when
    first used.
    """
    blocks = text.split("\nentries {\n")
    state = {"version": None, "entry_count": None}
    if blocks[0].startswith("entries {\n"):
        blocks[0] = "\n" + blocks[0][len("entries {\n"):]
        blocks.insert(0, "")
    _parse_preamble(blocks[0].split("\n"), state)
    if len(blocks) == 1:
        return state["version"] or 0, state["entry_count"], []
    last = blocks[-1]
    end = last.find("\n}\n")
    if end < 0:
        raise _NotCanonical()
    _parse_preamble(last[end + 3:].split("\n"), state)
    blocks[-1] = last[:end + 2]
    del blocks[0]
    # Every block must end its entry, and every line of the entries must be
    # a key line (checked below, by position), a candidate, a provenance or
    # a closing brace: counted over all blocks at once, unless trusted.
    if sum(map(str.endswith, blocks, itertools.repeat("\n}"))) != len(blocks):
        raise _NotCanonical()
    if trusted:
        rest_lines = n_lines = None
    else:
        rest_lines = (_count(blocks, "\n" + _CAND_PREFIX)
                      + _count(blocks, "\n  provenance { ") + len(blocks))
        n_lines = _count(blocks, "\n") + len(blocks)

    lines = list(map(str.split, blocks, itertools.repeat("\n"),
                     itertools.repeat(7)))
    standard = sum(map(len, lines)) == 8 * len(lines)
    if standard:
        kv_lines = list(map(_COLUMN[4], lines))
        run_lines = list(map(_COLUMN[6], lines))
        standard = (all(map(str.startswith, kv_lines,
                            itertools.repeat("  key_version: ")))
                    and all(map(str.startswith, run_lines,
                                itertools.repeat("  run_time_us: "))))
    if not standard:
        # Entries without a key version or a run time: block by block.
        return _parse_blocks(blocks, state, source, rest_lines, n_lines,
                             trusted)
    if not trusted and n_lines != 7 * len(blocks) + rest_lines:
        raise _NotCanonical()
    signatures = list(map(_COLUMN[3], lines))
    if not all(map(str.startswith, signatures,
                   itertools.repeat('  signature: "'))):
        raise _NotCanonical()
    signatures = list(map(operator.getitem, signatures,
                          itertools.repeat(slice(14, -1))))
    quoted = "".join(map(_COLUMN[3], lines))
    if quoted.count('"') != 2 * len(lines) or "\\" in quoted \
            or not all(map(str.endswith, map(_COLUMN[3], lines),
                           itertools.repeat('"'))):
        raise _NotCanonical()
    devices = _column({}, list(map(_COLUMN[0], lines)),
                      lambda line, _: _header_value(line, "device"))
    kernels = _column({}, list(map(_COLUMN[1], lines)),
                      lambda line, _: _header_value(line, "kernel"))
    fingerprints = _column({}, list(map(_COLUMN[2], lines)),
                           lambda line, _: _header_value(line, "fingerprint"))
    key_versions = _column({}, kv_lines, lambda line, _: int(line[15:]))
    bests = _column({}, list(map(_COLUMN[5], lines)),
                    lambda line, _: _parse_best_line(line))
    run_times = list(map(float, map(operator.getitem, run_lines,
                                    itertools.repeat(slice(15, None)))))
    keys = map(tuple.__new__, itertools.repeat(CacheKey),
               zip(devices, kernels, fingerprints, signatures, key_versions))
    rest_decoder = _TextRestDecoder({}, source, trusted)
    entries = [Entry(key, best, run_time, decode=(rest_decoder, rest))
               for key, best, run_time, rest in zip(
                   keys, bests, run_times, map(_COLUMN[7], lines))]
    return state["version"] or 0, state["entry_count"], entries


_COLUMN = [operator.itemgetter(i) for i in range(8)]


def _count(blocks, text):
    return sum(map(str.count, blocks, itertools.repeat(text)))


def _parse_best_line(line):
    if not line.startswith("  best { ") or not line.endswith(" }"):
        raise _NotCanonical()
    return _parse_config_fast(line[9:-2])


def _parse_blocks(blocks, state, source, rest_lines, n_lines, trusted):
    """_parse_text_fast for files where some entries leave out their key
    version or run time (zero): one block at a time."""
    memo = {}
    # One memo per field: a line is only ever read as the field it names.
    fields = {"device": {}, "kernel": {}, "fingerprint": {}}
    rest_decoder = _TextRestDecoder({}, source, trusted)
    entries = []
    head_lines = 0
    for block in blocks:
        lines = block.split("\n", 7)
        values = []
        for line, (field, seen) in zip(lines, fields.items()):
            value = seen.get(line)
            if value is None:
                value = seen[line] = _header_value(line, field)
            values.append(value)
        head, kernel, fingerprint = values
        signature = _header_value(lines[3], "signature")
        i = 4
        key_version = 0
        if lines[i].startswith("  key_version: "):
            key_version = int(lines[i][15:])
            i += 1
        best = memo.get(lines[i])
        if best is None:
            best = memo[lines[i]] = _parse_best_line(lines[i])
        i += 1
        run_time = 0.0
        if lines[i].startswith("  run_time_us: "):
            run_time = float(lines[i][15:])
            i += 1
        head_lines += i
        rest = "\n".join(lines[i:])
        key = CacheKey(head, kernel, fingerprint, signature, key_version)
        entries.append(Entry(key, best, run_time, decode=(rest_decoder, rest)))
    if not trusted and n_lines != head_lines + rest_lines:
        raise _NotCanonical()
    return state["version"] or 0, state["entry_count"], entries


def _header_value(line, field):
    prefix = "  " + field + ": "
    if not line.startswith(prefix):
        raise _NotCanonical()
    return _unquote(line[len(prefix):])


def decode_text(text, source, trusted=False):
    """trusted: the file is known to be as the writer produced it (its crc32
    line matches), so its layout needs no line count."""
    try:
        version, count, entries = _parse_text_fast(text, source, trusted)
    except (_NotCanonical, ValueError, IndexError, TypeError):
        return decode_text_slow(text, source)
    _check_header(version, source)
    _check_count(count, len(entries), source, text)
    return entries


def decode_text_slow(text, source):
    results = pb.AutotuneResults()
    try:
        text_format.Parse(text, results)
    except text_format.ParseError as e:
        raise CacheFileError(source, f"not a valid text autotune results "
                             f"file: {e}") from None
    _check_header(results.version, source)
    # proto3: an entry_count of 0 cannot be told from an absent one.
    _check_count(results.entry_count or None, len(results.entries), source,
                 text)
    return entries_from_pb(results, source)


def _check_count(count, n, source, text):
    if text.startswith(TEXT_HEADER) and not text.endswith("\n"):
        raise CacheFileError(
            source, "truncated: the last line is incomplete (rules_autotune "
            "ends every file with a newline; after editing by hand, add it "
            "back)")
    if count is None and text.startswith(TEXT_HEADER):
        raise CacheFileError(
            source, "truncated: no entry_count line at the end (rules_autotune "
            "writes it last); if you edited the file by hand, restore that "
            "line or delete the two header comment lines")
    if count is not None and count != n:
        raise CacheFileError(
            source, f"entry_count is {count} but the file holds {n} entries "
            "(truncated? after editing by hand, fix or delete the entry_count "
            "line)")


# --------------------------------------------------------------------------
# Files.

@contextlib.contextmanager
def no_gc():
    """Bulk decoding creates millions of small acyclic objects; the cyclic
    collector would rescan the growing heap again and again (measured: half
    of the load time of a 100,000-entry file)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def sort_entries(entries):
    return sorted(entries, key=_KEY_OF)


CRC_PREFIX = b"# crc32: "


def encode_chunks(entries, path):
    """The bytes of a results file for `entries`, in chunks: text or
    binary by the extension of `path`. Runs with the cyclic collector
    paused (see no_gc)."""
    with no_gc():
        entries = sort_entries(entries)
        if not is_text_path(path):
            yield from encode_binary_chunks(entries)
            return
        crc = 0
        for chunk in encode_text_chunks(entries):
            crc = zlib.crc32(chunk, crc)
            yield chunk
        # A comment to parsers; to our tools, proof that no line was
        # edited since the writer produced it (see check_text_rest).
        yield CRC_PREFIX + b"%08x\n" % crc


def encode(entries, path):
    return b"".join(encode_chunks(entries, path))


def _crc_matches(data):
    end = data.rfind(b"\n", 0, len(data) - 1) + 1
    line = data[end:]
    if not line.startswith(CRC_PREFIX) or len(line) != len(CRC_PREFIX) + 9:
        return False
    try:
        return int(line[len(CRC_PREFIX):-1], 16) == zlib.crc32(
            memoryview(data)[:end])
    except ValueError:
        return False


def decode(data, path, parse_all=False):
    """Entries of a results file's bytes. parse_all: parse all of a binary
    file now instead of leaving candidates and provenance for their first
    use."""
    with no_gc():
        return _decode(data, path, parse_all)


def _decode(data, path, parse_all):
    if is_text_path(path):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CacheFileError(path, f"not UTF-8 text ({e}); binary files "
                                 "must not use a text extension "
                                 f"({', '.join(TEXT_EXTENSIONS)})")
        # A matching crc32 line (a few ms to check) shows that no line was
        # edited since the writer produced the file.
        entries = decode_text(text, path, trusted=_crc_matches(data))
    else:
        entries = decode_binary(data, path, parse_all)
    _check_duplicates(entries, path)
    return entries


def _check_duplicates(entries, path):
    keys = list(map(_KEY_OF, entries))
    if len(set(keys)) == len(keys):
        return
    seen = {}
    for entry in entries:
        other = seen.get(entry.key)
        if other is not None:
            verdict = ("different configs" if not other.same_result(entry)
                       else "the same config")
            raise CacheFileError(
                path, f"duplicate key with {verdict}: {entry.key.describe()}")
        seen[entry.key] = entry


def load_results(path, parse_all=False):
    """Reads a results file; raises CacheFileError naming it on any problem.
    parse_all: see decode()."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CacheFileError(path, "no such file")
    except IsADirectoryError:
        raise CacheFileError(path, "is a directory, not a results file")
    except OSError as e:
        raise CacheFileError(path, f"cannot read: {e.strerror}")
    return decode(data, path, parse_all)


def atomic_write(path, data):
    """Writes via a temporary file in the same directory and a rename: a
    reader, or a crash, sees the old file or the new one, never a mix.
    data: bytes, or an iterable of bytes chunks (written as they come)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CacheFileError(path, f"directory {directory} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".",
                                   suffix=".tmp", dir=directory)
    except OSError as e:
        raise CacheFileError(path, f"cannot write in {directory}: "
                             f"{e.strerror}")
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                with contextlib.closing(iter(data)) as chunks:
                    for chunk in chunks:
                        f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def dump_results(entries, path):
    atomic_write(path, encode_chunks(list(entries), path))
