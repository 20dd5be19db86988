/* A GPU ifunc that does not end on its own: it waits for word 2 of the
 * region to become non-zero, which nothing writes. For the GPU target's
 * time limit (tc-serve --gpu --max-run-ms). One thread. Its CPU member
 * does nothing. Built by hand like gsum.c (test/CMakeLists.txt). */
typedef unsigned long size_t;

void gspin_main(void *payload, size_t size, void *target_args) {
  (void)payload;
  (void)size;
#ifdef __NVPTX__
  volatile unsigned long long *w = (volatile unsigned long long *)target_args;
  while (w[2] == 0)
    ;
#else
  (void)target_args;
#endif
}

#ifdef __NVPTX__
__attribute__((nvptx_kernel)) void __tc_kernel_gspin(void *p, size_t n,
                                                     void *t) {
  gspin_main(p, n, t);
}
#else
size_t gspin_payload_bound(void *args, size_t n) { return 1; }
int gspin_payload_init(void *args, size_t n, void *payload, size_t *size) {
  *(char *)payload = 1;
  *size = 1;
  return 0;
}
#endif
