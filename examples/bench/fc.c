/* First-contact probe for tc-bench: TSI under another name. tc-bench builds
 * it twice (FC_NAME=fca and fcb, with native object members too) so a target
 * keeping one identity loaded must load the other on every trial; and twice
 * more (fsa, fsb: bitcode only) for the stall mode's second client. */
#include <tc/ifunc.h>

#define FC_CAT_(a, b) a##b
#define FC_CAT(a, b) FC_CAT_(a, b)
#define FC_DECLARE(n) TC_IFUNC(n)

FC_DECLARE(FC_NAME)

void FC_CAT(FC_NAME, _main)(void *payload, size_t payload_size,
                            void *target_args) {
  (void)payload;
  (void)payload_size;
  ++*(size_t *)target_args;
}

size_t FC_CAT(FC_NAME, _payload_bound)(void *source_args,
                                       size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return 1;
}

int FC_CAT(FC_NAME, _payload_init)(void *source_args, size_t source_args_size,
                                   void *payload, size_t *payload_size) {
  (void)source_args;
  (void)source_args_size;
  *(unsigned char *)payload = 1;
  *payload_size = 1;
  return 0;
}
