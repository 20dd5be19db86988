/* tc-kv: a distributed hash table whose operations run where the data is,
 * and a word count on it. A PMIx job (mpirun, srun --mpi=pmix), on libtc's
 * C API:
 *
 *   mpirun -n N tc-kv [--output F] [--batch BYTES] FILE...
 *   mpirun -n N tc-kv --bench [--repeat K] [--gets G] FILE...
 *
 * Every rank owns a shard of the table (examples/kv/kv_table.h): the keys
 * whose hash kv_owner() gives it. Every rank reads its slice of the files
 * (examples/kv/kv_words.h) and sends each word to its owner with a delta of
 * 1, in batches: one kv_upsert message per owner for every BYTES of
 * records, which the owner's JIT-compiled kv_upsert applies to its shard
 * (its own words a rank counts at once, with the same table code linked
 * in). Once every rank has flushed its batches and met the others in a
 * barrier, rank 0 collects the shards (kv_dump, answered with kv_result)
 * and prints every distinct word once as `COUNT WORD`, by count (largest
 * first), then by word.
 *
 * --bench measures instead (docs/kv.md): the upserts of the words, K times
 * over (upsert_rate: upserts per second, from the barrier before the first
 * to the barrier after every rank's last was applied); then rank 0's get
 * latency (G gets of one key owned by another rank, one at a time, each
 * answered by the owner's kv_get with a kv_result message: the p50 of the
 * round trips); then the get rate (every rank looks up each word of its
 * slice K times, in batches, answered in batches). Every figure is
 * checked: the collected counts must add up to the words upserted, each
 * latency answer must be its key's collected count, and the rate answers
 * must sum to K * sum(count * count / K) over the collected table (see
 * kv_answers_check). Rank 0 prints
 *
 *   row tc METRIC VALUE UNIT
 *   tc-kv: kv over N ranks on HOST0,HOST1,...: ok
 *
 * Any failure is one line, `tc-kv: rank R: error: ...`, and exit 1.
 */
#include <tc/tc.h>

#define JOB_TOOL_NAME "tc-kv"
#include "job_tool.h"

#include "kv_msg.h"
#include "kv_words.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static uint64_t timeout_ms = 120000;
/* --idle: how ranks wait in barriers (IDLE below). */
enum { IDLE_SPIN, IDLE_WAIT };
static int idle_mode = IDLE_SPIN;

/* How a wait loop spends the time nothing happens: SPIN polls (rank 0's
 * latency gets), POLL polls and, after 1,024 empty polls in a row, yields
 * the CPU at each (the bulk phases, where messages keep coming: a process
 * that yields at once loses the CPU to every other runnable one before its
 * peers' next message), IDLE does what --idle says (barriers, where a rank
 * only answers others): spin (the default: an idle rank that yields may
 * come back only at the next scheduler tick, 4 ms here, and every get it
 * should answer waits that long), or wait: sleep in tc_worker_wait until a
 * message comes, the kernel waking the rank (for more ranks than CPUs,
 * where spinning ranks would take the CPUs the others need). */
enum { SPIN, POLL, IDLE };

/* Progresses w until done(arg); dies after the timeout, naming what it
 * waited for. */
typedef int (*cond_fn)(const void *arg);
static void wait_for(tc_worker_h w, cond_fn done, const void *arg, int how,
                     const char *what) {
  double start = 0;
  unsigned empty = 0;
  for (unsigned polls = 0; !done(arg); ++polls) {
    if (tc_worker_progress(w)) {
      empty = 0;
      continue;
    }
    if (how == IDLE && idle_mode == IDLE_WAIT)
      tc_worker_wait(w, 10);
    else if (how == POLL && ++empty > 1024)
      sched_yield();
    if ((polls & 1023) == 1023) {
      double t = now_ms();
      if (start == 0)
        start = t;
      else if (t - start > (double)timeout_ms)
        die("timed out after %llu ms waiting for %s",
            (unsigned long long)timeout_ms, what);
    }
  }
}

