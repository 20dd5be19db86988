//===- RuntimeDeviceTest.cpp - The protocol engine with a device ----------===//
//
// A target Runtime with a DeviceTarget (RuntimeOptions::Device), as
// tc-serve --gpu has, over the loopback transport. The device here runs no
// code: it records what it is asked and finishes each operation when the
// test lets it, adding 1 to a word of its own "region" per launch, or
// failing a launch whose payload says "fault". What is tested is the
// protocol around a device: the Hello names it, the sender ships its
// member, the target loads it there (or runs the CPU member), launches in
// order, answers fences and region reads only after the connection's
// launches, and reports a failed launch as DeviceFault (SandboxTrap to an
// older peer). GpuTarget itself is tested on a GPU (test/lit/gpu).
//
//===----------------------------------------------------------------------===//

#include "IfuncIR.h"
#include "protocol/Runtime.h"

#include "llvm/Support/Endian.h"

#include "gtest/gtest.h"

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>

using namespace tc;
using namespace tc::test;

namespace {

/// A device that runs nothing (above).
class StandInDevice final : public DeviceTarget {
public:
  struct Launch {
    uint64_t Conn;
    std::string Name, Payload;
  };
  std::vector<Launch> Launches;
  std::vector<std::string> Loaded, Unloaded;
  std::vector<uint64_t> Closed;
  /// While set, poll() finishes nothing.
  bool Hold = false;
  uint64_t Region = 0; ///< The word launches add to.

  std::string triple() const override { return "nvptx64-nvidia-cuda"; }
  std::string arch() const override { return "sm_90"; }
  uint32_t driverVersion() const override { return 13000; }
  const Member *memberFor(const Archive &A) const override {
    auto M = selectMember(A, triple(), arch(), Role::Target,
                          ImageKind::Bitcode);
    if (!M) {
      llvm::consumeError(M.takeError());
      return nullptr;
    }
    return *M;
  }
  llvm::Expected<const LoadedIfunc &> load(const Archive &A,
                                           const Member &M) override {
    std::lock_guard<std::mutex> L(Mu); // Loads run on the compile helper.
    LoadedIfunc &I = Code[A.Hash];
    I.Hash = A.Hash;
    I.Name = A.Name;
    I.MemberTriple = M.Triple;
    I.MemberCPU = M.CPU;
    I.Device = this;
    Loaded.push_back(A.Name);
    return I;
  }
  const LoadedIfunc *find(const ArchiveHash &H) const override {
    std::lock_guard<std::mutex> L(Mu);
    auto It = Code.find(H);
    return It == Code.end() ? nullptr : &It->second;
  }
  void unload(const ArchiveHash &H) override {
    std::lock_guard<std::mutex> L(Mu);
    auto It = Code.find(H);
    if (It == Code.end())
      return;
    Unloaded.push_back(It->second.Name);
    Code.erase(It);
  }
  std::string describe(const LoadedIfunc &) const override {
    return "on the stand-in device";
  }
  llvm::Error launch(uint64_t Conn, const LoadedIfunc &L,
                     llvm::StringRef Payload, uint64_t Tag) override {
    if (Payload == "refuse")
      return llvm::createStringError("refused at launch");
    Launches.push_back({Conn, L.Name, Payload.str()});
    Queue.push_back({DeviceDone::Launch, Conn, Tag, L.Name, Payload.str(), 0});
    return llvm::Error::success();
  }
  void fence(uint64_t Conn, uint64_t Tag) override {
    Queue.push_back({DeviceDone::Fence, Conn, Tag, "", "", 0});
  }
  void read(uint64_t Conn, uint64_t Length, uint64_t Tag) override {
    Queue.push_back({DeviceDone::Read, Conn, Tag, "", "", Length});
  }
  bool busy() const override { return !Queue.empty(); }
  void closeConnection(uint64_t Conn) override { Closed.push_back(Conn); }
  bool poll(llvm::function_ref<void(DeviceDone &)> Done) override {
    if (Hold || Queue.empty())
      return false;
    while (!Queue.empty()) {
      Op O = std::move(Queue.front());
      Queue.pop_front();
      DeviceDone D;
      D.What = O.What;
      D.Conn = O.Conn;
      D.Tag = O.Tag;
      if (O.What == DeviceDone::Launch) {
        if (O.Payload == "fault") {
          D.Ok = false;
          D.Why = "ifunc '" + O.Name + "' faulted on the stand-in device";
        } else {
          ++Region;
        }
      } else if (O.What == DeviceDone::Read) {
        std::string Bytes(8, '\0');
        llvm::support::endian::write64le(Bytes.data(), Region);
        D.Data = Bytes.substr(0, O.Length);
      }
      Done(D);
    }
    return true;
  }

private:
  struct Op {
    DeviceDone::Kind What;
    uint64_t Conn, Tag;
    std::string Name, Payload;
    uint64_t Length;
  };
  std::deque<Op> Queue;
  mutable std::mutex Mu;
  std::map<ArchiveHash, LoadedIfunc> Code;
};

/// An nvptx64 member (bitcode for the triple; the stand-in never runs it).
Member gpuMember(const std::string &Name, const std::string &CPU) {
  llvm::LLVMContext Ctx;
  llvm::SMDiagnostic Diag;
  std::string IR = "target triple = \"nvptx64-nvidia-cuda\"\n"
                   "define ptx_kernel void @__tc_kernel_" +
                   Name + "(ptr %p, i64 %n, ptr %t) {\n  ret void\n}\n";
  std::unique_ptr<llvm::Module> M = llvm::parseAssemblyString(IR, Diag, Ctx);
  EXPECT_TRUE(M) << Diag.getMessage().str();
  Member Mem;
  Mem.Triple = "nvptx64-nvidia-cuda";
  Mem.CPU = CPU;
  llvm::raw_string_ostream OS(Mem.Image);
  llvm::WriteBitcodeToFile(*M, OS);
  OS.flush();
  return Mem;
}

/// An archive whose CPU member adds the payload's first word to the
/// host's target_args, with a GPU member for \p GpuCPU (none if empty).
std::string archive(const std::string &Name, const std::string &GpuCPU) {
  Archive A;
  A.Name = Name;
  A.Members.push_back(hostMember(adderIR(Name)));
  A.Members.push_back(hostMember(copyingSourceIR(Name), Role::Source));
  if (!GpuCPU.empty())
    A.Members.push_back(gpuMember(Name, GpuCPU));
  auto Bytes = writeArchive(A);
  EXPECT_TRUE(!!Bytes);
  return Bytes ? Bytes->str().str() : std::string();
}

struct DevicePair {
  std::shared_ptr<LoopbackHub> Hub = createLoopbackHub();
  std::shared_ptr<StandInDevice> Dev = std::make_shared<StandInDevice>();
  std::unique_ptr<Runtime> Source, Target;
  ConnId Conn = 0;
  uint64_t HostCounter = 0;
  std::vector<RemoteError> Errors;
  std::vector<std::string> Events;

