#!/usr/bin/env python3
"""Prints the counters of a kv shard (examples/kv/kv_msg.h: kv_shard_t on
x86_64 or aarch64) from the first line of hex on stdin (tc-send
--read-back 144), one `name=value` per line."""
import re
import struct
import sys

FIELDS = ("index cap entries arena used arena_cap key_bytes error self ranks "
          "answer answer_ctx upserts gets bad misrouted unanswered hits hit_sum")
SHARD = "<QQQQQQQI4xIIQQQQQQQQQ"

for line in sys.stdin:
    if re.fullmatch(r"[0-9a-f]{288}", line.strip()):
        values = struct.unpack(SHARD, bytes.fromhex(line.strip()))
        for name, value in zip(FIELDS.split(), values):
            if name not in ("index", "arena", "answer", "answer_ctx"):
                print("%s=%d" % (name, value))
        sys.exit(0)
sys.exit("kv-shard.py: no 144-byte read-back on stdin")
