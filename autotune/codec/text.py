"""Text results files: a fast reader of our own, with protobuf's
text_format as its fallback, and what the reader and the writer
(autotune/codec/text_writer.py) share: the extensions, the header, quoting.

The writer prints canonical text format: entries sorted by cache key, one
scalar field per line, each config / candidate / provenance on one line;
text_format parses it to exactly the message the binary writer produces
(tests/test_results_io.py checks this). The reader takes that layout on a
fast path and hands anything else (hand-edited, reordered, comments in odd
places) to text_format, so every valid text file loads. Candidate and
provenance lines are decoded on first use, and copied as they are when an
entry is written back as text.

Measured on bench/bench_runtime.py's entries (20,000; see the closing notes
for the command), against building messages and calling text_format:
- writer: 96 % faster (24x) than text_format.MessageToString.
- reader: 99 % faster (136x) than text_format.Parse plus conversion.
- candidate and provenance lines copied from the file read when an entry
  is written back: 74 % faster than formatting them again.
- a file whose crc32 line matches skips the reader's line count and the
  copies' pattern check: 15 % faster loads, 78 % faster writes back.
Shortcuts measured at less than 30 % were removed: interleaving entries
with equal candidate counts by slice assignment (12 %).
"""
import itertools
import operator
import re

from google.protobuf import text_encoding
from google.protobuf import text_format

from autotune.codec import schema
from autotune.codec.binary import (MessageDecoder, entries_from_messages,
                                   without_entry_name)
from autotune.codec.columns import column
from autotune.errors import CacheFileError
from autotune.proto import autotune_results_pb2 as pb
from autotune.records import (Candidate, CacheKey, Config, EMPTY_PROVENANCE,
                              Entry, FAILURE_KINDS, NO_WORK, Provenance, Work)

TEXT_EXTENSIONS = (".txt", ".textproto", ".pbtxt", ".txtpb", ".prototxt")
TEXT_HEADER = ("# proto-file: autotune/proto/autotune_results.proto\n"
               "# proto-message: rules_autotune.AutotuneResults\n")


def is_text_path(path):
    return str(path).endswith(TEXT_EXTENSIONS)

def _quote(text):
    if text.isascii() and text.isprintable() and '"' not in text \
            and "\\" not in text:
        return '"' + text + '"'
    return '"' + text_encoding.CEscape(text, as_utf8=True) + '"'


# The escapes _quote writes (text_encoding.CEscape with as_utf8): what the
# fast reader decodes; any other escape goes to text_format.
_ESCAPE = r"""\\(?:[nrt"'\\]|0[0-3][0-7]|177)"""
_QUOTED = r'"(?:[^"\\\n]|' + _ESCAPE + r')*+"'
_QUOTED_RE = re.compile(_QUOTED)


def _unquote(token):
    if len(token) < 2 or token[0] != '"' or token[-1] != '"':
        raise _NotCanonical()
    body = token[1:-1]
    if "\\" not in body:
        if '"' in body:
            raise _NotCanonical()
        return body
    if _QUOTED_RE.fullmatch(token) is None:
        raise _NotCanonical()
    return text_encoding.CUnescape(body).decode("utf-8")


_REQUEST_PREFIX = "  compile_requests { "


_WORK_PREFIX = "  work { "
_WORK_STRINGS = ("source", "precision")
_WORK_FLOATS = ("bytes", "flops", "copy_bandwidth")


def _parse_work_fast(line):
    return Work(**_canonical_fields(line, _WORK_PREFIX, _WORK_STRINGS,
                                    _WORK_FLOATS))


class _NotCanonical(Exception):
    pass


