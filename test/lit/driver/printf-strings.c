// printf with string constants: the strings ship inside the target member
// (private constants), printf is an external symbol the target resolves.
// RUN: rm -rf %t && mkdir %t && cd %t
// RUN: tc-cc --name=p --target=aarch64-unknown-linux-gnu -emit-llvm -S %s -o p.ll
// RUN: FileCheck %s --implicit-check-not=payload < p.ll
// CHECK-DAG: private unnamed_addr constant [11 x i8] c"hello %zu\0A\00"
// CHECK-DAG: private unnamed_addr constant [6 x i8] c"world\00"
// CHECK-DAG: declare {{.*}}i32 @printf(ptr
// CHECK-DAG: declare {{.*}}i32 @puts(ptr
// RUN: tc-cc --name=p %s -o p.tcfb
// RUN: tc-ar dump p.tcfb | FileCheck %s --check-prefix=SYMS
// SYMS: member 0: aarch64-unknown-linux-gnu {{.*}} role=target
// SYMS: symbols: 2
// SYMS-NEXT: symbol printf
// SYMS-NEXT: symbol puts
// SYMS: member 1: x86_64-unknown-linux-gnu {{.*}} role=target
// SYMS: symbols: 2
// SYMS-NEXT: symbol printf
// SYMS-NEXT: symbol puts
#include <stdio.h>
#include <tc/ifunc.h>
TC_IFUNC(p)
void p_main(void *payload, size_t n, void *t) {
  printf("hello %zu\n", n);
  puts("world");
}
size_t p_payload_bound(void *a, size_t n) { return 0; }
int p_payload_init(void *a, size_t n, void *p, size_t *s) { *s = 0; return 0; }
