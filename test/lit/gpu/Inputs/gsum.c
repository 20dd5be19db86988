/* A data-parallel ifunc written by hand the way tc-cc builds one for a GPU
 * (until tc-cc's nvptx64 members, this is how the tests make one): gsum
 * adds the payload's 64-bit words into target_args[0] and counts messages
 * in target_args[1]. On a GPU each of gsum_threads threads takes every
 * tc_thread_count()-th word; the kernel entry __tc_kernel_gsum calls it. */
typedef unsigned long long u64;
typedef unsigned long size_t;

#ifdef __NVPTX__
const unsigned gsum_threads = GSUM_THREADS;
static size_t index_(void) {
  return (size_t)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() +
         __nvvm_read_ptx_sreg_tid_x();
}
static size_t count_(void) {
  return (size_t)__nvvm_read_ptx_sreg_nctaid_x() * __nvvm_read_ptx_sreg_ntid_x();
}
#else
static size_t index_(void) { return 0; }
static size_t count_(void) { return 1; }
#endif

void gsum_main(void *payload, size_t size, void *target_args) {
  const u64 *v = (const u64 *)payload;
  u64 *t = (u64 *)target_args;
  u64 s = 0;
  for (size_t i = index_(); i < size / 8; i += count_())
    s += v[i];
  __atomic_fetch_add(&t[0], s, __ATOMIC_RELAXED);
  if (index_() == 0)
    __atomic_fetch_add(&t[1], 1, __ATOMIC_RELAXED);
}

#ifdef __NVPTX__
__attribute__((nvptx_kernel)) void __tc_kernel_gsum(void *p, size_t n,
                                                    void *t) {
  gsum_main(p, n, t);
}
#else
size_t gsum_payload_bound(void *args, size_t n) { return n; }
int gsum_payload_init(void *args, size_t n, void *payload, size_t *size) {
  for (size_t i = 0; i < n; ++i)
    ((char *)payload)[i] = ((const char *)args)[i];
  *size = n;
  return 0;
}
#endif
