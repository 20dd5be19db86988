/* tc-mpi-kv: tc-kv's word count and benchmark written the two ways an MPI
 * programmer would, each at its best (docs/kv.md):
 *
 *   mpirun -n N tc-mpi-kv --mode rma|alltoall [--output F] FILE...
 *   mpirun -n N tc-mpi-kv --mode rma|alltoall --bench [--repeat K]
 *                         [--gets G] [--wave W] FILE...
 *
 * Both read the same slices of the same files as tc-kv (kv_words.h), send
 * each word to the same owner (kv_owner of the same hash, kv_table.h) and
 * print the same output.
 *
 * --mode rma: a hash table in an MPI window on every rank, updated with
 * one-sided operations as BCL's HashMap is (passive target,
 * MPI_Win_lock_all for the whole run). A slot is 32 bytes: a meta word, the
 * count, and 16 bytes of key. The meta word is 0 for an empty slot, else
 * READY | HEAP | a 16-bit tag of the hash | the key's length (up to 16
 * bytes, the key then lies in the slot) or, for a longer key, its offset
 * in the window's heap (the key there as [u64 length][bytes]). To add to a
 * key, a rank gets the key's home slot (MPI_Get, 32 bytes: meta, count and
 * an inline key in one round trip); a ready slot with the key gets the
 * delta (MPI_Fetch_and_op, MPI_SUM); another key sends it to the next slot;
 * an empty slot is claimed with MPI_Compare_and_swap on its meta word: a
 * short key reserves the slot (no READY), puts its bytes and then sets
 * READY (MPI_Fetch_and_op, MPI_REPLACE); a long key first takes heap space
 * (MPI_Fetch_and_op, MPI_SUM on the heap's top), puts itself there and
 * claims the slot ready at once. A lost claim looks at the slot again. A
 * rank works on --wave W keys at a time: each step issues one operation
 * for every key that needs one and ends with one MPI_Win_flush_all, so a
 * round trip serves W keys (at most 64 when osc pt2pt may serve: Open
 * MPI 4.1's deadlocks with a hundred or more in flight). Gets probe the
 * same way. Unless OMPI_MCA_osc says otherwise, the component is sm or
 * pt2pt (OMPI_MCA_osc=sm,pt2pt): Open MPI's own choice on one host, osc
 * rdma, crashes in MPI_Compare_and_swap. The table cannot grow
 * (a window's size is fixed, as BCL's HashMap's is): a first pass counts
 * the words every rank sends to every owner (MPI_Allreduce), and each
 * owner's window has room for all of them at a load of at most 0.7.
 *
 * --mode alltoall: the bulk-synchronous shuffle, MPI's best case for a word
 * count: every rank packs its words by owner, MPI_Alltoall of the sizes,
 * MPI_Alltoallv of the words, and each owner counts what it received in
 * the table tc-kv's ranks use (kv_table.h, linked in). Gets: the keys to
 * their owners and the values back, with two MPI_Alltoallv.
 *
 * The word count: rank 0 gathers every rank's entries (MPI_Gatherv) and
 * prints `COUNT WORD` as tc-kv does. --bench prints, as tc-kv --bench,
 *
 *   row mpi|alltoall METRIC VALUE UNIT
 *   tc-mpi-kv: kv over N ranks on HOST0,HOST1,..., osc OSC: ok
 *
 * with the same checks (counts add up; latency answers are their keys'
 * counts; the get rate's answers sum to sum(count^2) / K). The all-to-all
 * has no get latency (one key is a collective of every rank). Errors: one
 * line, `tc-mpi-kv: rank R: error: ...`, and MPI_Abort; --timeout S
 * (default 300) bounds the whole run.
 */
#define MPI_TOOL_NAME "tc-mpi-kv"
#include "mpi_tool.h"

#include "kv_table.h"
#include "kv_words.h"

#include <limits.h>
#include <signal.h>

/*--- The window's layout ---------------------------------------------------*/

#define META_READY (1ULL << 63)
#define META_HEAP (1ULL << 62)
#define META_TAG_SHIFT 46
#define META_LOW ((1ULL << META_TAG_SHIFT) - 1)
#define INLINE_MAX 16
#define SLOT_BYTES 32
#define SLOTS_AT 8 /* after the heap's top */

typedef struct slot {
  uint64_t meta, count;
  unsigned char key[INLINE_MAX];
} slot_t;

typedef struct window {
  MPI_Win win;
  unsigned char *base; /* this rank's part */
  uint64_t *caps;      /* every rank's slot count */
  uint64_t *heaps;     /* where every rank's heap starts */
  uint64_t bytes;      /* this rank's part's size */
} window_t;

