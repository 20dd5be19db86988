/* job_tool.h: what tc-mpi-chase, tc-mpi-tsi and tc-kv share as
 * command-line programs of a PMIx job: one error line naming the program
 * and the rank, count arguments, the ifunc directory of the build tree they
 * run from, and the wire-up. Define JOB_TOOL_NAME ("tc-...") before
 * including it. */
#ifndef TC_EXAMPLES_JOB_TOOL_H
#define TC_EXAMPLES_JOB_TOOL_H

#include "error_line.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tc/tc.h>
#include <time.h>
#include <unistd.h>

#ifndef JOB_TOOL_NAME
#error "define JOB_TOOL_NAME before including job_tool.h"
#endif

static uint32_t self_rank, job_size;

/* Prints "NAME: rank R: error: ..." (error_line.h) and exits 1. */
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  error_line(JOB_TOOL_NAME, (long)self_rank, fmt, ap);
  va_end(ap);
  exit(1);
}

/* The value of \p flag: a positive decimal count, else die(). */
static uint64_t parse_count(const char *flag, const char *v) {
  char *end;
  unsigned long long x = v ? strtoull(v, &end, 10) : 0;
  if (!v || !*v || *end || x == 0)
    die("bad %s '%s'", flag, v ? v : "");
  return x;
}

/* BUILD/ifuncs for this executable's BUILD/bin/NAME, in \p buf. */
static const char *job_tool_ifunc_path(char buf[PATH_MAX]) {
  ssize_t n = readlink("/proc/self/exe", buf, PATH_MAX - 16);
  if (n <= 0)
    die("cannot find this executable");
  buf[n] = '\0';
  for (int up = 0; up < 2; ++up) {
    char *slash = strrchr(buf, '/');
    if (!slash)
      die("cannot find the build tree of '%s'", buf);
    *slash = '\0';
  }
  strcat(buf, "/ifuncs");
  return buf;
}

/* A context whose ifunc path is `ifunc_path` and a worker of it that wires
 * up through PMIx (publishes its address, fences with every rank), with
 * `target_args` for every ifunc; sets self_rank and job_size. Returns the
 * worker, *ctx the context, *create_ms how long tc_worker_create took. */
static inline tc_worker_h job_tool_worker(const char *ifunc_path,
                                          void *target_args,
                                          tc_context_h *ctx,
                                          double *create_ms) {
  tc_context_params_t cp = {.field_mask = TC_CONTEXT_PARAM_FIELD_IFUNC_PATH,
                            .ifunc_path = ifunc_path};
  if (tc_context_create(&cp, ctx) != TC_OK)
    die("cannot create a tc context");
  tc_worker_params_t wp = {.field_mask = TC_WORKER_PARAM_FIELD_TARGET_ARGS |
                                         TC_WORKER_PARAM_FIELD_BOOTSTRAP,
                           .target_args = target_args,
                           .bootstrap = TC_BOOTSTRAP_PMIX};
  tc_worker_h w = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  tc_status_t st = tc_worker_create(*ctx, &wp, &w);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (st != TC_OK)
    die("cannot create a PMIx-bootstrapped worker (started by mpirun or "
        "srun --mpi=pmix?): %s",
        tc_status_string(st));
  if (create_ms)
    *create_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                 (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  tc_worker_query_rank(w, &self_rank, &job_size);
  return w;
}

#endif
