/* Misbehaving ifuncs for the sandbox and fault-attribution tests. Build one
 * with -DIFUNC=NAME -DKIND=N --name=NAME; the payload is one byte, 1. */
#include <tc/ifunc.h>

#include <stdint.h>
#include <stdlib.h>

#define CAT_(A, B) A##B
#define CAT(A, B) CAT_(A, B)

TC_IFUNC(IFUNC)

/* Values the compiler cannot see through: derived from the payload. */
static uintptr_t one(void *payload) { return *(unsigned char *)payload; }

static int deep(int n) {
  volatile int local[16];
  local[n & 15] = n;
  return deep(n + 1) + local[(n * 7) & 15];
}

void CAT(IFUNC, _main)(void *payload, size_t payload_size, void *target_args) {
#if KIND == 1 /* null-pointer write */
  *(volatile int *)(one(payload) - 1) = 42;
#elif KIND == 2 /* a write far outside the region */
  *(volatile uint64_t *)((char *)target_args + (one(payload) << 44)) = 42;
#elif KIND == 3 /* a call to an address that is no function of its own */
  ((void (*)(void))(0x1000 + one(payload)))();
#elif KIND == 4 /* an infinite loop */
  volatile unsigned n = 0;
  for (;;)
    n += one(payload);
#elif KIND == 5 /* unbounded recursion */
  *(volatile int *)payload = deep((int)one(payload));
#elif KIND == 6
  abort();
#elif KIND == 7
  exit(3);
#endif
}

size_t CAT(IFUNC, _payload_bound)(void *source_args, size_t source_args_size) {
  return 1;
}

int CAT(IFUNC, _payload_init)(void *source_args, size_t source_args_size,
                              void *payload, size_t *payload_size) {
  *(unsigned char *)payload = 1;
  *payload_size = 1;
  return 0;
}
