; tc-sandbox instruments a target member: the state is fetched once per
; function; fuel and the machine stack depth are checked on entry; a local
; whose address escapes moves to the shadow stack (popped on return), one
; that does not stays put and is accessed unchecked; every other access is
; checked inline against the region, payload and shadow-stack ranges, then
; out of line (tc_sandbox_check with the globals table); division by a
; variable checks for zero; loop back-edges burn fuel; indirect calls are
; checked against the module's functions.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes=tc-sandbox -S %s | FileCheck %s

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

@g = internal global [4 x i64] zeroinitializer
@k = internal constant i64 7

; CHECK: @tc.sandbox.globals = private constant [2 x { ptr, i64, i64 }] [{ ptr, i64, i64 } { ptr @g, i64 32, i64 1 }, { ptr, i64, i64 } { ptr @k, i64 8, i64 0 }]
; CHECK: @tc.sandbox.functions = private constant [2 x ptr] [ptr @helper, ptr @t_main]

define internal i64 @helper(ptr %p) {
  %v = load i64, ptr %p
  ret i64 %v
}
; CHECK-LABEL: define internal i64 @helper(ptr %p)
; CHECK: %sandbox = call ptr @tc_sandbox_state()
; CHECK: [[FUELP:%.*]] = getelementptr inbounds i8, ptr %sandbox, i64 48
; CHECK: [[FUEL:%.*]] = load i64, ptr [[FUELP]]
; CHECK: [[LEFT:%.*]] = sub i64 [[FUEL]], 1
; CHECK: store i64 [[LEFT]], ptr [[FUELP]]
; CHECK: [[OUT:%.*]] = icmp slt i64 [[LEFT]], 0
; CHECK: [[FA:%.*]] = call ptr @llvm.frameaddress.p0(i32 0)
; CHECK: [[LIMITP:%.*]] = getelementptr inbounds i8, ptr %sandbox, i64 56
; CHECK: br i1 [[OUT]]
; CHECK: call void @tc_sandbox_trap(i32 4, i64 0)
; CHECK: call void @tc_sandbox_trap(i32 5, i64
; The ranges fixed while the function runs (region 16/24, payload 0/8,
; shadow stack 32/40) are loaded once; the load of %p is checked against
; them and against the slow path's last match (72/80), loaded there.
; CHECK: getelementptr inbounds i8, ptr %sandbox, i64 16
; CHECK: getelementptr inbounds i8, ptr %sandbox, i64 0
; CHECK: getelementptr inbounds i8, ptr %sandbox, i64 32
; CHECK: [[A:%.*]] = ptrtoint ptr %p to i64
; CHECK-NOT: getelementptr inbounds i8, ptr %sandbox, i64 16
; CHECK: getelementptr inbounds i8, ptr %sandbox, i64 72
; CHECK: call void @tc_sandbox_check(i64 [[A]], i64 8, i32 1, ptr @tc.sandbox.globals, i64 2)
; CHECK: %v = load i64, ptr %p

define void @t_main(ptr %payload, i64 %n, ptr %args) {
entry:
  %local = alloca i64
  %esc = alloca [4 x i64]
  store i64 1, ptr %local
  %x = load i64, ptr %local
  store i64 %x, ptr %args
  %r = call i64 @helper(ptr %esc)
  %i = load i64, ptr %payload
  %gp = getelementptr [4 x i64], ptr @g, i64 0, i64 %i
  store i64 %r, ptr %gp
  br label %loop
loop:
  %j = phi i64 [0, %entry], [%j1, %loop]
  %j1 = add i64 %j, 1
  %d = udiv i64 %x, %j1
  %c = icmp ult i64 %j1, %n
  br i1 %c, label %loop, label %done
done:
  %fp = load ptr, ptr %payload
  call void %fp()
  ret void
}
; CHECK-LABEL: define void @t_main(
; CHECK: %local = alloca i64
; CHECK-NOT: alloca
; CHECK: %shadow.sp = load i64
; CHECK: [[NEW:%.*]] = and i64 {{%.*}}, -16
; CHECK: call void @tc_sandbox_trap(i32 5, i64 0)
; CHECK: store i64 [[NEW]], ptr
; CHECK: %shadow.frame = inttoptr i64 [[NEW]] to ptr
; CHECK: %esc = getelementptr inbounds i8, ptr %shadow.frame, i64 0
; The local that does not escape: no check.
; CHECK: store i64 1, ptr %local
; CHECK-NEXT: %x = load i64, ptr %local
; CHECK: call void @tc_sandbox_check(i64 {{%.*}}, i64 8, i32 2,
; CHECK-NEXT: br label
; CHECK: store i64 %x, ptr %args
; CHECK: %r = call i64 @helper(ptr %esc)
; CHECK: call void @tc_sandbox_check(i64 {{%.*}}, i64 8, i32 1,
; CHECK: %i = load i64, ptr %payload
; CHECK: call void @tc_sandbox_check(i64 {{%.*}}, i64 8, i32 2,
; CHECK: store i64 %r, ptr %gp
; Division by a variable.
; CHECK: loop:
; CHECK: [[Z:%.*]] = icmp eq i64 %j1, 0
; CHECK: br i1 [[Z]]
; CHECK: call void @tc_sandbox_trap(i32 6, i64 0)
; CHECK: %d = udiv i64 %x, %j1
; The back-edge burns fuel before it branches.
; CHECK: sub i64 {{%.*}}, 1
; CHECK: call void @tc_sandbox_trap(i32 4, i64 0)
; CHECK: br i1 %c, label %loop, label %done
; CHECK: done:
; CHECK: %fp = load ptr, ptr %payload
; CHECK-NEXT: call void @tc_sandbox_check_call(ptr %fp, ptr @tc.sandbox.functions, i64 2)
; CHECK-NEXT: call void %fp()
; The shadow frame is popped on return.
; CHECK-NEXT: getelementptr inbounds i8, ptr %sandbox, i64 64
; CHECK-NEXT: store i64 %shadow.sp, ptr
; CHECK-NEXT: ret void
