; A thread-local variable the target code uses is refused.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=r>' -disable-output %s 2>&1 | FileCheck %s

target triple = "x86_64-unknown-linux-gnu"

@counter = thread_local global i64 0
define void @r_main(ptr %p, i64 %n, ptr %t) {
  %v = load i64, ptr @counter
  store i64 %v, ptr %t
  ret void
}
; CHECK: error: ifunc 'r': thread-local variable 'counter' is not supported: threads of the target process are not the ifunc's
