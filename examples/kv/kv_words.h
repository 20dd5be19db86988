/* The word count's input and output, shared by tc-kv (examples/kv) and
 * tc-mpi-kv (examples/mpi-rma): which words a rank reads, and how rank 0
 * prints the counts.
 *
 * A word is a maximal run of ASCII letters and digits, lowercased; every
 * other byte separates words, and so does the end of a file. The input is
 * the files' bytes one after the other; rank r of R reads the slice
 * [T*r/R, T*(r+1)/R) of their T bytes in all and counts every word that
 * starts in it (to its end, past the slice if it goes on), so every word is
 * counted by exactly one rank. A rank's words are kept as a record stream,
 * [LEB128 n][n bytes] per word (kv_table.h's kv_next_record reads it).
 *
 * The output is every distinct word once, `COUNT WORD`, by count (largest
 * first), then by word (byte order).
 *
 * Header-only C99; not for ifuncs (it reads files).
 */
#ifndef TC_EXAMPLES_KV_WORDS_H
#define TC_EXAMPLES_KV_WORDS_H

#include "kv_table.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A rank's words: a record stream of `len` bytes holding `count` words. */
typedef struct kv_words {
  unsigned char *rec;
  uint64_t len, cap, count;
} kv_words_t;

static inline int kv_is_word(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9');
}

static inline int kv_fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

static inline int kv_words_reserve(kv_words_t *w, uint64_t more) {
  if (w->len + more <= w->cap)
    return 0;
  uint64_t cap = w->cap ? w->cap * 2 : 1 << 16;
  while (cap < w->len + more)
    cap *= 2;
  unsigned char *r = (unsigned char *)realloc(w->rec, cap);
  if (!r)
    return -1;
  w->rec = r;
  w->cap = cap;
  return 0;
}

/* Appends the words that start in [from, to) of text[0 .. size) (a whole
 * file), lowercased. */
static inline int kv_words_scan(kv_words_t *w, const unsigned char *text,
                                uint64_t size, uint64_t from, uint64_t to) {
  uint64_t i = from;
  if (i > 0) /* A word that began before `from` is the previous slice's. */
    while (i < size && kv_is_word(text[i - 1]) && kv_is_word(text[i]))
      ++i;
  while (i < to) {
    while (i < to && !kv_is_word(text[i]))
      ++i;
    if (i >= to)
      break;
    uint64_t b = i;
    while (i < size && kv_is_word(text[i]))
      ++i;
    uint64_t n = i - b;
    if (kv_words_reserve(w, n + 10))
      return -1;
    w->len += kv_put_varint(w->rec + w->len, n);
    unsigned char *out = w->rec + w->len;
    for (uint64_t k = 0; k < n; ++k) {
      unsigned char c = text[b + k];
      out[k] = c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
    }
    w->len += n;
    ++w->count;
  }
  return 0;
}

/* The sizes of `files`, checked: each a readable regular file. */
static inline int kv_input_sizes(char *const *files, int nfiles,
                                 uint64_t *sizes, char *err, size_t errlen) {
  for (int f = 0; f < nfiles; ++f) {
    struct stat st;
    int fd = open(files[f], O_RDONLY);
    if (fd < 0)
      return kv_fail(err, errlen, "cannot open '%s': %s", files[f],
                     strerror(errno));
    int bad = fstat(fd, &st) != 0 || !S_ISREG(st.st_mode);
    close(fd);
    if (bad)
      return kv_fail(err, errlen, "'%s' is not a regular file", files[f]);
    sizes[f] = (uint64_t)st.st_size;
  }
  return 0;
}

/* Reads rank `rank`'s words of `files` into w (zeroed first). */
static inline int kv_read_slice(char *const *files, int nfiles, uint32_t rank,
                                uint32_t ranks, kv_words_t *w, char *err,
                                size_t errlen) {
  memset(w, 0, sizeof *w);
  if (kv_words_reserve(w, 1)) /* w->rec is never NULL, even for no words */
    return kv_fail(err, errlen, "out of memory");
  uint64_t *sizes = (uint64_t *)calloc((size_t)nfiles + 1, sizeof *sizes);
  if (!sizes)
    return kv_fail(err, errlen, "out of memory");
  if (kv_input_sizes(files, nfiles, sizes, err, errlen)) {
    free(sizes);
    return -1;
  }
  uint64_t total = 0;
  for (int f = 0; f < nfiles; ++f)
    total += sizes[f];
  /* T * r / R without overflow for any T below 2^64 / 2^32. */
  unsigned __int128 t = total;
  uint64_t lo = (uint64_t)(t * rank / ranks);
  uint64_t hi = (uint64_t)(t * (rank + 1) / ranks);
  uint64_t base = 0;
  int rc = 0;
  for (int f = 0; f < nfiles && !rc; base += sizes[f], ++f) {
    uint64_t size = sizes[f];
    if (!size || base + size <= lo || base >= hi)
      continue;
    int fd = open(files[f], O_RDONLY);
    if (fd < 0) {
      rc = kv_fail(err, errlen, "cannot open '%s': %s", files[f],
                   strerror(errno));
      break;
    }
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
      rc = kv_fail(err, errlen, "cannot read '%s': %s", files[f],
                   strerror(errno));
      break;
    }
    uint64_t from = lo > base ? lo - base : 0;
    uint64_t to = hi - base < size ? hi - base : size;
    if (kv_words_scan(w, (const unsigned char *)m, size, from, to))
      rc = kv_fail(err, errlen, "out of memory reading '%s'", files[f]);
    munmap(m, size);
  }
  free(sizes);
  return rc;
}

