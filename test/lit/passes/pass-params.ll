; Malformed pass parameters are refused, each with what was expected.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check' -disable-output %s 2>&1 | FileCheck %s --check-prefix=BARE
; BARE: tc-abi-check: expected tc-abi-check<name=NAME>
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-source<g>' -disable-output %s 2>&1 | FileCheck %s --check-prefix=NONAME
; NONAME: tc-prepare-source: missing name=NAME
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=t;O3>' -disable-output %s 2>&1 | FileCheck %s --check-prefix=UNKNOWN
; UNKNOWN: tc-prepare-target: unknown parameter 'O3' (expected name=NAME, g, uwtable or libclc=PATH)

target triple = "x86_64-unknown-linux-gnu"

define void @t_main(ptr %p, i64 %n, ptr %t) {
  ret void
}
