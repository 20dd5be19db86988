; clang's nvptx target turns printf into a call of vprintf(format, args):
; refused, naming printf.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@fmt = private constant [4 x i8] c"%d\0A\00"
define void @g_main(ptr %p, i64 %n, ptr %t) {
  %c = call i32 @vprintf(ptr @fmt, ptr %p)
  ret void
}
declare i32 @vprintf(ptr, ptr)
; CHECK: error: ifunc 'g': function 'g_main' calls printf (vprintf on nvptx): a GPU member cannot make variadic calls
