/* tc-mpi-chase: the whole tc model in one small program, launched by
 * mpirun (or srun --mpi=pmix) with no hosts file.
 *
 *   mpirun -n N tc-mpi-chase [--chases C] [--depth D] [--entries E]
 *                            [--report [--rows]]
 *
 * Every rank creates a tc worker with TC_BOOTSTRAP_PMIX: libtc publishes
 * the UCX worker address under the rank and meets the other ranks in a
 * PMIx fence. Every rank then builds its shard of a pointer-chasing table
 * (examples/dapc/dapc_table.h: E entries over N ranks) and connects to
 * every rank by number. Rank 0 injects C chases of depth D: the chaser
 * ifunc (examples/dapc/dapc.c, JIT-compiled on each rank on first contact)
 * walks the local shard and forwards itself to the rank owning the next
 * entry; the last rank sends a dapc_result ifunc back to rank 0, which
 * checks the end value against the closed-form reference. Rank 0 prints
 *
 *   tc-mpi-chase: C chases of depth D over N ranks: ok
 *
 * and every rank exits 0 after a closing barrier. On any failure rank 0
 * prints the reason, tells the live ranks (which print it too), and all
 * exit 1. A rank that dies is found by rank 0's flushes to every rank.
 *
 * With --report, every rank also times one barrier and the first flush of
 * each endpoint it made, and after the closing barrier measures itself
 * (memory, registered bytes) and sends that to rank 0, which prints the
 * spread over the ranks (--rows: every rank's row too; rank_report.h)
 * before its ok line.
 */
#include <tc/tc.h>

#define JOB_TOOL_NAME "tc-mpi-chase"
#include "job_tool.h"

#include "dapc_chase.h"
#include "dapc_table.h"
#include "rank_report.h"

#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int verbose;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void note(const char *fmt, ...) {
  if (!verbose)
    return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tc-mpi-chase: rank %u: ", self_rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* The ranks' "stop" message from rank 0: the reason, as text. */
static char stop_reason[256];
static int stopped;
static void on_stop(void *payload, size_t size, void *args) {
  (void)args;
  size_t n = size < sizeof stop_reason - 1 ? size : sizeof stop_reason - 1;
  memcpy(stop_reason, payload, n);
  stop_reason[n] = '\0';
  stopped = 1;
}

/* Completion of the closing barrier and of rank 0's liveness flushes. */
static int barrier_done;
static tc_status_t barrier_status;
static void on_barrier(void *arg, tc_status_t s) {
  (void)arg;
  barrier_status = s;
  barrier_done = 1;
}

/* A job-wide barrier, progressing \p w until it ends; dies naming \p what
 * if it cannot be entered or fails. */
static void barrier(tc_worker_h w, const char *what) {
  barrier_done = 0;
  tc_status_t st = tc_worker_barrier_nb(w, on_barrier, NULL);
  if (st != TC_INPROGRESS)
    die("cannot enter %s: %s", what, tc_status_string(st));
  while (!barrier_done)
    if (!tc_worker_progress(w))
      tc_worker_wait(w, 100);
  barrier_done = 0;
  if (barrier_status != TC_OK)
    die("%s failed: %s", what, tc_status_string(barrier_status));
}

typedef struct probe {
  int pending;
  tc_status_t status;
} probe_t;
static void on_probe(void *arg, tc_status_t s) {
  probe_t *p = arg;
  p->pending = 0;
  p->status = s;
}