static uint64_t tag_of(uint64_t h) { return h & 0xffff; }

/* The meta word a ready slot holding key (n bytes, hash h) would have
 * inline; heap keys have META_HEAP and the heap offset instead of n. */
static uint64_t inline_meta(uint64_t h, uint64_t n) {
  return (tag_of(h) << META_TAG_SHIFT) | n;
}

/* Whether a slot's meta word can be key (n bytes, hash h): -1 no, 0 yes
 * (compare the bytes), 1 yes but not ready yet (look again later). */
static int may_hold(uint64_t meta, uint64_t h, uint64_t n) {
  if (((meta >> META_TAG_SHIFT) & 0xffff) != tag_of(h))
    return -1;
  int heap = (meta & META_HEAP) != 0;
  if (heap != (n > INLINE_MAX) || (!heap && (meta & META_LOW) != n))
    return -1;
  return (meta & META_READY) ? 0 : 1;
}

static MPI_Aint slot_disp(uint64_t s) {
  return (MPI_Aint)(SLOTS_AT + s * SLOT_BYTES);
}

/*--- One-sided operations, a wave of keys at a time -------------------------*/

enum { PROBE, FETCH, ALLOC, PUT_HEAP, CLAIM, SET_READY, DONE };

typedef struct op {
  const unsigned char *key;
  uint64_t len, h, slot, heap_off;
  uint32_t owner;
  int state;
  int have_heap;   /* heap_off is this key's own copy in the owner's heap */
  uint64_t result; /* the slot's value (gets), or CAS's old meta */
  uint64_t operand; /* what an operation in flight reads (MPI reads origin
                       buffers until the flush) */
  uint64_t fetched[2]; /* what the count's and the meta word's
                          MPI_Fetch_and_op return (not looked at) */
  int found;
  slot_t got;               /* the slot, as fetched */
  unsigned char *scratch;   /* FETCH: [u64 n][n bytes]; PUT_HEAP: the same */
} op_t;

/* What this rank's one-sided code did. */
typedef struct stats {
  uint64_t steps, flushes, ops, lost;
} stats_t;
static stats_t st;

static void flush_all(window_t *w) {
  check(MPI_Win_flush_all(w->win), "MPI_Win_flush_all");
  ++st.flushes;
}

static unsigned char *scratch_for(op_t *o) {
  if (!o->scratch && !(o->scratch = malloc(8 + o->len)))
    die("out of memory for a key of %llu bytes", (unsigned long long)o->len);
  return o->scratch;
}

/* Runs ops[0 .. n) to DONE: upserts of +1 (upsert) or gets (result, found).
 * Every step issues what each op needs, then one flush. */
static const uint64_t one = 1, empty = 0;

/* The count of o's slot += 1. MPI_Fetch_and_op rather than
 * MPI_Accumulate: Open MPI's osc ucx turns a single-element fetch-and-op
 * into one UCX atomic, an accumulate into a lock, get, put and unlock at
 * the target. */
static void add_count(window_t *w, op_t *o) {
  check(MPI_Fetch_and_op(&one, &o->fetched[0], MPI_UINT64_T, (int)o->owner,
                         slot_disp(o->slot) + 8, MPI_SUM, w->win),
        "MPI_Fetch_and_op");
  ++st.ops;
}