def _parse_config_fast(text):
    """Parses `params: "..." num_warps: 4 num_stages: 2 [num_ctas: 2]`."""
    if not text.startswith('params: "'):
        raise _NotCanonical()
    end = text.index('" num_warps: ')
    params = text[9:end]
    if "\\" in params or '"' in params:
        # Escaped quotes or backslashes (string-valued parameters): the
        # quoted string ends at its first unescaped quote.
        match = _QUOTED_RE.match(text, 8)
        if match is None or not text.startswith('" num_warps: ',
                                                match.end() - 1):
            raise _NotCanonical()
        end = match.end() - 1
        params = _unquote(match.group())
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
    if "\\" in body:
        # Escapes in the params: find their closing quote.
        match = _QUOTED_RE.match(body, 8)
        cut = match.end() - 1 if match else -1
    else:
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
        if schema.bad_time(run_time):
            raise _NotCanonical()  # text_format's path names the entry
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
                       "timestamp", "tuner", "method")
_PROVENANCE_FLOATS = ("timing_spread", "tuning_seconds",
                      "default_run_time_us")
_FIELD_RE = re.compile(r'(\w+): (' + _QUOTED + r'|[^ "]+)')


def _parse_provenance_fast(line):
    return Provenance(**_canonical_fields(
        line, "  provenance { ", _PROVENANCE_STRINGS, _PROVENANCE_FLOATS))


def _canonical_fields(line, prefix, strings, floats):
    """The fields of a one-line message `prefix ... }` as the canonical
    writer writes it (each field once, strings quoted, floats valid
    times); _NotCanonical otherwise, for text_format's slow path."""
    if not line.startswith(prefix) or not line.endswith(" }"):
        raise _NotCanonical()
    body = line[len(prefix):-2]
    pairs = _FIELD_RE.findall(body)
    if " ".join(f"{n}: {v}" for n, v in pairs) != body:
        raise _NotCanonical()
    fields = {}
    for name, value in pairs:
        if name in fields:
            raise _NotCanonical()
        if name in strings:
            fields[name] = _unquote(value)
        elif name in floats:
            fields[name] = float(value)
            if schema.bad_time(fields[name]):
                raise _NotCanonical()  # text_format's path names the entry
        else:
            raise _NotCanonical()
    return fields


# Possessive quantifiers (Python 3.11+): the pattern never backtracks.
_FLOAT = r"-?\d++(?:\.\d*+)?+(?:[eE][-+]?\d++)?+"
# A string-valued parameter is JSON (ASCII, see records.Config) inside
# the quoted params, so its quotes and backslashes appear escaped.
_JSON_STRING = (r'\\"(?:[ !#-&(-\[\]-~]|' + r"\\'" + r'|\\\\(?:\\\\|\\"|'
                r'[bfnrt/]|u[0-9a-fA-F]{4}))*+\\"')
_PARAM_VALUE = (r"(?:-?\d++(?:\.\d*+)?+(?:[eE][-+]?\d++)?+|true|false|inf"
                r"|-inf|nan|" + _JSON_STRING + ")")
_PARAMS = r"(?:\w++=" + _PARAM_VALUE + r"(?: \w++=" + _PARAM_VALUE + r")*+)?+"
_CAND_LINE = (r'  candidates \{ config \{ params: "' + _PARAMS + r'" num_warps: '
              r"\d++ num_stages: \d++(?: num_ctas: \d++)?+ \}"
              r"(?: run_time_us: " + _FLOAT + r")?+"
              r"(?: failure: (?:" + "|".join(FAILURE_KINDS[1:]) + r"))?+"
              r"(?: failure_detail: " + _QUOTED + r")?+ \}\n")
_PROV_LINE = (r"  provenance \{(?: (?:triton_version|torch_version|"
              r"cuda_version|timestamp|tuner|method): " + _QUOTED +
              r"| (?:timing_spread|tuning_seconds|default_run_time_us): "
              + _FLOAT + r")++ \}\n")
# The candidate and provenance lines of one canonical text entry, checked
# in one C-speed match (what the writer produces; anything else is decoded
# line by line).
_REQUEST_LINE = (r"  compile_requests \{(?: (?:kernel|arguments|options|"
                 r"triton_version): " + _QUOTED + r")*+ \}\n")
_WORK_LINE = (r"  work \{(?: (?:source|precision): " + _QUOTED +
              r"| (?:bytes|flops|copy_bandwidth): " + _FLOAT + r")*+ \}\n")
