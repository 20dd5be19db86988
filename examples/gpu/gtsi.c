/* GPU-ready target-side increment: TSI written once for CPU and GPU
 * members. Each message adds one to the 64-bit counter at the start of
 * the target's region (target_args). It runs as one thread on either
 * kind of target (no TC_IFUNC_THREADS); the increment is atomic, so
 * messages that run at once on one target (a GPU runs each connection's
 * messages on its own stream) never lose a count. The payload is one byte
 * the target ignores. */
#include <tc/ifunc.h>

#include <stdint.h>

TC_IFUNC(gtsi)

void gtsi_main(void *payload, size_t payload_size, void *target_args) {
  (void)payload;
  (void)payload_size;
  __atomic_fetch_add((uint64_t *)target_args, 1, __ATOMIC_RELAXED);
}

size_t gtsi_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return 1;
}

int gtsi_payload_init(void *source_args, size_t source_args_size,
                      void *payload, size_t *payload_size) {
  (void)source_args;
  (void)source_args_size;
  *(unsigned char *)payload = 1;
  *payload_size = 1;
  return 0;
}
