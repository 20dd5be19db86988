"""tc.Archive on each archive given: what tc-ar list prints, then the
manifest's fields."""
import sys

import tc

for path in sys.argv[1:]:
    try:
        a = tc.Archive.open(path)
    except tc.Error as e:
        print(f"{path}: {e.status_name}: {e}")
        continue
    print(a)
    print(f"name={a.name} version={a.format_version} deps={a.deps} "
          f"omitted={a.omitted} hash={a.hash_hex[:16]}")
    for s in a.signatures:
        print(f"signature {s.key_id} verifies={s.verifies}")
    for m in a.members:
        print(f"{m.triple} {m.role}: symbols={list(m.symbols)} "
              f"digest={m.digest.hex()[:16]}")
