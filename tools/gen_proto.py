"""Regenerates autotune/proto/autotune_results_pb2.py from the .proto file.

Usage: python tools/gen_proto.py [--check]
  --check  exit 1 if the checked-in module differs from a fresh generation.
Needs grpcio-tools (it bundles protoc).
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.path.join(ROOT, "autotune", "proto")
PROTO = "autotune_results.proto"
MODULE = "autotune_results_pb2.py"


# protoc pins the generated module to runtimes at least as new as itself
# (protoc 35 -> protobuf>=7.35.1). The module only builds descriptors from
# a serialized file, which every runtime from 4.21 on can do; the guard is
# replaced by this note, and tests/test_proto_current.py loads the module
# on the oldest runtime pyproject.toml declares.
_GUARD = re.compile(
    rb"from google\.protobuf import runtime_version as _runtime_version\n"
    rb"|_runtime_version\.ValidateProtobufRuntimeVersion\([^)]*\)\n")
_NOTE = (b"# rules_autotune: no runtime version guard; works with the protobuf "
         b"range in\n# pyproject.toml (tools/gen_proto.py).\n")


def relax_version_guard(code):
    relaxed, count = _GUARD.subn(b"", code)
    if count != 2:
        raise SystemExit("gen_proto: protoc's runtime version guard was not "
                         "found where expected; check the generated module")
    return relaxed.replace(b'"""Generated protocol buffer code."""\n',
                           b'"""Generated protocol buffer code."""\n' + _NOTE,
                           1)


def generate(out_dir):
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I" + PROTO_DIR,
         "--python_out=" + out_dir, os.path.join(PROTO_DIR, PROTO)],
        check=True)
    with open(os.path.join(out_dir, MODULE), "rb") as f:
        return relax_version_guard(f.read())


def main(argv):
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(tmp)
    target = os.path.join(PROTO_DIR, MODULE)
    if "--check" in argv:
        with open(target, "rb") as f:
            current = f.read()
        if current != fresh:
            print(f"{target} is stale: run python tools/gen_proto.py")
            return 1
        print(f"{target} is current")
        return 0
    with open(target, "wb") as f:
        f.write(fresh)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
