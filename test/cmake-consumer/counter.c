/* Adds STEP (from step.h) to a counter in the target's memory. */
#include <tc/ifunc.h>

#include "step.h"

TC_IFUNC(counter)

void counter_main(void *payload, size_t payload_size, void *target_args) {
  (void)payload;
  (void)payload_size;
  *(size_t *)target_args += STEP;
}

size_t counter_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return 1;
}

int counter_payload_init(void *source_args, size_t source_args_size,
                         void *payload, size_t *payload_size) {
  (void)source_args;
  (void)source_args_size;
  (void)payload;
  *payload_size = 1;
  return 0;
}
