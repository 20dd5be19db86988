/* Target-side increment (TSI): the smallest useful ifunc. Each message adds
 * one to a counter that lives in the target process (its target_args); the
 * payload is one byte the target ignores. This is the paper's latency and
 * message-rate benchmark. */
#include <tc/ifunc.h>

TC_IFUNC(tsi)

void tsi_main(void *payload, size_t payload_size, void *target_args) {
  (void)payload;
  (void)payload_size;
  ++*(size_t *)target_args;
}

size_t tsi_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return 1;
}

int tsi_payload_init(void *source_args, size_t source_args_size, void *payload,
                     size_t *payload_size) {
  (void)source_args;
  (void)source_args_size;
  *(unsigned char *)payload = 1;
  *payload_size = 1;
  return 0;
}
