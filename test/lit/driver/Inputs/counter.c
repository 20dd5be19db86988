/* A mutable global: per-target-process state that survives between
 * messages. */
#include <tc/ifunc.h>

TC_IFUNC(counter)

static unsigned long calls;

void counter_main(void *payload, size_t payload_size, void *target_args) {
  (void)payload;
  (void)payload_size;
  *(unsigned long *)target_args = ++calls;
}

size_t counter_payload_bound(void *a, size_t n) {
  (void)a;
  (void)n;
  return 0;
}

int counter_payload_init(void *a, size_t n, void *p, size_t *s) {
  (void)a;
  (void)n;
  (void)p;
  *s = 0;
  return 0;
}
