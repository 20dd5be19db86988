; A pointer-chase step: the target member is chase_main's loop over the
; target's table and nothing else; the payload copy stays on the source side.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=chase>,tc-prepare-target<name=chase>' -S %s | FileCheck %s --implicit-check-not=payload --implicit-check-not=memcpy

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

define void @chase_main(ptr %msg, i64 %size, ptr %table) {
entry:
  %addrp = getelementptr inbounds i8, ptr %msg, i64 8
  %d0 = load i64, ptr %msg, align 8
  %done0 = icmp eq i64 %d0, 0
  br i1 %done0, label %exit, label %loop
loop:
  %d = phi i64 [ %d0, %entry ], [ %d1, %loop ]
  %a = load i64, ptr %addrp, align 8
  %slot = getelementptr inbounds i64, ptr %table, i64 %a
  %next = load i64, ptr %slot, align 8
  store i64 %next, ptr %addrp, align 8
  %d1 = add i64 %d, -1
  store i64 %d1, ptr %msg, align 8
  %done = icmp eq i64 %d1, 0
  br i1 %done, label %exit, label %loop
exit:
  ret void
}

define i64 @chase_payload_bound(ptr %a, i64 %n) {
  ret i64 16
}
define i32 @chase_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  %bad = icmp ne i64 %n, 16
  br i1 %bad, label %refuse, label %copy
refuse:
  ret i32 1
copy:
  call void @llvm.memcpy.p0.p0.i64(ptr %p, ptr %a, i64 16, i1 false)
  store i64 16, ptr %s, align 8
  ret i32 0
}
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

; CHECK-LABEL: define void @chase_main(ptr %msg, i64 %size, ptr %table) {
; CHECK-NEXT:  entry:
; CHECK-NEXT:    %addrp = getelementptr inbounds i8, ptr %msg, i64 8
; CHECK:       loop:
; CHECK:         %slot = getelementptr inbounds i64, ptr %table, i64 %a
; CHECK-NEXT:    %next = load i64, ptr %slot, align 8
; CHECK-NEXT:    store i64 %next, ptr %addrp, align 8
; CHECK:       exit:
; CHECK-NEXT:    ret void
; CHECK-NEXT:  }
