; A global constructor would never run on a target: refused.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=r>' -disable-output %s 2>&1 | FileCheck %s

target triple = "x86_64-unknown-linux-gnu"

@llvm.global_ctors = appending global [1 x { i32, ptr, ptr }] [{ i32, ptr, ptr } { i32 65535, ptr @init, ptr null }]
define void @init() {
  ret void
}
define void @r_main(ptr %p, i64 %n, ptr %t) {
  ret void
}
; CHECK: error: ifunc 'r': global constructor 'init' would never run on a target
