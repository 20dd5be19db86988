/* The end of a DAPC chase: runs on the client and records where chase `id`
 * ended, so the client can check it against the reference. */
#include <tc/ifunc.h>

#include <string.h>

#include "dapc_chase.h"

TC_IFUNC(dapc_result)

void dapc_result_main(void *payload, size_t payload_size, void *target_args) {
  dapc_client_t *c = (dapc_client_t *)target_args;
  dapc_args_t a;
  if (payload_size != sizeof a)
    return;
  memcpy(&a, payload, sizeof a);
  if (a.id < c->count)
    c->ends[a.id] = a.addr;
  ++c->done;
}

size_t dapc_result_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return sizeof(dapc_args_t);
}

int dapc_result_payload_init(void *source_args, size_t source_args_size,
                             void *payload, size_t *payload_size) {
  if (source_args_size != sizeof(dapc_args_t))
    return -1;
  memcpy(payload, source_args, sizeof(dapc_args_t));
  *payload_size = sizeof(dapc_args_t);
  return 0;
}