static int flag_set(const void *arg) { return *(const volatile int *)arg; }

/* *at >= want. */
typedef struct reach {
  const volatile uint64_t *at;
  uint64_t want;
} reach_t;
static int reached(const void *arg) {
  const reach_t *r = (const reach_t *)arg;
  return *r->at >= r->want;
}

static void on_done(void *arg, tc_status_t s) {
  int *flag = (int *)arg;
  *flag = s == TC_OK ? 1 : 2;
}

/* A job-wide barrier (the PMIx fence without data). */
static void barrier(tc_worker_h w, const char *what) {
  int done = 0;
  tc_status_t st = tc_worker_barrier_nb(w, on_done, &done);
  if (st != TC_INPROGRESS)
    die("cannot enter %s: %s", what, tc_status_string(st));
  wait_for(w, flag_set, &done, IDLE, what);
  if (done != 1)
    die("%s failed (a rank died?)", what);
}

/* Until every other rank has run everything sent to it. */
static volatile uint64_t flushes_done;
static tc_status_t flush_status;
static void on_flush(void *arg, tc_status_t s) {
  (void)arg;
  if (s != TC_OK)
    flush_status = s;
  ++flushes_done;
}
static void flush_all(tc_worker_h w, tc_ep_h *peers) {
  reach_t r = {&flushes_done, flushes_done};
  for (uint32_t p = 0; p < job_size; ++p) {
    if (p == self_rank)
      continue;
    tc_status_t st = tc_ep_flush_nb(peers[p], on_flush, NULL);
    if (st != TC_INPROGRESS)
      die("cannot flush rank %u: %s", p, tc_status_string(st));
    ++r.want;
  }
  wait_for(w, reached, &r, POLL, "the flushes");
  if (flush_status != TC_OK)
    die("a flush failed: %s", tc_status_string(flush_status));
}

/*--- Batches to owners -----------------------------------------------------*/

typedef struct batch {
  unsigned char *buf;
  size_t len, cap, head; /* head: bytes before the records (a get header) */
  uint64_t keys;
} batch_t;

static void batch_reserve(batch_t *b, size_t more) {
  if (b->len + more <= b->cap)
    return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + more)
    cap *= 2;
  if (!(b->buf = realloc(b->buf, cap)))
    die("out of memory for a batch of %zu bytes", cap);
  b->cap = cap;
}

static void batch_append(batch_t *b, const unsigned char *key, uint64_t len,
                         int with_delta) {
  batch_reserve(b, (size_t)len + 20);
  b->len += kv_put_varint(b->buf + b->len, len);
  memcpy(b->buf + b->len, key, (size_t)len);
  b->len += (size_t)len;
  if (with_delta)
    b->buf[b->len++] = 1; /* LEB128 of the delta, 1 */
  ++b->keys;
}

/* A batch that could not be sent (its completion's status). */
static tc_status_t batch_status = TC_OK;
static void on_batch_sent(void *arg, tc_status_t s) {
  (void)arg;
  if (s != TC_OK)
    batch_status = s;
}

/* Sends b's records to rank `to` as one message of ifunc f. With a
 * completion callback: such a message goes as a UCX active message, not
 * through the peer's mailbox ring (docs/c-api.md), and UCX keeps many
 * batches in flight where a 24 KiB ring holds three, whose slots come back
 * only as the owner takes them (with more processes than CPUs, each such
 * turn can wait for a scheduler slice: docs/kv.md). */
static void batch_send(tc_worker_h w, tc_ifunc_h f, tc_ep_h ep, batch_t *b,
                       uint32_t to) {
  tc_msg_h m;
  tc_status_t st = tc_msg_create(f, b->buf, b->len, &m);
  if (st != TC_OK)
    die("cannot create a message for rank %u: %s", to, tc_status_string(st));
  if ((st = tc_msg_send(ep, m, on_batch_sent, NULL)) != TC_INPROGRESS)
    die("cannot send to rank %u: %s", to, tc_status_string(st));
  tc_msg_free(m);
  b->len = b->head;
  b->keys = 0;
  tc_worker_progress(w); /* Let the messages that came meanwhile run. */
}

