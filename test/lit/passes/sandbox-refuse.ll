; tc-sandbox refuses, in one error, the calls its policy does not allow;
; tc-sandbox<allow=SYM;...> adds names (their pointer arguments go unchecked).
; Default-allowed calls pass: memcpy with both ranges checked, sqrt as is.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes=tc-sandbox -disable-output %s 2>&1 | FileCheck %s
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-sandbox<allow=abort;allow=printf>' -S %s | FileCheck %s --check-prefix=IR

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

@fmt = private constant [3 x i8] c"%d\00"

declare void @abort()
declare i32 @printf(ptr, ...)
declare double @sqrt(double)
declare ptr @memcpy(ptr, ptr, i64)

define void @r_main(ptr %payload, i64 %n, ptr %args) {
  %q = call double @sqrt(double 2.0)
  %m = call ptr @memcpy(ptr %args, ptr %payload, i64 %n)
  %f = call i32 (ptr, ...) @printf(ptr @fmt, i32 1)
  call void @abort()
  unreachable
}
; CHECK: error: calls 'abort', which the sandbox policy does not allow; calls 'printf', which the sandbox policy does not allow
; CHECK: tc-sandbox: 1 problem

; IR-LABEL: define void @r_main(
; IR: %q = call double @sqrt(double 2.000000e+00)
; IR: [[D:%.*]] = ptrtoint ptr %args to i64
; IR: call void @tc_sandbox_check(i64 [[D]], i64 %n, i32 2,
; IR: [[S:%.*]] = ptrtoint ptr %payload to i64
; IR: call void @tc_sandbox_check(i64 [[S]], i64 %n, i32 1,
; IR: %m = call ptr @memcpy(ptr %args, ptr %payload, i64 %n)
; IR-NEXT: %f = call i32 (ptr, ...) @printf(ptr @fmt, i32 1)
; IR-NEXT: call void @abort()
; IR-NEXT: call void @tc_sandbox_trap(i32 7, i64 0)
; IR-NEXT: unreachable
