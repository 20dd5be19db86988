; Every ABI problem is reported, each with what was expected.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=foo>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

define void @foo_main(ptr %p, i64 %n) {
  ret void
}
define internal i32 @foo_payload_bound(ptr %a, i32 %n) {
  ret i32 1
}
; CHECK: error: ifunc 'foo': 'foo_main' takes 2 parameters, expected 3 (void *payload, size_t payload_size, void *target_args)
; CHECK-NEXT: error: ifunc 'foo': 'foo_payload_bound' has internal linkage; it must be externally visible (remove 'static')
; CHECK-NEXT: error: ifunc 'foo': 'foo_payload_bound' parameter 2 is i32, expected size_t (i64 on this target)
; CHECK-NEXT: error: ifunc 'foo': 'foo_payload_bound' returns i32, expected size_t (i64 on this target)
; CHECK-NEXT: error: ifunc 'foo': 'foo_payload_init' is missing, expected int foo_payload_init(void *source_args, size_t source_args_size, void *payload, size_t *payload_size)
; CHECK-NEXT: error: tc-abi-check: 5 problems
