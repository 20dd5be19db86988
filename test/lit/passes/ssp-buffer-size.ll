; "stack-protector-buffer-size"="8" is LLVM's default and goes; another
; size changes which arrays get a canary and stays.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=s>' -S %s | FileCheck %s

target triple = "x86_64-unknown-linux-gnu"

define internal void @small_buffers(ptr %t) #1 {
  store i64 1, ptr %t
  ret void
}
define void @s_main(ptr %p, i64 %n, ptr %t) #0 {
  call void @small_buffers(ptr %t)
  ret void
}

attributes #0 = { nounwind sspstrong "stack-protector-buffer-size"="8" }
attributes #1 = { nounwind sspstrong "stack-protector-buffer-size"="4" }

; CHECK: define internal void @small_buffers(ptr %t) #[[SMALL:[0-9]+]] {
; CHECK: define void @s_main(ptr %p, i64 %n, ptr %t) #[[DEFAULT:[0-9]+]] {
; CHECK-DAG: attributes #[[SMALL]] = { nounwind sspstrong "stack-protector-buffer-size"="4" }
; CHECK-DAG: attributes #[[DEFAULT]] = { nounwind sspstrong }
