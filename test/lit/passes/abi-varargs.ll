; A variadic entry point is refused: callers pass exactly the ABI's arguments.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=f>' -disable-output %s 2>&1 | FileCheck %s --implicit-check-not=error:

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

define void @f_main(ptr %p, i64 %n, ptr %t, ...) {
  ret void
}
define i64 @f_payload_bound(ptr %a, i64 %n) {
  ret i64 1
}
define i32 @f_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  ret i32 0
}
; CHECK: error: ifunc 'f': 'f_main' is variadic, expected (void *payload, size_t payload_size, void *target_args)
; CHECK-NEXT: error: tc-abi-check: 1 problem
