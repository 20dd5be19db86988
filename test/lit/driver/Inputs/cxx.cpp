// C++ with C entry points: templates and a class inside, C ABI outside.
#include <tc/ifunc.h>
#include <vector>

TC_IFUNC(cxx)

namespace {
template <typename T> T twice(T X) { return X + X; }
struct Acc {
  unsigned long Sum = 0;
  void add(unsigned long V) { Sum += twice(V); }
};
} // namespace

extern "C" void cxx_main(void *payload, size_t payload_size, void *args) {
  Acc A;
  const unsigned char *P = static_cast<const unsigned char *>(payload);
  for (size_t I = 0; I < payload_size; ++I)
    A.add(P[I]);
  *static_cast<unsigned long *>(args) += A.Sum;
}

extern "C" size_t cxx_payload_bound(void *, size_t n) { return n; }

extern "C" int cxx_payload_init(void *a, size_t n, void *p, size_t *s) {
  std::vector<unsigned char> Copy(static_cast<unsigned char *>(a),
                                  static_cast<unsigned char *>(a) + n);
  for (size_t I = 0; I < n; ++I)
    static_cast<unsigned char *>(p)[I] = Copy[I];
  *s = n;
  return 0;
}
