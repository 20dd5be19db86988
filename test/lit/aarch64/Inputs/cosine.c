// An ifunc with a libm dependency: writes cos(x) for the payload's double x
// into the first 8 bytes of the target's region.
#include <math.h>
#include <string.h>
#include <tc/ifunc.h>

TC_IFUNC(cosine)

void cosine_main(void *payload, size_t payload_size, void *target_args) {
  double X;
  memcpy(&X, payload, sizeof X);
  X = cos(X);
  memcpy(target_args, &X, sizeof X);
}

size_t cosine_payload_bound(void *source_args, size_t source_args_size) {
  return sizeof(double);
}

int cosine_payload_init(void *source_args, size_t source_args_size,
                        void *payload, size_t *payload_size) {
  memcpy(payload, source_args, sizeof(double));
  *payload_size = sizeof(double);
  return 0;
}
