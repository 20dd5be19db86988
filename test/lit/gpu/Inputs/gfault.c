/* A GPU ifunc that faults, for the GPU target's fault tests: payload byte
 * 1 stores through a wild pointer (an illegal address), 2 traps. It runs
 * as one thread. Its CPU member does nothing: the faults are the GPU's.
 * Built by hand like gsum.c (test/CMakeLists.txt). */
typedef unsigned long size_t;

void gfault_main(void *payload, size_t size, void *target_args) {
#ifdef __NVPTX__
  unsigned char how = size ? *(const unsigned char *)payload : 0;
  if (how == 1)
    *(volatile unsigned long long *)0x10ull = 1;
  else if (how == 2)
    __builtin_trap();
#else
  (void)payload;
  (void)size;
  (void)target_args;
#endif
}

#ifdef __NVPTX__
__attribute__((nvptx_kernel)) void __tc_kernel_gfault(void *p, size_t n,
                                                      void *t) {
  gfault_main(p, n, t);
}
#else
size_t gfault_payload_bound(void *args, size_t n) { return n; }
int gfault_payload_init(void *args, size_t n, void *payload, size_t *size) {
  for (size_t i = 0; i < n; ++i)
    ((char *)payload)[i] = ((const char *)args)[i];
  *size = n;
  return 0;
}
#endif
