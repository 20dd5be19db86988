// C++ for CPU and GPU members: the host's libstdc++ headers, std::atomic
// in the code the GPU runs, std::vector only in the sender's code.
#include <tc/ifunc.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

TC_IFUNC(cx)
TC_IFUNC_THREADS(cx, 64)

namespace {
template <typename T> T square(T X) { return X * X; }
} // namespace

extern "C" void cx_main(void *payload, size_t payload_size, void *args) {
  auto *Sum = static_cast<std::atomic<std::uint64_t> *>(args);
  const auto *P = static_cast<const std::uint8_t *>(payload);
  std::uint64_t Local = 0;
  for (size_t I = tc_thread_index(); I < payload_size; I += tc_thread_count())
    Local += square<std::uint64_t>(P[I]);
  Sum->fetch_add(Local, std::memory_order_relaxed);
}

extern "C" size_t cx_payload_bound(void *, size_t n) { return n; }

extern "C" int cx_payload_init(void *a, size_t n, void *p, size_t *s) {
  std::vector<unsigned char> Copy(static_cast<unsigned char *>(a),
                                  static_cast<unsigned char *>(a) + n);
  std::memcpy(p, Copy.data(), n);
  *s = n;
  return 0;
}