int main(int argc, char **argv) {
  uint64_t chases = 100, depth = 64, entries = 1 << 16;
  uint64_t timeout_ms = 30000, barriers = 0;
  long kill_rank = -1;
  int report = 0, rows = 0;
  const char *ifunc_path = getenv("TC_IFUNC_PATH");
  char path_buf[PATH_MAX];
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--chases"))
      chases = parse_count(a, v), ++i;
    else if (!strcmp(a, "--depth"))
      depth = parse_count(a, v), ++i;
    else if (!strcmp(a, "--entries"))
      entries = parse_count(a, v), ++i;
    else if (!strcmp(a, "--barriers"))
      barriers = parse_count(a, v), ++i;
    else if (!strcmp(a, "--timeout"))
      timeout_ms = parse_count(a, v), ++i;
    else if (!strcmp(a, "--ifunc-path") && v)
      ifunc_path = v, ++i;
    else if (!strcmp(a, "--test-kill-rank") && v)
      kill_rank = (long)parse_count(a, v), ++i; /* fault injection */
    else if (!strcmp(a, "-v"))
      verbose = 1;
    else if (!strcmp(a, "--report"))
      report = 1;
    else if (!strcmp(a, "--rows"))
      rows = 1;
    else if (!strcmp(a, "--help")) {
      puts("USAGE: mpirun -n N tc-mpi-chase [--chases C] [--depth D] "
           "[--entries E]\n"
           "         [--timeout MS] [--ifunc-path DIR] [--barriers K] [-v]\n"
           "         [--report [--rows]]\n"
           "Rank 0 injects C pointer chases of depth D into a table of E "
           "entries\nsharded over all N ranks and checks every end value.\n"
           "-v: timings on stderr; --barriers K: first time K job-wide "
           "barriers (the\nPMIx fence without data). --report: rank 0 "
           "prints what each rank cost\n(wire-up and connect times, "
           "memory, registered bytes); --rows: per rank.");
      return 0;
    } else
      die("unknown argument '%s' (try --help)", a);
  }
  if (entries < 2)
    die("--entries must be at least 2");
  if (!ifunc_path) /* build/bin/tc-mpi-chase -> build/ifuncs */
    ifunc_path = job_tool_ifunc_path(path_buf);

  /* 1. Wire-up: context, then a worker that bootstraps through PMIx. */
  tc_context_h ctx;
  dapc_server_t server = {0};
  double t_create;
  tc_worker_h w = job_tool_worker(ifunc_path, &server, &ctx, &t_create);
  tc_status_t st;
  {
    void *addr;
    size_t len = 0;
    if (tc_worker_get_address(w, &addr, &len) == TC_OK)
      tc_worker_release_address(w, addr);
    note("worker created and wired up (publish %zu-byte address + fence) in "
         "%.2f ms", len, t_create);
  }
  /* How long a job-wide fence takes once every rank is up. */
  double t_barriers = now_ms();
  for (uint64_t b = 0; b < barriers; ++b)
    barrier(w, "a barrier");
  if (barriers && self_rank == 0)
    fprintf(stderr, "tc-mpi-chase: %u ranks: %llu barriers, %.3f ms each\n",
            job_size, (unsigned long long)barriers,
            (now_ms() - t_barriers) / (double)barriers);
  rank_report_t me;
  memset(&me, 0, sizeof me);
  me.rank = self_rank;
  me.wireup_ms = t_create;
  rank_reports_t all = {NULL, job_size, 0};
  if (report) {
    if (!(all.r = calloc(job_size, sizeof *all.r)))
      die("out of memory");
    tc_worker_set_target_args(w, RANK_REPORT_FN, &all);
    tc_worker_register_local(w, RANK_REPORT_FN, rank_report_keep);
    double t = now_ms();
    barrier(w, "a barrier");
    me.barrier_ms = now_ms() - t;
  }
  if (entries < job_size)
    die("--entries %llu is less than the %u ranks",
        (unsigned long long)entries, job_size);

  /* 2. This rank's shard, and an endpoint to every rank (itself too: rank
   *    0's chases may start in its own shard, and results come to it). */
  dapc_perm_t perm;
  dapc_perm_init(&perm, entries, DAPC_DEFAULT_SEED);
  uint64_t lo = dapc_shard_lo(entries, job_size, self_rank);
  uint64_t hi = dapc_shard_lo(entries, job_size, self_rank + 1);
  uint64_t *shard = malloc((hi - lo) * sizeof *shard + 1);
  tc_ep_h *peers = calloc(job_size, sizeof *peers);
  if (!shard || !peers)
    die("out of memory");
  dapc_fill_shard(&perm, lo, hi, shard);
  double t_connect = now_ms();
  for (uint32_t r = 0; r < job_size; ++r)
    if ((st = tc_ep_connect_rank(w, r, &peers[r])) != TC_OK)
      die("cannot connect to rank %u: %s", r, tc_status_string(st));
  me.connect_ms = now_ms() - t_connect;
  tc_ifunc_h chaser, result;
  if (tc_ifunc_register(w, "dapc", &chaser) != TC_OK ||
      tc_ifunc_register(w, "dapc_result", &result) != TC_OK)
    die("cannot load dapc.tcfb and dapc_result.tcfb from '%s'", ifunc_path);
  dapc_args_t zero = {0, 1, 0};
  server = (dapc_server_t){.shard = shard, .lo = lo, .hi = hi, .n = entries,
                           .servers = job_size, .self = self_rank,
                           .peers = peers, .client = peers[0]};
  if (tc_msg_create(chaser, &zero, sizeof zero, &server.forward) != TC_OK ||
      tc_msg_create(result, &zero, sizeof zero, &server.result) != TC_OK)
    die("cannot create the chase messages");
  uint64_t *ends = calloc(chases + 1, sizeof *ends);
  dapc_client_t client = {0, ends, chases + 1};
  tc_worker_set_target_args(w, "dapc_result", &client);
  tc_worker_register_local(w, "mpi_chase.stop", on_stop);
  if (report) {
    /* Each endpoint flushed once: the peer answered. Only now that the
     * chaser's state is set: a flush progresses this worker, and the
     * chases of ranks done with theirs may arrive meanwhile. */
    t_connect = now_ms();
    for (uint32_t r = 0; r < job_size; ++r)
      if ((st = tc_ep_flush(peers[r], (int)timeout_ms)) != TC_OK)
        die("the first flush to rank %u failed: %s", r,
            tc_status_string(st));
    me.connect_ms += now_ms() - t_connect;
  }
  double t_work = now_ms();

  /* Fault injection for the tests: this rank dies once every rank has
   * connected (a barrier, so that no connect races the death). */
  if (kill_rank >= 0) {
    barrier(w, "a barrier");
    if (kill_rank == (long)self_rank)
      raise(SIGKILL);
  }

  char failure[200] = "";
  if (self_rank == 0) {
    /* 3. Rank 0 injects the chases one at a time and checks each end. */
    tc_msg_h msg;
    if (tc_msg_create(chaser, &zero, sizeof zero, &msg) != TC_OK)
      die("cannot create a chase message");
    double t_chase = now_ms();
    for (uint64_t k = 1; k <= chases && !failure[0]; ++k) {
      dapc_args_t a = {dapc_mix64(k) % entries, depth, k};
      memcpy(tc_msg_payload(msg, NULL), &a, sizeof a);
      uint32_t owner = dapc_owner(entries, job_size, a.addr);
      st = tc_msg_send(peers[owner], msg, NULL, NULL);
      if (st != TC_INPROGRESS) {
        snprintf(failure, sizeof failure, "rank %u: %s", owner,
                 tc_status_string(st));
        break;
      }
      double start = now_ms(), last_probe = start;
      while (client.done < k && !failure[0]) {
        if (tc_worker_progress(w))
          continue;
        double t = now_ms();
        if (t - start > (double)timeout_ms) {
          snprintf(failure, sizeof failure,
                   "chase %llu did not end within %llu ms",
                   (unsigned long long)k, (unsigned long long)timeout_ms);
          break;
        }
        if (t - last_probe > 200) {
          /* A chase is late: is every rank still there? A flush to a
           * dead rank fails (its connection is reset). */
          last_probe = t;
          for (uint32_t r = 1; r < job_size && !failure[0]; ++r) {
            probe_t p = {1, TC_OK};
            if ((st = tc_ep_flush_nb(peers[r], on_probe, &p)) !=
                TC_INPROGRESS) {
              p.pending = 0;
              p.status = st;
            }
            double ps = now_ms();
            while (p.pending && now_ms() - ps < 5000)
              if (!tc_worker_progress(w))
                tc_worker_wait(w, 10);
            if (p.status != TC_OK)
              snprintf(failure, sizeof failure, "rank %u died (%s)", r,
                       tc_status_string(p.status));
          }
        }
        tc_worker_wait(w, 10);
      }
      if (!failure[0]) {
        uint64_t start_addr = dapc_mix64(k) % entries;
        uint64_t want = dapc_chase_ref(&perm, start_addr, depth);
        if (ends[k] != want)
          snprintf(failure, sizeof failure,
                   "chase %llu from %llu ended at %llu, expected %llu",
                   (unsigned long long)k, (unsigned long long)start_addr,
                   (unsigned long long)ends[k], (unsigned long long)want);
      }
    }
    tc_msg_free(msg);
    if (failure[0]) {
      /* Tell every live rank why, so each stops and says so. */
      for (uint32_t r = 1; r < job_size; ++r)
        if (tc_ep_send_local(peers[r], "mpi_chase.stop", failure,
                             strlen(failure), NULL, NULL) == TC_INPROGRESS)
          tc_ep_flush(peers[r], 2000);
      die("%s", failure);
    }
    note("%llu chases in %.2f ms", (unsigned long long)chases,
         now_ms() - t_chase);
  }

  /* 4. The closing barrier: rank 0 enters when done; the other ranks serve
   *    chases from their progress loop until every rank has entered. */
  double t_barrier = now_ms();
  if ((st = tc_worker_barrier_nb(w, on_barrier, NULL)) != TC_INPROGRESS)
    die("cannot enter the closing barrier: %s", tc_status_string(st));
  while (!barrier_done && !stopped)
    if (!tc_worker_progress(w))
      tc_worker_wait(w, 100);
  if (stopped)
    die("stopping: rank 0 reports: %s", stop_reason);
  if (barrier_status != TC_OK)
    die("the closing barrier failed: %s", tc_status_string(barrier_status));
  if (report) {
    /* Every rank measures itself once all chases are done; rank 0 gathers
     * the reports before a last barrier and prints them. */
    me.work_ms = now_ms() - t_work;
    rank_report_stats(w, &me);
    if (rank_report_memory(&me) != 0)
      die("cannot read /proc/self/smaps_rollup");
    if (self_rank == 0)
      rank_report_keep(&me, sizeof me, &all);
    else if ((st = tc_ep_send_local(peers[0], RANK_REPORT_FN, &me, sizeof me,
                                    NULL, NULL)) != TC_INPROGRESS ||
             (st = tc_ep_flush(peers[0], (int)timeout_ms)) != TC_OK)
      die("cannot send the report to rank 0: %s", tc_status_string(st));
    barrier(w, "the report's barrier");
    if (self_rank == 0) {
      if (all.count != job_size)
        die("%u of %u ranks reported", all.count, job_size);
      rank_report_print(stdout, "tc-mpi-chase", &all, rows);
    }
  }
  if (self_rank == 0) {
    note("closing barrier %.2f ms", now_ms() - t_barrier);
    printf("tc-mpi-chase: %llu chases of depth %llu over %u ranks: ok\n",
           (unsigned long long)chases, (unsigned long long)depth, job_size);
    fflush(stdout);
  }
  tc_msg_free(server.forward);
  tc_msg_free(server.result);
  tc_ifunc_deregister(chaser);
  tc_ifunc_deregister(result);
  for (uint32_t r = 0; r < job_size; ++r)
    tc_ep_destroy(peers[r]);
  tc_worker_destroy(w);
  tc_context_destroy(ctx);
  free(peers);
  free(shard);
  free(ends);
  free(all.r);
  return 0;
}
