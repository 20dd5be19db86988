/* The DAPC chaser: follows pointers in the server's shard while the next
 * entry is local, forwards itself to the owning server otherwise, and at
 * depth 0 injects a dapc_result ifunc into the client. It calls libtc on
 * the target (tc_msg_payload, tc_msg_send): the symbols resolve from the
 * server process. See examples/dapc/README.md. */
#include <tc/ifunc.h>
#include <tc/tc.h>

#include <string.h>

#include "dapc_chase.h"
#include "dapc_table.h"

TC_IFUNC(dapc)

static void send_args(tc_ep_h ep, tc_msg_h msg, const dapc_args_t *a) {
  memcpy(tc_msg_payload(msg, NULL), a, sizeof *a);
  tc_msg_send(ep, msg, NULL, NULL);
}

void dapc_main(void *payload, size_t payload_size, void *target_args) {
  dapc_server_t *s = (dapc_server_t *)target_args;
  dapc_args_t a;
  if (payload_size != sizeof a)
    return;
  memcpy(&a, payload, sizeof a);
  if (a.depth == 0 || a.addr >= s->n)
    return;
  if (dapc_walk(s, &a))
    send_args(s->client, s->result, &a);
  else
    send_args(s->peers[dapc_owner(s->n, s->servers, a.addr)], s->forward, &a);
}

size_t dapc_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return sizeof(dapc_args_t);
}

int dapc_payload_init(void *source_args, size_t source_args_size,
                      void *payload, size_t *payload_size) {
  if (source_args_size != sizeof(dapc_args_t))
    return -1;
  memcpy(payload, source_args, sizeof(dapc_args_t));
  *payload_size = sizeof(dapc_args_t);
  return 0;
}
