/* tc-mpi-rma: each tc-bench benchmark written the way an MPI user writes it,
 * with MPI one-sided operations (passive target, MPI_Win_lock_all), as the
 * reference tc-bench measures beside tc (`--modes ...,mpi`).
 *
 *   mpirun -n 2     tc-mpi-rma tsi  [--warmup N] [--iters N] [--msgs N]
 *   mpirun -n 2     tc-mpi-rma sss  [--sizes LIST] [--warmup N] [--iters N]
 *                                   [--msgs N]
 *   mpirun -n 2     tc-mpi-rma iput [same as sss]
 *   mpirun -n S+1   tc-mpi-rma dapc [--entries N] [--seed N] [--depths LIST]
 *                                   [--count N]
 *   common options: [--timeout S]
 *
 * Rank 0 is the origin (tc-bench's client); the other ranks are targets
 * (its servers) and take no part in the operations: they wait in the final
 * MPI_Barrier, which is where a component that needs the target's help
 * (osc pt2pt, anything over TCP without RDMA) gets its progress.
 *  - tsi: rank 1 exposes a 64-bit counter. mpi_acc: MPI_Accumulate(+1,
 *    MPI_SUM) then MPI_Win_flush; mpi_fop: MPI_Fetch_and_op(+1, MPI_SUM),
 *    the old value returned. Latency: half the time of one operation plus
 *    its flush (a round trip: the origin knows the target has it, as
 *    tc-bench's ping-pong, whose half is tc's latency); rate: operations
 *    issued back to back and ended by one flush. Checked: the counter is
 *    exactly the number of increments after each phase, and every fetched
 *    value is the counter's value before that increment (each once).
 *  - dapc: ranks 1..S hold the shards of tc-bench dapc's table (same size,
 *    seed and sharding: examples/dapc/dapc_table.h); rank 0 chases with one
 *    MPI_Get + MPI_Win_flush per hop (the MPI user's GBPC). Every chase end
 *    is checked against the closed-form reference; warm-up and start
 *    points are tc-bench dapc's.
 *  - sss: rank 1 holds SIZE bytes of the numbers tc-bench sss sends;
 *    mpi_get: MPI_Get of all of them + flush, then a local sum, checked
 *    against the exact sum every time. Rate: gets into a ring of buffers,
 *    a flush per ring, then the sums.
 *  - iput: mpi_put: MPI_Put of the bytes tc-bench iput's payload carries
 *    (SIZE - 8, at offset 0 of a 1 MiB window) + flush; rate: back to back,
 *    one flush. Checked: the target's buffer hashes (FNV-1a) to what tc's
 *    iput leaves in its 1 MiB buffer.
 * Rank 0 prints one line per figure, then the ok line:
 *
 *   row OP METRIC VALUE UNIT [servers=S depth=D] [payload=P]
 *   tc-mpi-rma: tsi over 2 ranks on HOST0,HOST1, osc sm: ok
 *
 * (the ranks' host names in rank order; osc: the OMPI_MCA_osc that
 * mpirun's --mca osc set, "default" without.)
 * Any failure, a wrong result included, is one line on stderr,
 * `tc-mpi-rma: rank R: error: ...`, and MPI_Abort; every rank stops itself
 * after --timeout seconds (default 300) with such a line.
 *
 * TC_MPI_RMA_FAULT (tests): "data" corrupts the data once, where the
 * checks must see it (one increment or put left out or changed, a shard
 * built with another seed, one number changed); "stall" makes rank 1 stop
 * answering (it sleeps), so that the timeout must end the job.
 */
#define MPI_TOOL_NAME "tc-mpi-rma"
#include "mpi_tool.h"

#include "dapc_table.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *fault = "";

/* A ','-separated list of positive numbers; returns how many (at most
 * max). */
static size_t parse_list(const char *flag, const char *v, uint64_t *out,
                         size_t max) {
  if (!v)
    die("missing value after %s", flag);
  size_t n = 0;
  char *copy = strdup(v), *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (n == max)
      die("too many values for %s (at most %zu)", flag, max);
    out[n++] = parse_count(flag, tok);
  }
  free(copy);
  if (!n)
    die("missing value after %s", flag);
  return n;
}

