//===- KindTable.h - Cut a member's metadata kind table ---------*- C++ -*-===//
//
// LLVM's bitcode writer puts every metadata kind its context knows (49 in
// LLVM 22, ~1 KB) into every module, whether the module uses them or not,
// and the reader parses each one: a sixth of the bitcode parse of a small
// ifunc at the target. tc-cc keeps only the kinds a member uses.
//
//===----------------------------------------------------------------------===//

#ifndef TC_DRIVER_KINDTABLE_H
#define TC_DRIVER_KINDTABLE_H

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace llvm {
class Module;
} // namespace llvm

namespace tc {

/// The metadata kinds \p M attaches to its functions, globals and
/// instructions (the only places bitcode refers to a kind by its id).
llvm::DenseSet<unsigned> usedMetadataKinds(const llvm::Module &M);

/// \p Bitcode (one module, as BitcodeWriter writes it) with its metadata
/// kind block holding only the kinds in \p Used. The block keeps its size,
/// so no offset in the file moves: the records it drops become a sub-block
/// the reader skips in one step. Returns \p Bitcode unchanged when it is
/// not laid out as expected or nothing would be dropped.
std::string cutMetadataKinds(llvm::StringRef Bitcode,
                             const llvm::DenseSet<unsigned> &Used);

} // namespace tc

#endif
