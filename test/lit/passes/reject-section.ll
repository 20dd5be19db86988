; A global in an explicit section is refused.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=r>' -disable-output %s 2>&1 | FileCheck %s

target triple = "x86_64-unknown-linux-gnu"

@table = global i64 3, section ".mydata"
define void @r_main(ptr %p, i64 %n, ptr %t) {
  %v = load i64, ptr @table
  store i64 %v, ptr %t
  ret void
}
; CHECK: error: ifunc 'r': global 'table' is in explicit section '.mydata', which a JIT-loaded member cannot honour