  explicit DevicePair(const Capabilities *SourceSays = nullptr) {
    RuntimeOptions TO;
    TO.Device = Dev;
    auto S = Runtime::create(createLoopbackTransport(Hub));
    auto T = Runtime::create(createLoopbackTransport(Hub), TO);
    EXPECT_TRUE(S && T);
    Source = std::move(*S);
    Target = std::move(*T);
    Target->setTargetArgs(&HostCounter);
    Target->onEvent([this](llvm::StringRef E) { Events.push_back(E.str()); });
    EXPECT_TRUE(!!Target->transport().listen("target", 1));
    auto C = Source->connect("target", 1);
    EXPECT_TRUE(!!C);
    Conn = *C;
    Source->onRemoteError([this](const RemoteError &E) { Errors.push_back(E); });
  }

  bool runUntil(const std::function<bool()> &Done) {
    auto End = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!Done()) {
      if (std::chrono::steady_clock::now() > End)
        return false;
      bool Did = Source->progress();
      Did |= Target->progress();
      if (!Did)
        llvm::consumeError(Target->wait(10));
    }
    return true;
  }
  void settle() {
    for (int I = 0; I < 200; ++I) {
      Source->progress();
      Target->progress();
    }
  }
  std::shared_ptr<const Ifunc> reg(const std::string &Bytes) {
    auto F = Source->registerArchive(Bytes);
    EXPECT_TRUE(!!F) << (F ? "" : llvm::toString(F.takeError()));
    return F ? *F : nullptr;
  }
  void send(const std::shared_ptr<const Ifunc> &F, llvm::StringRef Payload) {
    auto M = Source->createMessage(F, Payload.data(), Payload.size());
    ASSERT_TRUE(!!M) << llvm::toString(M.takeError());
    Source->send(Conn, *M);
  }
  std::string event(llvm::StringRef Prefix) const {
    for (const std::string &E : Events)
      if (llvm::StringRef(E).starts_with(Prefix))
        return E;
    return "";
  }
};

