; C++: extern "C" entry points, mangled inline helpers in comdats and a
; function-local static. The helpers main reaches are internalized out of
; their comdats (a JIT-loaded member has no other copy to fold with).
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=cx>,tc-prepare-target<name=cx>' -S %s | FileCheck %s --implicit-check-not=comdat --implicit-check-not=payload --implicit-check-not=_Z6unusedv

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

$_Z1gm = comdat any
$_Z5twiceImET_S0_ = comdat any
$_ZZ1gmE1n = comdat any
$_Z6unusedv = comdat any

@_ZZ1gmE1n = linkonce_odr global i64 0, comdat, align 8

define void @cx_main(ptr %p, i64 %n, ptr %a) {
  %v = call i64 @_Z1gm(i64 %n)
  %o = load i64, ptr %a, align 8
  %s = add i64 %o, %v
  store i64 %s, ptr %a, align 8
  ret void
}
define linkonce_odr i64 @_Z1gm(i64 %v) comdat {
  %t = call i64 @_Z5twiceImET_S0_(i64 %v)
  %n = load i64, ptr @_ZZ1gmE1n, align 8
  %n1 = add i64 %n, %t
  store i64 %n1, ptr @_ZZ1gmE1n, align 8
  ret i64 %n1
}
define linkonce_odr i64 @_Z5twiceImET_S0_(i64 %x) comdat {
  %r = add i64 %x, %x
  ret i64 %r
}
define linkonce_odr void @_Z6unusedv() comdat {
  ret void
}
define i64 @cx_payload_bound(ptr %a, i64 %n) {
  ret i64 %n
}
define i32 @cx_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  store i64 %n, ptr %s, align 8
  ret i32 0
}

; CHECK: @_ZZ1gmE1n = internal global i64 0, align 8
; CHECK: define void @cx_main(ptr %p, i64 %n, ptr %a) {
; CHECK: define internal i64 @_Z1gm(i64 %v) {
; CHECK: define internal i64 @_Z5twiceImET_S0_(i64 %x) {
