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

Binary files are parsed by the protobuf runtime (C) and encoded by a small
wire encoder here whose output is byte-identical to protobuf's deterministic
serialization. Candidates and provenance are decoded lazily in both formats:
lookups need only keys and best configs.
"""
import contextlib
import gc
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

def config_to_pb(config, msg):
    msg.params = config.params_text
    msg.num_warps = config.num_warps
    msg.num_stages = config.num_stages
    if config.num_ctas != 1:
        msg.num_ctas = config.num_ctas


def config_from_pb(msg):
    return Config.from_params_text(msg.params, msg.num_warps, msg.num_stages,
                                   msg.num_ctas or 1)


def entry_to_pb(entry, msg=None):
    msg = msg if msg is not None else pb.Entry()
    key = entry.key
    msg.device, msg.kernel, msg.fingerprint, msg.signature = key[:4]
    msg.key_version = key.key_version
    config_to_pb(entry.best, msg.best)
    msg.run_time_us = entry.run_time_us
    for cand in entry.candidates:
        c = msg.candidates.add()
        config_to_pb(cand.config, c.config)
        c.run_time_us = cand.run_time_us
        c.failure = FAILURE_KINDS.index(cand.failure)
        c.failure_detail = cand.failure_detail
    msg.provenance.CopyFrom(pb.Provenance(**entry.provenance._asdict()))
    return msg


class _PbRestDecoder:
    """Decodes the candidates and provenance of a binary entry on demand."""

    def __init__(self, config_memo, source="<memory>"):
        self.memo = config_memo
        self.source = source

    def head(self, msg):
        b = msg.best
        raw = (b.params, b.num_warps, b.num_stages, b.num_ctas)
        best = self.memo.get(raw)
        if best is None:
            try:
                best = self.memo[raw] = config_from_pb(b)
            except ValueError as e:
                raise CacheFileError(self.source, f"entry for kernel "
                                     f"{msg.kernel} [{msg.signature}]: {e}")
        return best, msg.run_time_us

    def __call__(self, msg):
        memo = self.memo
        cands = tuple(
            Candidate(_memo_config_pb(c.config, memo), c.run_time_us,
                      FAILURE_KINDS[c.failure] if c.failure < len(FAILURE_KINDS)
                      else "RUNTIME_ERROR", c.failure_detail)
            for c in msg.candidates)
        p = msg.provenance
        prov = Provenance(p.triton_version, p.torch_version, p.cuda_version,
                          p.timestamp, p.timing_spread, p.tuner,
                          p.tuning_seconds)
        return cands, prov


def _memo_config_pb(msg, memo):
    raw = (msg.params, msg.num_warps, msg.num_stages, msg.num_ctas)
    config = memo.get(raw)
    if config is None:
        config = memo[raw] = config_from_pb(msg)
    return config


def entries_from_pb(results, source, config_memo=None):
    memo = {} if config_memo is None else config_memo
    rest = _PbRestDecoder(memo, source)
    out = []
    append = out.append
    for msg in results.entries:
        append(Entry(CacheKey(msg.device, msg.kernel, msg.fingerprint,
                              msg.signature, msg.key_version),
                     None, 0.0, decode=(rest, msg)))
    return out


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


def encode_binary(entries):
    enc = _Encoder()
    parts = [_int_field(b"\x08", FORMAT_VERSION)]
    for entry in entries:
        parts.append(_len_field(b"\x12", enc.entry(entry)))
    parts.append(_int_field(b"\x18", len(entries)))
    return b"".join(parts)


def decode_binary(data, source):
    results = pb.AutotuneResults()
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


class _TextWriter:
    """Canonical text; what repeats across entries (devices, kernels,
    configs, provenance) is formatted once. Written for speed: a 100,000
    entry dump is one call of entry() each."""

    def __init__(self):
        self.heads = {}
        self.configs = {}
        self.candidates = {}
        self.provenances = {}
        self.quoted = {}
        self.ok_heads = {}
        self.prov_floats = {}

    def _config_head(self, config):
        head = self.candidates.get(id(config))
        if head is None:
            head = self.candidates[id(config)] = (
                f"  candidates {{ config {{ {_format_config(config)} }}")
            self.ok_heads[id(config)] = head + " run_time_us: "
        return head

    def _candidate_line(self, candidate):
        config, run_time, failure, detail = candidate
        text = self._config_head(config)
        if run_time:
            text += f" run_time_us: {run_time!r}"
        if failure != "NONE":
            text += f" failure: {failure}"
        if detail:
            text += f" failure_detail: {self.quote(detail)}"
        return text + " }"

    def quote(self, text):
        quoted = self.quoted.get(text)
        if quoted is None:
            quoted = self.quoted[text] = _quote(text)
        return quoted

    def entry(self, entry, lines):
        """Appends the lines of one entry to `lines`."""
        key = entry.key
        head_key = (key.device, key.kernel, key.fingerprint)
        head = self.heads.get(head_key)
        if head is None:
            head = self.heads[head_key] = (
                f"entries {{\n  device: {_quote(key.device)}\n"
                f"  kernel: {_quote(key.kernel)}\n"
                f"  fingerprint: {_quote(key.fingerprint)}")
        sig = key.signature
        if not (sig.isascii() and sig.isprintable() and '"' not in sig
                and "\\" not in sig):
            sig = _quote(sig)[1:-1]
        best = self.configs.get(id(entry.best))
        if best is None:
            best = self.configs[id(entry.best)] = (
                f"  best {{ {_format_config(entry.best)} }}")
        run_time = entry.run_time_us
        if key.key_version and run_time:
            # The common case in one string.
            lines.append(f'{head}\n  signature: "{sig}"\n  key_version: '
                         f'{key.key_version}\n{best}\n  run_time_us: '
                         f'{run_time!r}')
        else:
            lines.append(f'{head}\n  signature: "{sig}"')
            if key.key_version:
                lines.append(f"  key_version: {key.key_version}")
            lines.append(best)
            if run_time:
                lines.append(f"  run_time_us: {run_time!r}")
        append = lines.append
        raw = entry.raw
        if raw is not None and type(raw[0]) is _TextRestDecoder \
                and (entry._decode is None or len(raw) == 3
                     or raw[0].trusted):
            # Read from canonical text and checked line by line when it was
            # decoded: its candidate and provenance lines are copied.
            append(raw[1])
            return
        cands = entry.candidates
        ok_heads = self.ok_heads
        other = self._candidate_line
        try:
            # One pass; measured candidates (the bulk) inline, others (failed,
            # or with a detail) through _candidate_line.
            lines.extend([f"{ok_heads[id(c[0])]}{c[1]!r} }}"
                          if c[2] == "NONE" and c[1] and not c[3]
                          else other(c) for c in cands])
        except KeyError:
            # A config seen for the first time: format it, then retry.
            for c in cands:
                self._config_head(c[0])
            lines.extend([f"{ok_heads[id(c[0])]}{c[1]!r} }}"
                          if c[2] == "NONE" and c[1] and not c[3]
                          else other(c) for c in cands])
        p = entry.provenance
        prefix = self.provenances.get(p[:4] + p[5:6])
        if prefix is None:
            prefix = self.provenances[p[:4] + p[5:6]] = _provenance_prefix(p)
        spread, seconds = p.timing_spread, p.tuning_seconds
        if spread or seconds:
            # Both are rounded when measured: few distinct values, each
            # formatted once (keyed by the float: no tuples for the
            # garbage collector to track).
            floats = self.prov_floats
            a = floats.get(spread)
            if a is None:
                a = floats[spread] = (f" timing_spread: {float(spread)!r}"
                                      if spread else "")
            b = floats.get(-seconds - 1.0)  # its own key range
            if b is None:
                b = floats[-seconds - 1.0] = (
                    f" tuning_seconds: {float(seconds)!r}" if seconds else "")
            append(f"{prefix}{a}{b} }}\n}}")
        elif prefix:
            append(prefix + " }\n}")
        else:
            append("}")


def _provenance_prefix(p):
    """The provenance line up to its numeric fields: the string fields
    (versions, timestamp, tuner) repeat across entries of one run; the
    numbers are written per entry, in field order after this prefix.
    Field order in text format does not matter to parsers; the writer keeps
    strings first so the prefix can be shared."""
    fields = []
    for name in ("triton_version", "torch_version", "cuda_version",
                 "timestamp", "tuner"):
        value = getattr(p, name)
        if value:
            fields.append(f"{name}: {_quote(value)}")
    if not fields and not p.timing_spread and not p.tuning_seconds:
        return ""
    return "  provenance {" + "".join(" " + f for f in fields)


def encode_text(entries):
    writer = _TextWriter()
    lines = []
    for e in entries:
        writer.entry(e, lines)
    body = "\n".join(lines)
    out = TEXT_HEADER + f"version: {FORMAT_VERSION}\n"
    if body:
        out += body + "\n"
    return out + f"entry_count: {len(entries)}\n"


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

    def __init__(self, config_memo, source):
        self.memo = config_memo
        self.source = source
        # Set when the file's crc32 line matched: every line is as the
        # writer produced it, so copies need no line-by-line check.
        self.trusted = False

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
        return _PbRestDecoder(self.memo)(msg)


def _parse_preamble(lines, state):
    for line in lines:
        if not line or line[0] == "#":
            continue
        field, sep, value = line.partition(": ")
        if not sep or field not in ("version", "entry_count") \
                or state.get(field) is not None:
            raise _NotCanonical()
        state[field] = int(value)


def _parse_text_fast(text, source):
    """The canonical layout only; raises _NotCanonical on anything else.

    Splits the file into entry blocks (C speed), then reads each block's
    lines by position. Lines that repeat across entries (device, kernel,
    fingerprint, configs) are decoded once.
    """
    memo = {}
    header_memo = {}
    rest_decoder = _TextRestDecoder({}, source)
    blocks = text.split("\nentries {\n")
    state = {"version": None, "entry_count": None}
    if blocks[0].startswith("entries {\n"):
        blocks[0] = "\n" + blocks[0][len("entries {\n"):]
        blocks.insert(0, "")
    _parse_preamble(blocks[0].split("\n"), state)
    entries = []
    last = len(blocks) - 1
    for index in range(1, last + 1):
        block = blocks[index]
        if index == last:
            end = block.find("\n}\n")
            if end < 0:
                raise _NotCanonical()
            _parse_preamble(block[end + 3:].split("\n"), state)
            block = block[:end + 2]
        if not block.endswith("\n}"):
            raise _NotCanonical()
        lines = block.split("\n", 7)
        head = header_memo.get(lines[0])
        if head is None:
            head = header_memo[lines[0]] = _header_value(lines[0], "device")
        kernel = header_memo.get(lines[1])
        if kernel is None:
            kernel = header_memo[lines[1]] = _header_value(lines[1], "kernel")
        fingerprint = header_memo.get(lines[2])
        if fingerprint is None:
            fingerprint = header_memo[lines[2]] = _header_value(
                lines[2], "fingerprint")
        signature = _header_value(lines[3], "signature")
        i = 4
        key_version = 0
        if lines[i].startswith("  key_version: "):
            key_version = int(lines[i][15:])
            i += 1
        line = lines[i]
        if not line.startswith("  best { ") or not line.endswith(" }"):
            raise _NotCanonical()
        best = memo.get(line)
        if best is None:
            best = memo[line] = _parse_config_fast(line[9:-2])
        i += 1
        run_time = 0.0
        if lines[i].startswith("  run_time_us: "):
            run_time = float(lines[i][15:])
            i += 1
        rest = "\n".join(lines[i:])
        # What is left must be candidate lines, at most one provenance line
        # after them, and the closing brace; counted in C, decoded later.
        marked = "\n" + rest
        n_prov = marked.count("\n  provenance { ")
        if (marked.count("\n") != marked.count("\n" + _CAND_PREFIX) + n_prov + 1
                or n_prov > 1 or (n_prov and marked.rfind("\n  provenance { ")
                                  < marked.rfind("\n" + _CAND_PREFIX))):
            raise _NotCanonical()
        key = CacheKey(head, kernel, fingerprint, signature, key_version)
        entries.append(Entry(key, best, run_time, decode=(rest_decoder, rest)))
    return state["version"] or 0, state["entry_count"], entries


def _header_value(line, field):
    prefix = "  " + field + ": "
    if not line.startswith(prefix):
        raise _NotCanonical()
    return _unquote(line[len(prefix):])


def decode_text(text, source):
    try:
        version, count, entries = _parse_text_fast(text, source)
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


_BY_KEY = operator.attrgetter("key")


def sort_entries(entries):
    return sorted(entries, key=_BY_KEY)


CRC_PREFIX = b"# crc32: "


def encode(entries, path):
    with no_gc():
        entries = sort_entries(entries)
        if is_text_path(path):
            data = encode_text(entries).encode("utf-8")
            # A comment to parsers; to our tools, proof that no line was
            # edited since the writer produced it (see check_text_rest).
            return data + CRC_PREFIX + b"%08x\n" % zlib.crc32(data)
        return encode_binary(entries)


def _crc_matches(data):
    end = data.rfind(b"\n", 0, len(data) - 1) + 1
    line = data[end:]
    if not line.startswith(CRC_PREFIX) or len(line) != len(CRC_PREFIX) + 9:
        return False
    try:
        return int(line[len(CRC_PREFIX):-1], 16) == zlib.crc32(data[:end])
    except ValueError:
        return False


def decode(data, path, verify=False):
    """Entries of a results file's bytes. verify: also check a text file's
    crc32 line, so that its lines may be copied unchecked (tools)."""
    with no_gc():
        entries = _decode(data, path)
    if verify and entries and is_text_path(path) and _crc_matches(data):
        decoder = entries[0].raw[0] if entries[0].raw else None
        if type(decoder) is _TextRestDecoder:
            decoder.trusted = True
    return entries


def _decode(data, path):
    if is_text_path(path):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CacheFileError(path, f"not UTF-8 text ({e}); binary files "
                                 "must not use a text extension "
                                 f"({', '.join(TEXT_EXTENSIONS)})")
        entries = decode_text(text, path)
    else:
        entries = decode_binary(data, path)
    _check_duplicates(entries, path)
    return entries


def _check_duplicates(entries, path):
    keys = [e.key for e in entries]
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


def load_results(path, verify=False):
    """Reads a results file; raises CacheFileError naming it on any problem.
    verify: see decode()."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CacheFileError(path, "no such file")
    except IsADirectoryError:
        raise CacheFileError(path, "is a directory, not a results file")
    except OSError as e:
        raise CacheFileError(path, f"cannot read: {e.strerror}")
    return decode(data, path, verify)


def atomic_write(path, data):
    """Writes via a temporary file in the same directory and a rename: a
    reader, or a crash, sees the old file or the new one, never a mix."""
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
            f.write(data)
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
    atomic_write(path, encode(list(entries), path))
