"""Regenerates autotune/proto/autotune_results_pb2.py from the .proto file.

Usage: python tools/gen_proto.py [--check]
  --check  exit 1 if the checked-in module differs from a fresh generation.
Needs grpcio-tools (it bundles protoc).
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.path.join(ROOT, "autotune", "proto")
PROTO = "autotune_results.proto"
MODULE = "autotune_results_pb2.py"


def generate(out_dir):
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I" + PROTO_DIR,
         "--python_out=" + out_dir, os.path.join(PROTO_DIR, PROTO)],
        check=True)
    with open(os.path.join(out_dir, MODULE), "rb") as f:
        return f.read()


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
