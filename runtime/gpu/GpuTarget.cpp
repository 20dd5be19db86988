//===- GpuTarget.cpp - Run ifuncs' GPU members on one CUDA device ---------===//

#include "gpu/GpuTarget.h"
#include "gpu/GpuCache.h"
#include "gpu/GpuWorker.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

using namespace llvm;
using namespace tc::gpu;

namespace tc {

/// Staging pieces are aligned to this.
constexpr size_t StageAlign = 256;
/// How often the owner thread looks whether its worker still runs.
constexpr uint64_t LivenessCheckNs = 1000000;
/// A worker that stops turning its loop for this long (or twice the time
/// limit, if longer) while work is in flight is ended: it is stuck in the
/// driver. Only with a time limit, which asks for runaways to be stopped.
constexpr uint64_t StallNs = 1000000000;

/// A command of a connection that the worker has not answered yet.
struct GpuTarget::Pending {
  CmdKind Kind = CmdKind::Fence;
  uint64_t Seq = 0;     ///< The command's tag.
  uint64_t Tag = 0;     ///< The Runtime's, when Answers.
  bool Answers = false; ///< The last command of a Runtime operation.
  GpuKernel *Kernel = nullptr; ///< Launch.
  Alloc *Mem = nullptr;
  std::shared_ptr<std::string> Data; ///< Read: the whole answer.
  uint64_t DataOff = 0, Len = 0;     ///< Read: this piece.
};

/// An operation of the Runtime on its way into commands.
struct GpuTarget::Work {
  DeviceDone::Kind What = DeviceDone::Fence;
  bool Close = false;
  uint64_t Conn = 0, Tag = 0;
  GpuKernel *Kernel = nullptr;
  StringRef Payload;
  std::string Owned; ///< The payload, once it is held back.
  uint64_t Length = 0;
  // How far it went.
  uint64_t Big = 0, Sent = 0;
  std::shared_ptr<std::string> Data;
};

/// A load, prewarm or cache link the worker answers.
struct GpuTarget::Request {
  CmdKind Kind = CmdKind::Load;
  bool Waited = false; ///< Someone waits for the answer.
  bool Done = false, Ok = false;
  bool WorkerEnded = false;
  std::string Error;
  uint64_t A = 0, B = 0, C = 0;
  Alloc *Mem = nullptr;
  uint32_t Kernel = 0;
  std::string About; ///< A reload: "ifunc 'NAME' (HASH) from ...".
};

void GpuTarget::event(const Twine &Msg) {
  if (EventCB)
    EventCB(Msg.str());
}

static std::string doneText(const Done &R) {
  return std::string(R.Text, R.TextLen);
}

//===----------------------------------------------------------------------===//
// Start-up
//===----------------------------------------------------------------------===//

Expected<std::unique_ptr<GpuTarget>> GpuTarget::create(const GpuOptions &O) {
  std::unique_ptr<GpuTarget> G(new GpuTarget());
  G->Opts = O;
  G->Owner = std::this_thread::get_id();
  if (O.RegionSize == 0)
    return createStringError("a GPU target needs a region of at least 1 byte");
  G->Opts.StagingBytes = std::max<size_t>(
      alignTo(O.StagingBytes, 65536), size_t(1) << 20);
  GpuInfo &I = G->Info;
  I.Device = O.Device;
  I.Library = O.Library;
  if (I.Library.empty()) {
    const char *Env = std::getenv(cuda::DriverLibraryEnv);
    I.Library = Env && *Env ? Env : cuda::DefaultDriverLibrary;
  }

  // The memory shared with the worker.
  G->Bytes = channelBytes(G->Opts.StagingBytes);
  G->ShmFd = ::memfd_create("tc-gpu-channel", MFD_CLOEXEC);
  if (G->ShmFd < 0 || ::ftruncate(G->ShmFd, off_t(G->Bytes)) != 0)
    return createStringError(
        std::string("cannot make the memory a GPU target shares with its "
                    "worker: ") +
        std::strerror(errno));
  G->Base = ::mmap(nullptr, G->Bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                   G->ShmFd, 0);
  if (G->Base == MAP_FAILED) {
    G->Base = nullptr;
    return createStringError(
        std::string("cannot map the memory a GPU target shares with its "
                    "worker: ") +
        std::strerror(errno));
  }
  G->Ch.attach(G->Base, G->Opts.StagingBytes, /*Init=*/true);
  G->Ch.H->Tracing.store(O.Trace);

  {
    std::unique_lock<std::mutex> L(G->Mu);
    if (Error E = G->startWorker())
      return std::move(E);
    if (Error E = G->readHello(/*Block=*/true))
      return std::move(E);
  }

  unsigned Ptx = ptxVersionForDriver(I.DriverVersion);
  Expected<std::unique_ptr<PtxCompiler>> PC = PtxCompiler::create(I.Arch, Ptx);
  if (!PC)
    return createStringError("CUDA device " + std::to_string(O.Device) + " (" +
                             I.Name + ", " + I.Arch + ", driver " +
                             cuda::driverVersionText(I.DriverVersion) +
                             "): " + toString(PC.takeError()));
  G->Ptx = std::move(*PC);
  I.CodeArch = G->Ptx->arch();
  I.PtxVersion = G->Ptx->ptxVersion();
  if (!O.CacheDir.empty())
    if (std::error_code EC = sys::fs::create_directories(O.CacheDir))
      return createStringError(EC, "cache directory '%s': %s",
                               O.CacheDir.c_str(), EC.message().c_str());

  if (O.Prewarm) {
    // Lower a built-in kernel once and have the worker JIT it: LLVM's NVPTX
    // paths and the driver's JIT (whose first compile in a process costs
    // several times a later one) are then warm for the first real load.
    uint64_t Start = monoNanos();
    Expected<std::string> P = G->Ptx->prewarm();
    if (!P)
      return P.takeError();
    G->PrewarmPtx = std::move(*P);
    std::unique_lock<std::mutex> L(G->Mu);
    Expected<uint64_t> Seq =
        G->request(CmdKind::Prewarm, 0, FlagPtx, 1, G->PrewarmPtx,
                   ptxKernelName("tc_prewarm"));
    if (!Seq)
      return createStringError("prewarming the GPU: " +
                               toString(Seq.takeError()));
    Request R;
    if (Error E = G->await(*Seq, R))
      return createStringError("prewarming the GPU: " + toString(std::move(E)));
    if (!R.Ok)
      return createStringError("prewarming the GPU: " + R.Error);
    I.PrewarmMillis = double(monoNanos() - Start) / 1e6;
  }
  return std::move(G);
}

Error GpuTarget::startWorker() {
  std::string Exe = Opts.WorkerPath;
  if (Exe.empty()) {
    char Buf[PATH_MAX];
    ssize_t N = ::readlink("/proc/self/exe", Buf, sizeof Buf - 1);
    if (N <= 0)
      return createStringError(
          std::string("cannot find this program to start its GPU worker: ") +
          std::strerror(errno));
    Exe.assign(Buf, size_t(N));
  }
  int SP[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, SP) != 0)
    return createStringError(
        std::string("cannot start the GPU worker: socketpair: ") +
        std::strerror(errno));
  GpuWorkerOptions W;
  W.ShmFd = ShmFd;
  W.SockFd = SP[1];
  W.Parent = long(::getpid());
  W.Device = Opts.Device;
  W.RegionSize = Opts.RegionSize;
  W.StagingBytes = Opts.StagingBytes;
  W.MaxRunMs = Opts.MaxRunMs;
  W.Library = Opts.Library;
  W.Trace = Opts.Trace;
  std::vector<std::string> Args = gpuWorkerArgs(W);
  Args.insert(Args.begin(), Exe);
  std::vector<char *> Argv;
  for (std::string &A : Args)
    Argv.push_back(A.data());
  Argv.push_back(nullptr);
  static const char Failed[] = "error cannot run the GPU worker ";
  // Only async-signal-safe calls between fork and exec.
  pid_t P = ::fork();
  if (P == 0) {
    sigset_t None;
    sigemptyset(&None);
    ::sigprocmask(SIG_SETMASK, &None, nullptr);
    // The worker inherits the channel and its socket, nothing else (a
    // listening socket of ours must not outlive us in it).
    if (::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0)
      for (int Fd = 3; Fd < 4096; ++Fd)
        ::fcntl(Fd, F_SETFD, FD_CLOEXEC);
    ::fcntl(ShmFd, F_SETFD, 0);
    ::fcntl(SP[1], F_SETFD, 0);
    ::execv(Exe.c_str(), Argv.data());
    (void)!::write(SP[1], Failed, sizeof Failed - 1);
    (void)!::write(SP[1], Exe.c_str(), Exe.size());
    (void)!::write(SP[1], "\n", 1);
    ::_exit(127);
  }
  ::close(SP[1]);
  if (P < 0) {
    ::close(SP[0]);
    return createStringError(std::string("cannot start the GPU worker: fork: ") +
                             std::strerror(errno));
  }
  ::fcntl(SP[0], F_SETFL, O_NONBLOCK);
  Sock = SP[0];
  Pid = P;
  State = WorkerState::Starting;
  ++Generation;
  Hello.clear();
  StartNs = LastBeatNs = LastCheckNs = monoNanos();
  LastBeat = Ch.H->Heartbeat.load(std::memory_order_relaxed);
  return Error::success();
}

