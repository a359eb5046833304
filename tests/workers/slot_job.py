"""A stand-in test: appends its CUDA_VISIBLE_DEVICES and its running
interval (Unix times) to argv[1] as one JSON line, after sleeping argv[2]
seconds."""
import json
import os
import sys
import time

start = time.time()
print("STARTED", flush=True)
time.sleep(float(sys.argv[2]))
end = time.time()
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"device": os.environ.get("CUDA_VISIBLE_DEVICES"),
                        "start": start, "end": end, "pid": os.getpid()})
            + "\n")
