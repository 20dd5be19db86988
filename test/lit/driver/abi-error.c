// ABI problems print as `file:line: error: ifunc 'NAME': ...` (the line from
// the line tables tc-cc asks for), exit 1 and leave no archive, not even an
// older one.
// RUN: rm -rf %t && mkdir %t && cd %t
// RUN: cp %s bad.c && echo old > bad.tcfb
// RUN: not tc-cc bad.c -o bad.tcfb 2>&1 | FileCheck %s --implicit-check-not=error:
// CHECK: bad.c:[[@LINE+3]]: error: ifunc 'bad': 'bad_main' takes 2 parameters, expected 3 (void *payload, size_t payload_size, void *target_args)
// RUN: not ls bad.tcfb
#include <stddef.h>
void bad_main(void *p, size_t n) {}
size_t bad_payload_bound(void *a, size_t n) { return 0; }
int bad_payload_init(void *a, size_t n, void *p, size_t *s) { return 0; }