_REST_RE = re.compile(r"(?:" + _CAND_LINE + r")*+(?:" + _PROV_LINE + r")?+"
                      r"(?:" + _REQUEST_LINE + r")*+(?:" + _WORK_LINE +
                      r")?+\}")


def copyable_rest(entry):
    """The candidate and provenance lines of an entry read from canonical
    text, when they are well formed and may be copied as they are when the
    entry is written as text; None otherwise (they must be re-encoded)."""
    raw = entry.raw
    if raw is None or type(raw[0]) is not _TextRestDecoder:
        return None
    decoder, rest = raw
    return rest if decoder.well_formed(rest) else None


class _TextRestDecoder:
    """Decodes the candidate and provenance lines of a text entry on demand;
    lines outside the canonical layout go through text_format."""

    def __init__(self, config_memo, source, trusted=False):
        self.memo = config_memo
        self.source = source
        # The file's crc32 line matched: every line is as the writer
        # produced it, so copies need no line-by-line check.
        self.trusted = trusted
        # ids of the rests found well formed (they live as long as their
        # entries, which hold them; the decoder makes no new ones).
        self.checked = set()
        # The file's entries, to name the one whose lines do not decode.
        self.entries = ()

    def _name(self, rest):
        """How an error names the entry whose lines `rest` are."""
        for entry in self.entries:
            if entry.raw is not None and entry.raw[1] is rest:
                return (f"entry for kernel {entry.key.kernel} "
                        f"[{entry.key.signature}]: ")
        return ""

    def well_formed(self, rest):
        """Whether an entry's candidate and provenance lines are as the
        writer produces them (one C-speed match, remembered)."""
        if self.trusted or id(rest) in self.checked:
            return True
        if _REST_RE.fullmatch(rest) is None:
            return False
        self.checked.add(id(rest))
        return True

    def __call__(self, rest):
        lines = _without_requests(rest.split("\n")[:-1])
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
            raise CacheFileError(self.source, f"{self._name(rest)}bad "
                                 f"candidate or provenance: {e}") from None
        try:
            return MessageDecoder(self.memo, self.source)(msg)
        except CacheFileError as e:
            # The lines alone hold no key fields: the entry is named here.
            raise CacheFileError(self.source, self._name(rest) +
                                 without_entry_name(e.reason)) from None

    def compile_requests(self, rest):
        if _REQUEST_PREFIX not in rest:
            return ()
        lines = [line for line in rest.split("\n")
                 if line.startswith(_REQUEST_PREFIX)]
        msg = pb.Entry()
        try:
            text_format.Parse("\n".join(lines), msg)
        except text_format.ParseError as e:
            raise CacheFileError(self.source, f"bad compile request: {e}")
        return MessageDecoder(self.memo, self.source).compile_requests(msg)

    def work(self, rest):
        """The launch's work alone: its line, the last before the closing
        brace in the canonical layout."""
        if _WORK_PREFIX not in rest:
            return NO_WORK
        lines = [line for line in rest.split("\n")
                 if line.startswith(_WORK_PREFIX)]
        if len(lines) == 1:
            try:
                return _parse_work_fast(lines[0])
            except (_NotCanonical, ValueError, IndexError, TypeError):
                pass
        msg = pb.Entry()
        try:
            text_format.Parse("\n".join(lines), msg)
        except text_format.ParseError as e:
            raise CacheFileError(self.source, f"{self._name(rest)}bad work "
                                 f"line: {e}") from None
        try:
            return MessageDecoder(self.memo, self.source).work(msg)
        except CacheFileError as e:
            raise CacheFileError(self.source, self._name(rest) +
                                 without_entry_name(e.reason)) from None

    def provenance(self, rest):
        """The provenance alone: the canonical layout puts it on the last
        line before the closing brace (and any compile requests and work
        line)."""
        body = rest[:-2] if rest.endswith("\n}") else ""
        if _REQUEST_PREFIX in body or _WORK_PREFIX in body:
            body = "\n".join(_without_requests(body.split("\n")))
        last = body.rpartition("\n")[2]
        if last.startswith("  provenance { "):
            try:
                return _parse_provenance_fast(last)
            except (_NotCanonical, ValueError, IndexError, TypeError):
                pass
        elif "provenance" not in body and rest.endswith("}"):
            return EMPTY_PROVENANCE
        return self(rest)[1]


