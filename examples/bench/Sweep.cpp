//===- Sweep.cpp - `tc-bench sss` and `tc-bench iput` ---------------------===//
//
// Two-Chains §VI-VII (Figs. 7-8): server-side sum and indirect put over
// payload sizes, injected (the cached ifunc) against local-function
// invocation (the same C code linked into the server, invoked by id over
// UCX active messages). Latency is half a ping-pong round trip; rate is
// back-to-back sends ended by a flush. The server's sum, or its buffer's
// hash, must match what the client sent before a figure is reported.
//
//===----------------------------------------------------------------------===//

#include "Bench.h"

#include <cstdio>
#include <cstring>

namespace bench {
namespace {

const char *const SweepUsage = R"(USAGE: tc-bench sss|iput [options]

Server-side sum (sss) or indirect put (iput) over payload sizes (Two-Chains
Figs. 7-8): one-way latency and message rate, injected vs local.

OPTIONS:
  --sizes LIST   Payload bytes (default 16,64,256,1024,4096,16384,65536;
                 --quick 16,1024,16384)
  --iters N      Ping-pong round trips per point (default 20000; --quick 2000)
  --msgs N       Messages per rate point (default 100000; --quick 10000)
)";

} // namespace

int runSweep(const std::string &Which, const CommonOptions &O,
             const std::vector<std::string> &Args) {
  std::vector<uint64_t> Sizes =
      O.Quick ? std::vector<uint64_t>{16, 1024, 16384}
              : std::vector<uint64_t>{16, 64, 256, 1024, 4096, 16384, 65536};
  uint64_t Iters = O.Quick ? 2000 : 20000, Msgs = O.Quick ? 10000 : 100000;
  if (!walkArgs(
          Which, Args, SweepUsage,
          [&](const std::string &A, const std::function<std::string()> &Value) {
            if (A == "--sizes")
              Sizes = parseList(A, Value());
            else if (A == "--iters")
              Iters = parseCount(A, Value());
            else if (A == "--msgs")
              Msgs = parseCount(A, Value());
            else
              return false;
            return true;
          }))
    return 0;
  if (!Iters || !Msgs)
    die("--iters and --msgs must be at least 1");
  for (uint64_t S : Sizes)
    if (S < 16 || S % 8 || S > (1u << 20))
      die("payload sizes must be multiples of 8 from 16 to 1048576 bytes "
          "(got " + std::to_string(S) + ")");
  selectTransport(O.Transport, /*Loopback=*/true);
  pinClientAndServer(O.Pin);

  Child Srv = startServer({selfPath(), "serve", "--listen", "127.0.0.1:0",
                           "--ifunc-path", O.IfuncPath},
                          "", Which + " server");
  ClientWorker C;
  makeClient(C, O.IfuncPath, false);
  tc_ep_h Ep = connectTo(C, Srv);
  tc_ifunc_h F = registerIfunc(C, Which.c_str());
  bool Sum = Which == "sss";
  std::vector<Record> Out;

  for (uint64_t Size : Sizes) {
    // sss: Size bytes of numbers. iput: {offset 0, Size - 8 bytes}.
    std::vector<uint64_t> Words(Size / 8);
    for (size_t I = 0; I < Words.size(); ++I)
      Words[I] = Sum ? I * 2654435761u + Size
                     : (I == 0 ? 0 : 0x0101010101010101ULL * (I + Size));
    uint64_t Expect = 0;
    for (uint64_t W : Words)
      Expect += W;
    tc_msg_h M;
    if (tc_msg_create(F, Words.data(), Size, &M) != TC_OK)
      die("cannot create a " + Which + " message of " + std::to_string(Size) +
          " bytes");
    for (int Local = 0; Local < 2; ++Local) {
      std::string Mode = Local ? "local" : "injected";
      note(Which + " " + Mode + " " + std::to_string(Size) + " bytes");
      auto Send = [&] {
        tc_status_t S =
            Local ? tc_ep_send_local(Ep, Which.c_str(), Words.data(), Size,
                                     nullptr, nullptr)
                  : tc_msg_send(Ep, M, nullptr, nullptr);
        if (S != TC_INPROGRESS)
          die(Which + ": send failed: " + tc_status_string(S));
      };
      control(C, Ep, "bench.reset", nullptr, 0);
      uint64_t Warm = Iters / 10 + 1;
      double Lat =
          pingPong(C, Ep, Local ? PongLocal : PongIfunc, Send, Warm, Iters);
      double Rate = rate(C, Ep, Send, Msgs);

      ServerStats St = queryStats(C, Ep);
      uint64_t N = Warm + Iters + Msgs;
      if (Sum) {
        if (St.SssCount != N || St.SssSum != Expect * N)
          die("sss " + Mode + ": the server summed " +
              std::to_string(St.SssCount) + " messages to " +
              std::to_string(St.SssSum) + ", expected " + std::to_string(N) +
              " to " + std::to_string(Expect * N));
      } else {
        std::vector<unsigned char> Buf(1 << 20);
        std::memcpy(Buf.data(), Words.data() + 1, Size - 8);
        if (St.IputCount != N || St.IputRejected ||
            St.IputHash != fnv1a(Buf.data(), Buf.size()))
          die("iput " + Mode + ": the server's buffer or counters are not "
              "what was put (" + std::to_string(St.IputCount) + " puts, " +
              std::to_string(St.IputRejected) + " rejected)");
      }
      for (auto [Metric, V, Unit] :
           {std::tuple<const char *, double, const char *>{"latency_us", Lat,
                                                           "us"},
            {"rate_msgs", Rate, "msgs/s"}}) {
        Record R;
        R.Bench = Which;
        R.Mode = Mode;
        R.Metric = Metric;
        R.Value = V;
        R.Unit = Unit;
        R.Transport = O.Transport;
        R.PayloadBytes = static_cast<long>(Size);
        Out.push_back(R);
      }
    }
    tc_msg_free(M);
  }
  tc_ifunc_deregister(F);
  tc_ep_destroy(Ep);
  stopServer(Srv);
  printRecords(Out, O.Fmt);
  return 0;
}

} // namespace bench
