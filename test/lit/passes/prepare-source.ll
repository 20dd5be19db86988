; The source member keeps payload_bound and payload_init (and what they
; reach) and drops tsi_main and what only it reaches.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-source<name=tsi>' -S %s | FileCheck %s --implicit-check-not=tsi_main --implicit-check-not=only_main

target triple = "x86_64-unknown-linux-gnu"

define void @only_main() {
  ret void
}
define void @tsi_main(ptr %p, i64 %n, ptr %t) {
  call void @only_main()
  ret void
}
define i64 @size() {
  ret i64 8
}
define i64 @tsi_payload_bound(ptr %a, i64 %n) {
  %s = call i64 @size()
  ret i64 %s
}
define i32 @tsi_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  store i64 8, ptr %s
  ret i32 0
}
; CHECK-DAG: define internal i64 @size()
; CHECK-DAG: define i64 @tsi_payload_bound(ptr %a, i64 %n)
; CHECK-DAG: define i32 @tsi_payload_init(ptr %a, i64 %n, ptr %p, ptr %s)
