#!/usr/bin/env python3
"""Turn a commented hex description into bytes, so malformed test inputs stay
readable. Everything after '#' on a line is a comment; whitespace is ignored.
Usage: hex2bin.py IN OUT"""
import sys

with open(sys.argv[1]) as f:
    digits = "".join("".join(line.split("#", 1)[0].split()) for line in f)
with open(sys.argv[2], "wb") as out:
    out.write(bytes.fromhex(digits))
