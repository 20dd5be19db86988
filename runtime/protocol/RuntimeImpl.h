//===- RuntimeImpl.h - Runtime's private pieces ---------------------------===//
//
// What the protocol engine's own files share beside Runtime.h: the helper
// thread that runs compiles off the progress thread (Runtime::CompileThread),
// and finishWaiter(), which answers the fences and region reads that wait.
// Only runtime/protocol's .cpp files include it.
//
//===----------------------------------------------------------------------===//

#ifndef TC_RUNTIME_PROTOCOL_RUNTIMEIMPL_H
#define TC_RUNTIME_PROTOCOL_RUNTIMEIMPL_H

#include "protocol/Runtime.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tc {

/// Makes the calling thread (the compile helper) the one that gives way:
/// Linux's SCHED_IDLE policy (a thread's own), nice 19 where that fails.
/// A task that wakes preempts a running SCHED_IDLE task at once, whatever
/// its slice (kernel/sched/fair.c, check_preempt_wakeup_fair), so a
/// progress thread woken by a message takes the CPU back from the compile.
/// Nice 19 alone did not: EEVDF's RUN_TO_PARITY lets the running task
/// finish its slice (0.75-3 ms, whatever its weight) before a wakeup may
/// preempt it, and a compile is shorter than that, so each message that
/// came during one waited for its end (tc-bench tsi --modes stall: the
/// stream's p99 was one compile; docs/runtime.md). Only where the two share
/// one CPU: the compile then gets it whenever the progress thread is idle,
/// since that sleeps (finishCompiles). Elsewhere such a compile would
/// starve behind threads that spin on every other CPU (tc-bench --no-pin:
/// a nice-19 first contact took 98 ms). Where both calls fail, nothing
/// changes.
inline void giveWayToProgress() {
#if defined(__linux__) && defined(SCHED_IDLE)
  sched_param P{};
  if (sched_setscheduler(0, SCHED_IDLE, &P) == 0) // 0: the calling thread.
    return;
#endif
#if defined(__linux__) && defined(SYS_gettid)
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
#endif
}

/// The default executor of off-thread compiles: one thread, started at the
/// first job, running jobs in order. One is enough: the codegen step of
/// compiles on one JitEngine runs one at a time anyway.
class Runtime::CompileThread {
public:
  /// \p GiveWay: the helper shares its one CPU with the progress thread,
  /// which sleeps whenever it is idle during a compile (finishCompiles):
  /// the helper runs under SCHED_IDLE there (giveWayToProgress).
  explicit CompileThread(bool GiveWay) : GiveWay(GiveWay) {}
  ~CompileThread() {
    {
      std::lock_guard<std::mutex> L(Mutex);
      Stop = true;
      Jobs.clear(); // Not started: their results would go unused.
    }
    Wake.notify_one();
    if (Thread.joinable())
      Thread.join(); // A compile under way finishes first (ORC cannot stop).
  }
  void post(std::function<void()> Job) {
    {
      std::lock_guard<std::mutex> L(Mutex);
      Jobs.push_back(std::move(Job));
      if (!Thread.joinable())
        Thread = std::thread([this] { run(); });
    }
    Wake.notify_one();
  }

private:
  void run() {
    if (GiveWay)
      giveWayToProgress();
    std::unique_lock<std::mutex> L(Mutex);
    for (;;) {
      Wake.wait(L, [&] { return Stop || !Jobs.empty(); });
      if (Stop)
        return;
      std::function<void()> Job = std::move(Jobs.front());
      Jobs.pop_front();
      L.unlock();
      Job();
      L.lock();
    }
  }

  std::mutex Mutex;
  std::condition_variable Wake;
  std::deque<std::function<void()>> Jobs;
  bool Stop = false;
  const bool GiveWay;
  std::thread Thread;
};

/// Runs and forgets the waiter registered for \p Seq, if there is one.
/// Returns false (leaving \p Result untouched) when there is none.
template <typename Fn, typename Arg>
bool finishWaiter(std::map<uint32_t, Fn> &Waiters, uint32_t Seq,
                         Arg &&Result) {
  auto It = Waiters.find(Seq);
  if (It == Waiters.end())
    return false;
  Fn Done = std::move(It->second);
  Waiters.erase(It);
  if (Done)
    Done(std::forward<Arg>(Result));
  return true;
}

} // namespace tc

#endif // TC_RUNTIME_PROTOCOL_RUNTIMEIMPL_H
