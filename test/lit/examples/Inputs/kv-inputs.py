#!/usr/bin/env python3
"""Writes the word count's edge-case inputs into DIR (deterministic):
empty (no bytes), seps (separators only), binary (4 KiB of every byte
value, NUL and 0x80-0xff included), long (a 100,000-letter word, longer
than any batch or inline key, then a 300-digit one), case (one word in
four spellings, no final newline), join1/join2 (a word at the end of one
file and another at the start of the next: two words, never one), and
many (40 small files whose words repeat across them)."""
import os
import random
import sys

d = sys.argv[1]


def write(name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


rng = random.Random(41)
write("empty", b"")
write("seps", b"  \n\t--!!\x00\xff\n.,;")
write("binary", bytes(rng.randrange(256) for _ in range(4096)))
write("long", b"A" + b"a" * 99999 + b" short " + b"7" * 300 + b"\n")
write("case", b"Hello HELLO hello hElLo wORLD world")
write("join1", b"data moves zyxtail")
write("join2", b"headzyx compute")
for i in range(40):
    write("many%02d" % i, b" ".join(b"w%d" % rng.randrange(12)
                                     for _ in range(rng.randrange(1, 30))))
