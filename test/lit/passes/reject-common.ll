; A common symbol is refused (no initializer: its owner is ambiguous).
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=r>' -disable-output %s 2>&1 | FileCheck %s

target triple = "x86_64-unknown-linux-gnu"

@shared = common global i64 0
define void @r_main(ptr %p, i64 %n, ptr %t) {
  %v = load i64, ptr @shared
  store i64 %v, ptr %t
  ret void
}
; CHECK: error: ifunc 'r': common symbol 'shared' cannot ship: give it an initializer or make it static (-fno-common)
