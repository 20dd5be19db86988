/* A test ifunc that does not end on a GPU: it waits for word 2 of the
 * region to become non-zero, which nothing writes (tc-serve --gpu
 * --max-run-ms stops it). One thread. Its CPU member does nothing. */
#include <tc/ifunc.h>

#include <stdint.h>

TC_IFUNC(gspin)

void gspin_main(void *payload, size_t size, void *target_args) {
  (void)payload;
  (void)size;
#ifdef __NVPTX__
  volatile uint64_t *w = (volatile uint64_t *)target_args;
  while (w[2] == 0)
    ;
#else
  (void)target_args;
#endif
}

size_t gspin_payload_bound(void *args, size_t n) {
  (void)args;
  (void)n;
  return 1;
}

int gspin_payload_init(void *args, size_t n, void *payload, size_t *size) {
  (void)args;
  (void)n;
  *(unsigned char *)payload = 1;
  *size = 1;
  return 0;
}