/* FNV-1a, as tc-bench's iput check. */
static uint64_t fnv1a(const void *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) {
    h ^= ((const unsigned char *)p)[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

/* A window of `bytes` on the target ranks (none on rank 0), locked for
 * the whole run: passive target, as one-sided codes do. */
static MPI_Win make_window(MPI_Aint bytes, void **base) {
  MPI_Win win;
  check(MPI_Win_allocate(rank ? bytes : 0, 8, MPI_INFO_NULL, MPI_COMM_WORLD,
                         base, &win),
        "MPI_Win_allocate (is this osc component usable here?)");
  check(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN),
        "MPI_Win_set_errhandler");
  return win;
}

static void start_epoch(MPI_Win win) {
  check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win), "MPI_Win_lock_all");
  check(MPI_Win_sync(win), "MPI_Win_sync");
  check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

static void end_epoch(MPI_Win win) {
  if (rank == 1 && !strcmp(fault, "stall"))
    for (;;)
      pause(); /* Never answers again: the timeout must end the job. */
  check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  check(MPI_Win_unlock_all(win), "MPI_Win_unlock_all");
}

static void row(const char *op, const char *metric, double v,
                const char *unit, const char *params) {
  printf("row %s %s %.6g %s%s%s\n", op, metric, v, unit, *params ? " " : "",
         params);
}

/*--- tsi -------------------------------------------------------------------*/

static void tsi(uint64_t warmup, uint64_t iters, uint64_t msgs) {
  if (nranks != 2)
    die("tsi runs on 2 ranks (origin and target), not %d", nranks);
  uint64_t *counter = NULL;
  MPI_Win win = make_window(8, (void **)&counter);
  if (rank)
    *counter = 0;
  start_epoch(win);
  if (rank == 0) {
    const uint64_t one = 1;
    uint64_t expect = 0;
    /* The counter's value, read with an atomic no-op, must be `expect`. */
#define CHECK_COUNTER(phase)                                                   \
  do {                                                                         \
    uint64_t got = 0;                                                          \
    check(MPI_Fetch_and_op(NULL, &got, MPI_UINT64_T, 1, 0, MPI_NO_OP, win),    \
          "MPI_Fetch_and_op");                                                 \
    check(MPI_Win_flush(1, win), "MPI_Win_flush");                             \
    if (got != expect)                                                         \
      die("tsi %s: the target counted %llu increments, expected %llu", phase,  \
          (unsigned long long)got, (unsigned long long)expect);                \
  } while (0)

    /* mpi_acc latency: accumulate + flush, one at a time. */
    double t0 = 0;
    for (uint64_t i = 0; i < warmup + iters; ++i) {
      if (i == warmup)
        t0 = MPI_Wtime();
      check(MPI_Accumulate(&one, 1, MPI_UINT64_T, 1, 0, 1, MPI_UINT64_T,
                           MPI_SUM, win),
            "MPI_Accumulate");
      check(MPI_Win_flush(1, win), "MPI_Win_flush");
    }
    double lat = (MPI_Wtime() - t0) / (double)iters / 2 * 1e6;
    expect += warmup + iters;
    CHECK_COUNTER("mpi_acc latency");
    /* mpi_acc rate: back to back, one flush. */
    int skip = !strcmp(fault, "data");
    t0 = MPI_Wtime();
    for (uint64_t i = 0; i < msgs; ++i) {
      if (skip && i == msgs / 2)
        continue; /* TC_MPI_RMA_FAULT=data: one increment left out. */
      check(MPI_Accumulate(&one, 1, MPI_UINT64_T, 1, 0, 1, MPI_UINT64_T,
                           MPI_SUM, win),
            "MPI_Accumulate");
    }
    check(MPI_Win_flush(1, win), "MPI_Win_flush");
    double rate = (double)msgs / (MPI_Wtime() - t0);
    expect += msgs;
    CHECK_COUNTER("mpi_acc rate");
    row("mpi_acc", "latency_us", lat, "us", "");
    row("mpi_acc", "rate_msgs", rate, "msgs/s", "");

    /* mpi_fop latency: fetch-and-add, the old value back, one at a time;
     * each old value must be the count so far. */
    for (uint64_t i = 0; i < warmup + iters; ++i) {
      if (i == warmup)
        t0 = MPI_Wtime();
      uint64_t old = 0;
      check(MPI_Fetch_and_op(&one, &old, MPI_UINT64_T, 1, 0, MPI_SUM, win),
            "MPI_Fetch_and_op");
      check(MPI_Win_flush(1, win), "MPI_Win_flush");
      if (old != expect + i)
        die("tsi mpi_fop: increment %llu fetched %llu, expected %llu",
            (unsigned long long)i, (unsigned long long)old,
            (unsigned long long)(expect + i));
    }
    lat = (MPI_Wtime() - t0) / (double)iters / 2 * 1e6;
    expect += warmup + iters;
    /* mpi_fop rate: back to back into a result array, one flush; every
     * value from expect to expect + msgs - 1 must come back exactly once. */
    uint64_t *old = calloc(msgs, sizeof *old);
    unsigned char *seen = calloc(msgs, 1);
    if (!old || !seen)
      die("out of memory for %llu results", (unsigned long long)msgs);
    t0 = MPI_Wtime();
    for (uint64_t i = 0; i < msgs; ++i)
      check(MPI_Fetch_and_op(&one, &old[i], MPI_UINT64_T, 1, 0, MPI_SUM, win),
            "MPI_Fetch_and_op");
    check(MPI_Win_flush(1, win), "MPI_Win_flush");
    rate = (double)msgs / (MPI_Wtime() - t0);
    for (uint64_t i = 0; i < msgs; ++i) {
      uint64_t k = old[i] - expect;
      if (old[i] < expect || k >= msgs || seen[k]++)
        die("tsi mpi_fop rate: fetched value %llu is out of place (%llu "
            "increments before the phase)",
            (unsigned long long)old[i], (unsigned long long)expect);
    }
    free(old);
    free(seen);
    expect += msgs;
    CHECK_COUNTER("mpi_fop");
    row("mpi_fop", "latency_us", lat, "us", "");
    row("mpi_fop", "rate_msgs", rate, "msgs/s", "");
#undef CHECK_COUNTER
  }
  end_epoch(win);
  check(MPI_Win_free(&win), "MPI_Win_free");
}

