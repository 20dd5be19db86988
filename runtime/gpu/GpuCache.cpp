//===- GpuCache.cpp - A GPU target's cubins on disk -----------------------===//

#include "gpu/GpuCache.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/BLAKE3.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace tc {

std::string cubinCachePath(StringRef Dir, StringRef Key) {
  SmallString<256> P(Dir);
  sys::path::append(P, Key + ".cubin");
  return std::string(P);
}

bool readCubinCache(StringRef Path, std::optional<uint32_t> &Threads,
                    std::string &Cubin) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFile(
      Path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!B || (*B)->getBufferSize() < 32 + 4 + 1)
    return false;
  StringRef All = (*B)->getBuffer();
  StringRef Rest = All.drop_front(32);
  BLAKE3Result<32> Sum = BLAKE3::hash(arrayRefFromStringRef(Rest));
  if (StringRef(reinterpret_cast<const char *>(Sum.data()), 32) !=
      All.take_front(32))
    return false;
  uint32_t T = support::endian::read32le(Rest.data());
  Threads = T ? std::optional<uint32_t>(T) : std::nullopt;
  Cubin = Rest.drop_front(4).str();
  return true;
}

void writeCubinCache(StringRef Path, std::optional<uint32_t> Threads,
                     StringRef Cubin) {
  std::string Rest(4, '\0');
  support::endian::write32le(Rest.data(), Threads ? *Threads : 0);
  Rest += Cubin;
  SmallString<256> Tmp;
  int FD;
  if (sys::fs::createUniqueFile(Path + ".tmp-%%%%%%%%", FD, Tmp))
    return;
  raw_fd_ostream OS(FD, /*shouldClose=*/true);
  BLAKE3Result<32> Sum = BLAKE3::hash(arrayRefFromStringRef(Rest));
  OS.write(reinterpret_cast<const char *>(Sum.data()), Sum.size());
  OS << Rest;
  OS.close();
  if (OS.has_error() || sys::fs::rename(Tmp, Path)) {
    OS.clear_error();
    sys::fs::remove(Tmp);
  }
}

} // namespace tc
