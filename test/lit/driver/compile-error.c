// Clang's diagnostics print as clang prints them (file:line:col: error:),
// once: the first triple that fails stops tc-cc, exit 1, no output.
// RUN: rm -rf %t && mkdir %t && cd %t
// RUN: cp %s bad.c
// RUN: not tc-cc bad.c -o b.tcfb 2>&1 | FileCheck %s --implicit-check-not=error:
// CHECK: bad.c:[[@LINE+3]]:9: error: use of undeclared identifier 'nope'
// CHECK: 1 error generated.
// RUN: not ls b.tcfb
int x = nope;
