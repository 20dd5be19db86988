; An ifunc that calls libm and printf: both must show up as external symbols.
target triple = "x86_64-pc-linux-gnu"

@fmt = private constant [4 x i8] c"%f\0A\00"

declare double @sqrt(double)
declare i32 @printf(ptr, ...)

define void @sq_main(ptr %payload, i64 %payload_size, ptr %target_args) {
  %x = load double, ptr %payload, align 8
  %r = call double @sqrt(double %x)
  %p = call i32 (ptr, ...) @printf(ptr @fmt, double %r)
  ret void
}
