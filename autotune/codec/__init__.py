"""Results files: load and dump, text or binary protobuf by extension.

Both formats follow autotune/proto/autotune_results.proto.
- schema: the format version and the fields' wire tags, from the schema.
- binary: protobuf's parser through a heads-only view, and a wire encoder.
- text: a canonical writer and a fast reader (text_format as fallback).
- files: formats by extension, checksums, duplicates, the atomic writer.

Entries are decoded lazily (lookups need only keys and best configs), and
entries read from a file are written back in the same format by copying
their bytes or lines.
"""
from autotune.codec.binary import decode_heads, is_message_backed
from autotune.codec.files import (MAX_CACHE_BYTES, atomic_write,
                                  check_duplicates, decode, dump_results,
                                  encode, encode_chunks, is_regular_file,
                                  load_results, no_gc, read_bytes,
                                  read_stream, sort_entries, write_temp)
from autotune.codec.schema import FORMAT_VERSION
from autotune.codec.text import (TEXT_EXTENSIONS, copyable_rest, decode_text,
                                 decode_text_slow, is_text_path)
from autotune.errors import CacheFileError

__all__ = ["CacheFileError", "FORMAT_VERSION", "MAX_CACHE_BYTES",
           "TEXT_EXTENSIONS", "atomic_write", "check_duplicates", "copyable_rest", "decode",
           "decode_heads", "decode_text", "decode_text_slow", "dump_results",
           "encode", "encode_chunks", "is_message_backed",
           "is_regular_file", "is_text_path", "load_results", "no_gc",
           "read_bytes", "read_stream", "sort_entries",
           "write_temp"]