Error GpuTarget::readHello(bool Block) {
  uint64_t Deadline = StartNs + uint64_t(Opts.StartTimeoutMs) * 1000000u;
  for (;;) {
    size_t NL;
    while ((NL = Hello.find('\n')) != std::string::npos) {
      std::string Line = Hello.substr(0, NL);
      Hello.erase(0, NL + 1);
      StringRef Key, Value;
      std::tie(Key, Value) = StringRef(Line).split(' ');
      if (Key == "error")
        return createStringError(Value.str());
      // The first worker's facts are the device's; later workers find the
      // same device (and other threads read Info meanwhile).
      if (Generation > 1 && Key != "ready")
        continue;
      if (Key == "name")
        Info.Name = Value.str();
      else if (Key == "arch")
        Info.Arch = Value.str();
      else if (Key == "driver")
        Value.getAsInteger(10, Info.DriverVersion);
      else if (Key == "sms")
        Value.getAsInteger(10, Info.Multiprocessors);
      else if (Key == "memory")
        Value.getAsInteger(10, Info.Memory);
      else if (Key == "staging")
        Info.StagingCopied =
            Value.starts_with("copied") ? Value.drop_front(6).trim().str() : "";
      else if (Key == "ready") {
        double Ms = double(monoNanos() - StartNs) / 1e6;
        if (Generation == 1)
          Info.WorkerStartMillis = Ms;
        else
          event(formatv("gpu: worker {0} (pid {1}) ready in {2:f1} ms",
                        Generation, Pid, Ms));
        State = WorkerState::Ready;
        FailedStarts = 0;
        DownWhy.clear();
        return Error::success();
      }
    }
    char Buf[4096];
    ssize_t N = ::recv(Sock, Buf, sizeof Buf, MSG_DONTWAIT);
    if (N > 0) {
      Hello.append(Buf, size_t(N));
      continue;
    }
    if (N == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      int Status = 0;
      std::string How;
      if (::waitpid(Pid, &Status, 0) == Pid) {
        if (WIFSIGNALED(Status))
          How = formatv(" (killed by signal {0})", WTERMSIG(Status)).str();
        else if (WIFEXITED(Status))
          How = formatv(" (exit status {0})", WEXITSTATUS(Status)).str();
        Pid = -1;
      }
      return createStringError("the GPU worker ended before it was ready" +
                               How);
    }
    if (!Block)
      return Error::success();
    uint64_t Now = monoNanos();
    if (Now >= Deadline) {
      ::kill(Pid, SIGKILL);
      return createStringError(
          formatv("the GPU worker did not start within {0} s (cuInit or the "
                  "device's context did not return)",
                  Opts.StartTimeoutMs / 1000)
              .str());
    }
    pollfd PF{Sock, POLLIN, 0};
    ::poll(&PF, 1, int(std::min<uint64_t>((Deadline - Now) / 1000000 + 1, 500)));
  }
}

