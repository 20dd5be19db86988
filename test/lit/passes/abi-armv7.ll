; On a 32-bit target size_t is i32: an armv7 module with i32 sizes passes
; (opt exits zero and prints nothing).
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=t>' -disable-output %s 2>&1 | count 0

target datalayout = "e-m:e-p:32:32-Fi8-i64:64-v128:64:128-a:0:32-n32-S64"
target triple = "armv7-unknown-linux-gnueabihf"

define void @t_main(ptr %p, i32 %n, ptr %t) {
  ret void
}
define i32 @t_payload_bound(ptr %a, i32 %n) {
  ret i32 1
}
define i32 @t_payload_init(ptr %a, i32 %n, ptr %p, ptr %s) {
  ret i32 0
}
