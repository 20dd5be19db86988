//===- GpuCache.h - A GPU target's cubins on disk ---------------*- C++ -*-===//
//
// With a cache directory (tc-serve --cache-dir), a GPU target keeps each
// kernel's machine code (the driver's link of its PTX: a cubin) in a file
// named by the cache key (GpuTarget.cpp: the code identity, member, device
// sm, PTX version, driver and LLVM versions) + ".cubin":
//
//   BLAKE3 of the rest (32 bytes) | NAME_threads (u32 LE, 0: absent) | cubin
//
// written to a unique name and renamed into place, so a reader sees a whole
// file or none; a file whose hash does not match is ignored (and written
// over by the next link).
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_GPU_GPUCACHE_H
#define TC_RUNTIME_GPU_GPUCACHE_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace tc {

std::string cubinCachePath(llvm::StringRef Dir, llvm::StringRef Key);
/// False when the file is missing, short or damaged.
bool readCubinCache(llvm::StringRef Path, std::optional<uint32_t> &Threads,
                    std::string &Cubin);
/// Best effort: a cache that cannot be written is only slower.
void writeCubinCache(llvm::StringRef Path, std::optional<uint32_t> Threads,
                     llvm::StringRef Cubin);

} // namespace tc

#endif // TC_RUNTIME_GPU_GPUCACHE_H
