; Target-side increment (TSI) for x86_64: the paper's smallest ifunc.
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

define void @tsi_main(ptr %payload, i64 %payload_size, ptr %target_args) {
  %v = load i64, ptr %target_args, align 8
  %n = add i64 %v, 1
  store i64 %n, ptr %target_args, align 8
  ret void
}