static void run_wave(window_t *w, op_t *ops, int n, int upsert) {
  int left = n;
  while (left) {
    ++st.steps;
    /* Issue. */
    int any = 0;
    for (int i = 0; i < n; ++i) {
      op_t *o = &ops[i];
      switch (o->state) {
      case PROBE:
        check(MPI_Get(&o->got, SLOT_BYTES, MPI_BYTE, (int)o->owner,
                      slot_disp(o->slot), SLOT_BYTES, MPI_BYTE, w->win),
              "MPI_Get");
        ++st.ops;
        any = 1;
        break;
      case FETCH:
        check(MPI_Get(scratch_for(o), (int)(8 + o->len), MPI_BYTE,
                      (int)o->owner,
                      (MPI_Aint)(w->heaps[o->owner] +
                                 (o->got.meta & META_LOW)),
                      (int)(8 + o->len), MPI_BYTE, w->win),
              "MPI_Get");
        ++st.ops;
        any = 1;
        break;
      case ALLOC: {
        o->operand = 8 + o->len;
        check(MPI_Fetch_and_op(&o->operand, &o->heap_off, MPI_UINT64_T,
                               (int)o->owner, 0, MPI_SUM, w->win),
              "MPI_Fetch_and_op");
        ++st.ops;
        any = 1;
        break;
      }
      case PUT_HEAP: {
        unsigned char *s = scratch_for(o);
        memcpy(s, &o->len, 8);
        memcpy(s + 8, o->key, (size_t)o->len);
        check(MPI_Put(s, (int)(8 + o->len), MPI_BYTE, (int)o->owner,
                      (MPI_Aint)(w->heaps[o->owner] + o->heap_off),
                      (int)(8 + o->len), MPI_BYTE, w->win),
              "MPI_Put");
        ++st.ops;
        any = 1;
        break;
      }
      case CLAIM: {
        o->operand = o->len > INLINE_MAX
                         ? META_READY | META_HEAP |
                               (tag_of(o->h) << META_TAG_SHIFT) | o->heap_off
                         : inline_meta(o->h, o->len);
        check(MPI_Compare_and_swap(&o->operand, &empty, &o->result,
                                   MPI_UINT64_T,
                                   (int)o->owner, slot_disp(o->slot), w->win),
              "MPI_Compare_and_swap");
        ++st.ops;
        any = 1;
        break;
      }
      default:
        break;
      }
    }
    if (any)
      flush_all(w);
    /* Look at what came back. */
    int puts = 0;
    for (int i = 0; i < n; ++i) {
      op_t *o = &ops[i];
      switch (o->state) {
      case PROBE: {
        uint64_t meta = o->got.meta;
        if (meta == 0) { /* Empty: the key is not in the table. */
          if (!upsert) {
            o->found = 0;
            o->state = DONE;
          } else if (o->len > INLINE_MAX) {
            o->state = o->have_heap ? CLAIM : ALLOC;
          } else {
            o->state = CLAIM;
          }
          break;
        }
        int m = may_hold(meta, o->h, o->len);
        if (m == 1) /* Being written: look again. */
          break;
        if (m == 0 && o->len > INLINE_MAX) {
          o->state = FETCH;
          break;
        }
        if (m == 0 && !memcmp(o->got.key, o->key, (size_t)o->len)) {
          if (upsert)
            add_count(w, o);
          o->result = o->got.count;
          o->found = 1;
          o->state = DONE;
          break;
        }
        o->slot = o->slot + 1 == w->caps[o->owner] ? 0 : o->slot + 1;
        break;
      }
      case FETCH: {
        uint64_t n;
        memcpy(&n, o->scratch, 8);
        if (n == o->len && !memcmp(o->scratch + 8, o->key, (size_t)n)) {
          if (upsert)
            add_count(w, o);
          o->result = o->got.count;
          o->found = 1;
          o->state = DONE;
        } else {
          o->slot = o->slot + 1 == w->caps[o->owner] ? 0 : o->slot + 1;
          o->state = PROBE;
        }
        break;
      }
      case ALLOC:
        o->have_heap = 1;
        o->state = PUT_HEAP;
        break;
      case PUT_HEAP:
        o->state = CLAIM; /* The flush made the key visible first. */
        break;
      case CLAIM:
        if (o->result != 0) { /* Lost: look at the winner's slot. */
          ++st.lost;
          o->state = PROBE;
          break;
        }
        if (o->len > INLINE_MAX) {
          add_count(w, o);
          o->state = DONE;
          break;
        }
        /* Reserved: the key's bytes, then READY once they are there. */
        memcpy(o->got.key, o->key, (size_t)o->len);
        check(MPI_Put(o->got.key, (int)o->len, MPI_BYTE, (int)o->owner,
                      slot_disp(o->slot) + 16, (int)o->len, MPI_BYTE, w->win),
              "MPI_Put");
        ++st.ops;
        o->state = SET_READY;
        puts = 1;
        break;
      default:
        break;
      }
    }
    if (puts) {
      flush_all(w);
      for (int i = 0; i < n; ++i) {
        op_t *o = &ops[i];
        if (o->state != SET_READY)
          continue;
        o->operand = META_READY | inline_meta(o->h, o->len);
        check(MPI_Fetch_and_op(&o->operand, &o->fetched[1], MPI_UINT64_T,
                               (int)o->owner, slot_disp(o->slot),
                               MPI_REPLACE, w->win),
              "MPI_Fetch_and_op");
        ++st.ops;
        add_count(w, o);
        o->state = DONE;
      }
    }
    left = 0;
    for (int i = 0; i < n; ++i)
      left += ops[i].state != DONE;
  }
}

static void op_start(op_t *o, const window_t *w, const unsigned char *key,
                     uint64_t len) {
  free(o->scratch); /* Sized for the key before. */
  memset(o, 0, sizeof *o);
  o->key = key;
  o->len = len;
  o->h = kv_hash(key, len);
  o->owner = kv_owner(o->h, (uint32_t)nranks);
  o->slot = kv_home(o->h, w->caps[o->owner]);
  o->state = PROBE;
}

