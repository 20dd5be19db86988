; A variadic call through a function pointer is refused like a direct one.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define void @g_main(ptr %p, i64 %n, ptr %t) {
  %f = load ptr, ptr %t, align 8
  %c = call i32 (ptr, ...) %f(ptr %p, i64 %n)
  ret void
}
; CHECK: error: ifunc 'g': function 'g_main' makes a variadic call through a pointer: a GPU member cannot make variadic calls
