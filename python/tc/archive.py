"""Archive inspection: what `tc-ar list` and `tc-ar dump` show, read by
libtc's archive reader (tc_archive_inspect) as a target reads it."""
import os
from dataclasses import dataclass

from . import errors
from ._tc_ffi import ffi, lib


def _str(p):
    return ffi.string(p).decode("utf-8", "replace")


@dataclass(frozen=True)
class Member:
    """One member: a code image for one triple (and maybe one CPU)."""
    triple: str
    cpu: str           # "" for the triple's generic CPU
    features: str      # "+feat,-feat,..." or ""
    kind: str          # "bitcode" or "object"
    role: str          # "target" (ships) or "source" (the sender runs it)
    compression: str   # "none", "zstd" or "zstd-dict"
    size: int          # image bytes, uncompressed
    stored_size: int   # image bytes in the archive
    symbols: tuple     # external symbols the image needs
    digest: bytes      # the member's identity (BLAKE3, 32 bytes)

    def __str__(self):
        """The member's `tc-ar list` line."""
        line = (f"{self.triple} {self.cpu or 'generic'} {self.kind} "
                f"{self.role} {self.size}")
        if self.compression != "none":
            line += f" ({self.compression} {self.stored_size})"
        return line


@dataclass(frozen=True)
class Signature:
    key_id: str
    verifies: bool


class Archive:
    """A tc archive read for inspection: Archive.open(path or bytes)."""

    def __init__(self, data):
        data = bytes(data)
        out = ffi.new("tc_archive_info_t **")
        status = lib.tc_archive_inspect(data, len(data), out)
        if status != lib.TC_OK:
            raise errors.error_for(status, _str(lib.tc_last_error()))
        i = out[0]
        try:
            self.name = _str(i.name)
            self.hash = bytes(i.hash)
            self.format_version = i.format_version
            self.deps = [_str(i.deps[k]) for k in range(i.dep_count)]
            self.members = [
                Member(_str(m.triple), _str(m.cpu), _str(m.features),
                       _str(m.kind), _str(m.role), _str(m.compression),
                       m.size, m.stored_size,
                       tuple(_str(m.symbols[k])
                             for k in range(m.symbol_count)),
                       bytes(m.digest))
                for m in (i.members[k] for k in range(i.member_count))]
            self.signatures = [
                Signature(_str(s.key_id), bool(s.verifies))
                for s in (i.signatures[k] for k in range(i.signature_count))]
            self.omitted = i.omitted_count
        finally:
            lib.tc_archive_info_free(i)
        self.bytes = data

    @classmethod
    def open(cls, source):
        """Reads an archive from a path (str, os.PathLike) or its bytes."""
        if isinstance(source, (str, os.PathLike)):
            with open(source, "rb") as f:
                return cls(f.read())
        return cls(source)

    @property
    def hash_hex(self):
        return self.hash.hex()

    def __str__(self):
        """What `tc-ar list` prints: a line per member."""
        return "\n".join(str(m) for m in self.members)

    def __repr__(self):
        return (f"<tc.Archive {self.name} {self.hash.hex()[:16]}: "
                f"{len(self.members)} members>")
