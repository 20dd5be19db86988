/* tc-roundtrip: the C side of examples/python/bench.py's round trip. A
 * message of ARCHIVE's ifunc made from ARGS, sent and freed, then a flush,
 * N times, on one endpoint to HOST:PORT: what `ep.send(f, args);
 * ep.flush()` does in Python, in C.
 *
 *   tc-roundtrip HOST:PORT ARCHIVE N [ARGS_HEX]
 *
 * Prints `roundtrip_us X`: the mean microseconds of one send + flush (after
 * 100 not counted). Exit status 1 with one line on any error. */
#include <tc/tc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what, tc_status_t s) {
  fprintf(stderr, "tc-roundtrip: error: %s: %s\n", what,
          s == TC_OK ? "failed" : tc_last_error());
  exit(1);
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: tc-roundtrip HOST:PORT ARCHIVE N [ARGS_HEX]\n");
    return 1;
  }
  char host[256];
  const char *colon = strrchr(argv[1], ':');
  long n = atol(argv[3]);
  if (!colon || colon == argv[1] || (size_t)(colon - argv[1]) >= sizeof host ||
      n <= 0) {
    fprintf(stderr, "tc-roundtrip: error: bad arguments\n");
    return 1;
  }
  memcpy(host, argv[1], colon - argv[1]);
  host[colon - argv[1]] = '\0';
  unsigned char args[256];
  size_t nargs = 0;
  for (const char *h = argc > 4 ? argv[4] : ""; h[0] && h[1] && nargs < 256;
       h += 2)
    sscanf(h, "%2hhx", &args[nargs++]);

  FILE *f = fopen(argv[2], "rb");
  if (!f) {
    fprintf(stderr, "tc-roundtrip: error: '%s': cannot open\n", argv[2]);
    return 1;
  }
  static char archive[1 << 20];
  size_t size = fread(archive, 1, sizeof archive, f);
  fclose(f);

  tc_context_h ctx;
  tc_worker_h w;
  tc_ep_h ep;
  tc_ifunc_h fn;
  tc_msg_h m;
  tc_status_t s;
  if ((s = tc_context_create(NULL, &ctx)) != TC_OK)
    die("context", s);
  if ((s = tc_worker_create(ctx, NULL, &w)) != TC_OK)
    die("worker", s);
  if ((s = tc_ep_connect(w, host, (uint16_t)atoi(colon + 1), &ep)) != TC_OK)
    die("connect", s);
  if ((s = tc_ifunc_register_archive(w, archive, size, &fn)) != TC_OK)
    die("register", s);
  double start = 0;
  for (long i = -100; i < n; ++i) {
    if (i == 0)
      start = now_us();
    if ((s = tc_msg_create(fn, nargs ? args : NULL, nargs, &m)) != TC_OK)
      die("message", s);
    if ((s = tc_msg_send(ep, m, NULL, NULL)) != TC_INPROGRESS)
      die("send", s);
    tc_msg_free(m);
    if ((s = tc_ep_flush(ep, 10000)) != TC_OK)
      die("flush", s);
  }
  printf("roundtrip_us %.3f\n", (now_us() - start) / (double)n);
  tc_ifunc_deregister(fn);
  tc_ep_destroy(ep);
  tc_worker_destroy(w);
  tc_context_destroy(ctx);
  return 0;
}