/*--- dapc ------------------------------------------------------------------*/

static void dapc(uint64_t entries, uint64_t seed, const uint64_t *depths,
                 size_t ndepths, uint64_t count) {
  if (nranks < 2)
    die("dapc needs at least 2 ranks (rank 0 chases, the others serve)");
  uint32_t servers = (uint32_t)(nranks - 1);
  if (entries < servers)
    die("--entries %llu is less than the %u server ranks",
        (unsigned long long)entries, servers);
  dapc_perm_t perm;
  dapc_perm_init(&perm, entries, seed);
  uint64_t lo = 0, hi = 0;
  if (rank) {
    lo = dapc_shard_lo(entries, servers, (uint32_t)rank - 1);
    hi = dapc_shard_lo(entries, servers, (uint32_t)rank);
  }
  uint64_t *shard = NULL;
  MPI_Win win = make_window((MPI_Aint)((hi - lo) * 8), (void **)&shard);
  if (rank) {
    dapc_perm_t built = perm;
    if (!strcmp(fault, "data")) /* Another table: every chase ends wrong. */
      dapc_perm_init(&built, entries, seed + 1);
    dapc_fill_shard(&built, lo, hi, shard);
  }
  start_epoch(win);
  if (rank == 0) {
    uint64_t gets = 0;
    /* One chase: a get + flush per hop, from the owner of the entry. */
#define CHASE(start, depth, k)                                                 \
  do {                                                                         \
    uint64_t addr_ = (start);                                                  \
    for (uint64_t h_ = 0; h_ < (depth); ++h_) {                                \
      uint32_t s_ = dapc_owner(entries, servers, addr_);                       \
      uint64_t at_ = addr_ - dapc_shard_lo(entries, servers, s_);              \
      check(MPI_Get(&addr_, 1, MPI_UINT64_T, (int)s_ + 1, (MPI_Aint)at_, 1,    \
                    MPI_UINT64_T, win),                                        \
            "MPI_Get");                                                        \
      check(MPI_Win_flush((int)s_ + 1, win), "MPI_Win_flush");                 \
      ++gets;                                                                  \
    }                                                                          \
    uint64_t ref_ = dapc_chase_ref(&perm, (start), (depth));                   \
    if (addr_ != ref_)                                                         \
      die("dapc: chase %llu of depth %llu ended at %llu, expected %llu",       \
          (unsigned long long)(k), (unsigned long long)(depth),                \
          (unsigned long long)addr_, (unsigned long long)ref_);                \
  } while (0)
    for (size_t d = 0; d < ndepths; ++d) {
      uint64_t depth = depths[d];
      gets = 0;
      /* Warm-up, untimed: one chase from each server's first entry. */
      for (uint32_t s = 0; s < servers; ++s)
        CHASE(dapc_shard_lo(entries, servers, s), depth, (uint64_t)0);
      double t0 = MPI_Wtime();
      for (uint64_t k = 1; k <= count; ++k)
        CHASE(dapc_mix64(k + 1) % entries, depth, k);
      double rate = (double)count / (MPI_Wtime() - t0);
      if (gets != (count + servers) * depth)
        die("dapc: %llu gets for %llu chases of depth %llu",
            (unsigned long long)gets, (unsigned long long)(count + servers),
            (unsigned long long)depth);
      char params[64];
      snprintf(params, sizeof params, "servers=%u depth=%llu", servers,
               (unsigned long long)depth);
      row("mpi_get", "rate_chases", rate, "chases/s", params);
    }
#undef CHASE
  }
  end_epoch(win);
  check(MPI_Win_free(&win), "MPI_Win_free");
}

