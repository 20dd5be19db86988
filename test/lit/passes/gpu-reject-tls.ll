; A GPU has no thread-local storage (clang refuses _Thread_local for nvptx;
; IR inputs can still have it).
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@counter = thread_local global i64 0
define void @g_main(ptr %p, i64 %n, ptr %t) {
  %v = load i64, ptr @counter
  store i64 %v, ptr %t
  ret void
}
; CHECK: error: ifunc 'g': thread-local variable 'counter' is not supported in a GPU member: a GPU has no thread-local storage
