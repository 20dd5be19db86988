//===- Device.h - An accelerator a target runs code on -----------*- C++
//-*-===//
//
// A target whose ifuncs may run on an accelerator (tc-serve --gpu) has a
// DeviceTarget beside its JitEngine: it says which member of an archive it
// runs, loads it, and runs messages asynchronously, one queue per
// connection, reporting each operation when it is done. The protocol engine
// (Runtime) drives it from its progress thread; GpuTarget
// (runtime/gpu/GpuTarget.h) is the implementation for CUDA devices, and the
// unit tests drive the Runtime with one that runs nothing (RuntimeTest).
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_JIT_DEVICE_H
#define TC_RUNTIME_JIT_DEVICE_H

#include "jit/Jit.h"

#include "tc/Archive.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace tc {

/// What one operation on a connection's queue came to.
struct DeviceDone {
  enum Kind : uint8_t { Launch, Fence, Read } What = Launch;
  uint64_t Conn = 0;
  uint64_t Tag = 0; ///< The caller's, from launch/fence/read.
  bool Ok = true;
  std::string Why;  ///< When !Ok: one line naming the ifunc and the cause.
  std::string Data; ///< Read: the bytes.
};

class DeviceTarget {
public:
  virtual ~DeviceTarget() = default;

  /// For the Hello (docs/wire-format.md, key 10): the device's triple,
  /// architecture ("sm_90") and driver version (not 0).
  virtual std::string triple() const = 0;
  virtual std::string arch() const = 0;
  virtual uint32_t driverVersion() const = 0;

  /// The member of \p A this device runs, or null (the host runs the
  /// archive's CPU member then).
  virtual const Member *memberFor(const Archive &A) const = 0;
  /// Loads member \p M of \p A unless its identity is loaded; the result's
  /// Device is set. Any thread, concurrently with the rest. Errors are
  /// LoadErrors.
  virtual llvm::Expected<const LoadedIfunc &> load(const Archive &A,
                                                   const Member &M) = 0;
  /// The code loaded for \p H, or null. Any thread.
  virtual const LoadedIfunc *find(const ArchiveHash &H) const = 0;
  /// Forgets \p H (its code goes once its launches are done).
  virtual void unload(const ArchiveHash &H) = 0;
  /// One line about \p L for `tc-serve -v` ("on gpu 0 as sm_90, 1056 x
  /// 256 threads").
  virtual std::string describe(const LoadedIfunc &L) const = 0;

  /// Runs \p L on \p Payload (copied) after \p Conn's earlier operations;
  /// returns at once. An error means nothing was started.
  virtual llvm::Error launch(uint64_t Conn, const LoadedIfunc &L,
                             llvm::StringRef Payload, uint64_t Tag) = 0;
  /// Done when every earlier operation on \p Conn is.
  virtual void fence(uint64_t Conn, uint64_t Tag) = 0;
  /// The first min(\p Length, region size) bytes of the device's region,
  /// after \p Conn's earlier operations.
  virtual void read(uint64_t Conn, uint64_t Length, uint64_t Tag) = 0;
  /// Operations not reported yet, on any connection.
  virtual bool busy() const = 0;
  /// \p Conn is gone: its queue goes once its operations are done (they
  /// are still reported).
  virtual void closeConnection(uint64_t Conn) = 0;
  /// Reports finished operations to \p Done, in order per connection.
  /// Returns whether it reported any.
  virtual bool poll(llvm::function_ref<void(DeviceDone &)> Done) = 0;
};

} // namespace tc

#endif // TC_RUNTIME_JIT_DEVICE_H
