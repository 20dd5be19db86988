/* An ifunc written the prototype's way (no TC_IFUNC; tc-cc names it from
 * the file: bzc) whose two sides both call libbz2: the sender compresses
 * the payload, the target inflates it into its memory. */
#include <bzlib.h>
#include <stddef.h>

void bzc_main(void *payload, size_t size, void *target_args) {
  unsigned int out = 4096;
  BZ2_bzBuffToBuffDecompress((char *)target_args, &out, (char *)payload,
                             (unsigned int)size, 0, 0);
}

size_t bzc_payload_bound(void *args, size_t n) {
  (void)args;
  return n + n / 100 + 600;
}

int bzc_payload_init(void *args, size_t n, void *payload, size_t *size) {
  unsigned int out = (unsigned int)*size;
  if (BZ2_bzBuffToBuffCompress((char *)payload, &out, (char *)args,
                               (unsigned int)n, 9, 0, 0) != BZ_OK)
    return -1;
  *size = out;
  return 0;
}
