/* Standard headers in an ifunc built for CPU and GPU members: the GPU
 * compile reads the host's C library headers, so fixed-width types,
 * memcpy/memset/memmove and C11/GNU atomics work there, with the host's
 * type layout. */
#include <tc/ifunc.h>

#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(long) == 8 && sizeof(void *) == 8, "LP64");
_Static_assert(sizeof(intptr_t) == 8 && sizeof(int64_t) == 8, "int types");
_Static_assert(sizeof(size_t) == 8 && sizeof(wchar_t) == 4, "host types");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "lock-free 64-bit atomics");

TC_IFUNC(hdr)
TC_IFUNC_THREADS(hdr, 128)

struct hdr_region {
  _Atomic uint64_t messages;
  uint32_t flags;
  uint32_t pad;
  uint64_t sum;
  uint8_t copy[64];
};

void hdr_main(void *payload, size_t payload_size, void *target_args) {
  struct hdr_region *r = (struct hdr_region *)target_args;
  size_t n = payload_size < sizeof r->copy ? payload_size : sizeof r->copy;
  if (tc_thread_index() == 0) {
    memset(r->copy, 0, sizeof r->copy);
    memcpy(r->copy, payload, n);
    memmove(r->copy + 1, r->copy, n > 0 ? n - 1 : 0);
    atomic_fetch_add_explicit(&r->messages, 1, memory_order_relaxed);
  }
  __sync_fetch_and_or(&r->flags, 1u << (tc_thread_index() % 32));
  __atomic_fetch_add(&r->sum, (uint64_t)INT32_MAX, __ATOMIC_RELAXED);
  uint64_t expected = 0;
  __atomic_compare_exchange_n(&r->sum, &expected, 1, false, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
}

size_t hdr_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int hdr_payload_init(void *source_args, size_t source_args_size,
                     void *payload, size_t *payload_size) {
  memcpy(payload, source_args, source_args_size);
  *payload_size = source_args_size;
  return 0;
}
