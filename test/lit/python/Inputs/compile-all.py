"""tc.compile() on each SRC.py given: the archive's members, or the
diagnostics of the tc.CompileError, one line each."""
import sys

import tc

for src in sys.argv[1:]:
    name = src.rsplit("/", 1)[-1]
    try:
        data = tc.compile(src)
    except tc.CompileError as e:
        print(f"== {name}: refused")
        for line in e.diagnostics:
            print(line.replace(src, name))
    else:
        print(f"== {name}: {len(data)} bytes")
        print(tc.Archive.open(data))
