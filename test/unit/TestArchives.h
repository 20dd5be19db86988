//===- TestArchives.h - Builders of in-memory archives for unit tests -----===//
#ifndef TC_TEST_TESTARCHIVES_H
#define TC_TEST_TESTARCHIVES_H

#include "tc/Archive.h"

#include <random>
#include <string>

namespace tc::test {

/// Bytes that identify as LLVM bitcode (magic 'BC' 0xC0DE) and carry \p Tail.
inline std::string fakeBitcode(const std::string &Tail) {
  return std::string("BC\xC0\xDE", 4) + Tail;
}

/// Bytes that identify as a little-endian 64-bit ELF relocatable object.
inline std::string fakeObject(const std::string &Tail) {
  std::string H(64, '\0');
  H[0] = 0x7f, H[1] = 'E', H[2] = 'L', H[3] = 'F';
  H[4] = 2, H[5] = 1, H[6] = 1, H[16] = 1; // ELFCLASS64, LSB, ET_REL
  return H + Tail;
}

inline Member makeMember(const std::string &Triple, const std::string &CPU,
                         ImageKind Kind = ImageKind::Bitcode,
                         Role R = Role::Target) {
  Member M;
  M.Triple = Triple;
  M.CPU = CPU;
  M.Kind = Kind;
  M.TheRole = R;
  std::string Tail = Triple + "/" + CPU;
  M.Image = Kind == ImageKind::Bitcode ? fakeBitcode(Tail) : fakeObject(Tail);
  return M;
}

} // namespace tc::test

#endif
