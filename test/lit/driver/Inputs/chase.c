/* One pointer-chase step: follow `depth` links through a table of 8-byte
 * entries held by the target, leaving the last address in the payload. */
#include <stdint.h>
#include <tc/ifunc.h>

TC_IFUNC(chase)

struct chase_args {
  uint64_t depth;
  uint64_t addr;
};

void chase_main(void *payload, size_t payload_size, void *target_args) {
  struct chase_args *c = payload;
  const uint64_t *table = target_args;
  (void)payload_size;
  while (c->depth > 0) {
    c->addr = table[c->addr];
    --c->depth;
  }
}

size_t chase_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return sizeof(struct chase_args);
}

int chase_payload_init(void *source_args, size_t source_args_size,
                       void *payload, size_t *payload_size) {
  if (source_args_size != sizeof(struct chase_args))
    return 1;
  *(struct chase_args *)payload = *(struct chase_args *)source_args;
  *payload_size = sizeof(struct chase_args);
  return 0;
}
