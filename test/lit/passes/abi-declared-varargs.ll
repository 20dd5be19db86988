; A declaration is not a definition; a variadic entry point is refused.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=v>' -disable-output %s 2>&1 | FileCheck %s

target triple = "x86_64-unknown-linux-gnu"

declare void @v_main(ptr, i64, ptr)
define i64 @v_payload_bound(ptr %a, i64 %n, ...) {
  ret i64 1
}
@v_payload_init = global i32 0
; CHECK: error: ifunc 'v': 'v_main' is declared but not defined
; CHECK-NEXT: error: ifunc 'v': 'v_payload_bound' is variadic, expected (void *source_args, size_t source_args_size)
; CHECK-NEXT: error: ifunc 'v': 'v_payload_init' is not a function
