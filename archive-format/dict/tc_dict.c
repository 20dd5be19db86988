#include <tc/ifunc.h>

TC_IFUNC(tc_dict)

void tc_dict_main(void *payload, size_t payload_size, void *target_args) {
  const unsigned char *p = (const unsigned char *)payload;
  unsigned long sum = 0;
  for (size_t i = 0; i < payload_size; ++i)
    sum = sum * 31 + p[i];
  *(unsigned long *)target_args += sum;
}

size_t tc_dict_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int tc_dict_payload_init(void *source_args, size_t source_args_size,
                         void *payload, size_t *payload_size) {
  (void)source_args;
  (void)payload;
  *payload_size = source_args_size;
  return 0;
}