/* How this rank's kv_get and kv_dump answer (kv_msg.h: kv_answer_fn): a
 * kv_result message to the requesting rank. */
typedef struct answerer {
  tc_ep_h *peers;
  tc_ifunc_h result;
} answerer_t;
static int send_answer(void *ctx, uint32_t to, const kv_parts_t *parts) {
  answerer_t *a = (answerer_t *)ctx;
  tc_msg_h m;
  if (to >= job_size ||
      tc_msg_create(a->result, parts, sizeof *parts, &m) != TC_OK)
    return -1;
  /* A batch's answer as an active message, as the batches go; one key's
   * through the requester's mailbox ring (the latency path). */
  size_t size = parts->len[0] + parts->len[1] + parts->len[2];
  int rc = tc_msg_send(a->peers[to], m, size > 1024 ? on_batch_sent : NULL,
                       NULL) == TC_INPROGRESS
               ? 0
               : -1;
  tc_msg_free(m);
  return rc;
}

/*--- Reports to rank 0 -----------------------------------------------------*/

typedef struct kv_report {
  uint32_t rank, table_error;
  char host[64];
  uint64_t words;     /* words in this rank's slice */
  uint64_t applied;   /* upserts applied to this rank's shard */
  uint64_t entries, table_bytes, payload_bytes;
  uint64_t get_keys, get_hits, get_sum; /* the get-rate phase */
  uint64_t bad, misrouted, unanswered, client_bad;
} kv_report_t;

typedef struct reports {
  kv_report_t *r;
  uint32_t count;
} reports_t;

static int reports_in(const void *arg) {
  return ((const volatile reports_t *)arg)->count == job_size;
}

/* The requester's dump answers have reached `want`. */
typedef struct dump_wait {
  const volatile kv_client_t *c;
  uint32_t want;
} dump_wait_t;
static int dump_answered(const void *arg) {
  const dump_wait_t *d = (const dump_wait_t *)arg;
  return d->c->dump_answers >= d->want;
}

static void on_report(void *payload, size_t size, void *args) {
  reports_t *all = (reports_t *)args;
  kv_report_t rep;
  if (size != sizeof rep)
    return;
  memcpy(&rep, payload, sizeof rep);
  if (rep.rank < job_size && !all->r[rep.rank].host[0]) {
    all->r[rep.rank] = rep;
    ++all->count;
  }
}

/*--- main ------------------------------------------------------------------*/

static const char usage[] =
    "USAGE: mpirun -n N tc-kv [options] FILE...\n"
    "Counts the words of FILE... in a hash table sharded over the N ranks;\n"
    "rank 0 prints `COUNT WORD` for every distinct word (docs/kv.md).\n"
    "  --output F      rank 0 writes the counts to F (default stdout)\n"
    "  --batch BYTES   records per upsert message (default 32000)\n"
    "  --bench         measure upserts and gets instead of printing\n"
    "  --repeat K      --bench: upsert the words K times (default 1)\n"
    "  --gets G        --bench: get round trips timed by rank 0 (1000)\n"
    "  --idle spin|wait  in barriers, ranks poll (default) or sleep\n"
    "                  until a message comes (for more ranks than CPUs)\n"
    "  --timeout MS    any wait longer than this is an error (120000)\n"
    "  --ifunc-path D  where kv_*.tcfb are (default: the build's ifuncs)\n";