GpuTarget::~GpuTarget() {
  // Cubins the worker is still linking for the disk cache are worth a
  // moment (a link takes milliseconds): at most a quarter of a second.
  {
    std::unique_lock<std::mutex> L(Mu);
    uint64_t Until = monoNanos() + 250000000u;
    auto Linking = [&] {
      for (auto &KV : Requests)
        if (KV.second->Kind == CmdKind::CacheLink)
          return true;
      return false;
    };
    while (State == WorkerState::Ready && Linking() && monoNanos() < Until) {
      consume();
      Answered.wait_for(L, std::chrono::milliseconds(1));
    }
  }
  // The worker is ended, not asked: a kernel that never ends ends with it,
  // and nothing here waits on the device.
  if (Pid > 0) {
    ::kill(Pid, SIGKILL);
    Zombies.push_back(Pid);
    Pid = -1;
  }
  reap(/*Wait=*/true);
  if (Sock >= 0)
    ::close(Sock);
  if (Base)
    ::munmap(Base, Bytes);
  if (ShmFd >= 0)
    ::close(ShmFd);
}

void GpuTarget::reap(bool Wait) {
  // A killed worker ends once the driver has torn its context down; wait
  // for that at most half a second on the way out.
  uint64_t Until = monoNanos() + (Wait ? 500000000u : 0u);
  while (!Zombies.empty()) {
    for (auto It = Zombies.begin(); It != Zombies.end();) {
      int Status;
      pid_t R = ::waitpid(*It, &Status, WNOHANG);
      if (R == *It || (R < 0 && errno == ECHILD))
        It = Zombies.erase(It);
      else
        ++It;
    }
    if (Zombies.empty() || monoNanos() >= Until)
      return;
    ::usleep(5000);
  }
}

//===----------------------------------------------------------------------===//
// The channel
//===----------------------------------------------------------------------===//

bool GpuTarget::push(Cmd &C) {
  Header &H = *Ch.H;
  if (CmdHead - H.CmdTail.load(std::memory_order_acquire) >= CmdSlots)
    return false;
  C.Tag = NextSeq++;
  // The trace times the hop of a command that finds the ring empty: the
  // worker's reaction, not the queue behind it.
  C.SentNs = Opts.Trace && CmdHead == H.CmdTail.load(std::memory_order_relaxed)
                 ? monoNanos()
                 : 0;
  Ch.Cmds[CmdHead % CmdSlots] = C;
  H.CmdHead.store(++CmdHead, std::memory_order_seq_cst);
  if (H.Sleeping.load(std::memory_order_seq_cst)) {
    H.Wake.fetch_add(1, std::memory_order_seq_cst);
    futexWakeAll(H.Wake);
  }
  return true;
}

GpuTarget::Alloc *GpuTarget::stage(size_t Size) {
  size_t Cap = Opts.StagingBytes;
  size_t Need = std::max<size_t>(alignTo(Size, StageAlign), StageAlign);
  size_t Begin = SHead;
  if (Begin % Cap + Need > Cap) // Never wraps: skip to the next lap.
    Begin += Cap - Begin % Cap;
  if (Begin + Need - STail > Cap)
    return nullptr;
  // A deque keeps its elements where they are as it grows at the back
  // and shrinks at the front: the pointer stays good until release().
  Alloc &A = Allocs.emplace_back();
  A.Begin = Begin;
  A.End = SHead = Begin + Need;
  return &A;
}

void GpuTarget::release(Alloc *A) {
  if (!A)
    return;
  A->Done = true;
  while (!Allocs.empty() && Allocs.front().Done) {
    STail = Allocs.front().End;
    Allocs.pop_front();
  }
}

void GpuTarget::resetChannel() {
  Header &H = *Ch.H;
  H.CmdHead.store(0);
  H.CmdTail.store(0);
  H.DoneHead.store(0);
  H.DoneTail.store(0);
  H.Sleeping.store(0);
  H.InLongCall.store(0);
  CmdHead = DoneTail = 0;
  SHead = STail = 0;
  Allocs.clear();
  FatalSeen = false;
  SubmittedThrough.clear();
}

void GpuTarget::consume() {
  Header &H = *Ch.H;
  bool Any = false;
  while (DoneTail != H.DoneHead.load(std::memory_order_acquire)) {
    Done R = Ch.Dones[DoneTail % DoneSlots];
    H.DoneTail.store(++DoneTail, std::memory_order_release);
    Any = true;
    if (R.SentNs) {
      H.Pipe.DoneHops.fetch_add(1, std::memory_order_relaxed);
      H.Pipe.DoneHopNs.fetch_add(monoNanos() - R.SentNs,
                                 std::memory_order_relaxed);
    }
    switch (R.Kind) {
    case DoneKind::Through:
    case DoneKind::Failed: {
      auto It = Conns.find(R.Conn);
      if (It == Conns.end())
        break;
      std::deque<Pending> &Q = It->second;
      while (!Q.empty() && Q.front().Seq <= R.Tag) {
        Pending P = std::move(Q.front());
        Q.pop_front();
        bool Failed = R.Kind == DoneKind::Failed && P.Seq == R.Tag;
        std::string Why;
        if (Failed) {
          Why = doneText(R);
          if (P.Kernel)
            Why = formatv("ifunc '{0}' ({1}) could not be launched: {2}",
                          P.Kernel->Info.Name,
                          toHex(P.Kernel->Info.Hash).substr(0, 16), Why)
                      .str();
        }
        finish(R.Conn, P, !Failed, Why);
      }
      if (Q.empty())
        Conns.erase(It);
      break;
    }
    case DoneKind::Loaded:
    case DoneKind::Prewarmed:
    case DoneKind::Linked: {
      auto It = Requests.find(R.Tag);
      if (It == Requests.end())
        break;
      Request &Q = *It->second;
      Q.Done = true;
      Q.Ok = R.Ok;
      Q.Error = doneText(R);
      Q.A = R.A;
      Q.B = R.B;
      Q.C = R.C;
      release(Q.Mem);
      Q.Mem = nullptr;
      if (!Q.Waited) {
        if (!Q.About.empty())
          event(Q.Ok ? formatv("gpu: {0} in {1:f2} ms", Q.About,
                               double(Q.C) / 1e6)
                           .str()
                     : "gpu: " + Q.About + " failed: " + Q.Error);
        Requests.erase(It);
      }
      break;
    }
    case DoneKind::Submitted:
      SubmittedThrough[R.Conn] = R.Tag;
      break;
    case DoneKind::Fatal:
      FatalSeen = true;
      Fatal = R;
      break;
    }
  }
  if (Any)
    Answered.notify_all();
}

