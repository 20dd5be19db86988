; Ifunc code on a GPU does not inject further messages: a call into libtc
; is refused.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define void @g_main(ptr %p, i64 %n, ptr %t) {
  %ep = load ptr, ptr %t, align 8
  %r = call i32 @tc_msg_send(ptr %ep, ptr %p, ptr null, ptr null)
  ret void
}
declare i32 @tc_msg_send(ptr, ptr, ptr, ptr)
; CHECK: error: ifunc 'g': function 'g_main' calls 'tc_msg_send' from libtc: ifunc code on a GPU does not inject further messages
