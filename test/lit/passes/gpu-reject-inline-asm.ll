; Inline assembly in a GPU member is refused, whichever ISA it is written
; for: x86 assembly under #ifdef __x86_64__ reaches the GPU compile too
; (the host's macros are defined there, for its headers).
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -disable-output %s 2>&1 | FileCheck %s

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define void @g_main(ptr %p, i64 %n, ptr %t) {
  call void asm sideeffect "pause", ""()
  ret void
}
; CHECK: error: ifunc 'g': function 'g_main' uses inline assembly ('pause'), which a GPU member cannot ship: tc cannot check that it is PTX for every GPU the member runs on (host assembly under #ifdef __x86_64__ reaches the GPU compile too: guard it with #ifndef __NVPTX__)
