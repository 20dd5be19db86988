/* Indirect put (Two-Chains): the payload is {offset, bytes...}; the target
 * copies the bytes into its buffer at that offset, which only the target
 * can check against its buffer's size. The sender's payload_init copies
 * source_args (already in that layout). */
#include <tc/ifunc.h>

#include <stdint.h>
#include <string.h>

TC_IFUNC(iput)

/* target_args: the counter every benchmark target keeps first, then the
 * buffer the puts land in. */
typedef struct iput_target {
  uint64_t count;
  unsigned char *base;
  uint64_t size;
  uint64_t rejected; /* puts that did not fit */
} iput_target_t;

void iput_main(void *payload, size_t payload_size, void *target_args) {
  iput_target_t *t = (iput_target_t *)target_args;
  uint64_t offset;
  ++t->count;
  if (payload_size < sizeof offset) {
    ++t->rejected;
    return;
  }
  memcpy(&offset, payload, sizeof offset);
  size_t n = payload_size - sizeof offset;
  if (offset > t->size || n > t->size - offset) {
    ++t->rejected;
    return;
  }
  memcpy(t->base + offset, (const unsigned char *)payload + sizeof offset, n);
}

size_t iput_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int iput_payload_init(void *source_args, size_t source_args_size,
                      void *payload, size_t *payload_size) {
  if (source_args_size < sizeof(uint64_t))
    return -1;
  memcpy(payload, source_args, source_args_size);
  *payload_size = source_args_size;
  return 0;
}
