/* Server-side sum (Two-Chains): the payload is an array of 64-bit integers;
 * the target adds them all to its running sum. The sender's payload_init
 * copies the array it is given as source_args. */
#include <tc/ifunc.h>

#include <stdint.h>
#include <string.h>

TC_IFUNC(sss)

/* target_args: the counter every benchmark target keeps first, then the
 * sum. */
typedef struct sss_target {
  uint64_t count;
  uint64_t sum;
} sss_target_t;

void sss_main(void *payload, size_t payload_size, void *target_args) {
  sss_target_t *t = (sss_target_t *)target_args;
  const uint64_t *v = (const uint64_t *)payload;
  uint64_t sum = 0;
  for (size_t i = 0; i < payload_size / sizeof(uint64_t); ++i)
    sum += v[i];
  t->sum += sum;
  ++t->count;
}

size_t sss_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int sss_payload_init(void *source_args, size_t source_args_size,
                     void *payload, size_t *payload_size) {
  if (source_args_size % sizeof(uint64_t))
    return -1;
  memcpy(payload, source_args, source_args_size);
  *payload_size = source_args_size;
  return 0;
}