/* Every word of `words`, `repeat` times over, through waves of `wave`:
 * upserts of +1, or gets whose found values are summed into *sum. */
static void rma_all(window_t *w, const kv_words_t *words, uint64_t repeat,
                    int wave, int upsert, uint64_t *keys, uint64_t *hits,
                    uint64_t *sum) {
  /* Two sets of ops, a wave in each by turns: a wave's last fetch-and-adds
   * read and write their op until a flush, and the next wave's first flush
   * comes before this set is used again. */
  op_t *all = calloc(2 * (size_t)wave, sizeof *all);
  if (!all)
    die("out of memory");
  kv_iter_t it = kv_words_iter(words, repeat);
  const unsigned char *key;
  uint64_t len;
  int n = 0, more = 1, turn = 0;
  op_t *ops = all;
  while (more) {
    more = kv_iter_next(&it, &key, &len);
    if (more)
      op_start(&ops[n++], w, key, len);
    if (n == wave || (!more && n)) {
      run_wave(w, ops, n, upsert);
      for (int i = 0; i < n; ++i) {
        ++*keys;
        if (ops[i].found)
          ++*hits, *sum += ops[i].result;
      }
      n = 0;
      turn ^= 1;
      ops = all + (size_t)turn * (size_t)wave;
    }
  }
  flush_all(w); /* The last fetch-and-adds. */
  for (int i = 0; i < 2 * wave; ++i)
    free(all[i].scratch);
  free(all);
}

/* This rank's entries in kv_table.h's arena layout ([LEB128 n][key][u64
 * count]) for the gather; *bytes_out their size. Reads the local window
 * (after the barrier that ended the updates). */
static unsigned char *rma_entries(const window_t *w, uint64_t *bytes_out,
                                  uint64_t *entries, uint64_t *key_bytes) {
  uint64_t cap = w->caps[rank], size = 0, alloc = 4096;
  unsigned char *out = malloc(alloc);
  const unsigned char *heap = w->base + w->heaps[rank];
  if (!out)
    die("out of memory");
  *entries = *key_bytes = 0;
  for (uint64_t s = 0; s < cap; ++s) {
    slot_t sl;
    memcpy(&sl, w->base + slot_disp(s), sizeof sl);
    if (!(sl.meta & META_READY))
      continue;
    const unsigned char *key = sl.key;
    uint64_t n = sl.meta & META_LOW;
    if (sl.meta & META_HEAP) {
      memcpy(&n, heap + (sl.meta & META_LOW), 8);
      key = heap + (sl.meta & META_LOW) + 8;
    }
    if (size + n + 18 > alloc) {
      while (size + n + 18 > alloc)
        alloc *= 2;
      if (!(out = realloc(out, alloc)))
        die("out of memory");
    }
    size += kv_put_varint(out + size, n);
    memcpy(out + size, key, (size_t)n);
    size += n;
    memcpy(out + size, &sl.count, 8);
    size += 8;
    ++*entries;
    *key_bytes += n;
  }
  *bytes_out = size;
  return out;
}

/*--- The all-to-all ---------------------------------------------------------*/

static int to_int(uint64_t v, const char *what) {
  if (v > INT_MAX)
    die("%s: %llu bytes is more than one MPI call moves (INT_MAX); split "
        "the input",
        what, (unsigned long long)v);
  return (int)v;
}

/* Packs the words (`repeat` times over) by owner, records [n][key], and
 * exchanges them: returns what every rank sent this one, with
 * *rcounts_out and *rdispls_out per rank and *rbytes in all. owners
 * (room for every word) gets each word's owner. */
