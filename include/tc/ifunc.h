/**
 * @file ifunc.h
 * @brief What an injected-function (ifunc) author includes.
 *
 * An ifunc named NAME is three C functions. NAME_main runs on the target,
 * where the message arrives; NAME_payload_bound and NAME_payload_init run in
 * the sending process and never ship. Declaring them through TC_IFUNC(NAME)
 * lets the compiler check each definition's signature:
 *
 * @code
 * #include <tc/ifunc.h>
 * TC_IFUNC(tsi)
 * void tsi_main(void *payload, size_t payload_size, void *target_args) {
 *   ++*(size_t *)target_args;
 * }
 * size_t tsi_payload_bound(void *source_args, size_t source_args_size) {
 *   return 1;
 * }
 * int tsi_payload_init(void *source_args, size_t source_args_size,
 *                      void *payload, size_t *payload_size) {
 *   *payload_size = 1;
 *   return 0;
 * }
 * @endcode
 *
 * The same source builds for CPU and GPU members (tc-cc --offload-arch=sm_XX).
 * A data-parallel ifunc states how many threads it wants with
 * TC_IFUNC_THREADS and splits its work with tc_thread_index() and
 * tc_thread_count(), which a CPU target runs as one thread:
 *
 * @code
 * TC_IFUNC_THREADS(scale, TC_THREADS_DEVICE)
 * void scale_main(void *payload, size_t payload_size, void *target_args) {
 *   double *v = (double *)target_args;
 *   size_t n = *(const size_t *)payload;
 *   for (size_t i = tc_thread_index(); i < n; i += tc_thread_count())
 *     v[i] *= 2;
 * }
 * @endcode
 *
 * The full contract (what target code may use, mutable globals, deps, the
 * GPU member) is in docs/ifunc-abi.md.
 */
#ifndef TC_IFUNC_H
#define TC_IFUNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define TC_IFUNC_EXTERN_C extern "C"
#else
#define TC_IFUNC_EXTERN_C
#endif

/** Declares the three entry points of ifunc NAME with C linkage. */
#define TC_IFUNC(NAME)                                                         \
  TC_IFUNC_EXTERN_C void NAME##_main(void *payload, size_t payload_size,       \
                                     void *target_args);                       \
  TC_IFUNC_EXTERN_C size_t NAME##_payload_bound(void *source_args,             \
                                                size_t source_args_size);      \
  TC_IFUNC_EXTERN_C int NAME##_payload_init(void *source_args,                 \
                                            size_t source_args_size,           \
                                            void *payload,                     \
                                            size_t *payload_size);

/** TC_IFUNC_THREADS's "as many threads as fill the device": a GPU target
 *  launches blocks of 256 threads, as many as its SMs keep resident. */
#define TC_THREADS_DEVICE 0xFFFFFFFFu

/**
 * Defines `const uint32_t NAME_threads = N;`: ifunc NAME runs as N threads
 * in all on a GPU target (N > 0, or TC_THREADS_DEVICE). Without it an ifunc
 * runs as one thread. A CPU target ignores it and runs NAME_main once.
 */
#define TC_IFUNC_THREADS(NAME, N)                                              \
  TC_IFUNC_EXTERN_C const uint32_t NAME##_threads = (N);                       \
  typedef char NAME##_threads_must_be_positive[(uint32_t)(N) > 0 ? 1 : -1];

/**
 * This thread's index among tc_thread_count() threads: on a GPU the global
 * linear index, blockIdx.x * blockDim.x + threadIdx.x of the launch; 0 on a
 * CPU target.
 */
static inline size_t tc_thread_index(void) {
#ifdef __NVPTX__
  return (size_t)__nvvm_read_ptx_sreg_ctaid_x() *
             (size_t)__nvvm_read_ptx_sreg_ntid_x() +
         (size_t)__nvvm_read_ptx_sreg_tid_x();
#else
  return 0;
#endif
}

/**
 * How many threads run this message: on a GPU the launch grid's total,
 * gridDim.x * blockDim.x (at least NAME_threads, rounded up to whole
 * blocks); 1 on a CPU target. Loops written as
 * `for (i = tc_thread_index(); i < n; i += tc_thread_count())` cover every
 * i once on either.
 */
static inline size_t tc_thread_count(void) {
#ifdef __NVPTX__
  return (size_t)__nvvm_read_ptx_sreg_nctaid_x() *
         (size_t)__nvvm_read_ptx_sreg_ntid_x();
#else
  return 1;
#endif
}

#endif /* TC_IFUNC_H */
