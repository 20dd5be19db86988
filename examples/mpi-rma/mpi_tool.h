/* mpi_tool.h: what tc-mpi-rma and tc-mpi-kv share as programs of an MPI
 * job: the rank, one error line naming the program and the rank (then
 * MPI_Abort), MPI calls checked, a timeout every rank arms for itself,
 * count arguments, and the one-sided component mpirun chose. Define
 * MPI_TOOL_NAME ("tc-mpi-...") before including it. */
#ifndef TC_EXAMPLES_MPI_TOOL_H
#define TC_EXAMPLES_MPI_TOOL_H

#include <mpi.h>

#include "error_line.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MPI_TOOL_NAME
#error "define MPI_TOOL_NAME before including mpi_tool.h"
#endif

static int rank, nranks;

/* Prints "NAME: rank R: error: ..." (error_line.h) and ends the job. */
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  error_line(MPI_TOOL_NAME, rank, fmt, ap);
  va_end(ap);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* MPI_Init, this rank, the job's size; MPI calls return codes. */
static void mpi_tool_init(int *argc, char ***argv) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

/* MPI calls return codes (MPI_ERRORS_RETURN): one line naming the call. */
static void check(int rc, const char *what) {
  if (rc == MPI_SUCCESS)
    return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  die("%s failed: %s", what, msg);
}

/* SIGALRM after timeout_s (the caller arms it): one line, exit 1. */
static unsigned timeout_s = 300;
static void on_alarm(int sig) {
  (void)sig;
  char buf[128];
  int n = snprintf(buf, sizeof buf,
                   MPI_TOOL_NAME ": rank %d: error: timed out after %u s\n",
                   rank, timeout_s);
  if (write(STDERR_FILENO, buf, (size_t)n) < 0) {
  }
  _exit(1);
}

static uint64_t parse_count(const char *flag, const char *v) {
  char *end;
  unsigned long long x = v ? strtoull(v, &end, 10) : 0;
  if (!v || !*v || *end || x == 0)
    die("bad value '%s' for %s (expected a positive number)", v ? v : "",
        flag);
  return x;
}

/* The osc component mpirun's --mca osc set, "default" without. */
static const char *osc_name(void) {
  const char *o = getenv("OMPI_MCA_osc");
  return o && *o ? o : "default";
}

/* Rank 0 gets every rank's host name (MPI_Get_processor_name) in rank
 * order, comma-separated, in a malloc'd string; the others get NULL. */
static char *host_names(void) {
  char name[MPI_MAX_PROCESSOR_NAME] = {0}, *names = NULL;
  int len = 0;
  MPI_Get_processor_name(name, &len);
  if (rank == 0 && !(names = calloc((size_t)nranks, sizeof name)))
    die("out of memory");
  check(MPI_Gather(name, sizeof name, MPI_CHAR, names, sizeof name, MPI_CHAR,
                   0, MPI_COMM_WORLD),
        "MPI_Gather");
  if (rank)
    return NULL;
  char *out = calloc((size_t)nranks, sizeof name + 1);
  if (!out)
    die("out of memory");
  for (int r = 0; r < nranks; ++r) {
    if (r)
      strcat(out, ",");
    strcat(out, names + (size_t)r * sizeof name);
  }
  free(names);
  return out;
}

#endif
