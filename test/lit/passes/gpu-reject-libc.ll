; A GPU member has no C library: a call to one that is not resolved inside
; the member (memcpy/memmove/memset, libclc's libm) is refused, naming the
; caller and the callee. What only the sender runs may call anything.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -disable-output %s 2>&1 | FileCheck %s --implicit-check-not=strlen

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define void @g_main(ptr %p, i64 %n, ptr %t) {
  %l = call i64 @strlen(ptr %p)
  store i64 %l, ptr %t, align 8
  ret void
}
define i32 @g_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  %l = call i64 @strlen(ptr %a)
  ret i32 0
}
declare i64 @strlen(ptr)
; CHECK: error: ifunc 'g': function 'g_main' calls 'strlen', which a GPU member cannot call: only memcpy, memmove, memset and the libm functions libclc provides are resolved for the GPU (docs/ifunc-abi.md)
