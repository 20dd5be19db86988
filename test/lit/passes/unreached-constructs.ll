; Constructs the target code does not reach are stripped, not refused.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=r>' -S %s | FileCheck %s --implicit-check-not=tls --implicit-check-not=.mydata

target triple = "x86_64-unknown-linux-gnu"

@tls = thread_local global i64 0
@table = global i64 3, section ".mydata"
define i64 @source_only() {
  %v = load i64, ptr @tls
  %w = load i64, ptr @table
  %s = add i64 %v, %w
  ret i64 %s
}
define void @r_main(ptr %p, i64 %n, ptr %t) {
  ret void
}
; CHECK: define void @r_main
