#!/usr/bin/env python3
"""The word count's reference (docs/kv.md): every distinct word of FILE...
once as `COUNT WORD`, by count (largest first), then by word. A word is a
maximal run of ASCII letters and digits, lowercased; every other byte, and
the end of a file, separates words."""
import collections
import re
import sys

counts = collections.Counter()
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        counts.update(w.lower() for w in re.findall(rb"[A-Za-z0-9]+", f.read()))
out = sys.stdout.buffer
for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
    out.write(b"%d %s\n" % (n, word))
