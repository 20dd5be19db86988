; A mutable global the target code writes is kept, internal: it becomes
; state of the target process, kept between messages. Read-only tables ship
; with the code; a global only the source side uses goes.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=g>' -S %s | FileCheck %s --implicit-check-not=@sent

target triple = "x86_64-unknown-linux-gnu"

@seen = global i64 0, align 8
@steps = constant [2 x i64] [i64 1, i64 10], align 8
@sent = global i64 0, align 8

define void @g_main(ptr %p, i64 %n, ptr %t) {
  %s = load i64, ptr @seen, align 8
  %s1 = add i64 %s, 1
  store i64 %s1, ptr @seen, align 8
  %i = and i64 %s, 1
  %stepp = getelementptr inbounds [2 x i64], ptr @steps, i64 0, i64 %i
  %step = load i64, ptr %stepp, align 8
  store i64 %step, ptr %t, align 8
  ret void
}
define i64 @g_payload_bound(ptr %a, i64 %n) {
  ret i64 0
}
define i32 @g_payload_init(ptr %a, i64 %n, ptr %p, ptr %s) {
  %c = load i64, ptr @sent, align 8
  %c1 = add i64 %c, 1
  store i64 %c1, ptr @sent, align 8
  store i64 0, ptr %s, align 8
  ret i32 0
}

; CHECK: @seen = internal global i64 0, align 8
; CHECK: @steps = internal constant [2 x i64] [i64 1, i64 10], align 8
; CHECK: store i64 %s1, ptr @seen, align 8
