; Inline assembly in shipped code is refused; an empty barrier is allowed.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=r>' -disable-output %s 2>&1 | FileCheck %s

target triple = "x86_64-unknown-linux-gnu"

define void @r_main(ptr %p, i64 %n, ptr %t) {
  call void asm sideeffect "", "~{memory}"()
  %v = call i64 asm sideeffect "rdtsc", "=A"()
  store i64 %v, ptr %t
  ret void
}
; CHECK: error: ifunc 'r': function 'r_main' uses inline assembly ('rdtsc'), which may not run on every CPU of its triple
