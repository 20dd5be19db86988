; A variable the member does not define (stdout, errno) lives in a host
; process, out of a GPU's reach.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@stdout = external global ptr
define void @g_main(ptr %p, i64 %n, ptr %t) {
  %v = load ptr, ptr @stdout
  store ptr %v, ptr %t
  ret void
}
; CHECK: error: ifunc 'g': function 'g_main' references 'stdout', a variable outside the member, which a GPU member cannot reach
