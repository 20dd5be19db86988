/* Uses libm (cos) and printf with string constants. */
#include <math.h>
#include <stdio.h>
#include <tc/ifunc.h>

TC_IFUNC(norm)

void norm_main(void *payload, size_t payload_size, void *target_args) {
  const double *v = payload;
  double *out = target_args;
  (void)payload_size;
  *out = cos(v[0]) * v[1];
  printf("norm: %f\n", *out);
}

size_t norm_payload_bound(void *a, size_t n) {
  (void)a;
  return n;
}

int norm_payload_init(void *a, size_t n, void *p, size_t *s) {
  const char *src = a;
  char *dst = p;
  for (size_t i = 0; i < n; ++i)
    dst[i] = src[i];
  *s = n;
  return 0;
}