static unsigned char *shuffle(const kv_words_t *words, uint32_t *owners,
                              uint64_t repeat, int **rcounts_out,
                              int **rdispls_out, uint64_t *rbytes) {
  uint64_t *sbytes = calloc((size_t)nranks, 8);
  int *sc = calloc((size_t)nranks, sizeof(int)),
      *sd = calloc((size_t)nranks, sizeof(int)),
      *rc = calloc((size_t)nranks, sizeof(int)),
      *rd = calloc((size_t)nranks, sizeof(int));
  if (!sbytes || !sc || !sd || !rc || !rd)
    die("out of memory");
  const unsigned char *p = words->rec, *end = words->rec + words->len, *key;
  const unsigned char *rec = p;
  uint64_t len, i = 0;
  while (kv_next_record(&p, end, &key, &len, NULL) > 0) {
    uint32_t o = kv_owner(kv_hash(key, len), (uint32_t)nranks);
    owners[i++] = o;
    sbytes[o] += repeat * (uint64_t)(p - rec);
    rec = p;
  }
  uint64_t total = 0;
  for (int r = 0; r < nranks; ++r) {
    sc[r] = to_int(sbytes[r], "the words for one rank");
    sd[r] = to_int(total, "the words this rank sends");
    total += sbytes[r];
  }
  to_int(total, "the words this rank sends");
  unsigned char *send = malloc(total + 1);
  uint64_t *at = calloc((size_t)nranks, 8);
  if (!send || !at)
    die("out of memory for %llu bytes of words", (unsigned long long)total);
  for (int r = 0; r < nranks; ++r)
    at[r] = (uint64_t)sd[r];
  kv_iter_t it = kv_words_iter(words, repeat);
  for (i = 0; kv_iter_next(&it, &key, &len); ++i) {
    /* The record, [n][key], ends at the key's end. */
    uint32_t o = owners[i % words->count];
    unsigned char hdr[10];
    unsigned h = kv_put_varint(hdr, len);
    memcpy(send + at[o], key - h, (size_t)(h + len));
    at[o] += h + len;
  }
  check(MPI_Alltoall(sc, 1, MPI_INT, rc, 1, MPI_INT, MPI_COMM_WORLD),
        "MPI_Alltoall");
  uint64_t rtotal = 0;
  for (int r = 0; r < nranks; ++r) {
    rd[r] = to_int(rtotal, "the words this rank receives");
    rtotal += (uint64_t)rc[r];
  }
  to_int(rtotal, "the words this rank receives");
  unsigned char *recv = malloc(rtotal + 1);
  if (!recv)
    die("out of memory for %llu bytes of words", (unsigned long long)rtotal);
  check(MPI_Alltoallv(send, sc, sd, MPI_BYTE, recv, rc, rd, MPI_BYTE,
                      MPI_COMM_WORLD),
        "MPI_Alltoallv");
  free(send);
  free(at);
  free(sbytes);
  free(sc);
  free(sd);
  *rcounts_out = rc;
  *rdispls_out = rd;
  *rbytes = rtotal;
  return recv;
}

/* The gets of the all-to-all: keys out, values back (value + 1, 0 for a
 * key not found), in the order the keys went. */
static void alltoall_gets(const kv_words_t *words, uint32_t *owners,
                          uint64_t repeat, const kv_table_t *t, uint64_t *keys,
                          uint64_t *hits, uint64_t *sum) {
  int *rc, *rd;
  uint64_t rbytes;
  unsigned char *recv = shuffle(words, owners, repeat, &rc, &rd, &rbytes);
  /* Answer every key received, per sender. */
  int *ac = calloc((size_t)nranks, sizeof(int)),
      *ad = calloc((size_t)nranks, sizeof(int));
  uint64_t nkeys = 0;
  const unsigned char *p = recv, *end = recv + rbytes, *key;
  uint64_t len;
  for (int r = 0; r < nranks; ++r) {
    const unsigned char *q = recv + rd[r], *qe = q + rc[r];
    int n = 0;
    while (kv_next_record(&q, qe, &key, &len, NULL) > 0)
      ++n;
    ad[r] = to_int(nkeys, "the answers");
    ac[r] = n;
    nkeys += (uint64_t)n;
  }
  uint64_t *answers = malloc(nkeys * 8 + 8);
  if (!ac || !ad || !answers)
    die("out of memory");
  uint64_t i = 0;
  while (kv_next_record(&p, end, &key, &len, NULL) > 0) {
    const unsigned char *v = kv_table_find(t, key, len, kv_hash(key, len));
    answers[i++] = v ? kv_value(v) + 1 : 0;
  }
  /* Back to the senders. */
  int *bc = calloc((size_t)nranks, sizeof(int)),
      *bd = calloc((size_t)nranks, sizeof(int));
  if (!bc || !bd)
    die("out of memory");
  check(MPI_Alltoall(ac, 1, MPI_INT, bc, 1, MPI_INT, MPI_COMM_WORLD),
        "MPI_Alltoall");
  uint64_t back = 0;
  for (int r = 0; r < nranks; ++r) {
    bd[r] = to_int(back, "the answers");
    back += (uint64_t)bc[r];
  }
  uint64_t *mine = malloc(back * 8 + 8);
  if (!mine)
    die("out of memory");
  check(MPI_Alltoallv(answers, ac, ad, MPI_UINT64_T, mine, bc, bd,
                      MPI_UINT64_T, MPI_COMM_WORLD),
        "MPI_Alltoallv");
  for (uint64_t k = 0; k < back; ++k) {
    ++*keys;
    if (mine[k])
      ++*hits, *sum += mine[k] - 1;
  }
  free(mine);
  free(answers);
  free(recv);
  free(rc);
  free(rd);
  free(ac);
  free(ad);
  free(bc);
  free(bd);
}

