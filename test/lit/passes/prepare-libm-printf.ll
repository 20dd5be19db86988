; Calls into libm and libc stay declarations, resolved on the target from
; its process and deps; the string constants main uses ship with it. The
; source side's own string and callee go.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=m>,tc-prepare-target<name=m>' -S %s | FileCheck %s --implicit-check-not=puts --implicit-check-not=.str.src --implicit-check-not=payload

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

@.str = private unnamed_addr constant [11 x i8] c"sqrt = %f\0A\00", align 1
@.str.src = private unnamed_addr constant [6 x i8] c"init\0A\00", align 1

define void @m_main(ptr %p, i64 %n, ptr %t) {
  %x = load double, ptr %p, align 8
  %r = call double @sqrt(double %x)
  store double %r, ptr %t, align 8
  %c = call i32 (ptr, ...) @printf(ptr @.str, double %r)
  ret void
}
define i64 @m_payload_bound(ptr %a, i64 %n) {
  ret i64 8
}
define i32 @m_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  %c = call i32 @puts(ptr @.str.src)
  store i64 8, ptr %s, align 8
  ret i32 0
}
declare double @sqrt(double)
declare i32 @printf(ptr, ...)
declare i32 @puts(ptr)

; CHECK: @.str = private unnamed_addr constant [11 x i8] c"sqrt = %f\0A\00", align 1
; CHECK-LABEL: define void @m_main(
; CHECK:         %r = call double @sqrt(double %x)
; CHECK:         %c = call i32 (ptr, ...) @printf(ptr @.str, double %r)
; CHECK-DAG: declare double @sqrt(double)
; CHECK-DAG: declare i32 @printf(ptr, ...)