def _without_requests(lines):
    """The lines of an entry's rest before its compile requests and its
    work line."""
    while lines and lines[-1].startswith((_REQUEST_PREFIX, _WORK_PREFIX)):
        lines = lines[:-1]
    return lines


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
                      + _count(blocks, "\n  provenance { ")
                      + _count(blocks, "\n" + _REQUEST_PREFIX)
                      + _count(blocks, "\n" + _WORK_PREFIX) + len(blocks))
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
    quoted = "".join(signatures)
    if quoted.count('"') != 2 * len(lines) or "\\" in quoted \
            or not all(map(str.endswith, signatures, itertools.repeat('"'))):
        # Quotes or escapes in some signature: each is checked alone.
        signatures = [_header_value(line, "signature") for line in signatures]
    else:
        signatures = list(map(operator.getitem, signatures,
                              itertools.repeat(slice(14, -1))))
    devices = column({}, list(map(_COLUMN[0], lines)),
                      lambda line, _: _header_value(line, "device"))
    kernels = column({}, list(map(_COLUMN[1], lines)),
                      lambda line, _: _header_value(line, "kernel"))
    fingerprints = column({}, list(map(_COLUMN[2], lines)),
                           lambda line, _: _header_value(line, "fingerprint"))
    key_versions = column({}, kv_lines, lambda line, _: int(line[15:]))
    bests = column({}, list(map(_COLUMN[5], lines)),
                    lambda line, _: _parse_best_line(line))
    run_times = list(map(float, map(operator.getitem, run_lines,
                                    itertools.repeat(slice(15, None)))))
    if not schema.times_ok(run_times):
        raise _NotCanonical()  # text_format's path names the entry
    keys = map(tuple.__new__, itertools.repeat(CacheKey),
               zip(devices, kernels, fingerprints, signatures, key_versions))
    rest_decoder = _TextRestDecoder({}, source, trusted)
    entries = [Entry(key, best, run_time, decode=(rest_decoder, rest))
               for key, best, run_time, rest in zip(
                   keys, bests, run_times, map(_COLUMN[7], lines))]
    rest_decoder.entries = entries
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
            if schema.bad_time(run_time):
                raise _NotCanonical()  # text_format's path names the entry
            i += 1
        head_lines += i
        rest = "\n".join(lines[i:])
        key = CacheKey(head, kernel, fingerprint, signature, key_version)
        entries.append(Entry(key, best, run_time, decode=(rest_decoder, rest)))
    if not trusted and n_lines != head_lines + rest_lines:
        raise _NotCanonical()
    rest_decoder.entries = entries
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
    schema.check_header(version, source)
    _check_count(count, len(entries), source, text)
    return entries


def decode_text_slow(text, source):
    results = pb.AutotuneResults()
    try:
        text_format.Parse(text, results)
    except text_format.ParseError as e:
        raise CacheFileError(source, f"not a valid text autotune results "
                             f"file: {e}") from None
    schema.check_header(results.version, source)
    # proto3: an entry_count of 0 cannot be told from an absent one.
    _check_count(results.entry_count or None, len(results.entries), source,
                 text)
    return entries_from_messages(results, source)


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
            "line (entry_count: N, N the number of entries) or delete the "
            "file's first two lines, the '# proto-file:' and "
            "'# proto-message:' comments, which mark it as written by "
            "rules_autotune")
    if count is not None and count != n:
        raise CacheFileError(
            source, f"entry_count is {count} but the file holds {n} entries "
            "(truncated? after editing by hand, fix or delete the entry_count "
            "line)")
