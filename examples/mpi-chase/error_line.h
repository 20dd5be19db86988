/* error_line.h: how the programs of a job (job_tool.h's, mpi_tool.h's)
 * say why they stop: one line, `NAME: rank R: error: MESSAGE`, written to
 * stderr at once. The launcher forwards what each rank writes as it comes,
 * and two ranks failing at once must not interleave their lines. */
#ifndef TC_EXAMPLES_ERROR_LINE_H
#define TC_EXAMPLES_ERROR_LINE_H

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static inline void error_line(const char *name, long rank, const char *fmt,
                              va_list ap) {
  char line[1024];
  int n = snprintf(line, sizeof line, "%s: rank %ld: error: ", name, rank);
  n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  if (n > (int)sizeof line - 2)
    n = (int)sizeof line - 2;
  line[n++] = '\n';
  fflush(stdout);
  if (write(STDERR_FILENO, line, (size_t)n) < 0) {
  }
}

#endif
