/*===- CApiTarget.c - A tc target process for the C API's end-to-end tests -===
 *
 * tc-capi-target: a target worker made through the C API (mailboxes on, the
 * default) whose target_args is a counter. It prints "address HEX" (its
 * worker address) and serves until its parent goes away, a minute passes
 * or it is killed. CApiTest starts it and connects by address.
 *
 *===----------------------------------------------------------------------===*/

#include "tc/tc.h"

#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int main(void) {
  uint64_t Counter = 0;
  pid_t Parent = getppid();
  tc_context_h Ctx;
  if (tc_context_create(NULL, &Ctx) != TC_OK)
    return 1;
  tc_worker_params_t WP;
  WP.field_mask = TC_WORKER_PARAM_FIELD_TARGET_ARGS;
  WP.target_args = &Counter;
  tc_worker_h W;
  if (tc_worker_create(Ctx, &WP, &W) != TC_OK)
    return 1;
  void *Addr;
  size_t Len;
  if (tc_worker_get_address(W, &Addr, &Len) != TC_OK)
    return 1;
  printf("address ");
  for (size_t I = 0; I < Len; ++I)
    printf("%02x", ((const unsigned char *)Addr)[I]);
  printf("\n");
  fflush(stdout);
  tc_worker_release_address(W, Addr);
  time_t End = time(NULL) + 60;
  while (getppid() == Parent && time(NULL) < End)
    for (int I = 0; I < 4096; ++I)
      tc_worker_progress(W);
  tc_worker_destroy(W);
  tc_context_destroy(Ctx);
  return 0;
}
