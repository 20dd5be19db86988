; A GNU ifunc (load-time resolver) is refused.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=r>' -disable-output %s 2>&1 | FileCheck %s

target triple = "x86_64-unknown-linux-gnu"

@pick = ifunc void (), ptr @resolve
define ptr @resolve() {
  ret ptr null
}
define void @r_main(ptr %p, i64 %n, ptr %t) {
  call void @pick()
  ret void
}
; CHECK: error: ifunc 'r': GNU ifunc 'pick' cannot ship: its resolver runs at load time