int main(int argc, char **argv) {
  uint64_t batch_bytes = 32000, repeat = 1, gets = 1000;
  int bench = 0, verbose = 0;
  const char *output = NULL, *ifunc_path = getenv("TC_IFUNC_PATH");
  char path_buf[PATH_MAX];
  char **files = calloc((size_t)argc, sizeof *files);
  int nfiles = 0;
  if (!files)
    die("out of memory");
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(a, "--output") && v)
      output = v, ++i;
    else if (!strcmp(a, "--batch"))
      batch_bytes = parse_count(a, v), ++i;
    else if (!strcmp(a, "--bench"))
      bench = 1;
    else if (!strcmp(a, "--repeat"))
      repeat = parse_count(a, v), ++i;
    else if (!strcmp(a, "--gets"))
      gets = parse_count(a, v), ++i;
    else if (!strcmp(a, "--timeout"))
      timeout_ms = parse_count(a, v), ++i;
    else if (!strcmp(a, "--idle") && v && !strcmp(v, "spin"))
      idle_mode = IDLE_SPIN, ++i;
    else if (!strcmp(a, "--idle") && v && !strcmp(v, "wait"))
      idle_mode = IDLE_WAIT, ++i;
    else if (!strcmp(a, "--ifunc-path") && v)
      ifunc_path = v, ++i;
    else if (!strcmp(a, "-v"))
      verbose = 1;

    else if (a[0] == '-' && a[1])
      die("unknown or incomplete argument '%s' (try --help)", a);
    else
      files[nfiles++] = argv[i];
  }
  if (!nfiles)
    die("no input files (try --help)");
  if (!ifunc_path)
    ifunc_path = job_tool_ifunc_path(path_buf);

  /* Batches go eagerly, whatever their size: with UCX's default threshold
   * a message of more than some 8 KiB takes the rendezvous protocol (a
   * request, then the receiver fetches the data), a round trip per batch
   * (docs/kv.md). */
  setenv("UCX_RNDV_THRESH", "inf", 0);

  /* 1. Wire-up: the worker publishes its address and fences with all. */
  tc_context_h ctx;
  kv_shard_t shard;
  memset(&shard, 0, sizeof shard);
  tc_worker_h w = job_tool_worker(ifunc_path, &shard, &ctx, NULL);
  tc_status_t st;

  /* 2. This rank's words. */
  kv_words_t words;
  char err[512];
  if (kv_read_slice(files, nfiles, self_rank, job_size, &words, err,
                    sizeof err))
    die("%s", err);

  /* 3. The shard, the endpoints, the code. */
  tc_ep_h *peers = calloc(job_size, sizeof *peers);
  batch_t *out = calloc(job_size, sizeof *out);
  reports_t all = {calloc(job_size, sizeof(kv_report_t)), 0};
  if (!peers || !out || !all.r)
    die("out of memory");
  for (uint32_t r = 0; r < job_size; ++r)
    if ((st = tc_ep_connect_rank(w, r, &peers[r])) != TC_OK)
      die("cannot connect to rank %u: %s", r, tc_status_string(st));
  tc_ifunc_h upsert = NULL, get = NULL, dump = NULL, result = NULL;
  if (tc_ifunc_register(w, "kv_upsert", &upsert) != TC_OK ||
      tc_ifunc_register(w, "kv_get", &get) != TC_OK ||
      tc_ifunc_register(w, "kv_dump", &dump) != TC_OK ||
      tc_ifunc_register(w, "kv_result", &result) != TC_OK)
    die("cannot load kv_upsert, kv_get, kv_dump and kv_result from '%s'",
        ifunc_path);
  answerer_t answerer = {peers, result};
  shard.self = self_rank;
  shard.ranks = job_size;
  shard.answer = send_answer;
  shard.answer_ctx = &answerer;
  kv_client_t client;
  memset(&client, 0, sizeof client);
  tc_worker_set_target_args(w, "kv_result", &client);
  tc_worker_set_target_args(w, "kv.report", &all);
  tc_worker_register_local(w, "kv.report", on_report);
  barrier(w, "the set-up barrier");

  /* Warm-up, untimed: every rank's code reaches every other rank (first
   * contact: shipped, JIT-compiled) with an empty upsert batch and a get
   * of the empty key (found nowhere, answered all the same). */
  if (bench) {
    batch_t probe = {0};
    kv_get_hdr_t hdr = {self_rank, 0, 0};
    batch_reserve(&probe, sizeof hdr);
    memcpy(probe.buf, &hdr, sizeof hdr);
    probe.len = probe.head = sizeof hdr;
    reach_t answered = {&client.answers, job_size - 1};
    for (uint32_t r = 0; r < job_size; ++r) {
      if (r == self_rank)
        continue;
      batch_t empty = {0};
      batch_send(w, upsert, peers[r], &empty, r);
      batch_append(&probe, (const unsigned char *)"", 0, 0);
      batch_send(w, get, peers[r], &probe, r);
    }
    free(probe.buf);
    wait_for(w, reached, &answered, POLL, "the warm-up's answers");
    flush_all(w, peers);
    memset(&client, 0, sizeof client);
    barrier(w, "the barrier after the warm-up");
  }

  /* 4. The upserts: every word to its owner, batched. */
  uint64_t local = 0;
  double t0 = now_ms();
  kv_iter_t it = kv_words_iter(&words, repeat);
  const unsigned char *key;
  uint64_t len;
  while (kv_iter_next(&it, &key, &len)) {
    uint64_t h = kv_hash(key, len);
    uint32_t o = kv_owner(h, job_size);
    if (o == self_rank) {
      if (kv_table_add(&shard.table, key, len, h, 1) == 0)
        ++local;
      continue;
    }
    batch_append(&out[o], key, len, 1);
    if (out[o].len >= batch_bytes)
      batch_send(w, upsert, peers[o], &out[o], o);
  }
  for (uint32_t r = 0; r < job_size; ++r)
    if (out[r].len)
      batch_send(w, upsert, peers[r], &out[r], r);
  double t_sent = now_ms();
  flush_all(w, peers);
  double t_flushed = now_ms();
  barrier(w, "the barrier after the upserts");
  double t_upsert = now_ms() - t0;
  if (flush_status != TC_OK || batch_status != TC_OK)
    die("a batch or flush failed: %s",
        tc_status_string(flush_status != TC_OK ? flush_status : batch_status));
  if (shard.table.error)
    die("the table stopped growing: %s", shard.table.error == KV_ERR_FULL
                                             ? "over 4 GiB of entries"
                                             : "out of memory");
  if (verbose)
    fprintf(stderr,
            "tc-kv: rank %u: %llu words, %llu entries; upserts %.2f ms "
            "(sending %.2f, flushing %.2f, the barrier %.2f)\n",
            self_rank, (unsigned long long)words.count,
            (unsigned long long)shard.table.count, t_upsert, t_sent - t0,
            t_flushed - t_sent, t0 + t_upsert - t_flushed);

  /* 5. --bench: get latency (rank 0) and get rate (every rank). */
  kv_lat_t lat = {{0}, {0}, {0}, 0};
  double p50 = -1, t_gets = 0;
  uint64_t local_get_keys = 0, local_get_hits = 0, local_get_sum = 0;
  if (bench) {
    if (self_rank == 0 && job_size > 1)
      kv_lat_pick(&lat, &words, job_size);
    if (lat.n) {
      double *rt = malloc(gets * sizeof *rt);
      batch_t one = {0};
      uint64_t answer = 0;
      unsigned char found = 0;
      if (!rt)
        die("out of memory");
      client.values = &answer;
      client.found = &found;
      client.slots = 1;
      for (uint64_t i = 0; i < gets + lat.n; ++i) {
        uint64_t k = i % lat.n;
        uint32_t o = kv_owner(kv_hash(lat.key[k], lat.len[k]), job_size);
        kv_get_hdr_t hdr = {0, 0, 0};
        one.len = 0;
        batch_reserve(&one, sizeof hdr);
        memcpy(one.buf, &hdr, sizeof hdr);
        one.len = sizeof hdr;
        batch_append(&one, lat.key[k], lat.len[k], 0);
        reach_t r = {&client.answers, client.answers + 1};
        found = 0;
        double s = now_ms();
        tc_msg_h m;
        if (tc_msg_create(get, one.buf, one.len, &m) != TC_OK ||
            tc_msg_send(peers[o], m, NULL, NULL) != TC_INPROGRESS)
          die("cannot send a get to rank %u", o);
        tc_msg_free(m);
        wait_for(w, reached, &r, SPIN, "a get's answer");
        double e = now_ms();
        if (i >= lat.n) /* The first round of keys is the warm-up. */
          rt[i - lat.n] = e - s;
        if (!found)
          die("a get of '%.*s' found nothing at rank %u", (int)lat.len[k],
              (const char *)lat.key[k], o);
        lat.value[k] = answer;
      }
      p50 = kv_median(rt, gets) * 1e3;
      free(rt);
      free(one.buf);
      memset(&client, 0, sizeof client);
    }
    barrier(w, "the barrier after the latency gets");

    /* The get rate: every word of the slice once, batched per owner. */
    for (uint32_t r = 0; r < job_size; ++r) {
      kv_get_hdr_t hdr = {self_rank, 0, 0};
      out[r].len = 0;
      batch_reserve(&out[r], sizeof hdr);
      memcpy(out[r].buf, &hdr, sizeof hdr);
      out[r].len = out[r].head = sizeof hdr;
      out[r].keys = 0;
    }
    barrier(w, "the barrier before the get rate");
    uint64_t sent = 0;
    t0 = now_ms();
    it = kv_words_iter(&words, repeat);
    while (kv_iter_next(&it, &key, &len)) {
      uint64_t h = kv_hash(key, len);
      uint32_t o = kv_owner(h, job_size);
      if (o == self_rank) {
        const unsigned char *v = kv_table_find(&shard.table, key, len, h);
        ++local_get_keys;
        if (v)
          ++local_get_hits, local_get_sum += kv_value(v);
        continue;
      }
      batch_append(&out[o], key, len, 0);
      if (out[o].len >= batch_bytes)
        sent += out[o].keys, batch_send(w, get, peers[o], &out[o], o);
    }
    for (uint32_t r = 0; r < job_size; ++r)
      if (out[r].keys)
        sent += out[r].keys, batch_send(w, get, peers[r], &out[r], r);
    reach_t answered = {&client.answers, sent};
    wait_for(w, reached, &answered, POLL, "the get answers");
    barrier(w, "the barrier after the get rate");
    t_gets = now_ms() - t0;
  }

  /* 6. Every rank reports to rank 0. */
  kv_report_t me;
  memset(&me, 0, sizeof me);
  me.rank = self_rank;
  gethostname(me.host, sizeof me.host - 1);
  me.words = words.count;
  me.applied = shard.upserts + local;
  me.entries = shard.table.count;
  me.table_bytes = kv_table_bytes(&shard.table);
  me.payload_bytes = kv_table_payload_bytes(&shard.table);
  me.get_keys = client.answers + local_get_keys;
  me.get_hits = client.hits + local_get_hits;
  me.get_sum = client.sum + local_get_sum;
  me.bad = shard.bad;
  me.misrouted = shard.misrouted;
  me.unanswered = shard.unanswered + (batch_status != TC_OK);
  me.client_bad = client.bad;
  me.table_error = shard.table.error;
  if (self_rank == 0)
    on_report(&me, sizeof me, &all);
  else if ((st = tc_ep_send_local(peers[0], "kv.report", &me, sizeof me,
                                  NULL, NULL)) != TC_INPROGRESS)
    die("cannot report to rank 0: %s", tc_status_string(st));

  /* 7. Rank 0 collects every shard and checks, then prints. */
  if (self_rank == 0) {
    wait_for(w, reports_in, &all, POLL, "every rank's report");
    uint64_t total_words = 0, applied = 0, entries = 0, max_bytes = 0;
    double max_ratio = 0;
    for (uint32_t r = 0; r < job_size; ++r) {
      const kv_report_t *x = &all.r[r];
      if (x->bad || x->misrouted || x->unanswered || x->client_bad ||
          x->table_error)
        die("rank %u: %llu malformed messages, %llu misrouted keys, %llu "
            "unanswered gets, %llu malformed answers, table error %u",
            r, (unsigned long long)x->bad, (unsigned long long)x->misrouted,
            (unsigned long long)x->unanswered,
            (unsigned long long)x->client_bad, x->table_error);
      total_words += x->words;
      applied += x->applied;
      entries += x->entries;
      if (x->table_bytes > max_bytes)
        max_bytes = x->table_bytes;
      if (x->payload_bytes &&
          (double)x->table_bytes / (double)x->payload_bytes > max_ratio)
        max_ratio = (double)x->table_bytes / (double)x->payload_bytes;
    }
    if (applied != total_words * repeat)
      die("%llu upserts applied, expected %llu",
          (unsigned long long)applied,
          (unsigned long long)(total_words * repeat));
    for (uint32_t r = 1; r < job_size; ++r) {
      client.dump_next = 0;
      client.dump_done = 0;
      do {
        kv_dump_req_t req = {0, 60000, client.dump_next};
        dump_wait_t answered = {&client, client.dump_answers + 1};
        tc_msg_h m;
        if (tc_msg_create(dump, &req, sizeof req, &m) != TC_OK ||
            tc_msg_send(peers[r], m, NULL, NULL) != TC_INPROGRESS)
          die("cannot ask rank %u for its entries", r);
        tc_msg_free(m);
        wait_for(w, dump_answered, &answered, POLL, "a rank's entries");
        if (client.error || client.bad)
          die("cannot keep rank %u's entries", r);
      } while (!client.dump_done);
    }
    kv_count_t *counts = NULL;
    uint64_t n = 0, cap = 0;
    if (kv_counts_add(client.entries, client.entries_len, &counts, &n, &cap) ||
        kv_counts_add(shard.table.arena, shard.table.used, &counts, &n,
                      &cap))
        die("the collected entries are malformed (or out of memory)");
    if (n != entries)
      die("collected %llu entries; the shards hold %llu",
          (unsigned long long)n, (unsigned long long)entries);
    uint64_t keys = 0, hits = 0, gsum = 0;
    for (uint32_t r = 0; r < job_size; ++r)
      keys += all.r[r].get_keys, hits += all.r[r].get_hits,
          gsum += all.r[r].get_sum;
    if (kv_counts_check(counts, n, total_words, repeat, err, sizeof err) ||
        (bench && kv_answers_check(counts, n, total_words, repeat, keys, hits,
                                   gsum, &lat, err, sizeof err)))
      die("%s", err);
    if (bench) {
      kv_figures_t f = {total_words, repeat, n, t_upsert / 1e3, t_gets / 1e3,
                        p50, max_ratio, max_bytes};
      kv_bench_rows("tc", &f);
      printf("tc-kv: kv over %u ranks on ", job_size);
      for (uint32_t r = 0; r < job_size; ++r)
        printf("%s%s", r ? "," : "", all.r[r].host);
      printf(": ok\n");
      fflush(stdout);
    } else {
      if (kv_counts_write(counts, n, output, err, sizeof err))
        die("%s", err);
    }
    free(counts);
  }

  /* 8. The closing barrier: the other ranks answer dumps until it ends. */
  barrier(w, "the closing barrier");
  tc_ifunc_deregister(upsert);
  tc_ifunc_deregister(get);
  tc_ifunc_deregister(dump);
  tc_ifunc_deregister(result);
  for (uint32_t r = 0; r < job_size; ++r)
    tc_ep_destroy(peers[r]);
  tc_worker_destroy(w);
  tc_context_destroy(ctx);
  for (uint32_t r = 0; r < job_size; ++r)
    free(out[r].buf);
  free(out);
  free(peers);
  free(all.r);
  free(client.entries);
  free(words.rec);
  free(files);
  kv_table_free(&shard.table);
  return 0;
}