void GpuTarget::finish(uint64_t Conn, Pending &P, bool Ok,
                       const std::string &Why) {
  if (P.Kind == CmdKind::Read && P.Mem && P.Len && Ok)
    std::memcpy(P.Data->data() + P.DataOff,
                Ch.Staging + P.Mem->Begin % Opts.StagingBytes, P.Len);
  release(P.Mem);
  P.Mem = nullptr;
  if (P.Kernel)
    landed(*P.Kernel);
  if (!P.Answers)
    return;
  --Answers;
  DeviceDone R;
  R.What = P.Kind == CmdKind::Launch ? DeviceDone::Launch
           : P.Kind == CmdKind::Read ? DeviceDone::Read
                                     : DeviceDone::Fence;
  R.Conn = Conn;
  R.Tag = P.Tag;
  R.Ok = Ok;
  R.Why = Why;
  if (R.What == DeviceDone::Read && P.Data)
    R.Data = std::move(*P.Data);
  Ready.push_back(std::move(R));
}

void GpuTarget::landed(GpuKernel &K) {
  if (--K.Launched || Doomed.empty())
    return;
  // unload() left it here until its last launch was answered.
  for (auto It = Doomed.begin(); It != Doomed.end(); ++It)
    if (It->get() == &K) {
      if (K.Generation == Generation) {
        Cmd C{};
        C.Kind = CmdKind::Unload;
        C.Kernel = K.Id;
        (void)push(C); // No room: the module goes with the worker.
      }
      Doomed.erase(It);
      return;
    }
}

//===----------------------------------------------------------------------===//
// The worker's life
//===----------------------------------------------------------------------===//

