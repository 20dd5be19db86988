; Each parameter of the wrong type is named, with the C type expected.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=f>' -disable-output %s 2>&1 | FileCheck %s --implicit-check-not=error:

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

define void @f_main(ptr %p, i64 %n, ptr %t) {
  ret void
}
define i64 @f_payload_bound(ptr %a, i64 %n) {
  ret i64 1
}
define i32 @f_payload_init(i64 %a, i32 %n, ptr %p, i64 %s) {
  ret i32 0
}
; CHECK: error: ifunc 'f': 'f_payload_init' parameter 1 is i64, expected void *
; CHECK-NEXT: error: ifunc 'f': 'f_payload_init' parameter 2 is i32, expected size_t (i64 on this target)
; CHECK-NEXT: error: ifunc 'f': 'f_payload_init' parameter 4 is i64, expected size_t *
; CHECK-NEXT: error: tc-abi-check: 3 problems