/*--- sss and iput ----------------------------------------------------------*/

#define MAX_SIZE (1u << 20)

/* tc-bench's payload words for a size (examples/bench/Sweep.cpp). */
static void sweep_words(int sum, uint64_t size, uint64_t *w) {
  for (uint64_t i = 0; i < size / 8; ++i)
    w[i] = sum ? i * 2654435761u + size
               : (i == 0 ? 0 : 0x0101010101010101ULL * (i + size));
}

static void sweep(int sum, const uint64_t *sizes, size_t nsizes,
                  uint64_t warmup, uint64_t iters, uint64_t msgs) {
  const char *name = sum ? "sss" : "iput";
  if (nranks != 2)
    die("%s runs on 2 ranks (origin and target), not %d", name, nranks);
  for (size_t s = 0; s < nsizes; ++s)
    if (sizes[s] < 16 || sizes[s] % 8 || sizes[s] > MAX_SIZE)
      die("payload sizes must be multiples of 8 from 16 to %u bytes (got "
          "%llu)",
          MAX_SIZE, (unsigned long long)sizes[s]);
  unsigned char *base = NULL;
  MPI_Win win = make_window(MAX_SIZE, (void **)&base);
  uint64_t *words = malloc(MAX_SIZE);
  /* sss rate: gets into a ring of buffers (4 MiB, at most 256), then the
   * sums. */
  size_t ring_bytes = 4u << 20;
  unsigned char *ring = malloc(ring_bytes);
  if (!words || !ring)
    die("out of memory");
  check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win), "MPI_Win_lock_all");
  for (size_t s = 0; s < nsizes; ++s) {
    uint64_t size = sizes[s], nwords = size / 8;
    sweep_words(sum, size, words);
    /* The target's window for this size: sss's numbers, or zeroes for
     * iput to put into. */
    if (rank) {
      if (sum) {
        memcpy(base, words, size);
        if (!strcmp(fault, "data"))
          ((uint64_t *)base)[nwords / 2] ^= 1; /* One number changed. */
      } else {
        memset(base, 0, MAX_SIZE);
      }
    }
    check(MPI_Win_sync(win), "MPI_Win_sync");
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    char params[32];
    snprintf(params, sizeof params, "payload=%llu", (unsigned long long)size);
    if (rank == 0 && sum) {
      uint64_t expect = 0;
      for (uint64_t i = 0; i < nwords; ++i)
        expect += words[i];
      uint64_t per_ring = ring_bytes / size;
      if (per_ring > 256)
        per_ring = 256;
      uint64_t sums = 0;
#define SUM_AND_CHECK(buf)                                                     \
  do {                                                                         \
    const uint64_t *v_ = (const uint64_t *)(buf);                              \
    uint64_t t_ = 0;                                                           \
    for (uint64_t i_ = 0; i_ < nwords; ++i_)                                   \
      t_ += v_[i_];                                                            \
    if (t_ != expect)                                                          \
      die("sss: get %llu of %llu bytes summed to %llu, expected %llu",         \
          (unsigned long long)sums, (unsigned long long)size,                  \
          (unsigned long long)t_, (unsigned long long)expect);                 \
    ++sums;                                                                    \
  } while (0)
      double t0 = 0;
      for (uint64_t i = 0; i < warmup + iters; ++i) {
        if (i == warmup)
          t0 = MPI_Wtime();
        check(MPI_Get(ring, (int)size, MPI_BYTE, 1, 0, (int)size, MPI_BYTE,
                      win),
              "MPI_Get");
        check(MPI_Win_flush(1, win), "MPI_Win_flush");
        SUM_AND_CHECK(ring);
      }
      double lat = (MPI_Wtime() - t0) / (double)iters / 2 * 1e6;
      t0 = MPI_Wtime();
      for (uint64_t i = 0; i < msgs; i += per_ring) {
        uint64_t n = msgs - i < per_ring ? msgs - i : per_ring;
        for (uint64_t j = 0; j < n; ++j)
          check(MPI_Get(ring + j * size, (int)size, MPI_BYTE, 1, 0, (int)size,
                        MPI_BYTE, win),
                "MPI_Get");
        check(MPI_Win_flush(1, win), "MPI_Win_flush");
        for (uint64_t j = 0; j < n; ++j)
          SUM_AND_CHECK(ring + j * size);
      }
      double rate = (double)msgs / (MPI_Wtime() - t0);
#undef SUM_AND_CHECK
      if (sums != warmup + iters + msgs)
        die("sss: %llu sums, expected %llu", (unsigned long long)sums,
            (unsigned long long)(warmup + iters + msgs));
      row("mpi_get", "latency_us", lat, "us", params);
      row("mpi_get", "rate_msgs", rate, "msgs/s", params);
    } else if (rank == 0) {
      /* iput: the payload's bytes after its offset word, at offset 0. */
      const unsigned char *data = (const unsigned char *)(words + 1);
      int n = (int)(size - 8);
      uint64_t puts = 0;
      double t0 = 0;
      for (uint64_t i = 0; i < warmup + iters; ++i) {
        if (i == warmup)
          t0 = MPI_Wtime();
        check(MPI_Put(data, n, MPI_BYTE, 1, 0, n, MPI_BYTE, win), "MPI_Put");
        check(MPI_Win_flush(1, win), "MPI_Win_flush");
        ++puts;
      }
      double lat = (MPI_Wtime() - t0) / (double)iters / 2 * 1e6;
      /* TC_MPI_RMA_FAULT=data: the last put carries one byte changed. */
      int corrupt = !strcmp(fault, "data");
      static unsigned char bad[MAX_SIZE];
      if (corrupt) {
        memcpy(bad, data, (size_t)n);
        bad[n / 2] ^= 1;
      }
      t0 = MPI_Wtime();
      for (uint64_t i = 0; i < msgs; ++i) {
        const void *src = corrupt && i == msgs - 1 ? bad : data;
        check(MPI_Put(src, n, MPI_BYTE, 1, 0, n, MPI_BYTE, win), "MPI_Put");
        ++puts;
      }
      check(MPI_Win_flush(1, win), "MPI_Win_flush");
      double rate = (double)msgs / (MPI_Wtime() - t0);
      if (puts != warmup + iters + msgs)
        die("iput: %llu puts, expected %llu", (unsigned long long)puts,
            (unsigned long long)(warmup + iters + msgs));
      row("mpi_put", "latency_us", lat, "us", params);
      row("mpi_put", "rate_msgs", rate, "msgs/s", params);
    }
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    if (!sum) {
      /* The target hashes its buffer once the puts are flushed; the origin
       * compares with tc's: {0, Size - 8 bytes} put at offset 0 of 1 MiB. */
      uint64_t hash = 0;
      if (rank) {
        check(MPI_Win_sync(win), "MPI_Win_sync");
        hash = fnv1a(base, MAX_SIZE);
        check(MPI_Send(&hash, 1, MPI_UINT64_T, 0, 0, MPI_COMM_WORLD),
              "MPI_Send");
      } else {
        check(MPI_Recv(&hash, 1, MPI_UINT64_T, 1, 0, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE),
              "MPI_Recv");
        static unsigned char want[MAX_SIZE];
        memset(want, 0, sizeof want);
        memcpy(want, words + 1, size - 8);
        if (hash != fnv1a(want, MAX_SIZE))
          die("iput: the target's buffer is not what was put (%llu bytes)",
              (unsigned long long)size);
      }
    }
  }
  if (rank == 1 && !strcmp(fault, "stall"))
    for (;;)
      pause();
  check(MPI_Win_unlock_all(win), "MPI_Win_unlock_all");
  check(MPI_Win_free(&win), "MPI_Win_free");
  free(words);
  free(ring);
}

