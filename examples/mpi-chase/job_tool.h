/* job_tool.h: what tc-mpi-chase and tc-mpi-tsi share as command-line
 * programs of a PMIx job: one error line naming the program and the rank,
 * count arguments, and the ifunc directory of the build tree they run
 * from. Define JOB_TOOL_NAME ("tc-mpi-...") before including it. */
#ifndef TC_EXAMPLES_JOB_TOOL_H
#define TC_EXAMPLES_JOB_TOOL_H

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef JOB_TOOL_NAME
#error "define JOB_TOOL_NAME before including job_tool.h"
#endif

static uint32_t self_rank, job_size;

/* Prints "NAME: rank R: error: ..." and exits 1. */
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, JOB_TOOL_NAME ": rank %u: error: ", self_rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
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

#endif
