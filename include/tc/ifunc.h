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
 * The full contract (what target code may use, mutable globals, deps) is in
 * docs/ifunc-abi.md.
 */
#ifndef TC_IFUNC_H
#define TC_IFUNC_H

#include <stddef.h>

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

#endif /* TC_IFUNC_H */
