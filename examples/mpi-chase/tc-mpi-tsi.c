/* tc-mpi-tsi: a TSI all-to-all over every rank of an mpirun (or srun
 * --mpi=pmix) job, and what each rank costs.
 *
 *   mpirun -n N tc-mpi-tsi [--messages M] [--rows] [--timeout MS]
 *                          [--no-mailbox]
 *
 * Every rank creates a PMIx-bootstrapped tc worker (publish + fence),
 * connects to every other rank and flushes each endpoint once (and once
 * more: every ring offered is then read), then sends
 * M cached TSI messages (examples/tsi: one byte, the target adds one to a
 * counter) to every other rank, round by round (to rank+1, rank+2, ...),
 * flushes every endpoint (each target has run them all) and meets the
 * others in a barrier. Each rank then checks that its counter is
 * M x (N - 1), measures itself (/proc/self/smaps_rollup; what its worker
 * registered for mailboxes) and sends that to rank 0, which prints the
 * spread of every figure over the ranks (--rows: one row per rank too,
 * rank_report.h) and
 *
 *   tc-mpi-tsi: N ranks, M messages from every rank to each of the N - 1
 *   others: ok
 *
 * A rank whose count is wrong makes rank 0 print why and every rank exit
 * 1. Every wait is bounded (--timeout, default 60 s).
 */
#include <tc/tc.h>

#define JOB_TOOL_NAME "tc-mpi-tsi"
#include "job_tool.h"

#include "rank_report.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t timeout_ms = 60000;

/* Completions: of barriers and flushes. */
typedef struct done {
  int pending;
  tc_status_t status;
} done_t;
static void on_done(void *arg, tc_status_t s) {
  done_t *d = arg;
  d->status = s;
  --d->pending;
}

/* Progresses \p w until \p d has no completion pending, at most
 * timeout_ms; dies naming \p what otherwise. */
static void wait_done(tc_worker_h w, done_t *d, const char *what) {
  double start = rank_report_now_ms();
  while (d->pending > 0) {
    if (tc_worker_progress(w))
      continue;
    if (rank_report_now_ms() - start > (double)timeout_ms)
      die("%s did not end within %llu ms", what,
          (unsigned long long)timeout_ms);
    tc_worker_wait(w, 10);
  }
  if (d->status != TC_OK)
    die("%s failed: %s", what, tc_status_string(d->status));
}

static void barrier(tc_worker_h w, const char *what) {
  done_t d = {1, TC_OK};
  tc_status_t st = tc_worker_barrier_nb(w, on_done, &d);
  if (st != TC_INPROGRESS)
    die("cannot enter %s: %s", what, tc_status_string(st));
  wait_done(w, &d, what);
}

/* Flushes every endpoint in \p peers (null entries skipped) at once. */
static void flush_all(tc_worker_h w, tc_ep_h *peers, const char *what) {
  done_t d = {0, TC_OK};
  for (uint32_t r = 0; r < job_size; ++r) {
    if (!peers[r])
      continue;
    ++d.pending;
    tc_status_t st = tc_ep_flush_nb(peers[r], on_done, &d);
    if (st != TC_INPROGRESS)
      die("%s: cannot flush rank %u: %s", what, r, tc_status_string(st));
  }
  wait_done(w, &d, what);
}