TEST(RuntimeDevice, TheHelloNamesTheDeviceAndTheSenderShipsItsMember) {
  DevicePair P;
  auto F = P.reg(archive("g", "sm_80"));
  ASSERT_TRUE(F);
  P.send(F, std::string("\x01\0\0\0\0\0\0\0", 8));
  bool Done = false;
  P.Source->fence(P.Conn, [&](llvm::Error E) {
    EXPECT_FALSE(!!E);
    llvm::consumeError(std::move(E));
    Done = true;
  });
  ASSERT_TRUE(P.runUntil([&] { return Done; }));
  const Capabilities *Peer = P.Source->peer(P.Conn);
  ASSERT_TRUE(Peer);
  ASSERT_TRUE(Peer->Gpu.has_value());
  EXPECT_EQ(Peer->Gpu->Triple, "nvptx64-nvidia-cuda");
  EXPECT_EQ(Peer->Gpu->Arch, "sm_90");
  EXPECT_EQ(Peer->Gpu->DriverVersion, 13000u);
  // One member shipped (the GPU's), the CPU target and source members as
  // digests; loaded on the device, launched there, not run on the host.
  EXPECT_NE(P.event("code g ").find("1 member(s), 2 omitted"),
            std::string::npos)
      << P.event("code g ");
  EXPECT_NE(P.event("loaded g ").find("member nvptx64-nvidia-cuda sm_80, on "
                                      "the stand-in device"),
            std::string::npos)
      << P.event("loaded g ");
  ASSERT_EQ(P.Dev->Launches.size(), 1u);
  EXPECT_EQ(P.Dev->Launches[0].Name, "g");
  EXPECT_EQ(P.Dev->Launches[0].Payload.size(), 8u);
  EXPECT_EQ(P.HostCounter, 0u);
  EXPECT_EQ(P.Target->counters().Executed, 1u);
  EXPECT_TRUE(P.Errors.empty());
}

TEST(RuntimeDevice, AnArchiveWithoutAMemberForTheDeviceRunsOnTheHost) {
  DevicePair P;
  auto F = P.reg(archive("cpuonly", "")); // and one for a newer GPU:
  auto N = P.reg(archive("newer", "sm_100"));
  ASSERT_TRUE(F && N);
  P.send(F, std::string("\x05\0\0\0\0\0\0\0", 8));
  P.send(N, std::string("\x07\0\0\0\0\0\0\0", 8));
  bool Done = false;
  P.Source->fence(P.Conn, [&](llvm::Error E) {
    llvm::consumeError(std::move(E));
    Done = true;
  });
  ASSERT_TRUE(P.runUntil([&] { return Done; }));
  EXPECT_EQ(P.HostCounter, 12u);
  EXPECT_TRUE(P.Dev->Launches.empty());
  EXPECT_TRUE(P.Dev->Loaded.empty());
  EXPECT_NE(P.event("code newer ").find("1 member(s), 2 omitted"),
            std::string::npos);
  EXPECT_TRUE(P.Errors.empty());
}

