/* The hash table each rank of tc-kv owns, and the hash that picks the
 * owner. Header-only C99: the ifuncs (kv_upsert, kv_get, kv_dump) compile it
 * into the code they ship, and tc-kv and tc-mpi-kv link the same code
 * natively (a rank's own words are counted without a message; the
 * all-to-all version counts the words it receives with it).
 *
 * Keys are byte strings of any length, values 64-bit counters. The table is
 * two allocations:
 *
 *   arena  every entry, appended in insertion order and never moved:
 *            [LEB128 key length][key bytes][u64 value, little-endian,
 *            unaligned]
 *          (9 + n bytes for a key of n < 128 bytes). It grows by a
 *          quarter (glibc's realloc moves a large block with mremap, not
 *          by copying).
 *   index  open addressing with linear probing: `cap` 32-bit slots, each 0
 *          (empty) or 1 + the offset of an entry in the arena. A key's home
 *          slot is (low 32 bits of its hash * cap) >> 32, so cap need not
 *          be a power of two: it grows by half once more than 7/10 of the
 *          slots are used, and the load stays between 0.46 and 0.7.
 *
 * A table of E entries whose keys hold K bytes (all shorter than 128)
 * costs
 *   arena_cap + 4 * cap  <=  1.25 * (K + 9E) + 4E / 0.46
 * bytes, just after both have grown: at most 2x its keys' and values'
 * bytes (K + 8E) when keys average 5.3 bytes or more, whatever the state
 * of the two allocations (docs/kv.md has the measured figures). The arena is
 * limited to 4 GiB per table (32-bit offsets): past that an insert fails
 * with KV_ERR_FULL.
 *
 * The hash is the same on every rank and in every version (tc, MPI RMA,
 * MPI all-to-all): kv_owner() takes its high 32 bits, the home slot its
 * low 32, MPI's slot tag its low 16.
 */
#ifndef TC_EXAMPLES_KV_TABLE_H
#define TC_EXAMPLES_KV_TABLE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Why a table stopped taking keys (kv_table_t::error; sticky). */
enum {
  KV_OK = 0,
  KV_ERR_NOMEM = 1, /* an allocation failed */
  KV_ERR_FULL = 2,  /* the arena would pass 4 GiB */
};

