; NAME_threads, TC_IFUNC_THREADS's launch shape, must be a constant,
; externally visible 32-bit integer above 0 (the GPU target reads the
; initializer); tc-abi-check says what is wrong, on every triple. A valid
; one passes.
; RUN: rm -rf %t && split-file %s %t
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=t>' -disable-output %t/ok.ll
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=t>' -disable-output %t/mutable.ll 2>&1 | FileCheck %s --check-prefix=MUTABLE
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=t>' -disable-output %t/zero.ll 2>&1 | FileCheck %s --check-prefix=ZERO
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=t>' -disable-output %t/wide.ll 2>&1 | FileCheck %s --check-prefix=WIDE
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=t>' -disable-output %t/extern.ll 2>&1 | FileCheck %s --check-prefix=EXTERN
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=t>' -disable-output %t/static.ll 2>&1 | FileCheck %s --check-prefix=STATIC
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-abi-check<name=t>' -disable-output %t/function.ll 2>&1 | FileCheck %s --check-prefix=FUNCTION
; MUTABLE: error: ifunc 't': 't_threads' is not constant, expected 'const uint32_t t_threads = N;' with N > 0 (TC_IFUNC_THREADS)
; ZERO: error: ifunc 't': 't_threads' is 0, expected
; WIDE: error: ifunc 't': 't_threads' is not a 32-bit integer, expected
; EXTERN: error: ifunc 't': 't_threads' is declared but not defined, expected
; STATIC: error: ifunc 't': 't_threads' is not externally visible, expected
; FUNCTION: error: ifunc 't': 't_threads' is not a variable, expected

;--- ok.ll
target triple = "nvptx64-nvidia-cuda"
@t_threads = constant i32 -1
define void @t_main(ptr %p, i64 %n, ptr %t) { ret void }
define i64 @t_payload_bound(ptr %a, i64 %n) { ret i64 0 }
define i32 @t_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) { ret i32 0 }
;--- mutable.ll
target triple = "nvptx64-nvidia-cuda"
@t_threads = global i32 4
define void @t_main(ptr %p, i64 %n, ptr %t) { ret void }
define i64 @t_payload_bound(ptr %a, i64 %n) { ret i64 0 }
define i32 @t_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) { ret i32 0 }
;--- zero.ll
target triple = "x86_64-unknown-linux-gnu"
@t_threads = constant i32 0
define void @t_main(ptr %p, i64 %n, ptr %t) { ret void }
define i64 @t_payload_bound(ptr %a, i64 %n) { ret i64 0 }
define i32 @t_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) { ret i32 0 }
;--- wide.ll
target triple = "nvptx64-nvidia-cuda"
@t_threads = constant i64 4
define void @t_main(ptr %p, i64 %n, ptr %t) { ret void }
define i64 @t_payload_bound(ptr %a, i64 %n) { ret i64 0 }
define i32 @t_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) { ret i32 0 }
;--- extern.ll
target triple = "nvptx64-nvidia-cuda"
@t_threads = external constant i32
define void @t_main(ptr %p, i64 %n, ptr %t) { ret void }
define i64 @t_payload_bound(ptr %a, i64 %n) { ret i64 0 }
define i32 @t_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) { ret i32 0 }
;--- static.ll
target triple = "nvptx64-nvidia-cuda"
@t_threads = internal constant i32 4
define void @t_main(ptr %p, i64 %n, ptr %t) { ret void }
define i64 @t_payload_bound(ptr %a, i64 %n) { ret i64 0 }
define i32 @t_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) { ret i32 0 }
;--- function.ll
target triple = "nvptx64-nvidia-cuda"
define void @t_threads() { ret void }
define void @t_main(ptr %p, i64 %n, ptr %t) { ret void }
define i64 @t_payload_bound(ptr %a, i64 %n) { ret i64 0 }
define i32 @t_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) { ret i32 0 }
