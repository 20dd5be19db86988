/* An ifunc with a loop the vectorizer widens to the CPU's vector width. */
#include <tc/ifunc.h>

TC_IFUNC(vadd)

void vadd_main(void *payload, size_t payload_size, void *target_args) {
  int *Dst = (int *)target_args;
  const int *Src = (const int *)payload;
  for (size_t I = 0; I < payload_size / sizeof(int); ++I)
    Dst[I] += Src[I];
}

size_t vadd_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int vadd_payload_init(void *source_args, size_t source_args_size,
                      void *payload, size_t *payload_size) {
  for (size_t I = 0; I < source_args_size; ++I)
    ((char *)payload)[I] = ((char *)source_args)[I];
  *payload_size = source_args_size;
  return 0;
}