static inline uint64_t kv_mix64(uint64_t x) {
  /* splitmix64's finalizer. */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/* Eight bytes at p as a little-endian number (both ABIs tc targets are
 * little-endian; memcpy makes it an unaligned load). */
static inline uint64_t kv_load64(const unsigned char *p) {
  uint64_t w;
  memcpy(&w, p, 8);
  return w;
}

/* The hash of key k[0 .. n). */
static inline uint64_t kv_hash(const unsigned char *k, uint64_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ (n * 0xff51afd7ed558ccdULL);
  while (n >= 8) {
    h = kv_mix64(h ^ kv_load64(k));
    k += 8;
    n -= 8;
  }
  uint64_t w = 0;
  for (uint64_t i = 0; i < n; ++i)
    w |= (uint64_t)k[i] << (8 * i);
  return kv_mix64(h ^ w ^ 0x2545f4914f6cdd1dULL);
}

/* The rank of `ranks` that owns a key with hash h. */
static inline uint32_t kv_owner(uint64_t h, uint32_t ranks) {
  return (uint32_t)(((h >> 32) * (uint64_t)ranks) >> 32);
}

/* Slot of `cap` where a key with hash h starts probing. */
static inline uint64_t kv_home(uint64_t h, uint64_t cap) {
  return ((h & 0xffffffffULL) * cap) >> 32;
}

/*--- LEB128 ---------------------------------------------------------------*/

/* Writes v at p (at most 10 bytes); returns the bytes written. */
static inline unsigned kv_put_varint(unsigned char *p, uint64_t v) {
  unsigned n = 0;
  while (v >= 0x80) {
    p[n++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (unsigned char)v;
  return n;
}

/* Reads a number at p, no further than end; returns the bytes read, or 0
 * when it is truncated or longer than 10 bytes. */
static inline unsigned kv_get_varint(const unsigned char *p,
                                     const unsigned char *end, uint64_t *v) {
  uint64_t x = 0;
  for (unsigned i = 0; i < 10 && p + i < end; ++i) {
    x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
    if (!(p[i] & 0x80)) {
      *v = x;
      return i + 1;
    }
  }
  return 0;
}

/*--- The table ------------------------------------------------------------*/

typedef struct kv_table {
  uint32_t *index;     /* cap slots: 0, or 1 + an arena offset */
  uint64_t cap;        /* slots */
  uint64_t count;      /* entries */
  unsigned char *arena;
  uint64_t used;       /* arena bytes in use */
  uint64_t arena_cap;  /* arena bytes allocated */
  uint64_t key_bytes;  /* the keys' bytes, summed */
  uint32_t error;      /* KV_OK or why the table stopped (sticky) */
} kv_table_t;

#define KV_ARENA_MAX 0xffffffffULL
#define KV_MIN_SLOTS 16u

/* The entry at arena offset `off`: its key and where its value is. */
static inline unsigned char *kv_entry(const kv_table_t *t, uint64_t off,
                                      const unsigned char **key,
                                      uint64_t *len) {
  unsigned char *p = t->arena + off;
  unsigned h = kv_get_varint(p, t->arena + t->used, len);
  *key = p + h;
  return p + h + *len;
}

static inline uint64_t kv_value(const unsigned char *v) {
  return kv_load64(v);
}

/* The value of key k (hash h), or NULL when the table does not hold it. */
static inline unsigned char *kv_table_find(const kv_table_t *t,
                                           const unsigned char *k, uint64_t n,
                                           uint64_t h) {
  if (!t->cap)
    return NULL;
  for (uint64_t i = kv_home(h, t->cap);;) {
    uint32_t s = t->index[i];
    if (!s)
      return NULL;
    const unsigned char *key;
    uint64_t len;
    unsigned char *v = kv_entry(t, s - 1, &key, &len);
    if (len == n && !memcmp(key, k, n))
      return v;
    if (++i == t->cap)
      i = 0;
  }
}

/* Rebuilds the index with `cap` slots from the arena (every entry there is
 * live: nothing is ever removed). */
static inline int kv_table_reindex(kv_table_t *t, uint64_t cap) {
  uint32_t *index = (uint32_t *)calloc(cap, sizeof *index);
  if (!index) {
    t->error = KV_ERR_NOMEM;
    return -1;
  }
  for (uint64_t off = 0; off < t->used;) {
    const unsigned char *key;
    uint64_t len;
    unsigned char *v = kv_entry(t, off, &key, &len);
    uint64_t i = kv_home(kv_hash(key, len), cap);
    while (index[i])
      if (++i == cap)
        i = 0;
    index[i] = (uint32_t)(off + 1);
    off = (uint64_t)(v + 8 - t->arena);
  }
  free(t->index);
  t->index = index;
  t->cap = cap;
  return 0;
}

/* Adds `delta` to the value of key k (hash h), inserting it with value
 * `delta` when it is new. Returns 0, or -1 when the table cannot grow
 * (t->error says why; the table is unchanged). */
static inline int kv_table_add(kv_table_t *t, const unsigned char *k,
                               uint64_t n, uint64_t h, uint64_t delta) {
  unsigned char *v = kv_table_find(t, k, n, h);
  if (v) {
    uint64_t x = kv_load64(v) + delta;
    memcpy(v, &x, 8);
    return 0;
  }
  if (t->error)
    return -1;
  if ((t->count + 1) * 10 > t->cap * 7) {
    uint64_t cap = t->cap + t->cap / 2;
    if (cap < KV_MIN_SLOTS)
      cap = KV_MIN_SLOTS;
    if (kv_table_reindex(t, cap))
      return -1;
  }
  unsigned char hdr[10];
  unsigned hl = kv_put_varint(hdr, n);
  uint64_t size = hl + n + 8;
  if (t->used + size > t->arena_cap) {
    if (size > KV_ARENA_MAX || t->used > KV_ARENA_MAX - size) {
      t->error = KV_ERR_FULL;
      return -1;
    }
    uint64_t cap = t->arena_cap + t->arena_cap / 4;
    if (cap < 256)
      cap = 256;
    if (cap < t->used + size)
      cap = t->used + size;
    if (cap > KV_ARENA_MAX)
      cap = KV_ARENA_MAX;
    unsigned char *a = (unsigned char *)realloc(t->arena, cap);
    if (!a) {
      t->error = KV_ERR_NOMEM;
      return -1;
    }
    t->arena = a;
    t->arena_cap = cap;
  }
  uint64_t off = t->used;
  unsigned char *p = t->arena + off;
  memcpy(p, hdr, hl);
  memcpy(p + hl, k, n);
  memcpy(p + hl + n, &delta, 8);
  t->used += size;
  uint64_t i = kv_home(h, t->cap);
  while (t->index[i])
    if (++i == t->cap)
      i = 0;
  t->index[i] = (uint32_t)(off + 1);
  ++t->count;
  t->key_bytes += n;
  return 0;
}

/* What the table costs (its two allocations) and what it holds (keys'
 * bytes and 8 bytes of value per entry). */
static inline uint64_t kv_table_bytes(const kv_table_t *t) {
  return t->arena_cap + t->cap * sizeof(uint32_t);
}
static inline uint64_t kv_table_payload_bytes(const kv_table_t *t) {
  return t->key_bytes + 8 * t->count;
}

static inline void kv_table_free(kv_table_t *t) {
  free(t->index);
  free(t->arena);
  memset(t, 0, sizeof *t);
}

/*--- Record streams -------------------------------------------------------
 * An upsert batch is a sequence of records [LEB128 n][n key bytes][LEB128
 * delta]; a get batch the same without the delta. kv_next_record() walks
 * one, checking every length against the end. */

/* Reads the record at *p: its key and, with `delta` non-NULL, its delta.
 * Returns 1 and advances *p; 0 at the end; -1 when the record is malformed
 * (a length past the end, a number longer than 10 bytes). */
static inline int kv_next_record(const unsigned char **p,
                                 const unsigned char *end,
                                 const unsigned char **key, uint64_t *len,
                                 uint64_t *delta) {
  if (*p == end)
    return 0;
  unsigned h = kv_get_varint(*p, end, len);
  if (!h || *len > (uint64_t)(end - *p - h))
    return -1;
  *key = *p + h;
  const unsigned char *q = *p + h + *len;
  if (delta) {
    unsigned d = kv_get_varint(q, end, delta);
    if (!d)
      return -1;
    q += d;
  }
  *p = q;
  return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* TC_EXAMPLES_KV_TABLE_H */
