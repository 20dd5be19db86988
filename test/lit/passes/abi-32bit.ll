; size_t follows the module's data layout: i32 on a 32-bit target, so i64
; parameters are wrong there.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=t>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-m:e-p:32:32-p270:32:32-p271:32:32-p272:64:64-i128:128-f64:32:64-f80:32-n8:16:32-S128"
target triple = "i386-unknown-linux-gnu"

define void @t_main(ptr %p, i64 %n, ptr %t) {
  ret void
}
define i32 @t_payload_bound(ptr %a, i32 %n) {
  ret i32 1
}
define i32 @t_payload_init(ptr %a, i32 %n, ptr %p, ptr %s) {
  ret i32 0
}
; CHECK: error: ifunc 't': 't_main' parameter 2 is i64, expected size_t (i32 on this target)
; CHECK-NEXT: error: tc-abi-check: 1 problem
