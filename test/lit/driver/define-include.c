// -I, -D and -U reach Clang for every triple, in order.
// RUN: rm -rf %t && mkdir -p %t/inc && cd %t
// RUN: echo '#define STEP 3' > inc/step.h
// RUN: tc-cc --name=d -Iinc -DEXTRA=4 --target=aarch64-unknown-linux-gnu -emit-llvm -S %s -o a.ll
// RUN: FileCheck %s --check-prefix=BOTH < a.ll
// BOTH: add i64 %{{.*}}, 7
// RUN: tc-cc --name=d -Iinc -DEXTRA=4 -UEXTRA --target=x86_64-unknown-linux-gnu -emit-llvm -S %s -o x.ll
// RUN: FileCheck %s --check-prefix=UNDEF < x.ll
// UNDEF: add i64 %{{.*}}, 3
// Without -I the header is not found.
// RUN: not tc-cc --name=d %s -o d.tcfb 2>&1 | FileCheck %s --check-prefix=NOINC
// NOINC: define-include.c:[[@LINE+1]]:10: fatal error: 'step.h' file not found
#include "step.h"
#include <tc/ifunc.h>
#ifndef EXTRA
#define EXTRA 0
#endif
TC_IFUNC(d)
void d_main(void *p, size_t n, void *t) { *(size_t *)t += STEP + EXTRA; }
size_t d_payload_bound(void *a, size_t n) { return 0; }
int d_payload_init(void *a, size_t n, void *p, size_t *s) { *s = 0; return 0; }
