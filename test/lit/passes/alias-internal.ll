; An alias of a definition the target code reaches is kept, internalized:
; a safe transformation, not a refusal. (IR cannot alias an external
; symbol at all; the pass still refuses one defensively.)
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=r>' -S %s | FileCheck %s

target triple = "x86_64-unknown-linux-gnu"

define i64 @step(i64 %x) {
  %y = add i64 %x, 1
  ret i64 %y
}
@inc = alias i64 (i64), ptr @step
; CHECK: @inc = internal alias i64 (i64), ptr @step

define void @r_main(ptr %p, i64 %n, ptr %t) {
  %v = load i64, ptr %t
  %w = call i64 @inc(i64 %v)
  store i64 %w, ptr %t
  ret void
}
