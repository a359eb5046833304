"""Takes a device lock (argv[1]: lock directory, argv[2]: device identity),
says HELD, and holds it until killed."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

from autotune.host import device_lock  # noqa: E402

turn = device_lock.DeviceTurn(identity=sys.argv[2], directory=sys.argv[1])
turn.take()
print("HELD", flush=True)
time.sleep(600)
