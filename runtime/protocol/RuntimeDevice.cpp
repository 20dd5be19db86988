//===- RuntimeDevice.cpp - The protocol engine and an accelerator ---------===//
//
// A target with a DeviceTarget (RuntimeOptions::Device, tc-serve --gpu)
// hands the messages whose code the device loaded to it instead of calling
// NAME_main: a launch is asynchronous, in order per connection on the
// device. A Fence or RegionRead of the connection goes to the device too
// and is answered when the device reports it, after the connection's
// launches; a launch that failed is answered with an Error frame
// (DeviceFault, or SandboxTrap to a peer older than wire version 3).
// docs/runtime.md, "GPU targets".
//
//===----------------------------------------------------------------------===//

#include "protocol/Runtime.h"

#include "llvm/Support/FormatVariadic.h"

using namespace llvm;

namespace tc {

const LoadedIfunc *Runtime::findLoaded(const ArchiveHash &H) const {
  if (const LoadedIfunc *L = Jit->find(H))
    return L;
  return Device ? Device->find(H) : nullptr;
}

WireStatus Runtime::deviceFaultStatus(ConnId C) const {
  const Capabilities *P = peer(C);
  return statusForPeer(WireStatus::DeviceFault, P ? P->WireMax : 1);
}

void Runtime::launchOnDevice(ConnId C, const SmallInvoke &About,
                             const LoadedIfunc &L, StringRef Payload) {
  uint64_t Tag = NextDeviceTag++;
  DeviceOp Op{C, FrameType::Invoke, About.Seq, About.CodeId, ""};
  if (Error E = Device->launch(C, L, Payload, Tag)) {
    // Reported after the connection's earlier launches, as their errors
    // are: behind a fence.
    Op.Refused = formatv("ifunc '{0}' ({1}) could not be launched: {2}",
                         L.Name, toHex(L.Hash).substr(0, 16),
                         toString(std::move(E)))
                     .str();
    DeviceOps.emplace(Tag, std::move(Op));
    Device->fence(C, Tag);
    return;
  }
  DeviceOps.emplace(Tag, std::move(Op));
}

void Runtime::queueOnDevice(ConnId C, const Frame &F) {
  uint64_t Tag = NextDeviceTag++;
  DeviceOps.emplace(Tag, DeviceOp{C, F.Type, F.Seq, F.CodeId, ""});
  if (F.Type == FrameType::Fence)
    Device->fence(C, Tag);
  else
    Device->read(C, F.Length, Tag);
}

bool Runtime::pollDevice() {
  return Device->poll([this](DeviceDone &D) { deviceDone(D); });
}

void Runtime::deviceDone(DeviceDone &D) {
  auto It = DeviceOps.find(D.Tag);
  if (It == DeviceOps.end())
    return; // Not ours: cannot happen.
  DeviceOp Op = std::move(It->second);
  DeviceOps.erase(It);
  bool Open = Conns.count(Op.Conn) != 0; // Else only counted.
  Frame About;
  About.Type = Op.Type;
  About.Seq = Op.Seq;
  About.CodeId = Op.CodeId;
  switch (Op.Type) {
  case FrameType::Invoke: {
    if (D.Ok && Op.Refused.empty()) {
      ++Counters.Executed;
      return;
    }
    const std::string &Why = Op.Refused.empty() ? D.Why : Op.Refused;
    if (Open) {
      sendError(Op.Conn, About, deviceFaultStatus(Op.Conn), Why);
    } else {
      ++Counters.Errors[WireStatus::DeviceFault];
      event(formatv("error seq={0} code={1}: {2}: {3}", Op.Seq, Op.CodeId,
                    wireStatusName(WireStatus::DeviceFault), Why));
    }
    return;
  }
  case FrameType::Fence:
    if (Open) {
      Frame R;
      R.Type = FrameType::FenceDone;
      R.Seq = Op.Seq;
      sendFrame(Op.Conn, R, StringRef(), nullptr);
    }
    return;
  case FrameType::RegionRead:
    if (!Open)
      return;
    if (!D.Ok) {
      sendError(Op.Conn, About, WireStatus::NoRegion, D.Why);
      return;
    }
    {
      Frame R;
      R.Type = FrameType::RegionData;
      R.Seq = Op.Seq;
      R.Data = D.Data;
      sendFrame(Op.Conn, R, R.Data, nullptr);
    }
    return;
  default:
    return;
  }
}

} // namespace tc
