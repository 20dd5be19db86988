/* rank_report.h: what one rank of a PMIx-launched tc job costs, gathered
 * on rank 0 and printed as one table (tc-mpi-tsi, tc-mpi-chase --report).
 *
 * Each rank fills a rank_report_t: its wire-up times, its memory as the
 * kernel counts it (/proc/self/smaps_rollup: RSS, PSS, Private_Dirty) and
 * what its worker registered for mailboxes (tc_worker_stats_t), and sends
 * it to rank 0 as a local-function message (RANK_REPORT_FN); rank 0 keeps
 * them (rank_report_keep) and prints them (rank_report_print). */
#ifndef TC_EXAMPLES_RANK_REPORT_H
#define TC_EXAMPLES_RANK_REPORT_H

#include <tc/tc.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RANK_REPORT_FN "rank_report.add"

typedef struct rank_report {
  uint32_t rank, valid;
  double wireup_ms;  /* tc_worker_create: publish the address + PMIx fence */
  double barrier_ms; /* one job-wide barrier (a PMIx fence without data) */
  double connect_ms; /* endpoints to every peer, each flushed once */
  double work_ms;    /* the program's work (all-to-all, chases) */
  uint64_t rss_kib, pss_kib, private_dirty_kib;
  uint64_t registered_bytes, areas; /* tc_worker_stats_t mailbox_* */
  uint64_t received, mailbox_received, mailbox_sent;
  uint64_t checked; /* what the program counted (tsi: increments) */
  uint64_t expected;
} rank_report_t;

static inline double rank_report_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* RSS, PSS and Private_Dirty of this process, in KiB; 0 on success. */
static inline int rank_report_memory(rank_report_t *r) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (!f)
    return -1;
  char line[256];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long long v;
    if (sscanf(line, "Rss: %llu kB", &v) == 1)
      r->rss_kib = v, found |= 1;
    else if (sscanf(line, "Pss: %llu kB", &v) == 1)
      r->pss_kib = v, found |= 2;
    else if (sscanf(line, "Private_Dirty: %llu kB", &v) == 1)
      r->private_dirty_kib = v, found |= 4;
  }
  fclose(f);
  return found == 7 ? 0 : -1;
}

/* The worker's counters. */
static inline void rank_report_stats(tc_worker_h w, rank_report_t *r) {
  tc_worker_stats_t s;
  memset(&s, 0, sizeof s);
  if (tc_worker_query_stats(w, &s) != TC_OK)
    return;
  r->registered_bytes = s.mailbox_registered_bytes;
  r->areas = s.mailbox_areas;
  r->received = s.received;
  r->mailbox_received = s.mailbox_received;
  r->mailbox_sent = s.mailbox_sent;
}

/* Rank 0's collection: one slot per rank. */
typedef struct rank_reports {
  rank_report_t *r;
  uint32_t size, count;
} rank_reports_t;

/* RANK_REPORT_FN, registered on rank 0 with the rank_reports_t as its
 * target_args. A report of another size or rank is ignored. */
static inline void rank_report_keep(void *payload, size_t size, void *args) {
  rank_reports_t *all = args;
  rank_report_t r;
  if (size != sizeof r)
    return;
  memcpy(&r, payload, sizeof r);
  if (r.rank >= all->size || all->r[r.rank].valid)
    return;
  r.valid = 1;
  all->r[r.rank] = r;
  ++all->count;
}

static inline int rank_report_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One column's minimum, median and maximum over the reports. */
static inline void rank_report_spread(const rank_reports_t *all, size_t off,
                                      int is_double, double out[3]) {
  double *v = calloc(all->size, sizeof *v);
  uint32_t n = 0;
  for (uint32_t i = 0; i < all->size; ++i) {
    if (!all->r[i].valid)
      continue;
    const char *p = (const char *)&all->r[i] + off;
    if (is_double)
      memcpy(&v[n++], p, sizeof(double));
    else {
      uint64_t u;
      memcpy(&u, p, sizeof u);
      v[n++] = (double)u;
    }
  }
  qsort(v, n, sizeof *v, rank_report_cmp);
  out[0] = n ? v[0] : 0;
  out[1] = n ? v[n / 2] : 0;
  out[2] = n ? v[n - 1] : 0;
  free(v);
}

/* Prints every rank's row (when \p rows) and the spread of each column,
 * each line starting with \p tag. */
static inline void rank_report_print(FILE *f, const char *tag,
                                     const rank_reports_t *all, int rows) {
  fprintf(f,
          "%s: rank wireup_ms barrier_ms connect_ms work_ms rss_kib pss_kib "
          "private_dirty_kib registered_bytes areas mailbox_received\n",
          tag);
  if (rows)
    for (uint32_t i = 0; i < all->size; ++i) {
      const rank_report_t *r = &all->r[i];
      if (!r->valid)
        continue;
      fprintf(f,
              "%s: %u %.2f %.3f %.2f %.2f %llu %llu %llu %llu %llu %llu\n",
              tag, r->rank, r->wireup_ms, r->barrier_ms, r->connect_ms,
              r->work_ms, (unsigned long long)r->rss_kib,
              (unsigned long long)r->pss_kib,
              (unsigned long long)r->private_dirty_kib,
              (unsigned long long)r->registered_bytes,
              (unsigned long long)r->areas,
              (unsigned long long)r->mailbox_received);
    }
  static const struct {
    const char *name;
    size_t off;
    int is_double;
  } cols[] = {
      {"wireup_ms", offsetof(rank_report_t, wireup_ms), 1},
      {"barrier_ms", offsetof(rank_report_t, barrier_ms), 1},
      {"connect_ms", offsetof(rank_report_t, connect_ms), 1},
      {"work_ms", offsetof(rank_report_t, work_ms), 1},
      {"rss_kib", offsetof(rank_report_t, rss_kib), 0},
      {"pss_kib", offsetof(rank_report_t, pss_kib), 0},
      {"private_dirty_kib", offsetof(rank_report_t, private_dirty_kib), 0},
      {"registered_bytes", offsetof(rank_report_t, registered_bytes), 0},
      {"areas", offsetof(rank_report_t, areas), 0},
  };
  for (size_t c = 0; c < sizeof cols / sizeof cols[0]; ++c) {
    double s[3];
    rank_report_spread(all, cols[c].off, cols[c].is_double, s);
    fprintf(f, "%s: %u ranks: %s min %.6g median %.6g max %.6g\n", tag,
            all->count, cols[c].name, s[0], s[1], s[2]);
  }
}

#endif /* TC_EXAMPLES_RANK_REPORT_H */
