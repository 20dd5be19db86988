//===- Stamps.h - Where a ping-pong's time goes -----------------*- C++ -*-===//
//
// `tc-bench tsi --breakdown` stamps every round trip of a ping-pong on both
// sides: the client before and after its send call and when its loop sees
// the answer, the target when its loop sees the message (just before it
// answers) and after its own send call. Both processes read one clock (the
// TSC on x86-64, CNTVCT on AArch64, CLOCK_MONOTONIC elsewhere) and write
// into one shared mapping: a file under /dev/shm that a tc server maps by
// name (control message bench.stamps), or that a forked raw-UCX server
// inherits. From the stamps:
//
//   send_call_ns         the client's send call
//   one_way_ns           client's send start -> target's loop sees it
//                        (send call, flight, the target's receive and
//                        dispatch up to its loop)
//   target_send_call_ns  the target's send call
//   return_ns            target's loop sees it -> client's loop sees the
//                        answer (the target's send call, flight, the
//                        client's receive and dispatch)
//
// one_way_ns + return_ns is the round trip. Means over the timed round
// trips, the slowest 1 % left out (preemption on a 2-vCPU VM).
//
//===----------------------------------------------------------------------===//

#ifndef TC_EXAMPLES_BENCH_STAMPS_H
#define TC_EXAMPLES_BENCH_STAMPS_H

#include <chrono>
#include <cstdint>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace bench {

/// steady_clock's time in ns.
inline int64_t steadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The clock both sides of a ping-pong read: cheap, and shared by every CPU
/// of the machine.
inline uint64_t stampNow() {
#if defined(__x86_64__)
  return __rdtsc();
#elif defined(__aarch64__)
  uint64_t V;
  asm volatile("isb; mrs %0, cntvct_el0" : "=r"(V));
  return V;
#else
  return static_cast<uint64_t>(steadyNanos());
#endif
}

/// The columns of a HopStamps mapping.
enum StampColumn : unsigned {
  ClientBefore, ///< Client, before its send call.
  ClientAfter,  ///< Client, after it.
  ClientSeen,   ///< Client, its loop saw the answer.
  TargetSeen,   ///< Target, its loop saw the message.
  TargetSent,   ///< Target, after its send call.
  NumStampColumns
};

/// The stamps of one ping-pong, in a mapping both processes share. The
/// client creates it (create()), the target maps it by path (open()) or
/// inherits it across fork(); only the target writes its columns and
/// TargetCount, only the client the rest.
struct HopStamps {
  uint64_t Capacity;    ///< Round trips each column has room for.
  uint64_t TargetCount; ///< Round trips the target stamped.
  uint64_t CalStamp;    ///< stampNow() when created ...
  int64_t CalNanos;     ///< ... and steady_clock then, in ns.
  // NumStampColumns columns of Capacity stamps follow.

  /// A mapping for \p RoundTrips round trips, backed by a new file under
  /// /dev/shm (its name in \p Path) that is unlinked by destroy().
  static HopStamps *create(uint64_t RoundTrips, std::string &Path);
  /// Maps the file \p Path made by create(); null (with \p Err set) when it
  /// is not one.
  static HopStamps *open(const std::string &Path, std::string &Err);
  /// Unmaps \p S (from open()).
  static void close(HopStamps *S);
  /// Unmaps \p S and removes its file (from create()) unless \p Path is
  /// empty (the file is gone already: the mapping outlives it).
  static void destroy(HopStamps *S, const std::string &Path);

  uint64_t *column(StampColumn C) {
    return reinterpret_cast<uint64_t *>(this + 1) + C * Capacity;
  }
  const uint64_t *column(StampColumn C) const {
    return reinterpret_cast<const uint64_t *>(this + 1) + C * Capacity;
  }
  /// The target's stamps for the round trip it answers now.
  void target(uint64_t Seen, uint64_t Sent) {
    if (TargetCount < Capacity) {
      column(TargetSeen)[TargetCount] = Seen;
      column(TargetSent)[TargetCount] = Sent;
    }
    ++TargetCount;
  }
  /// The client's stamps of round trip \p I.
  void client(uint64_t I, uint64_t Before, uint64_t After, uint64_t Seen) {
    if (I < Capacity) {
      column(ClientBefore)[I] = Before;
      column(ClientAfter)[I] = After;
      column(ClientSeen)[I] = Seen;
    }
  }
};

/// The target's answer to a ping: runs \p Answer (which sends it) and, with
/// \p S, stamps when the target's loop saw the message and when the send
/// call returned. Returns what \p Answer returns.
template <typename AnswerFn>
auto stampedAnswer(HopStamps *S, AnswerFn &&Answer) {
  uint64_t Seen = S ? stampNow() : 0;
  auto Result = Answer();
  if (S)
    S->target(Seen, stampNow());
  return Result;
}

/// What HopStamps say about the round trips after the first \p Warmup of
/// \p RoundTrips, in ns.
struct HopBreakdown {
  double SendCallNs = 0, OneWayNs = 0, TargetSendCallNs = 0, ReturnNs = 0;
};

/// Reads \p S once both sides are done; \p TimedNs is how long the client
/// measured the round trips after the warm-up to take (steady_clock). Dies,
/// naming \p What, when the target did not stamp every round trip, when
/// a quarter of the round trips have stamps out of causal order (the
/// processes do not share the clock, or the stamps are not matched), or
/// when the client's stamps span other than \p TimedNs (the clock's rate
/// is wrong).
HopBreakdown analyzeStamps(const HopStamps &S, uint64_t Warmup,
                           uint64_t RoundTrips, double TimedNs,
                           const std::string &What);

} // namespace bench

#endif // TC_EXAMPLES_BENCH_STAMPS_H
