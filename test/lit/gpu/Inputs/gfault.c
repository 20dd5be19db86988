/* A test ifunc that faults on a GPU: payload byte 1 stores through a wild
 * pointer (an illegal address), 2 traps. One thread. Its CPU member does
 * nothing: the faults are the GPU's. */
#include <tc/ifunc.h>

#include <stdint.h>
#include <string.h>

TC_IFUNC(gfault)

void gfault_main(void *payload, size_t size, void *target_args) {
  (void)target_args;
#ifdef __NVPTX__
  unsigned char how = size ? *(const unsigned char *)payload : 0;
  if (how == 1)
    *(volatile uint64_t *)(uintptr_t)0x10 = 1;
  else if (how == 2)
    __builtin_trap();
#else
  (void)payload;
  (void)size;
#endif
}

size_t gfault_payload_bound(void *args, size_t n) {
  (void)args;
  return n;
}

int gfault_payload_init(void *args, size_t n, void *payload, size_t *size) {
  memcpy(payload, args, n);
  *size = n;
  return 0;
}
