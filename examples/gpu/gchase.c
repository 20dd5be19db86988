/* A pointer chase inside the target's memory: the region holds a table of
 * next indices from word `first` (gfill makes one); starting at index
 * `start`, the chase takes `hops` steps, index = table[index], and stores
 * the index it ends at in word `result`. Each step depends on the last, so
 * it runs as one thread on a CPU or a GPU (no TC_IFUNC_THREADS): the
 * latency of dependent loads in the target's memory. The table must hold
 * indices below its length.
 *
 * Payload (little-endian, 32 bytes): struct gchase_args below. */
#include <tc/ifunc.h>

#include <stdint.h>
#include <string.h>

TC_IFUNC(gchase)

struct gchase_args {
  uint64_t first;  /* index of the table's first word */
  uint64_t start;  /* table index the chase starts at */
  uint64_t hops;   /* steps taken */
  uint64_t result; /* index of the word the last index is stored in */
};

void gchase_main(void *payload, size_t payload_size, void *target_args) {
  (void)payload_size;
  const struct gchase_args *a = (const struct gchase_args *)payload;
  uint64_t *region = (uint64_t *)target_args;
  const uint64_t *table = region + a->first;
  uint64_t at = a->start;
  for (uint64_t h = 0; h < a->hops; ++h)
    at = table[at];
  region[a->result] = at;
}

size_t gchase_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return sizeof(struct gchase_args);
}

int gchase_payload_init(void *source_args, size_t source_args_size,
                        void *payload, size_t *payload_size) {
  if (source_args_size != sizeof(struct gchase_args))
    return -1;
  memcpy(payload, source_args, sizeof(struct gchase_args));
  *payload_size = sizeof(struct gchase_args);
  return 0;
}
