//===- Guard.cpp - Attribute faults and overruns to the running ifunc -----===//
//
// Everything a signal handler here does is async-signal-safe: it reads
// plain thread-locals and atomics, formats into a stack buffer by hand and
// calls write(2), sigaction(2) and raise(3).
//
//===----------------------------------------------------------------------===//

#include "jit/Guard.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace tc {

namespace guard {
__thread const RunRecord *Current
    __attribute__((tls_model("initial-exec"))) = nullptr;
std::atomic<const LoadedIfunc *> ActiveCode{nullptr};
std::atomic<const char *> ActiveLocal{nullptr};
std::atomic<RunConnId> ActiveConn{0};
std::atomic<unsigned> ActiveDepth{0};
std::atomic<uint64_t> Epoch{0};
} // namespace guard

SignalSafeWriter::SignalSafeWriter(char *B, size_t S) : Buf(B), Size(S) {
  if (Size)
    Buf[0] = 0;
}

SignalSafeWriter &SignalSafeWriter::operator<<(const char *S) {
  while (S && *S && Len + 1 < Size)
    Buf[Len++] = *S++;
  if (Size)
    Buf[Len] = 0;
  return *this;
}

SignalSafeWriter &SignalSafeWriter::dec(uint64_t V) {
  char T[24];
  int N = 0;
  do
    T[N++] = char('0' + V % 10);
  while (V /= 10);
  char R[24];
  for (int I = 0; I < N; ++I)
    R[I] = T[N - 1 - I];
  R[N] = 0;
  return *this << R;
}

SignalSafeWriter &SignalSafeWriter::hex(uint64_t V) {
  char T[20];
  int N = 0;
  do
    T[N++] = "0123456789abcdef"[V & 15];
  while (V >>= 4);
  char R[24] = "0x";
  for (int I = 0; I < N; ++I)
    R[2 + I] = T[N - 1 - I];
  R[2 + N] = 0;
  return *this << R;
}

SignalSafeWriter &SignalSafeWriter::fixed2(double V) {
  uint64_t Hundredths = uint64_t(V * 100 + 0.5);
  dec(Hundredths / 100) << ".";
  if (Hundredths % 100 < 10)
    *this << "0";
  return dec(Hundredths % 100);
}

void SignalSafeWriter::flush(int FD) const { (void)!::write(FD, Buf, Len); }

namespace {
using Out = SignalSafeWriter;

const char *ToolName = "tc";
struct sigaction OldActions[65];
constexpr int FatalSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
alignas(16) char AltStack[1 << 16];

const char *signalName(int Sig) {
  switch (Sig) {
  case SIGSEGV:
    return "SIGSEGV";
  case SIGBUS:
    return "SIGBUS";
  case SIGILL:
    return "SIGILL";
  case SIGFPE:
    return "SIGFPE";
  case SIGABRT:
    return "SIGABRT";
  }
  return "signal";
}

void dieOf(int Sig) {
  struct sigaction Dfl;
  std::memset(&Dfl, 0, sizeof Dfl);
  Dfl.sa_handler = SIG_DFL;
  sigemptyset(&Dfl.sa_mask);
  sigaction(Sig, &Dfl, nullptr);
  raise(Sig); // Pending until the handler returns; a fault also recurs.
}

extern "C" void tcOnFatalSignal(int Sig, siginfo_t *Info, void *Ctx) {
  if (const RunRecord *R = guard::Current) {
    char Buf[512];
    Out O(Buf, sizeof Buf);
    O << ToolName << ": fatal signal " << signalName(Sig);
    if (Sig != SIGABRT && Info)
      (O << " (address ").hex(uint64_t(Info->si_addr)) << ")";
    char Run[400];
    formatRun(R->Code, R->LocalName, R->Conn, Run, sizeof Run);
    O << " in " << Run << "\n";
    (void)!::write(2, Buf, O.Len);
    dieOf(Sig);
    return;
  }
  // Not ifunc code: whoever handled this before (UCX prints a backtrace).
  const struct sigaction &Old = OldActions[Sig];
  if ((Old.sa_flags & SA_SIGINFO) && Old.sa_sigaction) {
    Old.sa_sigaction(Sig, Info, Ctx);
    return;
  }
  if (Old.sa_handler != SIG_DFL && Old.sa_handler != SIG_IGN &&
      Old.sa_handler) {
    Old.sa_handler(Sig);
    return;
  }
  dieOf(Sig);
}

extern "C" void tcOnExit() {
  if (const RunRecord *R = guard::Current) {
    char Buf[512];
    Out O(Buf, sizeof Buf);
    char Run[400];
    formatRun(R->Code, R->LocalName, R->Conn, Run, sizeof Run);
    O << ToolName << ": " << Run << " called exit()\n";
    (void)!::write(2, Buf, O.Len);
  }
}
} // namespace

size_t formatRun(const LoadedIfunc *Code, const char *LocalName,
                 RunConnId Conn,
                 char *Buf, size_t Size) {
  Out O(Buf, Size);
  if (Code) {
    char Hash[17];
    for (int I = 0; I < 8; ++I) {
      Hash[2 * I] = "0123456789abcdef"[Code->Hash[I] >> 4];
      Hash[2 * I + 1] = "0123456789abcdef"[Code->Hash[I] & 15];
    }
    Hash[16] = 0;
    O << "ifunc '" << Code->Name.c_str() << "' (" << Hash << ")";
  } else {
    O << "local function '" << (LocalName ? LocalName : "?") << "'";
  }
  O << " from connection ";
  O.dec(Conn);
  return O.Len;
}

void writeStderr(const char *S) { (void)!::write(2, S, std::strlen(S)); }

void installFaultAttribution(const char *Tool) {
  ToolName = Tool;
  stack_t SS;
  std::memset(&SS, 0, sizeof SS);
  SS.ss_sp = AltStack;
  SS.ss_size = sizeof AltStack;
  sigaltstack(&SS, nullptr);
  for (int Sig : FatalSignals) {
    struct sigaction A;
    std::memset(&A, 0, sizeof A);
    A.sa_sigaction = tcOnFatalSignal;
    A.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&A.sa_mask);
    struct sigaction Prev;
    sigaction(Sig, &A, &Prev);
    if (!((Prev.sa_flags & SA_SIGINFO) && Prev.sa_sigaction == tcOnFatalSignal))
      OldActions[Sig] = Prev; // Installed twice: keep the first one's.
  }
  static bool Registered = false;
  if (!Registered) {
    Registered = true;
    std::atexit(tcOnExit);
  }
}

} // namespace tc
