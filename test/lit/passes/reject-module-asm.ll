; Module-level inline assembly is refused.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=r>' -disable-output %s 2>&1 | FileCheck %s

target triple = "x86_64-unknown-linux-gnu"

module asm ".globl hidden_thing"
define void @r_main(ptr %p, i64 %n, ptr %t) {
  ret void
}
; CHECK: error: ifunc 'r': module-level inline assembly cannot ship: it is written for one ISA and runs outside any function
