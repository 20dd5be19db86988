; With debug info, a refused variable is located at its declaration.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=r>' -disable-output %s 2>&1 | FileCheck %s --implicit-check-not=error:

target triple = "x86_64-unknown-linux-gnu"

@counter = thread_local global i64 0, !dbg !3
define void @r_main(ptr %p, i64 %n, ptr %t) {
  %v = load i64, ptr @counter
  store i64 %v, ptr %t
  ret void
}

!llvm.dbg.cu = !{!0}
!llvm.module.flags = !{!2}
!0 = distinct !DICompileUnit(language: DW_LANG_C11, file: !1, emissionKind: FullDebug, globals: !{!3})
!1 = !DIFile(filename: "tls.c", directory: "/src")
!2 = !{i32 2, !"Debug Info Version", i32 3}
!3 = !DIGlobalVariableExpression(var: !4, expr: !DIExpression())
!4 = distinct !DIGlobalVariable(name: "counter", scope: !0, file: !1, line: 3, type: !5, isLocal: false, isDefinition: true)
!5 = !DIBasicType(name: "long", size: 64, encoding: DW_ATE_signed)
; CHECK: tls.c:3: error: ifunc 'r': thread-local variable 'counter' is not supported: threads of the target process are not the ifunc's
; CHECK-NEXT: error: tc-prepare-target: 1 problem
