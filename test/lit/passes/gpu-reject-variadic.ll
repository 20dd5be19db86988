; Variadic calls are refused on a GPU: to a variadic function the member
; does not define (printf as a C library call), or one it does.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@fmt = private constant [4 x i8] c"%d\0A\00"
define void @g_main(ptr %p, i64 %n, ptr %t) {
  %c = call i32 (ptr, ...) @printf(ptr @fmt, i64 %n)
  %s = call i64 (i32, ...) @sum(i32 1, i64 %n)
  ret void
}
define internal i64 @sum(i32 %k, ...) {
  ret i64 0
}
declare i32 @printf(ptr, ...)
; CHECK-DAG: error: ifunc 'g': function 'g_main' calls variadic function 'printf': a GPU member cannot make variadic calls
; CHECK-DAG: error: ifunc 'g': function 'sum' is variadic: a GPU member cannot make variadic calls
