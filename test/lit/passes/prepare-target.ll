; The target member keeps tsi_main and what it reaches (a helper, a mutable
; global: per-target-process state), internalized; it drops the source-side
; functions, unreached code, llvm.used and host-only metadata.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=tsi>,tc-prepare-target<name=tsi>' -S %s | FileCheck %s --implicit-check-not=payload

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

@calls = global i64 0
@unused = global i64 7
@llvm.used = appending global [1 x ptr] [ptr @unused], section "llvm.metadata"

; CHECK: @calls = internal global i64 0
; CHECK-NOT: @unused
; CHECK-NOT: llvm.used

define i64 @step(i64 %x) #0 {
  %y = add i64 %x, 1
  ret i64 %y
}
; CHECK: define internal i64 @step(i64 %x) {

define i64 @dead(i64 %x) {
  ret i64 %x
}
; CHECK-NOT: @dead

define void @tsi_main(ptr %p, i64 %n, ptr %t) #0 {
  %v = load i64, ptr %t
  %w = call i64 @step(i64 %v)
  store i64 %w, ptr %t
  %c = load i64, ptr @calls
  %c1 = add i64 %c, 1
  store i64 %c1, ptr @calls
  ret void
}
; CHECK: define void @tsi_main(ptr %p, i64 %n, ptr %t) {

define i64 @tsi_payload_bound(ptr %a, i64 %n) {
  ret i64 1
}
define i32 @tsi_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  store i64 1, ptr %s
  ret i32 0
}

attributes #0 = { "target-cpu"="x86-64" "target-features"="+sse2" "tune-cpu"="generic" }
!llvm.ident = !{!0}
!0 = !{!"clang version 22"}
; CHECK-NOT: target-cpu
; CHECK-NOT: llvm.ident
