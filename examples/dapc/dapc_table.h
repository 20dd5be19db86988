/* The pointer-chasing table shared by the DAPC, GBPC and AM examples.
 *
 * The table has N 8-byte entries; entry i holds the index of the next entry.
 * Together they form ONE cycle through all N entries in a pseudo-random
 * order fixed by a seed (the paper shuffled 64 Mi entries with a fixed seed).
 * The order is a keyed permutation P of [0, N): the cycle visits P(0), P(1),
 * ..., P(N-1), P(0), ... so
 *
 *   next(i)            = P(P^-1(i) + 1 mod N)
 *   chase(start, d)    = P(P^-1(start) + d mod N)   (d hops from start)
 *
 * Every process computes the entries of its own shard independently (no
 * process ever holds the whole table), and a client checks any chase result
 * in O(1) without the table. P is a 4-round Feistel network on the smallest
 * even number of bits that covers N, restricted to [0, N) by cycle walking.
 *
 * Shards: server s of S owns the contiguous range [dapc_shard_lo(s),
 * dapc_shard_lo(s + 1)); the first N % S servers own one entry more.
 *
 * Header-only C99, usable from ifuncs, C and C++. */
#ifndef TC_EXAMPLES_DAPC_TABLE_H
#define TC_EXAMPLES_DAPC_TABLE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DAPC_DEFAULT_SEED 0x7c5eedULL

typedef struct dapc_perm {
  uint64_t n;       /* table entries, >= 2 */
  unsigned half;    /* bits per Feistel half */
  uint64_t mask;    /* (1 << half) - 1 */
  uint64_t key[4];  /* round keys */
} dapc_perm_t;

static inline uint64_t dapc_mix64(uint64_t x) {
  /* splitmix64's finalizer. */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

static inline void dapc_perm_init(dapc_perm_t *p, uint64_t n, uint64_t seed) {
  unsigned bits = 2;
  while (bits < 64 && (1ULL << bits) < n)
    bits += 2;
  p->n = n;
  p->half = bits / 2;
  p->mask = (1ULL << p->half) - 1;
  for (int r = 0; r < 4; ++r)
    p->key[r] = dapc_mix64(seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(r + 1));
}

static inline uint64_t dapc_feistel(const dapc_perm_t *p, uint64_t x) {
  uint64_t l = x >> p->half, r = x & p->mask;
  for (int k = 0; k < 4; ++k) {
    uint64_t t = r;
    r = l ^ (dapc_mix64(r ^ p->key[k]) & p->mask);
    l = t;
  }
  return (l << p->half) | r;
}

static inline uint64_t dapc_feistel_inv(const dapc_perm_t *p, uint64_t x) {
  uint64_t l = x >> p->half, r = x & p->mask;
  for (int k = 3; k >= 0; --k) {
    uint64_t t = l;
    l = r ^ (dapc_mix64(l ^ p->key[k]) & p->mask);
    r = t;
  }
  return (l << p->half) | r;
}

/* P and its inverse on [0, n). */
static inline uint64_t dapc_perm(const dapc_perm_t *p, uint64_t x) {
  do
    x = dapc_feistel(p, x);
  while (x >= p->n);
  return x;
}

static inline uint64_t dapc_perm_inv(const dapc_perm_t *p, uint64_t x) {
  do
    x = dapc_feistel_inv(p, x);
  while (x >= p->n);
  return x;
}

/* The table entry at i: the index that follows i on the cycle. */
static inline uint64_t dapc_next(const dapc_perm_t *p, uint64_t i) {
  uint64_t k = dapc_perm_inv(p, i) + 1;
  return dapc_perm(p, k == p->n ? 0 : k);
}

/* Where a chase of `depth` hops from `start` ends (reference result). */
static inline uint64_t dapc_chase_ref(const dapc_perm_t *p, uint64_t start,
                                      uint64_t depth) {
  return dapc_perm(p, (dapc_perm_inv(p, start) + depth % p->n) % p->n);
}

/* First entry server s of `servers` owns; dapc_shard_lo(n, S, S) == n. */
static inline uint64_t dapc_shard_lo(uint64_t n, uint32_t servers,
                                     uint32_t s) {
  uint64_t q = n / servers, r = n % servers;
  return q * s + (s < r ? s : r);
}

/* The server that owns entry i. */
static inline uint32_t dapc_owner(uint64_t n, uint32_t servers, uint64_t i) {
  uint64_t q = n / servers, r = n % servers;
  uint64_t big = r * (q + 1);
  if (i < big)
    return (uint32_t)(i / (q + 1));
  return (uint32_t)(r + (i - big) / q);
}

/* Fills shard[0 .. hi-lo) with the entries of [lo, hi). */
static inline void dapc_fill_shard(const dapc_perm_t *p, uint64_t lo,
                                   uint64_t hi, uint64_t *shard) {
  for (uint64_t i = lo; i < hi; ++i)
    shard[i - lo] = dapc_next(p, i);
}

#ifdef __cplusplus
}
#endif

#endif /* TC_EXAMPLES_DAPC_TABLE_H */
