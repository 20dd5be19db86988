/* Fills part of the target's region for gsss and gchase, in parallel:
 * word first + i becomes (mul * i + add) mod count for i < count, in
 * uint64_t arithmetic. With count a power of two, mul = 1 mod 4 and add
 * odd, that is a permutation of 0..count-1 and a single cycle when read
 * as "next index" (a full-period linear congruential generator), so gsss
 * sums it to count * (count - 1) / 2 and gchase can walk it for as many
 * hops as it likes. It asks for the whole device.
 *
 * Payload (little-endian, 32 bytes): struct gfill_args below. */
#include <tc/ifunc.h>

#include <stdint.h>
#include <string.h>

TC_IFUNC(gfill)
TC_IFUNC_THREADS(gfill, TC_THREADS_DEVICE)

struct gfill_args {
  uint64_t first; /* index of the first word written */
  uint64_t count; /* words written, and the modulus */
  uint64_t mul;
  uint64_t add;
};

void gfill_main(void *payload, size_t payload_size, void *target_args) {
  (void)payload_size;
  const struct gfill_args *a = (const struct gfill_args *)payload;
  uint64_t *w = (uint64_t *)target_args + a->first;
  uint64_t n = a->count;
  if (n == 0)
    return;
  for (uint64_t i = tc_thread_index(); i < n; i += tc_thread_count())
    w[i] = (a->mul * i + a->add) % n;
}

size_t gfill_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return sizeof(struct gfill_args);
}

int gfill_payload_init(void *source_args, size_t source_args_size,
                       void *payload, size_t *payload_size) {
  if (source_args_size != sizeof(struct gfill_args))
    return -1;
  memcpy(payload, source_args, sizeof(struct gfill_args));
  *payload_size = sizeof(struct gfill_args);
  return 0;
}
