; With debug info, each ABI problem starts with the definition's file:line.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=f>' -disable-output %s 2>&1 | FileCheck %s --implicit-check-not=error:

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

define void @f_main(ptr %p, i64 %n) !dbg !5 {
  ret void
}
define i64 @f_payload_bound(ptr %a, i64 %n) {
  ret i64 1
}
define i32 @f_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  ret i32 0
}

!llvm.dbg.cu = !{!0}
!llvm.module.flags = !{!2}
!0 = distinct !DICompileUnit(language: DW_LANG_C11, file: !1, emissionKind: FullDebug)
!1 = !DIFile(filename: "bad.c", directory: "/src")
!2 = !{i32 2, !"Debug Info Version", i32 3}
!5 = distinct !DISubprogram(name: "f_main", scope: !1, file: !1, line: 7, type: !6, spFlags: DISPFlagDefinition, unit: !0)
!6 = !DISubroutineType(types: !{})
; CHECK: bad.c:7: error: ifunc 'f': 'f_main' takes 2 parameters, expected 3 (void *payload, size_t payload_size, void *target_args)
; CHECK-NEXT: error: tc-abi-check: 1 problem