/*--- main ------------------------------------------------------------------*/

static const char usage[] =
    "USAGE: mpirun -n N tc-mpi-kv --mode rma|alltoall [options] FILE...\n"
    "tc-kv's word count with MPI: a hash table in MPI windows updated with\n"
    "one-sided operations (rma), or the MPI_Alltoallv shuffle (alltoall).\n"
    "Rank 0 prints `COUNT WORD` for every distinct word (docs/kv.md).\n"
    "  --output F    rank 0 writes the counts to F (default stdout)\n"
    "  --bench       measure upserts and gets instead of printing\n"
    "  --repeat K    --bench: the words K times over (default 1)\n"
    "  --gets G      --bench, rma: get round trips timed by rank 0 (1000)\n"
    "  --max-words M each rank takes the first M words of its slice only\n"
    "                (a bound for the slow components)\n"
    "  --wave W      rma: keys in flight per rank (default 256; at most\n"
    "                64 with osc pt2pt, which deadlocks with more)\n"
    "  --timeout S   every rank stops with an error after S s (300)\n";

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], "--help")) {
      fputs(usage, stdout);
      return 0;
    }
  /* Open MPI 4.1.4 picks osc rdma for ranks on one host, and its
   * MPI_Compare_and_swap crashes in the vader BTL: unless told otherwise,
   * osc sm (every rank on one host) or pt2pt. */
  setenv("OMPI_MCA_osc", "sm,pt2pt", 0);
  mpi_tool_init(&argc, &argv);
  const char *mode = NULL, *output = NULL;
  uint64_t repeat = 1, gets = 1000, wave = 256, max_words = UINT64_MAX;
  int bench = 0, nfiles = 0;
  char **files = calloc((size_t)argc, sizeof *files);
  if (!files)
    die("out of memory");
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--mode") && v)
      mode = v, ++i;
    else if (!strcmp(a, "--output") && v)
      output = v, ++i;
    else if (!strcmp(a, "--bench"))
      bench = 1;
    else if (!strcmp(a, "--repeat"))
      repeat = parse_count(a, v), ++i;
    else if (!strcmp(a, "--gets"))
      gets = parse_count(a, v), ++i;
    else if (!strcmp(a, "--max-words"))
      max_words = parse_count(a, v), ++i;
    else if (!strcmp(a, "--wave"))
      wave = parse_count(a, v), ++i;
    else if (!strcmp(a, "--timeout"))
      timeout_s = (unsigned)parse_count(a, v), ++i;
    else if (a[0] == '-' && a[1])
      die("unknown or incomplete argument '%s' (try --help)", a);
    else
      files[nfiles++] = argv[i];
  }
  if (!mode || (strcmp(mode, "rma") && strcmp(mode, "alltoall")))
    die("--mode rma or --mode alltoall is required (try --help)");
  if (!nfiles)
    die("no input files (try --help)");
  if (wave > 65536)
    die("--wave %llu: at most 65536", (unsigned long long)wave);
  /* Open MPI 4.1's osc pt2pt deadlocks with a hundred or more operations in
   * flight per rank (its receive path recurses through opal_progress):
   * at most 64 there. */
  if (strstr(osc_name(), "pt2pt") && wave > 64)
    wave = 64;
  int rma = !strcmp(mode, "rma");
  const char *row_mode = rma ? "mpi" : "alltoall";
  signal(SIGALRM, on_alarm);
  alarm(timeout_s);

  kv_words_t words;
  char err[512];
  if (kv_read_slice(files, nfiles, (uint32_t)rank, (uint32_t)nranks, &words,
                    err, sizeof err))
    die("%s", err);
  kv_words_truncate(&words, max_words);
  /* Every word's owner, and what every owner gets: occurrences, the heap
   * bytes of long keys, the longest key. */
  uint32_t *owners = malloc(words.count * sizeof *owners + 4);
  uint64_t *need = calloc((size_t)nranks * 3, 8);
  uint64_t *all_need = calloc((size_t)nranks * 3, 8);
  if (!owners || !need || !all_need)
    die("out of memory");
  {
    const unsigned char *p = words.rec, *end = words.rec + words.len, *key;
    uint64_t len, i = 0;
    while (kv_next_record(&p, end, &key, &len, NULL) > 0) {
      uint32_t o = kv_owner(kv_hash(key, len), (uint32_t)nranks);
      owners[i++] = o;
      need[o * 3] += 1;
      if (len > INLINE_MAX)
        need[o * 3 + 1] += 8 + len;
      if (len > need[o * 3 + 2])
        need[o * 3 + 2] = len;
    }
  }
  check(MPI_Allreduce(need, all_need, nranks * 3, MPI_UINT64_T, MPI_SUM,
                      MPI_COMM_WORLD),
        "MPI_Allreduce");
  uint64_t max_len = 0, total_words = 0;
  for (int r = 0; r < nranks; ++r)
    if (all_need[r * 3 + 2] > max_len) /* A bound: the sum of maxima. */
      max_len = all_need[r * 3 + 2];
  check(MPI_Allreduce(&words.count, &total_words, 1, MPI_UINT64_T, MPI_SUM,
                      MPI_COMM_WORLD),
        "MPI_Allreduce");

  /* The table: rma's window, or the all-to-all's local kv_table. */
  window_t w;
  memset(&w, 0, sizeof w);
  kv_table_t table;
  memset(&table, 0, sizeof table);
  if (rma) {
    w.caps = calloc((size_t)nranks, 8);
    w.heaps = calloc((size_t)nranks, 8);
    if (!w.caps || !w.heaps)
      die("out of memory");
    for (int r = 0; r < nranks; ++r) {
      w.caps[r] = all_need[r * 3] * 10 / 7 + 16;
      w.heaps[r] = SLOTS_AT + w.caps[r] * SLOT_BYTES;
    }
    /* The heap: every long occurrence once, and room to read a key as
     * long as the longest past the last one. */
    w.bytes = w.heaps[rank] + all_need[rank * 3 + 1] + 8 + max_len;
    check(MPI_Win_allocate((MPI_Aint)w.bytes, 1, MPI_INFO_NULL,
                           MPI_COMM_WORLD, &w.base, &w.win),
          "MPI_Win_allocate (is this osc component usable here?)");
    check(MPI_Win_set_errhandler(w.win, MPI_ERRORS_RETURN),
          "MPI_Win_set_errhandler");
    memset(w.base, 0, (size_t)w.bytes);
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, w.win), "MPI_Win_lock_all");
    check(MPI_Win_sync(w.win), "MPI_Win_sync");
  }
  check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");

  /* The upserts. */
  uint64_t keys = 0, hits = 0, sum = 0;
  double t0 = MPI_Wtime();
  if (rma) {
    rma_all(&w, &words, repeat, (int)wave, 1, &keys, &hits, &sum);
  } else {
    int *rc, *rd;
    uint64_t rbytes;
    unsigned char *recv = shuffle(&words, owners, repeat, &rc, &rd, &rbytes);
    const unsigned char *p = recv, *end = recv + rbytes, *key;
    uint64_t len;
    while (kv_next_record(&p, end, &key, &len, NULL) > 0)
      if (kv_table_add(&table, key, len, kv_hash(key, len), 1))
        die("the table stopped growing: %s", table.error == KV_ERR_FULL
                                                 ? "over 4 GiB of entries"
                                                 : "out of memory");
    free(recv);
    free(rc);
    free(rd);
  }
  check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  double t_upsert = MPI_Wtime() - t0;
  if (rma)
    check(MPI_Win_sync(w.win), "MPI_Win_sync");

  /* --bench: get latency (rma, rank 0) and get rate. */
  kv_lat_t lat = {{0}, {0}, {0}, 0};
  double p50 = -1, t_gets = 0;
  uint64_t gkeys = 0, ghits = 0, gsum = 0;
  stats_t upsert_stats = st;
  if (bench) {
    if (rma && rank == 0 && nranks > 1)
      kv_lat_pick(&lat, &words, (uint32_t)nranks);
    if (lat.n) {
      double *rt = malloc(gets * sizeof *rt);
      if (!rt)
        die("out of memory");
      op_t o;
      memset(&o, 0, sizeof o);
      for (uint64_t i = 0; i < gets + lat.n; ++i) {
        uint64_t k = i % lat.n;
        double s = MPI_Wtime();
        op_start(&o, &w, lat.key[k], lat.len[k]);
        run_wave(&w, &o, 1, 0);
        double e = MPI_Wtime();
        if (i >= lat.n)
          rt[i - lat.n] = e - s;
        if (!o.found)
          die("a get of '%.*s' found nothing at rank %u", (int)lat.len[k],
              (const char *)lat.key[k], o.owner);
        lat.value[k] = o.result;
      }
      free(o.scratch);
      p50 = kv_median(rt, gets) * 1e6;
      free(rt);
    }
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    t0 = MPI_Wtime();
    if (rma)
      rma_all(&w, &words, repeat, (int)wave, 0, &gkeys, &ghits, &gsum);
    else
      alltoall_gets(&words, owners, repeat, &table, &gkeys, &ghits, &gsum);
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    t_gets = MPI_Wtime() - t0;
  }

  /* Every rank's entries to rank 0, which checks and prints. */
  uint64_t bytes = 0, entries = 0, key_bytes = 0;
  unsigned char *mine = rma ? rma_entries(&w, &bytes, &entries, &key_bytes)
                            : table.arena;
  if (!rma) {
    bytes = table.used;
    entries = table.count;
    key_bytes = table.key_bytes;
  }
  uint64_t table_bytes = rma ? w.bytes : kv_table_bytes(&table);
  /* Per rank: entries' bytes, table bytes, payload bytes, get keys, hits,
   * sum, one-sided operations of the upserts. */
  enum { R = 7 };
  uint64_t me[R] = {bytes,  table_bytes, key_bytes + 8 * entries, gkeys,
                    ghits,  gsum,        upsert_stats.ops};
  uint64_t *ranks = rank == 0 ? calloc((size_t)nranks * R, 8) : NULL;
  if (rank == 0 && !ranks)
    die("out of memory");
  check(MPI_Gather(me, R, MPI_UINT64_T, ranks, R, MPI_UINT64_T, 0,
                   MPI_COMM_WORLD),
        "MPI_Gather");
  int *counts = NULL, *displs = NULL;
  unsigned char *gathered = NULL;
  if (rank == 0) {
    counts = calloc((size_t)nranks, sizeof(int));
    displs = calloc((size_t)nranks, sizeof(int));
    uint64_t total = 0;
    for (int r = 0; r < nranks; ++r) {
      counts[r] = to_int(ranks[r * R], "a rank's entries");
      displs[r] = to_int(total, "the entries");
      total += ranks[r * R];
    }
    to_int(total, "the entries");
    if (!counts || !displs || !(gathered = malloc(total + 1)))
      die("out of memory");
  }
  to_int(bytes, "this rank's entries");
  check(MPI_Gatherv(mine, (int)bytes, MPI_BYTE, gathered, counts, displs,
                    MPI_BYTE, 0, MPI_COMM_WORLD),
        "MPI_Gatherv");
  char *hosts = host_names();
  if (rank == 0) {
    kv_count_t *c = NULL;
    uint64_t n = 0, cap = 0, total = 0;
    char err[512];
    for (int r = 0; r < nranks; ++r)
      total += ranks[r * R];
    if (kv_counts_add(gathered, total, &c, &n, &cap))
      die("the gathered entries are malformed (or out of memory)");
    if (kv_counts_check(c, n, total_words, repeat, err, sizeof err))
      die("%s", err);
    if (bench) {
      uint64_t k = 0, hh = 0, s = 0, max_bytes = 0;
      double max_ratio = 0;
      for (int r = 0; r < nranks; ++r) {
        k += ranks[r * R + 3], hh += ranks[r * R + 4], s += ranks[r * R + 5];
        if (ranks[r * R + 1] > max_bytes)
          max_bytes = ranks[r * R + 1];
        if (ranks[r * R + 2] &&
            (double)ranks[r * R + 1] / (double)ranks[r * R + 2] > max_ratio)
          max_ratio = (double)ranks[r * R + 1] / (double)ranks[r * R + 2];
      }
      if (kv_answers_check(c, n, total_words, repeat, k, hh, s, &lat, err,
                           sizeof err))
        die("%s", err);
      kv_figures_t f = {total_words, repeat, n, t_upsert, t_gets, p50,
                        max_ratio, max_bytes};
      kv_bench_rows(row_mode, &f);
      uint64_t ops = 0;
      for (int r = 0; r < nranks; ++r)
        ops += ranks[r * R + 6];
      if (rma && total_words)
        printf("row %s ops_per_upsert %.6g ops\n", row_mode,
               (double)ops / (double)(total_words * repeat));
      printf("tc-mpi-kv: kv over %d ranks on %s, osc %s: ok\n", nranks, hosts,
             osc_name());
      fflush(stdout);
    } else {
      if (kv_counts_write(c, n, output, err, sizeof err))
        die("%s", err);
    }
    free(c);
  }
  free(hosts);
  if (rma) {
    free(mine);
    check(MPI_Win_unlock_all(w.win), "MPI_Win_unlock_all");
    check(MPI_Win_free(&w.win), "MPI_Win_free");
  }
  kv_table_free(&table);
  free(gathered);
  free(counts);
  free(displs);
  free(ranks);
  free(owners);
  free(need);
  free(all_need);
  free(words.rec);
  free(files);
  MPI_Finalize();
  return 0;
}