void GpuTarget::service() {
  uint64_t Now = monoNanos();
  if (State == WorkerState::Starting) {
    if (Error E = readHello(/*Block=*/false)) {
      std::string Why = toString(std::move(E));
      ++FailedStarts;
      workerGone("the GPU worker could not be started again: " + Why);
      return;
    }
  }
  if (State == WorkerState::Down && Now >= NextRestartNs) {
    if (Error E = startWorker()) {
      ++FailedStarts;
      DownWhy = toString(std::move(E));
      NextRestartNs = Now + (uint64_t(1000000000) << std::min(FailedStarts, 5u));
      event("gpu: " + DownWhy);
    } else if (Opts.Prewarm && !PrewarmPtx.empty()) {
      (void)request(CmdKind::Prewarm, 0, FlagPtx, 1, PrewarmPtx,
                    ptxKernelName("tc_prewarm"), /*Wait=*/false);
    }
  }
  consume();
  if (FatalSeen) {
    workerGone("");
    return;
  }
  if (State != WorkerState::Down && Now - LastCheckNs >= LivenessCheckNs) {
    LastCheckNs = Now;
    if (State == WorkerState::Ready) {
      char C;
      ssize_t N = ::recv(Sock, &C, 1, MSG_DONTWAIT);
      if (N == 0 ||
          (N < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        consume(); // What it said before it ended.
        int Status = 0;
        std::string How = "ended";
        if (!FatalSeen && ::waitpid(Pid, &Status, WNOHANG) == Pid) {
          if (WIFSIGNALED(Status))
            How = formatv("was killed by signal {0}", WTERMSIG(Status)).str();
          else if (WIFEXITED(Status))
            How = formatv("exited with status {0}", WEXITSTATUS(Status)).str();
          Pid = -1;
        }
        workerGone(FatalSeen ? std::string()
                             : formatv("the GPU worker {0}", How).str());
        return;
      }
    }
    // A worker that stops turning its loop with work in flight is stuck in
    // a driver call: with a time limit, it is ended too.
    uint64_t Beat = Ch.H->Heartbeat.load(std::memory_order_relaxed);
    if (Beat != LastBeat || !Answers || State != WorkerState::Ready ||
        Ch.H->InLongCall.load(std::memory_order_relaxed)) {
      LastBeat = Beat;
      LastBeatNs = Now;
    } else if (Opts.MaxRunMs &&
               Now - LastBeatNs >
                   std::max<uint64_t>(StallNs,
                                      uint64_t(Opts.MaxRunMs) * 2000000u)) {
      workerGone(formatv("the GPU worker stopped answering for {0} ms (a "
                         "driver call did not return)",
                         (Now - LastBeatNs) / 1000000)
                     .str());
      return;
    }
  }
  if (!Zombies.empty())
    reap(false);
  issueHeldBack();
}

void GpuTarget::workerGone(const std::string &Cause) {
  consume();
  bool Overran = FatalSeen && Fatal.A == 1;
  std::string Why = FatalSeen ? doneText(Fatal) : Cause;
  auto Suspect = [&](uint64_t Conn, const Pending &P) {
    if (P.Kind != CmdKind::Launch)
      return false;
    if (Overran)
      return Conn == Fatal.Conn && P.Seq >= Fatal.B && P.Seq <= Fatal.Tag;
    if (FatalSeen) { // It said what the device had.
      auto It = SubmittedThrough.find(Conn);
      return It != SubmittedThrough.end() && P.Seq <= It->second;
    }
    return true; // It ended without a word: any launch may be why.
  };
  auto Who = [](const GpuKernel *K, uint64_t Conn) {
    return formatv("ifunc '{0}' ({1}) from connection {2}", K->Info.Name,
                   toHex(K->Info.Hash).substr(0, 16), Conn)
        .str();
  };
  unsigned Suspects = 0;
  std::string Culprit;
  for (auto &KV : Conns)
    for (const Pending &P : KV.second)
      if (Suspect(KV.first, P) && !Suspects++)
        Culprit = Who(P.Kernel, KV.first);
  if (Suspects > 1)
    Culprit = formatv("one of {0} launches ({1}, ...)", Suspects, Culprit);
  bool Started = !StringRef(Why).starts_with("the GPU worker could not be started");
  std::string After = !Suspects ? "a failure (" + Why + ")"
                      : Overran ? Culprit + " " + Why
                                : Culprit + " faulted: " + Why;
  const char *Lost = "; the GPU worker was started again and the region's "
                     "contents are lost";
  unsigned NFaulted = 0, NLost = 0;
  for (auto &KV : Conns) {
    for (Pending &P : KV.second) {
      std::string Text;
      bool Ok = true;
      if (P.Kind == CmdKind::Launch && P.Answers) {
        Ok = false;
        std::string W = Who(P.Kernel, KV.first);
        if (!Started) {
          ++NLost;
          Text = W + " did not run: " + Why;
        } else if (!Suspect(KV.first, P)) {
          ++NLost;
          Text = W + " did not run, or its effects were lost: the GPU worker "
                     "was started again after " +
                 After;
        } else if (Overran) {
          ++NFaulted;
          std::string Which =
              Suspects > 1
                  ? formatv(" (this message or one of the {0} launched with "
                            "it)",
                            Suspects - 1)
                        .str()
                  : "";
          Text = W + Which + " " + Why + " and was stopped" + Lost;
        } else {
          ++NFaulted;
          std::string Which =
              Suspects > 1
                  ? formatv(", or one of the {0} other launches in flight "
                            "with it did",
                            Suspects - 1)
                        .str()
                  : "";
          Text = W + " faulted on the GPU" + Which + ": " + Why + Lost;
        }
      } else if (P.Kind == CmdKind::Read && P.Answers && P.Data) {
        // The region of the next worker: zeroed.
        std::fill(P.Data->begin(), P.Data->end(), '\0');
      }
      P.Len = 0; // Nothing to copy out of staging.
      finish(KV.first, P, Ok, Text);
    }
  }
  Conns.clear();
  Answers = 0;
  for (auto &KV : Requests) {
    Request &Q = *KV.second;
    Q.Mem = nullptr;
    if (Q.Waited && !Q.Done) {
      Q.Done = true;
      Q.WorkerEnded = true;
      Q.Error = "the GPU worker ended: " + After;
    }
  }
  for (auto It = Requests.begin(); It != Requests.end();)
    It = It->second->Waited ? std::next(It) : Requests.erase(It);
  Answered.notify_all();
  Counters.Faults += NFaulted;
  Counters.Lost += NLost;
  if (Overran)
    Counters.Overruns += NFaulted;
  if (Pid > 0) {
    ::kill(Pid, SIGKILL);
    Zombies.push_back(Pid);
    Pid = -1;
  }
  if (Sock >= 0)
    ::close(Sock);
  Sock = -1;
  resetChannel();
  State = WorkerState::Down;
  if (!Started) {
    DownWhy = Why;
    NextRestartNs =
        monoNanos() + (uint64_t(1000000000) << std::min(FailedStarts, 5u));
    event(formatv("gpu: {0}; trying again in {1} s", Why,
                  1u << std::min(FailedStarts, 5u)));
    return;
  }
  ++Counters.Restarts;
  event(formatv("gpu: worker {0} ended after {1}: {2} launch(es) failed, {3} "
                "lost; starting another (the region is zeroed)",
                Generation, After, NFaulted, NLost));
  NextRestartNs = 0;
  service(); // Starts the next worker now.
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

const Member *GpuTarget::memberFor(const Archive &A) const {
  Expected<const Member *> M =
      selectMember(A, NvptxTriple, Info.Arch, Role::Target, ImageKind::Bitcode);
  if (!M) {
    consumeError(M.takeError());
    return nullptr;
  }
  return *M;
}

const GpuKernel *GpuTarget::kernel(const ArchiveHash &H) const {
  std::lock_guard<std::mutex> L(KernelsMutex);
  auto It = Kernels.find(H);
  return It == Kernels.end() ? nullptr : It->second.get();
}

const LoadedIfunc *GpuTarget::find(const ArchiveHash &H) const {
  const GpuKernel *K = kernel(H);
  return K ? &K->Info : nullptr;
}

std::string GpuTarget::cacheKey(const Archive &A, const Member &M,
                                StringRef CodeArch) const {
  return CacheKey()
      .field("tc-cubin-cache-v1")
      .field(StringRef(reinterpret_cast<const char *>(A.Hash.data()),
                       A.Hash.size()))
      .field(M.Triple)
      .field(M.CPU)
      .field(M.Features)
      .field(CodeArch)
      .field(std::to_string(Info.PtxVersion))
      .field(Info.Arch)
      .field(std::to_string(Info.DriverVersion))
      .field(LLVM_VERSION_STRING)
      .hex();
}

Expected<uint64_t> GpuTarget::request(CmdKind Kind, uint32_t Kernel,
                                      uint8_t Flags, uint64_t A,
                                      const std::string &Image,
                                      const std::string &Tail, bool Wait) {
  size_t Len = Image.size() + 1 + Tail.size() + 1;
  if (Len > Opts.StagingBytes / 2)
    return createStringError(
        formatv("its code ({0} bytes) is larger than half of the GPU staging "
                "area ({1} bytes)",
                Image.size(), Opts.StagingBytes)
            .str());
  Alloc *M = nullptr;
  if (CmdHead - Ch.H->CmdTail.load(std::memory_order_acquire) < CmdSlots)
    M = stage(Len);
  if (!M)
    return createStringError("the GPU staging area is full");
  char *P = Ch.Staging + M->Begin % Opts.StagingBytes;
  std::memcpy(P, Image.data(), Image.size());
  P[Image.size()] = '\0';
  std::memcpy(P + Image.size() + 1, Tail.data(), Tail.size());
  P[Image.size() + 1 + Tail.size()] = '\0';
  Cmd C{};
  C.Kind = Kind;
  C.Flags = Flags;
  C.Kernel = Kernel;
  C.Off = M->Begin % Opts.StagingBytes;
  C.Len = Image.size();
  C.A = A;
  (void)push(C); // Room was checked above.
  auto R = std::make_unique<Request>();
  R->Kind = Kind;
  R->Waited = Wait;
  R->Mem = M;
  R->Kernel = Kernel;
  Requests[C.Tag] = std::move(R);
  return C.Tag;
}

Error GpuTarget::await(uint64_t Seq, Request &Out) {
  // Called with Mu held by the caller's unique_lock (create, load).
  std::unique_lock<std::mutex> L(Mu, std::adopt_lock);
  for (;;) {
    auto It = Requests.find(Seq);
    if (It == Requests.end()) {
      L.release();
      return createStringError("the GPU worker's answer was lost");
    }
    if (It->second->Done) {
      Out = std::move(*It->second);
      Requests.erase(It);
      L.release();
      return Error::success();
    }
    if (owner()) {
      service();
      if (State == WorkerState::Starting) {
        // A worker that is starting cannot answer yet: its hello first.
        L.unlock();
        pollfd PF{Sock, POLLIN, 0};
        ::poll(&PF, 1, 1);
        L.lock();
      } else if (State == WorkerState::Down) {
        L.unlock();
        ::usleep(1000);
        L.lock();
      }
    } else {
      consume();
      Answered.wait_for(L, std::chrono::milliseconds(1));
    }
  }
}

Error GpuTarget::loadInWorker(GpuKernel &K, const std::string &Image,
                              bool IsPtx) {
  std::unique_lock<std::mutex> L(Mu);
  uint64_t Deadline = monoNanos() + 60000000000ull;
  for (int Try = 0;; ++Try) {
    if (State == WorkerState::Down && FailedStarts) {
      return createStringError("the GPU worker is not running: " + DownWhy);
    }
    Expected<uint64_t> Seq = request(CmdKind::Load, K.Id, IsPtx ? FlagPtx : 0,
                                     K.Threads, Image, K.Kernel, true);
    if (!Seq) {
      std::string Why = toString(Seq.takeError());
      if (Why != "the GPU staging area is full" || monoNanos() > Deadline)
        return createStringError(Why);
      // Wait for room: the owner's turns free staging.
      if (owner()) {
        service();
      } else {
        consume();
        Answered.wait_for(L, std::chrono::milliseconds(1));
      }
      --Try;
      continue;
    }
    uint64_t Gen = Generation;
    Request R;
    L.release();
    Error E = await(*Seq, R);
    L = std::unique_lock<std::mutex>(Mu, std::adopt_lock);
    if (E)
      return E;
    if (R.Ok) {
      K.Grid = unsigned(R.A);
      K.Block = unsigned(R.B);
      K.JitMillis = double(R.C) / 1e6;
      K.Generation = Gen;
      return Error::success();
    }
    if (!R.WorkerEnded || Try > 0)
      return createStringError(R.Error);
    // Another message's fault ended the worker meanwhile: load it into the
    // next one.
  }
}

Expected<const LoadedIfunc &> GpuTarget::load(const Archive &A,
                                              const Member &M) {
  if (const GpuKernel *K = kernel(A.Hash))
    return K->Info;
  uint64_t Start = monoNanos();
  auto K = std::make_unique<GpuKernel>();
  K->Info.Hash = A.Hash;
  K->Info.Name = A.Name;
  K->Info.Kind = ImageKind::Bitcode;
  K->Info.MemberTriple = M.Triple;
  K->Info.MemberCPU = M.CPU;
  K->Info.Device = K.get();
  K->Kernel = ptxKernelName(A.Name);
  {
    std::lock_guard<std::mutex> L(KernelsMutex);
    K->Id = NextKernel++;
  }
  std::string Id =
      "ifunc '" + A.Name + "' (" + toHex(A.Hash).substr(0, 16) + ")";

  // The sm the PTX is for: the device's, or an "a"/"f" member's own.
  char Suffix = 0;
  K->CodeArch = Info.CodeArch;
  if (parseSmArch(M.CPU, &Suffix) && Suffix)
    K->CodeArch = M.CPU;
  std::optional<uint32_t> Threads;
  std::string Cubin;
  bool Cached = false;
  if (!Opts.CacheDir.empty()) {
    K->CachePath = cubinCachePath(Opts.CacheDir, cacheKey(A, M, K->CodeArch));
    Cached = readCubinCache(K->CachePath, Threads, Cubin);
  }
  if (!Cached) {
    Expected<PtxModule> P = Ptx->compile(M.Image, A.Name, M.CPU);
    if (!P)
      return make_error<LoadError>(LoadFailure::CompileFailed,
                                   toString(P.takeError()));
    K->PtxMillis = double(monoNanos() - Start) / 1e6;
    K->PtxBytes = P->Ptx.size();
    K->Ptx = std::move(P->Ptx);
    Threads = P->Threads;
  }
  K->DeclaredThreads = Threads;
  K->Threads = Threads.value_or(1);
  if (Error E = loadInWorker(*K, Cached ? Cubin : K->Ptx, !Cached))
    return make_error<LoadError>(LoadFailure::CompileFailed,
                                 Id + ": the CUDA driver cannot load its "
                                      "code: " +
                                     toString(std::move(E)));
  if (Cached)
    K->Ptx.clear();
  else if (!K->CachePath.empty()) {
    // The worker links the PTX into a cubin for the disk cache on a thread
    // of its own, after this load: a restarted worker and later targets
    // load that instead of JITting the PTX again.
    std::lock_guard<std::mutex> L(Mu);
    if (Expected<uint64_t> S =
            request(CmdKind::CacheLink, K->Id, 0, Threads.value_or(0), K->Ptx,
                    K->CachePath, /*Wait=*/false);
        !S)
      consumeError(S.takeError()); // Only slower next time.
  }
  K->Info.FromDiskCache = Cached;
  K->Info.LoadMillis = double(monoNanos() - Start) / 1e6;

  std::lock_guard<std::mutex> L(KernelsMutex);
  auto [It, New] = Kernels.try_emplace(A.Hash);
  if (!New) { // Another thread loaded it meanwhile: keep that one.
    std::lock_guard<std::mutex> C(Mu);
    if (K->Generation == Generation) {
      Cmd U{};
      U.Kind = CmdKind::Unload;
      U.Kernel = K->Id;
      (void)push(U);
    }
    return It->second->Info;
  }
  std::lock_guard<std::mutex> C(Mu);
  ++Counters.Loads;
  if (Cached)
    ++Counters.DiskCacheHits;
  It->second = std::move(K);
  return It->second->Info;
}

bool GpuTarget::reload(GpuKernel &K) {
  // A new worker has none of the kernels: the disk cache's cubin, else the
  // PTX kept from the first load.
  std::string Image;
  std::optional<uint32_t> T;
  bool IsPtx = false;
  if (K.CachePath.empty() || !readCubinCache(K.CachePath, T, Image)) {
    Image = K.Ptx;
    IsPtx = true;
  }
  Expected<uint64_t> S = request(CmdKind::Load, K.Id, IsPtx ? FlagPtx : 0,
                                 K.Threads, Image, K.Kernel, /*Wait=*/false);
  if (S)
    Requests[*S]->About =
        formatv("ifunc '{0}' ({1}) loaded into worker {2} from {3}",
                K.Info.Name, toHex(K.Info.Hash).substr(0, 16), Generation,
                IsPtx ? "its PTX" : "the disk cache's cubin")
            .str();
  if (!S) {
    std::string Why = toString(S.takeError());
    if (Why == "the GPU staging area is full")
      return false;
    // It can never fit: the launch is refused by the worker.
    event("gpu: " + Why);
  }
  K.Generation = Generation;
  return true;
}

std::string GpuTarget::describe(const LoadedIfunc &L) const {
  const auto &K = *static_cast<const GpuKernel *>(L.Device);
  // Where a first contact's time went: LLVM's lowering here, the driver's
  // JIT (or cubin load) in the worker.
  return formatv("on gpu {0} as {1}, {2} x {3} threads; {4}, loaded by the "
                 "driver in {5:f2} ms",
                 Info.Device, K.CodeArch, K.Grid, K.Block,
                 L.FromDiskCache
                     ? std::string("a cubin from the disk cache")
                     : formatv("lowered in {0:f2} ms", K.PtxMillis).str(),
                 K.JitMillis)
      .str();
}

void GpuTarget::unload(const ArchiveHash &H) {
  std::unique_ptr<GpuKernel> K;
  {
    std::lock_guard<std::mutex> L(KernelsMutex);
    auto It = Kernels.find(H);
    if (It == Kernels.end())
      return;
    K = std::move(It->second);
    Kernels.erase(It);
  }
  std::lock_guard<std::mutex> L(Mu);
  if (K->Launched) { // Its module goes when its last launch is answered.
    Doomed.push_back(std::move(K));
    return;
  }
  if (K->Generation == Generation) {
    Cmd C{};
    C.Kind = CmdKind::Unload;
    C.Kernel = K->Id;
    (void)push(C);
  }
}

//===----------------------------------------------------------------------===//
// Operations
//===----------------------------------------------------------------------===//

GpuTarget::Pending &GpuTarget::expect(uint64_t Conn, const Cmd &C,
                                      uint64_t Tag, bool Answers, Alloc *Mem) {
  Pending &P = Conns[Conn].emplace_back();
  P.Kind = C.Kind;
  P.Seq = C.Tag;
  P.Tag = Tag;
  P.Answers = Answers;
  P.Mem = Mem;
  this->Answers += Answers;
  return P;
}

bool GpuTarget::issue(Work &W) {
  auto Room = [&] {
    return CmdHead - Ch.H->CmdTail.load(std::memory_order_acquire) < CmdSlots;
  };
  size_t Cap = Opts.StagingBytes;
  char *Staging = Ch.Staging;
  Cmd C{};
  C.Conn = W.Conn;
  if (W.Close) {
    C.Kind = CmdKind::Close;
    return push(C);
  }
  switch (W.What) {
  case DeviceDone::Fence:
    C.Kind = CmdKind::Fence;
    if (!push(C))
      return false;
    expect(W.Conn, C, W.Tag, true, nullptr);
    return true;
  case DeviceDone::Read: {
    if (!W.Data)
      W.Data = std::make_shared<std::string>(W.Length, '\0');
    // In pieces of a quarter of the staging area at most.
    do {
      uint64_t Piece = std::min<uint64_t>(W.Length - W.Sent, Cap / 4);
      if (!Room())
        return false;
      Alloc *A = nullptr;
      if (Piece && !(A = stage(Piece)))
        return false;
      C.Kind = CmdKind::Read;
      C.Off = A ? A->Begin % Cap : 0;
      C.Len = Piece;
      C.A = W.Sent;
      (void)push(C);
      Pending &P = expect(W.Conn, C, W.Tag, W.Sent + Piece >= W.Length, A);
      P.Data = W.Data;
      P.DataOff = W.Sent;
      P.Len = Piece;
      W.Sent += Piece;
    } while (W.Sent < W.Length);
    return true;
  }
  case DeviceDone::Launch: {
    GpuKernel &K = *W.Kernel;
    if (K.Generation != Generation && !reload(K))
      return false;
    size_t Size = W.Payload.size();
    Alloc *A = nullptr;
    if (Size <= Cap / 2) {
      if (!Room() || !(A = stage(Size)))
        return false;
      C.Off = A->Begin % Cap;
      if (Size)
        std::memcpy(Staging + C.Off, W.Payload.data(), Size);
    } else {
      // Larger than the staging area takes at once: into device memory of
      // its own, in pieces, on the connection's stream.
      if (!W.Big) {
        if (!Room())
          return false;
        W.Big = NextBig++;
        Cmd B = C;
        B.Kind = CmdKind::BigAlloc;
        B.Len = Size;
        B.A = W.Big;
        (void)push(B);
        expect(W.Conn, B, 0, false, nullptr);
        ++Counters.LargePayloads;
      }
      while (W.Sent < Size) {
        uint64_t Piece = std::min<uint64_t>(Size - W.Sent, Cap / 4);
        Alloc *Part;
        if (!Room() || !(Part = stage(Piece)))
          return false;
        Cmd B = C;
        B.Kind = CmdKind::BigCopy;
        B.Off = Part->Begin % Cap;
        B.Len = Piece;
        B.A = W.Big;
        B.B = W.Sent;
        std::memcpy(Staging + B.Off, W.Payload.data() + W.Sent, Piece);
        (void)push(B);
        expect(W.Conn, B, 0, false, Part);
        W.Sent += Piece;
      }
      if (!Room())
        return false;
      C.Flags = FlagBig;
      C.A = W.Big;
    }
    C.Kind = CmdKind::Launch;
    C.Kernel = K.Id;
    C.Len = Size;
    (void)push(C);
    expect(W.Conn, C, W.Tag, true, A).Kernel = &K;
    ++Counters.Launches;
    return true;
  }
  }
  return true;
}

void GpuTarget::issueHeldBack() {
  while (!HeldBack.empty() && issue(*HeldBack.front()))
    HeldBack.pop_front();
}

void GpuTarget::issueOrHold(Work &W) {
  if (HeldBack.empty() && issue(W))
    return;
  // Held back: the payload must outlive the caller's buffer.
  auto H = std::make_unique<Work>(std::move(W));
  if (H->Owned.empty() && !H->Payload.empty()) {
    H->Owned = H->Payload.str();
    H->Payload = H->Owned;
  }
  HeldBack.push_back(std::move(H));
}

Error GpuTarget::launch(uint64_t Conn, const LoadedIfunc &L, StringRef Payload,
                        uint64_t Tag) {
  std::lock_guard<std::mutex> G(Mu);
  if (State == WorkerState::Down && FailedStarts)
    return createStringError("the GPU worker is not running: " + DownWhy);
  auto *K = const_cast<GpuKernel *>(static_cast<const GpuKernel *>(L.Device));
  ++K->Launched;
  Work W;
  W.What = DeviceDone::Launch;
  W.Conn = Conn;
  W.Tag = Tag;
  W.Kernel = K;
  W.Payload = Payload;
  issueOrHold(W);
  return Error::success();
}

void GpuTarget::fence(uint64_t Conn, uint64_t Tag) {
  std::lock_guard<std::mutex> G(Mu);
  if (HeldBack.empty() && !Conns.count(Conn)) {
    // Nothing in flight here: done at once.
    DeviceDone R;
    R.What = DeviceDone::Fence;
    R.Conn = Conn;
    R.Tag = Tag;
    Ready.push_back(std::move(R));
    return;
  }
  Work W;
  W.What = DeviceDone::Fence;
  W.Conn = Conn;
  W.Tag = Tag;
  issueOrHold(W);
}

void GpuTarget::read(uint64_t Conn, uint64_t Length, uint64_t Tag) {
  std::lock_guard<std::mutex> G(Mu);
  Length = std::min<uint64_t>(Length, Opts.RegionSize);
  if (State == WorkerState::Down && FailedStarts) {
    DeviceDone R;
    R.What = DeviceDone::Read;
    R.Conn = Conn;
    R.Tag = Tag;
    R.Ok = false;
    R.Why = "the GPU worker is not running: " + DownWhy;
    Ready.push_back(std::move(R));
    return;
  }
  Work W;
  W.What = DeviceDone::Read;
  W.Conn = Conn;
  W.Tag = Tag;
  W.Length = Length;
  issueOrHold(W);
}

void GpuTarget::closeConnection(uint64_t Conn) {
  std::lock_guard<std::mutex> G(Mu);
  Work W;
  W.Close = true;
  W.Conn = Conn;
  issueOrHold(W);
}

bool GpuTarget::busy() const {
  std::lock_guard<std::mutex> G(Mu);
  return Answers || !Ready.empty() || !HeldBack.empty() ||
         State == WorkerState::Starting || !Requests.empty();
}

bool GpuTarget::poll(function_ref<void(DeviceDone &)> Done) {
  std::vector<DeviceDone> Out;
  {
    std::lock_guard<std::mutex> G(Mu);
    if (owner())
      service();
    else
      consume();
    if (Ready.empty())
      return false;
    Out.swap(Ready);
  }
  for (DeviceDone &R : Out)
    Done(R);
  return true;
}

std::vector<std::string> GpuTarget::traceReport() const {
  std::vector<std::string> Out;
  const Header &H = *Ch.H;
  uint64_t N = std::max<uint64_t>(Counters.Launches, 1);
  Out.push_back(formatv("gpu trace: launches {0}", Counters.Launches).str());
  std::vector<std::pair<uint64_t, unsigned>> ByTime;
  for (unsigned I = 0; I < cuda::NumEntryPoints; ++I)
    if (H.Trace[I].Calls.load())
      ByTime.push_back({H.Trace[I].Nanos.load(), I});
  std::sort(ByTime.rbegin(), ByTime.rend());
  for (auto [Ns, I] : ByTime) {
    uint64_t Calls = H.Trace[I].Calls.load();
    Out.push_back(formatv("gpu trace: call {0} {1:f3} per launch, {2:f3} us "
                          "each, {3:f3} us per launch",
                          cuda::entryPointSymbol(I), double(Calls) / double(N),
                          double(Ns) / double(Calls) / 1e3,
                          double(Ns) / double(N) / 1e3)
                      .str());
  }
  auto Avg = [](const std::atomic<uint64_t> &Ns, const std::atomic<uint64_t> &C) {
    uint64_t K = C.load();
    return K ? double(Ns.load()) / double(K) / 1e3 : 0.0;
  };
  Out.push_back(
      formatv("gpu trace: hop command {0:f3} us, completion {1:f3} us, device "
              "{2:f3} us, worker sleeps {3}",
              Avg(H.Pipe.CmdHopNs, H.Pipe.CmdHops),
              Avg(H.Pipe.DoneHopNs, H.Pipe.DoneHops),
              Avg(H.Pipe.DeviceNs, H.Pipe.Completions), H.Pipe.Sleeps.load())
          .str());
  return Out;
}

} // namespace tc