/* Keeps the first `max` words of w (all of them when it has fewer). */
static inline void kv_words_truncate(kv_words_t *w, uint64_t max) {
  const unsigned char *p = w->rec, *end = w->rec + w->len, *key;
  uint64_t len, n = 0;
  while (n < max && kv_next_record(&p, end, &key, &len, NULL) > 0)
    ++n;
  w->len = (uint64_t)(p - w->rec);
  w->count = n;
}

/* Walks a rank's words `repeat` times over: kv_iter_next gives the next
 * word until there is none. */
typedef struct kv_iter {
  const kv_words_t *w;
  const unsigned char *p;
  uint64_t left; /* passes left, this one included */
} kv_iter_t;

static inline kv_iter_t kv_words_iter(const kv_words_t *w, uint64_t repeat) {
  kv_iter_t it = {w, w->rec, repeat};
  return it;
}

static inline int kv_iter_next(kv_iter_t *it, const unsigned char **key,
                               uint64_t *len) {
  while (it->left) {
    if (kv_next_record(&it->p, it->w->rec + it->w->len, key, len, NULL) > 0)
      return 1;
    it->p = it->w->rec;
    --it->left;
  }
  return 0;
}

/*--- Output ---------------------------------------------------------------*/

typedef struct kv_count {
  const unsigned char *key;
  uint64_t len, count;
} kv_count_t;

static inline int kv_count_order(const void *a, const void *b) {
  const kv_count_t *x = (const kv_count_t *)a, *y = (const kv_count_t *)b;
  if (x->count != y->count)
    return x->count > y->count ? -1 : 1;
  uint64_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->key, y->key, n);
  if (c)
    return c;
  return x->len < y->len ? -1 : x->len > y->len;
}

/* Appends the entries of an arena image (kv_table.h's layout:
 * [LEB128 n][key][u64 value]) to *out. Returns -1 when the bytes are not
 * whole entries or memory runs out. */
static inline int kv_counts_add(const unsigned char *p, uint64_t size,
                                kv_count_t **out, uint64_t *n,
                                uint64_t *cap) {
  if (!size) /* p may be NULL then */
    return 0;
  const unsigned char *end = p + size;
  while (p < end) {
    uint64_t len;
    unsigned h = kv_get_varint(p, end, &len);
    if (!h || len > (uint64_t)(end - p - h) || (uint64_t)(end - p - h) - len < 8)
      return -1;
    if (*n == *cap) {
      uint64_t c = *cap ? *cap * 2 : 1024;
      kv_count_t *o = (kv_count_t *)realloc(*out, c * sizeof *o);
      if (!o)
        return -1;
      *out = o;
      *cap = c;
    }
    (*out)[(*n)++] = (kv_count_t){p + h, len, kv_load64(p + h + len)};
    p += h + len + 8;
  }
  return 0;
}

/* Sorts the counts and prints them to f; returns -1 on a write error. */
static inline int kv_counts_print(kv_count_t *c, uint64_t n, FILE *f) {
  if (n > 1)
    qsort(c, (size_t)n, sizeof *c, kv_count_order);
  for (uint64_t i = 0; i < n; ++i) {
    fprintf(f, "%llu ", (unsigned long long)c[i].count);
    fwrite(c[i].key, 1, (size_t)c[i].len, f);
    fputc('\n', f);
  }
  return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}

/* Sorts the counts and prints them to `path` (NULL: stdout); -1 and a
 * message in err when that fails. */
static inline int kv_counts_write(kv_count_t *c, uint64_t n, const char *path,
                                  char *err, size_t errlen) {
  FILE *f = path ? fopen(path, "w") : stdout;
  if (!f)
    return kv_fail(err, errlen, "cannot write '%s': %s", path,
                   strerror(errno));
  int bad = kv_counts_print(c, n, f);
  if (path && fclose(f))
    bad = -1;
  if (bad)
    return kv_fail(err, errlen, "cannot write the counts to '%s'",
                   path ? path : "stdout");
  return 0;
}

/*--- --bench: what tc-kv and tc-mpi-kv measure and check ----------------*/

/* The keys rank 0 gets one at a time for the latency: up to KV_LAT_KEYS
 * distinct words of its slice that other ranks own, and the value each
 * get answered. */