/*--- main ------------------------------------------------------------------*/

static const char usage[] =
    "USAGE: mpirun -n 2 tc-mpi-rma tsi|sss|iput [options]\n"
    "       mpirun -n S+1 tc-mpi-rma dapc [options]\n"
    "\n"
    "tc-bench's benchmarks with MPI one-sided operations (passive target):\n"
    "tsi with MPI_Accumulate + MPI_Win_flush (mpi_acc) and MPI_Fetch_and_op\n"
    "(mpi_fop), dapc with an MPI_Get per hop (mpi_get), sss with MPI_Get and\n"
    "a local sum (mpi_get), iput with MPI_Put (mpi_put). Rank 0 operates on\n"
    "the other ranks' windows, checks every result, and prints\n"
    "'row OP METRIC VALUE UNIT [PARAMS]' lines and an ok line.\n"
    "\n"
    "OPTIONS:\n"
    "  --warmup N     tsi/sss/iput: untimed operations first (default 1000)\n"
    "  --iters N      tsi/sss/iput: operations + flush one at a time "
    "(10000)\n"
    "  --msgs N       tsi/sss/iput: operations back to back, one flush "
    "(100000)\n"
    "  --sizes LIST   sss/iput: payload bytes (default 16,1024,16384)\n"
    "  --entries N    dapc: table entries (default 65536)\n"
    "  --seed N       dapc: table seed (tc-bench dapc's default)\n"
    "  --depths LIST  dapc: chase depths (default 1,64,4096)\n"
    "  --count N      dapc: timed chases per depth (default 10)\n"
    "  --timeout S    every rank stops with an error after S s (default "
    "300)\n";

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "--help")) {
    fputs(usage, stdout);
    return 0;
  }
  mpi_tool_init(&argc, &argv);
  if (getenv("TC_MPI_RMA_FAULT"))
    fault = getenv("TC_MPI_RMA_FAULT");
  if (argc < 2)
    die("missing benchmark (tsi, dapc, sss or iput; try --help)");
  const char *bench = argv[1];
  uint64_t warmup = 1000, iters = 10000, msgs = 100000;
  uint64_t entries = 65536, seed = DAPC_DEFAULT_SEED, count = 10;
  uint64_t depths[64] = {1, 64, 4096}, sizes[64] = {16, 1024, 16384};
  size_t ndepths = 3, nsizes = 3;
  for (int i = 2; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v)
      die("missing value after %s", a);
    ++i;
    if (!strcmp(a, "--warmup"))
      warmup = strcmp(v, "0") ? parse_count(a, v) : 0;
    else if (!strcmp(a, "--iters"))
      iters = parse_count(a, v);
    else if (!strcmp(a, "--msgs"))
      msgs = parse_count(a, v);
    else if (!strcmp(a, "--sizes"))
      nsizes = parse_list(a, v, sizes, 64);
    else if (!strcmp(a, "--entries"))
      entries = parse_count(a, v);
    else if (!strcmp(a, "--seed"))
      seed = strcmp(v, "0") ? parse_count(a, v) : 0;
    else if (!strcmp(a, "--depths"))
      ndepths = parse_list(a, v, depths, 64);
    else if (!strcmp(a, "--count"))
      count = parse_count(a, v);
    else if (!strcmp(a, "--timeout"))
      timeout_s = (unsigned)parse_count(a, v);
    else
      die("unknown argument '%s' (try --help)", a);
  }
  signal(SIGALRM, on_alarm);
  alarm(timeout_s);
  if (!strcmp(bench, "tsi"))
    tsi(warmup, iters, msgs);
  else if (!strcmp(bench, "dapc"))
    dapc(entries, seed, depths, ndepths, count);
  else if (!strcmp(bench, "sss") || !strcmp(bench, "iput"))
    sweep(!strcmp(bench, "sss"), sizes, nsizes, warmup, iters, msgs);
  else
    die("unknown benchmark '%s' (expected tsi, dapc, sss or iput)", bench);
  /* Where the ranks ran (MPI_Get_processor_name: the host name). */
  char *names = host_names();
  if (rank == 0) {
    printf("tc-mpi-rma: %s over %d ranks on %s, osc %s: ok\n", bench,
           nranks, names, osc_name());
    free(names);
  }
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
