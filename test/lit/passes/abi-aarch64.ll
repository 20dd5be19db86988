; An aarch64 module with the right signatures passes the check.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=t>' -disable-output %s

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i8:8:32-i16:16:32-i64:64-i128:128-n32:64-S128-Fn32"
target triple = "aarch64-unknown-linux-gnu"

define void @t_main(ptr %p, i64 %n, ptr %t) {
  ret void
}
define i64 @t_payload_bound(ptr %a, i64 %n) {
  ret i64 1
}
define i32 @t_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  ret i32 0
}