int main(int argc, char **argv) {
  uint64_t messages = 100;
  int rows = 0, mailbox = 1;
  const char *ifunc_path = getenv("TC_IFUNC_PATH");
  char path_buf[PATH_MAX];
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--messages"))
      messages = parse_count(a, v), ++i;
    else if (!strcmp(a, "--timeout"))
      timeout_ms = parse_count(a, v), ++i;
    else if (!strcmp(a, "--ifunc-path") && v)
      ifunc_path = v, ++i;
    else if (!strcmp(a, "--rows"))
      rows = 1;
    else if (!strcmp(a, "--no-mailbox"))
      mailbox = 0;
    else if (!strcmp(a, "--help")) {
      puts("USAGE: mpirun -n N tc-mpi-tsi [--messages M] [--rows] "
           "[--timeout MS]\n"
           "         [--no-mailbox] [--ifunc-path DIR]\n"
           "Every rank sends M TSI messages to every other rank; each "
           "checks its count.\nRank 0 prints what each rank cost (wire-up "
           "and connect times, memory,\nregistered bytes): the spread, and "
           "with --rows every rank's row. --no-mailbox: active messages "
           "only.");
      return 0;
    } else
      die("unknown argument '%s' (try --help)", a);
  }
  if (!ifunc_path) /* build/bin/tc-mpi-tsi -> build/ifuncs */
    ifunc_path = job_tool_ifunc_path(path_buf);

  /* 1. Wire-up: the worker publishes its address and meets every rank in
   *    a PMIx fence; then one job-wide barrier on its own. */
  rank_report_t me;
  memset(&me, 0, sizeof me);
  tc_context_params_t cp = {.field_mask = TC_CONTEXT_PARAM_FIELD_IFUNC_PATH,
                            .ifunc_path = ifunc_path};
  tc_context_h ctx;
  if (tc_context_create(&cp, &ctx) != TC_OK)
    die("cannot create a tc context");
  size_t count = 0;
  tc_worker_params_t wp = {.field_mask = TC_WORKER_PARAM_FIELD_BOOTSTRAP |
                                         TC_WORKER_PARAM_FIELD_MAILBOX,
                           .bootstrap = TC_BOOTSTRAP_PMIX,
                           .mailbox = mailbox};
  tc_worker_h w;
  double t0 = rank_report_now_ms();
  tc_status_t st = tc_worker_create(ctx, &wp, &w);
  if (st != TC_OK)
    die("cannot create a PMIx-bootstrapped worker: %s", tc_status_string(st));
  me.wireup_ms = rank_report_now_ms() - t0;
  tc_worker_query_rank(w, &self_rank, &job_size);
  me.rank = self_rank;
  if (job_size < 2)
    die("an all-to-all needs at least 2 ranks (the job has %u)", job_size);
  tc_worker_set_target_args(w, "tsi", &count);
  rank_reports_t all = {calloc(job_size, sizeof(rank_report_t)), job_size, 0};
  tc_ep_h *peers = calloc(job_size, sizeof *peers);
  if (!all.r || !peers)
    die("out of memory");
  tc_worker_set_target_args(w, RANK_REPORT_FN, &all);
  tc_worker_register_local(w, RANK_REPORT_FN, rank_report_keep);
  t0 = rank_report_now_ms();
  barrier(w, "the first barrier");
  me.barrier_ms = rank_report_now_ms() - t0;

  /* 2. An endpoint to every other rank, each flushed once: the peer
   *    answered (Hello, and over shared memory its mailbox ring). */
  t0 = rank_report_now_ms();
  for (uint32_t r = 0; r < job_size; ++r)
    if (r != self_rank && (st = tc_ep_connect_rank(w, r, &peers[r])) != TC_OK)
      die("cannot connect to rank %u: %s", r, tc_status_string(st));
  flush_all(w, peers, "the first flush of every endpoint");
  me.connect_ms = rank_report_now_ms() - t0;
  /* Each rank has answered every ring offered to it (the welcome that
   * carries the offer comes before the flush's answer); a second flush
   * returns once each peer has taken that answer and reads the ring, so
   * that the all-to-all goes through the rings from its first round. */
  flush_all(w, peers, "the second flush of every endpoint");

  /* 3. The all-to-all: round by round, one cached TSI message to each
   *    other rank (the first to each carries the code). */
  tc_ifunc_h tsi;
  if (tc_ifunc_register(w, "tsi", &tsi) != TC_OK)
    die("cannot load tsi.tcfb from '%s'", ifunc_path);
  static const unsigned char one = 1;
  tc_msg_h msg;
  if (tc_msg_create(tsi, &one, 1, &msg) != TC_OK)
    die("cannot create a tsi message");
  t0 = rank_report_now_ms();
  for (uint64_t m = 0; m < messages; ++m) {
    for (uint32_t k = 1; k < job_size; ++k) {
      uint32_t r = (self_rank + k) % job_size;
      if ((st = tc_msg_send(peers[r], msg, NULL, NULL)) != TC_INPROGRESS &&
          st != TC_OK)
        die("cannot send to rank %u: %s", r, tc_status_string(st));
    }
    tc_worker_progress(w);
  }
  flush_all(w, peers, "the flush after the all-to-all");
  barrier(w, "the barrier after the all-to-all");
  me.work_ms = rank_report_now_ms() - t0;

  /* 4. Every rank checks its count and measures itself; rank 0 gathers. */
  me.checked = count;
  me.expected = messages * (job_size - 1);
  rank_report_stats(w, &me);
  if (rank_report_memory(&me) != 0)
    die("cannot read /proc/self/smaps_rollup");
  if (self_rank == 0) {
    rank_report_keep(&me, sizeof me, &all);
  } else {
    if ((st = tc_ep_send_local(peers[0], RANK_REPORT_FN, &me, sizeof me, NULL,
                               NULL)) != TC_INPROGRESS &&
        st != TC_OK)
      die("cannot send the report to rank 0: %s", tc_status_string(st));
    done_t d = {1, TC_OK};
    if ((st = tc_ep_flush_nb(peers[0], on_done, &d)) != TC_INPROGRESS)
      die("cannot flush the report to rank 0: %s", tc_status_string(st));
    wait_done(w, &d, "the report's flush");
  }
  barrier(w, "the closing barrier");
  int failed = me.checked != me.expected;
  if (failed)
    fprintf(stderr, "tc-mpi-tsi: rank %u: error: counted %llu increments, "
            "expected %llu\n", self_rank, (unsigned long long)me.checked,
            (unsigned long long)me.expected);
  if (self_rank == 0) {
    if (all.count != job_size)
      die("%u of %u ranks reported", all.count, job_size);
    rank_report_print(stdout, "tc-mpi-tsi", &all, rows);
    for (uint32_t r = 0; r < job_size; ++r)
      if (all.r[r].checked != all.r[r].expected) {
        fprintf(stderr, "tc-mpi-tsi: rank 0: error: rank %u counted %llu "
                "increments, expected %llu\n", r,
                (unsigned long long)all.r[r].checked,
                (unsigned long long)all.r[r].expected);
        failed = 1;
      }
    if (!failed)
      printf("tc-mpi-tsi: %u ranks, %llu messages from every rank to each "
             "of the %u others: ok\n",
             job_size, (unsigned long long)messages, job_size - 1);
    fflush(stdout);
  }
  tc_msg_free(msg);
  tc_ifunc_deregister(tsi);
  for (uint32_t r = 0; r < job_size; ++r)
    if (peers[r])
      tc_ep_destroy(peers[r]);
  tc_worker_destroy(w);
  tc_context_destroy(ctx);
  free(peers);
  free(all.r);
  return failed;
}
