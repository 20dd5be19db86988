; The translation unit's default CPU attributes are dropped (the target JIT
; compiles for its own CPU); a function with its own, such as an AVX2 path
; behind a runtime CPU check, keeps them.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=v>' -S %s | FileCheck %s

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

define internal void @generic(ptr %t) #0 {
  store i64 1, ptr %t
  ret void
}
define internal void @avx2(ptr %t) #1 {
  store i64 2, ptr %t
  ret void
}
define void @v_main(ptr %p, i64 %n, ptr %t) #0 {
  %b = load i1, ptr %p
  br i1 %b, label %fast, label %slow
fast:
  call void @avx2(ptr %t)
  ret void
slow:
  call void @generic(ptr %t)
  ret void
}

attributes #0 = { nounwind "target-cpu"="x86-64" "target-features"="+cx8,+sse2" "tune-cpu"="generic" }
attributes #1 = { nounwind "target-cpu"="x86-64" "target-features"="+avx,+avx2,+cx8,+sse2" "tune-cpu"="generic" }

; CHECK: define internal void @generic(ptr %t) #[[DEFAULT:[0-9]+]] {
; CHECK: define internal void @avx2(ptr %t) #[[OWN:[0-9]+]] {
; CHECK: define void @v_main(ptr %p, i64 %n, ptr %t) #[[DEFAULT]] {
; CHECK: attributes #[[DEFAULT]] = { nounwind }
; CHECK: attributes #[[OWN]] = { nounwind "target-cpu"="x86-64" "target-features"="+avx,+avx2,+cx8,+sse2" "tune-cpu"="generic" }
