/* A data-parallel test ifunc for GPU targets: adds the payload's 64-bit
 * words into word 0 of target_args and counts messages in word 1. On a
 * GPU its threads (as many as fill the device) split the words with a
 * grid-stride loop; each adds its part with one atomic. Built by tc-cc
 * with a CPU and an sm_70 member (test/CMakeLists.txt). */
#include <tc/ifunc.h>

#include <stdint.h>
#include <string.h>

TC_IFUNC(gsum)
/* -DGSUM_THREADS=N for another launch shape, 0 for none (one thread). */
#ifndef GSUM_THREADS
#define GSUM_THREADS TC_THREADS_DEVICE
#endif
#if GSUM_THREADS
TC_IFUNC_THREADS(gsum, GSUM_THREADS)
#endif

void gsum_main(void *payload, size_t size, void *target_args) {
  const uint64_t *v = (const uint64_t *)payload;
  uint64_t *t = (uint64_t *)target_args;
  uint64_t s = 0;
  for (size_t i = tc_thread_index(); i < size / 8; i += tc_thread_count())
    s += v[i];
  if (s)
    __atomic_fetch_add(&t[0], s, __ATOMIC_RELAXED);
  if (tc_thread_index() == 0)
    __atomic_fetch_add(&t[1], 1, __ATOMIC_RELAXED);
}

size_t gsum_payload_bound(void *args, size_t n) {
  (void)args;
  return n;
}

int gsum_payload_init(void *args, size_t n, void *payload, size_t *size) {
  memcpy(payload, args, n);
  *size = n;
  return 0;
}
