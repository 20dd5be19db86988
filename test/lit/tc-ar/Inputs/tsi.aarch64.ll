; Target-side increment (TSI) for aarch64.
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i8:8:32-i16:16:32-i64:64-i128:128-n32:64-S128-Fn32"
target triple = "aarch64-unknown-linux-gnu"

define void @tsi_main(ptr %payload, i64 %payload_size, ptr %target_args) {
  %v = load i64, ptr %target_args, align 8
  %n = add i64 %v, 1
  store i64 %n, ptr %target_args, align 8
  ret void
}
