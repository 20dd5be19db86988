; Functions that cannot throw lose `uwtable` and the module loses its
; "uwtable" flag (no .eh_frame for a target to map and register); a
; function that may throw keeps it. With `uwtable` (tc-cc
; -fasynchronous-unwind-tables) everything stays.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=u>' -S %s | FileCheck %s --implicit-check-not='"uwtable"'
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=u;uwtable>' -S %s | FileCheck %s --check-prefix=KEEP

target triple = "x86_64-unknown-linux-gnu"

declare void @may_throw()

define internal void @thrower(ptr %t) #1 {
  call void @may_throw()
  store i64 1, ptr %t
  ret void
}
define void @u_main(ptr %p, i64 %n, ptr %t) #0 {
  call void @thrower(ptr %t)
  ret void
}

attributes #0 = { nounwind uwtable }
attributes #1 = { uwtable }

!llvm.module.flags = !{!0, !1}
!0 = !{i32 1, !"wchar_size", i32 4}
!1 = !{i32 7, !"uwtable", i32 2}

; CHECK: define internal void @thrower(ptr %t) #[[THROWS:[0-9]+]] {
; CHECK: define void @u_main(ptr %p, i64 %n, ptr %t) #[[NOTHROW:[0-9]+]] {
; CHECK-DAG: attributes #[[THROWS]] = { uwtable }
; CHECK-DAG: attributes #[[NOTHROW]] = { nounwind }
; CHECK: !llvm.module.flags = !{![[WCHAR:[0-9]+]]}
; CHECK: ![[WCHAR]] = !{i32 1, !"wchar_size", i32 4}

; KEEP: define void @u_main(ptr %p, i64 %n, ptr %t) #[[NOTHROW:[0-9]+]] {
; KEEP: attributes #[[NOTHROW]] = { nounwind uwtable }
; KEEP: !llvm.module.flags = !{![[WCHAR:[0-9]+]], ![[UW:[0-9]+]]}
; KEEP: ![[UW]] = !{i32 7, !"uwtable", i32 2}
