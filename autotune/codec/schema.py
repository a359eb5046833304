"""What the codecs take from the schema (autotune/proto): the format
version, and the wire tag of every field, computed from the message
descriptors so that a field number is written down in one place only."""
import math
import types

from google.protobuf import descriptor

from autotune.errors import CacheFileError
from autotune.proto import autotune_results_pb2 as pb
from autotune.records import FAILURE_KINDS

FORMAT_VERSION = 1

if tuple(pb.FailureKind.keys()) != FAILURE_KINDS:
    raise ImportError("autotune.records.FAILURE_KINDS does not list the "
                      "schema's FailureKind values in order")

_FIELD = descriptor.FieldDescriptor
_WIRE_TYPES = {_FIELD.TYPE_DOUBLE: 1, _FIELD.TYPE_FIXED64: 1,
               _FIELD.TYPE_SFIXED64: 1, _FIELD.TYPE_STRING: 2,
               _FIELD.TYPE_BYTES: 2, _FIELD.TYPE_MESSAGE: 2,
               _FIELD.TYPE_FLOAT: 5, _FIELD.TYPE_FIXED32: 5,
               _FIELD.TYPE_SFIXED32: 5}  # any other type: varint (0)


def varint(value):
    """Protobuf's base-128 varint; negative values as 64-bit two's
    complement, as int32 and int64 fields write them."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tags(message):
    """The wire tag (field number and wire type) of each field of a
    message, as bytes, by field name."""
    return types.SimpleNamespace(**{
        field.name: varint(field.number << 3
                           | _WIRE_TYPES.get(field.type, 0))
        for field in message.DESCRIPTOR.fields})


RESULTS = _tags(pb.AutotuneResults)
ENTRY = _tags(pb.Entry)
CONFIG = _tags(pb.Config)
CANDIDATE = _tags(pb.Candidate)
PROVENANCE = _tags(pb.Provenance)
COMPILE_REQUEST = _tags(pb.CompileRequest)
WORK = _tags(pb.Work)


def bad_time(value):
    """Whether a run time or duration read from a file is unusable: only
    finite numbers >= 0 are (NaN fails every comparison)."""
    return not (0.0 <= value < math.inf)


def times_ok(values):
    """Whether every number of a column is a usable time, at C speed."""
    return not values or (min(values) >= 0.0
                          and math.isfinite(sum(values)))


def time_error(source, what, value):
    return CacheFileError(source, f"{what} is {value!r}; run times and "
                          "durations must be finite numbers >= 0")


def check_header(version, source):
    if version == 0:
        raise CacheFileError(source, "no format version: empty, truncated, or "
                             "not an autotune results file")
    if version != FORMAT_VERSION:
        raise CacheFileError(
            source, f"unknown format version {version} (this rules_autotune "
            f"reads version {FORMAT_VERSION})")
