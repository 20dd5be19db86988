; A wrong return type is reported with the C type expected.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=f>' -disable-output %s 2>&1 | FileCheck %s --implicit-check-not=error:

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

define i32 @f_main(ptr %p, i64 %n, ptr %t) {
  ret i32 0
}
define i32 @f_payload_bound(ptr %a, i64 %n) {
  ret i32 1
}
define i64 @f_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  ret i64 0
}
; CHECK: error: ifunc 'f': 'f_main' returns i32, expected void
; CHECK-NEXT: error: ifunc 'f': 'f_payload_bound' returns i32, expected size_t (i64 on this target)
; CHECK-NEXT: error: ifunc 'f': 'f_payload_init' returns i64, expected int (i32)
; CHECK-NEXT: error: tc-abi-check: 3 problems