#define KV_LAT_KEYS 64
typedef struct kv_lat {
  const unsigned char *key[KV_LAT_KEYS];
  uint64_t len[KV_LAT_KEYS], value[KV_LAT_KEYS], n;
} kv_lat_t;

static inline void kv_lat_pick(kv_lat_t *l, const kv_words_t *w,
                               uint32_t ranks) {
  kv_iter_t it = kv_words_iter(w, 1);
  const unsigned char *key;
  uint64_t len;
  l->n = 0;
  while (l->n < KV_LAT_KEYS && kv_iter_next(&it, &key, &len)) {
    if (kv_owner(kv_hash(key, len), ranks) == 0)
      continue;
    int seen = 0;
    for (uint64_t k = 0; k < l->n && !seen; ++k)
      seen = l->len[k] == len && !memcmp(l->key[k], key, (size_t)len);
    if (!seen)
      l->key[l->n] = key, l->len[l->n++] = len;
  }
}

static inline int kv_by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0 .. n) (sorted in place). */
static inline double kv_median(double *v, uint64_t n) {
  if (n > 1)
    qsort(v, (size_t)n, sizeof *v, kv_by_value);
  return n ? v[n / 2] : 0;
}

/* Rank 0's first check once it holds every count (`c`, n of them): they
 * add up to the `words` of every slice `repeat` times over. -1 and a
 * message in err when they do not. */
static inline int kv_counts_check(const kv_count_t *c, uint64_t n,
                                  uint64_t words, uint64_t repeat, char *err,
                                  size_t errlen) {
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; ++i)
    total += c[i].count;
  if (total != words * repeat)
    return kv_fail(err, errlen,
                   "the counts add up to %llu, %llu words were upserted",
                   (unsigned long long)total,
                   (unsigned long long)(words * repeat));
  return 0;
}

/* --bench's checks of the gets: the get rate's answers (every word looked
 * up `repeat` times) are `words * repeat` keys, all found, summing to
 * sum(count^2) / repeat over the table, times repeat; each latency get
 * answered its key's count. */
static inline int kv_answers_check(const kv_count_t *c, uint64_t n,
                                   uint64_t words, uint64_t repeat,
                                   uint64_t keys, uint64_t hits, uint64_t sum,
                                   const kv_lat_t *lat, char *err,
                                   size_t errlen) {
  uint64_t sq = 0;
  for (uint64_t i = 0; i < n; ++i)
    sq += c[i].count * (c[i].count / repeat);
  if (keys != words * repeat || hits != keys || sum != sq * repeat)
    return kv_fail(err, errlen,
                   "the get rate's answers are wrong: %llu keys, %llu found, "
                   "sum %llu (expected %llu, %llu, %llu)",
                   (unsigned long long)keys, (unsigned long long)hits,
                   (unsigned long long)sum,
                   (unsigned long long)(words * repeat),
                   (unsigned long long)(words * repeat),
                   (unsigned long long)(sq * repeat));
  for (uint64_t k = 0; k < lat->n; ++k) {
    uint64_t want = 0;
    for (uint64_t i = 0; i < n; ++i)
      if (c[i].len == lat->len[k] &&
          !memcmp(c[i].key, lat->key[k], (size_t)lat->len[k]))
        want = c[i].count;
    if (lat->value[k] != want)
      return kv_fail(err, errlen,
                     "a get of '%.*s' answered %llu, its count is %llu",
                     (int)lat->len[k], (const char *)lat->key[k],
                     (unsigned long long)lat->value[k],
                     (unsigned long long)want);
  }
  return 0;
}

/* What --bench prints, as `row MODE METRIC VALUE UNIT` lines. */
typedef struct kv_figures {
  uint64_t words, repeat, distinct;
  double upsert_s, get_s;
  double latency_us; /* < 0: not measured */
  double table_ratio; /* the largest over the ranks */
  uint64_t table_bytes; /* the largest over the ranks */
} kv_figures_t;

static inline void kv_bench_rows(const char *mode, const kv_figures_t *f) {
  double n = (double)(f->words * f->repeat);
  printf("row %s upsert_rate %.6g upserts/s\n", mode, n / f->upsert_s);
  if (f->latency_us >= 0)
    printf("row %s get_latency_us %.6g us\n", mode, f->latency_us);
  printf("row %s get_rate %.6g gets/s\n", mode, n / f->get_s);
  printf("row %s table_ratio %.6g ratio\n", mode, f->table_ratio);
  printf("row %s table_bytes %llu bytes\n", mode,
         (unsigned long long)f->table_bytes);
  printf("row %s words %llu words\n", mode,
         (unsigned long long)(f->words * f->repeat));
  printf("row %s distinct %llu words\n", mode,
         (unsigned long long)f->distinct);
}

#endif /* TC_EXAMPLES_KV_WORDS_H */
