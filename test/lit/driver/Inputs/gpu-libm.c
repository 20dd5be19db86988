/* A libm ifunc for CPU and GPU members: on a GPU its math comes from
 * libclc, linked into the member. */
#include <tc/ifunc.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

TC_IFUNC(lm)
TC_IFUNC_THREADS(lm, TC_THREADS_DEVICE)

void lm_main(void *payload, size_t payload_size, void *target_args) {
  const double *in = (const double *)payload;
  double *out = (double *)target_args;
  size_t n = payload_size / sizeof(double);
  for (size_t i = tc_thread_index(); i < n; i += tc_thread_count()) {
    double x = in[i];
    float f = (float)x;
    out[i] = sin(x) + cos(x) + exp(x) + log(fabs(x) + 1) + pow(x, 1.5) +
             sqrt(fabs(x)) + floor(x) + cbrt(x) + atan2(x, 2.0) + tgamma(x) +
             (double)(sinf(f) + expf(f) + logf(f + 2.0f) + powf(f, 2.5f)) +
             (double)lround(x) + hypot(x, 3.0) + fmod(x, 0.5);
  }
}

size_t lm_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int lm_payload_init(void *source_args, size_t source_args_size, void *payload,
                    size_t *payload_size) {
  memcpy(payload, source_args, source_args_size);
  *payload_size = source_args_size;
  return 0;
}
