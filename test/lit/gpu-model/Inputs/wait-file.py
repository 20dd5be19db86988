"""Waits until FILE exists and is not empty (at most 30 s): the driver
model writes a line there when a kernel starts (TC_CUDA_MODEL_NOTE).
usage: wait-file.py FILE"""
import os
import sys
import time

deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    if os.path.exists(sys.argv[1]) and os.path.getsize(sys.argv[1]) > 0:
        sys.exit(0)
    time.sleep(0.01)
sys.exit("wait-file.py: %s did not appear in 30 s" % sys.argv[1])
