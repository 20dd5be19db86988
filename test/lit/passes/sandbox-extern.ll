; What the sandbox cannot confine is refused whatever the allow-list:
; external variables and the address of an external function.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-sandbox<allow=puts>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

@environ = external global ptr
declare i32 @puts(ptr)

define void @e_main(ptr %payload, i64 %n, ptr %args) {
  %e = load ptr, ptr @environ
  store ptr @puts, ptr %args
  ret void
}
; CHECK: error: refers to external variable 'environ', which the sandbox cannot confine; takes the address of external function 'puts', which the sandbox does not allow