TEST(RuntimeDevice, FencesAndReadsWaitForTheConnectionsLaunches) {
  DevicePair P;
  auto F = P.reg(archive("g", "sm_90"));
  ASSERT_TRUE(F);
  P.Dev->Hold = true;
  for (int I = 0; I < 3; ++I)
    P.send(F, "x");
  bool Fenced = false;
  std::optional<std::string> Read;
  P.Source->fence(P.Conn, [&](llvm::Error E) {
    llvm::consumeError(std::move(E));
    Fenced = true;
  });
  P.Source->readRegion(P.Conn, 8, [&](llvm::Expected<std::string> D) {
    Read = D ? *D : llvm::toString(D.takeError());
  });
  ASSERT_TRUE(P.runUntil([&] { return P.Dev->Launches.size() == 3; }));
  P.settle();
  // The device holds the launches: the fence and the read wait for them.
  EXPECT_FALSE(Fenced);
  EXPECT_FALSE(Read.has_value());
  EXPECT_TRUE(P.Dev->busy());
  P.Dev->Hold = false;
  ASSERT_TRUE(P.runUntil([&] { return Fenced && Read.has_value(); }));
  EXPECT_EQ(*Read, std::string("\x03\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(P.Target->counters().Executed, 3u);
}

TEST(RuntimeDevice, AFailedLaunchIsADeviceFaultAndTheTargetGoesOn) {
  DevicePair P;
  auto F = P.reg(archive("g", "sm_90"));
  ASSERT_TRUE(F);
  P.send(F, "a");
  P.send(F, "fault");
  P.send(F, "refuse");
  P.send(F, "b");
  bool Done = false;
  std::optional<std::string> Read;
  P.Source->readRegion(P.Conn, 8, [&](llvm::Expected<std::string> D) {
    Read = D ? *D : llvm::toString(D.takeError());
    Done = true;
  });
  ASSERT_TRUE(P.runUntil([&] { return Done; }));
  ASSERT_EQ(P.Errors.size(), 2u);
  // The error about the fault comes before the read's answer, in order.
  EXPECT_EQ(P.Errors[0].Seq, 2u); // a is 1, fault 2, refuse 3, b 4.
  EXPECT_EQ(P.Errors[0].Status, WireStatus::DeviceFault);
  EXPECT_EQ(P.Errors[0].Message, "ifunc 'g' faulted on the stand-in device");
  EXPECT_EQ(P.Errors[1].Seq, 3u);
  EXPECT_EQ(P.Errors[1].Status, WireStatus::DeviceFault);
  EXPECT_NE(P.Errors[1].Message.find("ifunc 'g' ("), std::string::npos);
  EXPECT_NE(P.Errors[1].Message.find(
                "could not be launched: refused at launch"),
            std::string::npos)
      << P.Errors[1].Message;
  EXPECT_EQ(*Read, std::string("\x02\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(P.Target->counters().Executed, 2u);
  EXPECT_EQ(P.Target->counters().Errors.at(WireStatus::DeviceFault), 2u);
}

TEST(RuntimeDevice, EvictionUnloadsFromTheDeviceAndDisconnectsCloseItsQueue) {
  DevicePair P;
  auto F = P.reg(archive("g", "sm_90"));
  ASSERT_TRUE(F);
  P.send(F, "a");
  ASSERT_TRUE(P.runUntil([&] { return P.Dev->Launches.size() == 1; }));
  P.settle();
  P.Target->evictAll();
  ASSERT_EQ(P.Dev->Unloaded.size(), 1u);
  EXPECT_EQ(P.Dev->Unloaded[0], "g");
  // The next message asks for the code again and loads it again.
  P.send(F, "b");
  ASSERT_TRUE(P.runUntil([&] { return P.Dev->Launches.size() == 2; }));
  EXPECT_EQ(P.Dev->Loaded.size(), 2u);
  P.Source->transport().disconnect(P.Conn);
  ASSERT_TRUE(P.runUntil([&] { return !P.Dev->Closed.empty(); }));
}

/// A peer played by hand over the loopback transport: it says Hello with
/// the capabilities it is given and collects the frames it gets.
struct RawPeer : TransportHandler {
  std::unique_ptr<Transport> T;
  std::vector<Frame> Got;
  std::vector<std::string> Bodies; ///< What Got's views point into.
  void onFrame(ConnId, llvm::StringRef Header, llvm::StringRef Body) override {
    Bodies.push_back((Header + Body).str());
    auto F = decodeFrame(Bodies.back());
    if (F)
      Got.push_back(*F);
    else
      llvm::consumeError(F.takeError());
  }
  void onDisconnect(ConnId, llvm::StringRef) override {}
};

TEST(RuntimeDevice, APeerOlderThanWireVersion3GetsASandboxTrapForAFault) {
  DevicePair P;
  RawPeer Old;
  Old.T = createLoopbackTransport(P.Hub);
  Old.T->setHandler(&Old);
  auto C = Old.T->connect("target", 1);
  ASSERT_TRUE(!!C);
  Capabilities Caps = P.Source->capabilities();
  Caps.WireMax = 2; // Knows no DeviceFault.
  std::string Hello = encodeCapabilities(Caps);
  Frame H;
  H.Type = FrameType::Hello;
  H.Data = Hello;
  std::string Header;
  encodeFrameHeader(H, Header);
  Old.T->send(*C, Header, Hello, nullptr);
  // An Invoke carrying the whole archive (the target picks its member).
  std::string Bytes = archive("g", "sm_90");
  auto A = readArchive(llvm::MemoryBufferRef(Bytes, "g"));
  ASSERT_TRUE(!!A);
  Frame I;
  I.Type = FrameType::Invoke;
  I.Flags = FrameHasCode;
  I.Seq = 1;
  I.CodeId = 1;
  I.Hash = A->Hash;
  I.Payload = "fault";
  I.Archive = Bytes;
  std::string Full = encodeFrame(I);
  auto HSize = frameHeaderSize(Full);
  ASSERT_TRUE(!!HSize);
  Old.T->send(*C, llvm::StringRef(Full).take_front(*HSize),
              llvm::StringRef(Full).drop_front(*HSize), nullptr);
  auto HasError = [&] {
    for (const Frame &F : Old.Got)
      if (F.Type == FrameType::Error)
        return true;
    return false;
  };
  ASSERT_TRUE(P.runUntil([&] {
    Old.T->progress();
    return HasError();
  }));
  for (const Frame &F : Old.Got)
    if (F.Type == FrameType::Error) {
      EXPECT_EQ(F.Status, WireStatus::SandboxTrap);
      EXPECT_EQ(F.Seq, 1u);
      EXPECT_EQ(F.Message, "ifunc 'g' faulted on the stand-in device");
    }
}

} // namespace
