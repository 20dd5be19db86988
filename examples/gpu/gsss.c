/* GPU-ready server-side sum over the target's own memory: adds up `count`
 * 64-bit words of the region (target_args) from word `first` and adds the
 * sum atomically to word `result`. Written once for CPU and GPU members:
 * a grid-stride loop over tc_thread_index()/tc_thread_count() (one thread
 * on a CPU target), then, on a GPU, a warp-shuffle reduction and one
 * atomic per warp (a naive atomic per thread is ten times slower).
 *
 * On a GPU the loop reads 16 bytes per load (two words) and keeps four
 * loads of each thread in flight (64 bytes), strided by the grid so that
 * a warp's loads are contiguous: memory bandwidth needs bytes in flight,
 * and one 8-byte load per thread per turn leaves a quarter of it unused.
 * It asks for the whole device.
 *
 * Payload (little-endian, 24 bytes): struct gsss_args below; payload_init
 * copies it from the source args and refuses any other size. */
#include <tc/ifunc.h>

#include <stdint.h>
#include <string.h>

TC_IFUNC(gsss)
TC_IFUNC_THREADS(gsss, TC_THREADS_DEVICE)

struct gsss_args {
  uint64_t first;  /* index of the first word summed */
  uint64_t count;  /* words summed */
  uint64_t result; /* index of the word the sum is added to */
};

void gsss_main(void *payload, size_t payload_size, void *target_args) {
  (void)payload_size;
  const struct gsss_args *a = (const struct gsss_args *)payload;
  uint64_t *region = (uint64_t *)target_args;
  const uint64_t *v = region + a->first;
  uint64_t n = a->count;
  uint64_t sum = 0;
  uint64_t t = tc_thread_index(), T = tc_thread_count();
#ifdef __NVPTX__
  typedef uint64_t pair __attribute__((ext_vector_type(2)));
  /* A word before the first 16-byte boundary, then pairs, then a last
   * word: each added by one thread. */
  if (((uintptr_t)v & 15) != 0 && n != 0) {
    if (t == 0)
      sum += v[0];
    ++v;
    --n;
  }
  const pair *p = (const pair *)__builtin_assume_aligned(v, 16);
  uint64_t pairs = n / 2, i = t;
  pair s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (; i + 3 * T < pairs; i += 4 * T) {
    pair x0 = p[i], x1 = p[i + T], x2 = p[i + 2 * T], x3 = p[i + 3 * T];
    s0 += x0;
    s1 += x1;
    s2 += x2;
    s3 += x3;
  }
  for (; i < pairs; i += T)
    s0 += p[i];
  s0 += s1 + s2 + s3;
  sum += s0.x + s0.y;
  if ((n & 1) != 0 && t == 0)
    sum += v[n - 1];
#else
  for (uint64_t i = t; i < n; i += T)
    sum += v[i];
#endif
#ifdef __NVPTX__
  /* Warp reduction when the whole warp is here (it is, in the target's
   * blocks of 256 threads): lane 0 ends with the warp's sum. */
  if (__nvvm_activemask() == 0xFFFFFFFFu) {
    for (int offset = 16; offset > 0; offset /= 2) {
      uint32_t lo = (uint32_t)__nvvm_shfl_sync_down_i32(
          0xFFFFFFFFu, (int)(uint32_t)sum, offset, 0x1F);
      uint32_t hi = (uint32_t)__nvvm_shfl_sync_down_i32(
          0xFFFFFFFFu, (int)(uint32_t)(sum >> 32), offset, 0x1F);
      sum += ((uint64_t)hi << 32) | lo;
    }
    if ((tc_thread_index() & 31) != 0)
      return;
  }
#endif
  if (sum != 0 || tc_thread_index() == 0)
    __atomic_fetch_add(&region[a->result], sum, __ATOMIC_RELAXED);
}

size_t gsss_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return sizeof(struct gsss_args);
}

int gsss_payload_init(void *source_args, size_t source_args_size,
                      void *payload, size_t *payload_size) {
  if (source_args_size != sizeof(struct gsss_args))
    return -1;
  memcpy(payload, source_args, sizeof(struct gsss_args));
  *payload_size = sizeof(struct gsss_args);
  return 0;
}
