//===- UcxTransportListen.cpp - Checks before a UCX listener is opened ----===//
//
// A listener that cannot work should fail at once, in one line that names
// the cause. UCX 1.13 says neither: a port in use is "Device is busy" (its
// status for EADDRINUSE, after an ERROR line of its own), any other bind
// failure "Input/output error", and a listener whose context has no
// transport on the device connections arrive on (UCX_TLS=posix,self) is
// opened, and then drops every connection request ("got connection
// request ... on a device lo which was not present during UCP
// initialization"), so the server says it listens and no client gets in.
//
//===----------------------------------------------------------------------===//

#include "transport/UcxTransportImpl.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tc {
namespace ucx {

namespace {

/// The port of \p SS.
uint16_t portOf(const sockaddr_storage &SS) {
  if (SS.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6 *>(&SS)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in *>(&SS)->sin_port);
}

/// Whether a socket of this network namespace listens on TCP port \p Port
/// (any address): /proc/net/tcp and tcp6, state 0A.
bool someoneListensOn(uint16_t Port) {
  for (const char *File : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    ErrorOr<std::unique_ptr<MemoryBuffer>> B =
        MemoryBuffer::getFileAsStream(File);
    if (!B)
      continue;
    SmallVector<StringRef, 64> Lines;
    (*B)->getBuffer().split(Lines, '\n', -1, false);
    for (StringRef L : drop_begin(Lines)) {
      // "  0: 0100007F:7A69 00000000:0000 0A ..."
      SmallVector<StringRef, 6> F;
      L.trim().split(F, ' ', 5, false);
      unsigned P;
      if (F.size() >= 4 && F[3] == "0A" &&
          !F[1].rsplit(':').second.getAsInteger(16, P) && P == Port)
        return true;
    }
  }
  return false;
}

/// The lowest port an unprivileged process may bind.
unsigned unprivilegedPortStart() {
  ErrorOr<std::unique_ptr<MemoryBuffer>> B = MemoryBuffer::getFileAsStream(
      "/proc/sys/net/ipv4/ip_unprivileged_port_start");
  unsigned N;
  if (B && !(*B)->getBuffer().trim().getAsInteger(10, N))
    return N;
  return 1024;
}

/// Whether \p A and \p B are the same address, or (with a netmask \p Mask)
/// \p A lies in \p B's subnet. For IPv4 only the latter: a connection to
/// any of 127.0.0.0/8 arrives on lo, which holds 127.0.0.1/8.
bool onInterface(const sockaddr *A, const sockaddr *B, const sockaddr *Mask) {
  if (!B || A->sa_family != B->sa_family)
    return false;
  if (A->sa_family == AF_INET) {
    uint32_t X = reinterpret_cast<const sockaddr_in *>(A)->sin_addr.s_addr;
    uint32_t Y = reinterpret_cast<const sockaddr_in *>(B)->sin_addr.s_addr;
    uint32_t M =
        Mask ? reinterpret_cast<const sockaddr_in *>(Mask)->sin_addr.s_addr
             : ~0u;
    return (X & M) == (Y & M);
  }
  if (A->sa_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6 *>(A)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6 *>(B)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  return false;
}

/// Whether \p SS is a wildcard address (0.0.0.0, ::).
bool isWildcard(const sockaddr_storage &SS) {
  if (SS.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in *>(&SS)->sin_addr.s_addr ==
           htonl(INADDR_ANY);
  if (SS.ss_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(
        &reinterpret_cast<const sockaddr_in6 *>(&SS)->sin6_addr);
  return false;
}

/// The network interfaces (up) a connection to \p SS may arrive on: those
/// holding the address, every one of its family for a wildcard.
StringSet<> interfacesFor(const sockaddr_storage &SS) {
  StringSet<> Names;
  ifaddrs *List = nullptr;
  if (getifaddrs(&List) != 0)
    return Names;
  bool Any = isWildcard(SS);
  for (ifaddrs *I = List; I; I = I->ifa_next) {
    if (!I->ifa_addr || !(I->ifa_flags & IFF_UP) ||
        I->ifa_addr->sa_family != SS.ss_family)
      continue;
    if (Any || onInterface(reinterpret_cast<const sockaddr *>(&SS),
                           I->ifa_addr,
                           SS.ss_family == AF_INET ? I->ifa_netmask
                                                   : nullptr))
      Names.insert(I->ifa_name);
  }
  freeifaddrs(List);
  return Names;
}

/// The devices UCX has a transport on in \p Context, as
/// ucp_context_print_info() lists its resources
/// ("#      resource 3  :  md 2  dev 2  flags -- tcp/lo").
StringSet<> transportDevices(ucp_context_h Context) {
  StringSet<> Devices;
  char *Text = nullptr;
  size_t Size = 0;
  FILE *F = open_memstream(&Text, &Size);
  if (!F)
    return Devices;
  ucp_context_print_info(Context, F);
  fclose(F);
  SmallVector<StringRef, 32> Lines;
  StringRef(Text, Size).split(Lines, '\n', -1, false);
  for (StringRef L : Lines) {
    if (!L.contains(" resource "))
      continue;
    StringRef Rsc = L.trim().rsplit(' ').second; // "tcp/lo"
    if (Rsc.contains('/'))
      Devices.insert(Rsc.split('/').second);
  }
  std::free(Text);
  return Devices;
}

} // namespace

Error checkListenAddress(const sockaddr_storage &SS, StringRef Where,
                         bool ReuseAddr) {
  int Fd = socket(SS.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (Fd < 0)
    return createStringError(std::error_code(errno, std::generic_category()),
                             "cannot listen on %s: socket: %s",
                             Where.str().c_str(), strerror(errno));
  int One = 1;
  if (ReuseAddr)
    (void)setsockopt(Fd, SOL_SOCKET, SO_REUSEADDR, &One, sizeof One);
  int RC = bind(Fd, reinterpret_cast<const sockaddr *>(&SS), sockLen(SS));
  int Err = errno;
  close(Fd);
  if (RC == 0)
    return Error::success();
  uint16_t Port = portOf(SS);
  std::string Why;
  switch (Err) {
  case EADDRINUSE:
    if (someoneListensOn(Port))
      Why = formatv("the address is in use: another process listens on port "
                    "{0} (one that is ending holds it until it has exited)",
                    Port);
    else if (ReuseAddr)
      Why = "the address is in use: connections of an earlier listener "
            "that did not set SO_REUSEADDR (UCX_TCP_CM_REUSEADDR=n) wait "
            "in TIME_WAIT on it, for up to 60 s";
    else
      Why = "the address is in use: connections of an earlier listener "
            "wait in TIME_WAIT on it, for up to 60 s, and "
            "UCX_TCP_CM_REUSEADDR=n keeps this one from reusing it";
    break;
  case EACCES:
    if (Port && Port < unprivilegedPortStart())
      Why = formatv("permission denied: ports below {0} need "
                    "CAP_NET_BIND_SERVICE (root has it unless it was "
                    "dropped)",
                    unprivilegedPortStart());
    else
      Why = "permission denied";
    break;
  case EADDRNOTAVAIL:
    Why = "no interface of this host has that address";
    break;
  default:
    Why = strerror(Err);
    break;
  }
  return createStringError(std::error_code(Err, std::generic_category()),
                           "cannot listen on %s: %s", Where.str().c_str(),
                           Why.c_str());
}

Error checkListenDevice(ucp_context_h Context, const sockaddr_storage &SS,
                        StringRef Where) {
  StringSet<> Devices = transportDevices(Context);
  StringSet<> Interfaces = interfacesFor(SS);
  if (Interfaces.empty())
    return Error::success(); // Cannot tell where connections arrive.
  for (const auto &D : Devices) {
    // An InfiniBand device ("mlx5_0:1"): its connections come through
    // rdmacm, named by the device, not by an interface of this list.
    if (D.getKey().contains(':') || Interfaces.count(D.getKey()))
      return Error::success();
  }
  std::string Names;
  for (const auto &I : Interfaces)
    Names += (Names.empty() ? "" : ", ") + I.getKey().str();
  std::string Env;
  for (const char *V : {"UCX_TLS", "UCX_NET_DEVICES"})
    if (const char *Val = std::getenv(V))
      Env += formatv("{0}{1}={2}", Env.empty() ? "" : ", ", V, Val).str();
  return createStringError(
      "cannot listen on %s: UCX has no transport on %s, where connections to "
      "it arrive%s: a HOST:PORT listener needs UCX's tcp transport there "
      "(UCX_TLS with tcp, and UCX_NET_DEVICES, if set, with %s)",
      Where.str().c_str(), Names.c_str(),
      Env.empty() ? "" : (" (" + Env + ")").c_str(), Names.c_str());
}

} // namespace ucx
} // namespace tc
