; Any call-graph cycle in a GPU member is refused: a function calling
; itself, functions calling each other, and a cycle through an indirect
; call (counted as a call of every function whose address is taken).
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define void @g_main(ptr %p, i64 %n, ptr %t) {
  %a = call i64 @fact(i64 %n)
  %b = call i64 @even(i64 %n)
  %f = load ptr, ptr %t, align 8
  call void @apply(ptr %f, i64 %n)
  store ptr @walk, ptr %t, align 8
  ret void
}
define internal i64 @fact(i64 %x) {
  %c = icmp ult i64 %x, 2
  br i1 %c, label %one, label %rec
one:
  ret i64 1
rec:
  %y = sub i64 %x, 1
  %f = call i64 @fact(i64 %y)
  %r = mul i64 %x, %f
  ret i64 %r
}
define internal i64 @even(i64 %x) {
  %y = sub i64 %x, 1
  %r = call i64 @odd(i64 %y)
  ret i64 %r
}
define internal i64 @odd(i64 %x) {
  %y = sub i64 %x, 1
  %r = call i64 @even(i64 %y)
  ret i64 %r
}
define internal void @apply(ptr %f, i64 %n) {
  call void %f(ptr %f, i64 %n)
  ret void
}
define internal void @walk(ptr %f, i64 %n) {
  call void @apply(ptr %f, i64 %n)
  ret void
}
; CHECK-DAG: error: ifunc 'g': function 'fact' calls itself: a GPU member cannot recurse (the GPU's per-thread stack is small and fixed); write it as a loop
; CHECK-DAG: error: ifunc 'g': functions 'even', 'odd' call each other: a GPU member cannot recurse (the GPU's per-thread stack is small and fixed); write it as a loop
; CHECK-DAG: error: ifunc 'g': functions 'apply', 'walk' call each other (an indirect call counts as a call of every function whose address is taken): a GPU member cannot recurse (the GPU's per-thread stack is small and fixed); write it as a loop
