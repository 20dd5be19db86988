/* Links libtc through tc::runtime and creates a context and a worker. */
#include <stdio.h>
#include <tc/tc.h>

int main(void) {
  tc_context_h ctx;
  tc_worker_h worker;
  tc_status_t s = tc_context_create(NULL, &ctx);
  if (s != TC_OK)
    return 1;
  s = tc_worker_create(ctx, NULL, &worker);
  printf("worker: %s\n", tc_status_string(s));
  if (s == TC_OK)
    tc_worker_destroy(worker);
  tc_context_destroy(ctx);
  return s == TC_OK ? 0 : 1;
}
