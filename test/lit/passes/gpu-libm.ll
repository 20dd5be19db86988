; libm on the GPU: calls of C libm functions and the math intrinsics the
; NVPTX backend cannot lower become calls of libclc's OpenCL builtins
; (mangled), whose definitions are linked in from libclc's nvptx64 bitcode
; and internalized; vector intrinsics go lane by lane, sincos to sin and
; cos, lround to round and a conversion, a memcpy call to the intrinsic.
; Nothing is left to resolve: every declaration is an LLVM intrinsic, and
; the NVPTX backend lowers the member with no external function.
; RUN: opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=m>' -S %s -o %t.ll
; RUN: FileCheck %s < %t.ll
; RUN: grep '^declare' %t.ll | not grep -v '@llvm\.'
; RUN: llc -march=nvptx64 -mcpu=sm_90 %t.ll -o - | FileCheck %s --check-prefix=PTX --implicit-check-not=.extern
; A path that is not libclc's bitcode is an error naming the package.
; RUN: not opt -load-pass-plugin=%tc_passes_plugin -passes='tc-prepare-target<name=m;libclc=%t.none>' -disable-output %s 2>&1 | FileCheck %s --check-prefix=MISSING
; MISSING: libm on the GPU needs libclc's nvptx64 bitcode '{{.*}}.none' (Debian package libclc-22): Could not open input file

target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define void @m_main(ptr %p, i64 %n, ptr %t) {
  %x = load double, ptr %p, align 8
  %xf = fptrunc double %x to float
  %a = call double @sin(double %x)
  %b = call float @cosf(float %xf)
  %bd = fpext float %b to double
  %c = call double @pow(double %x, double %bd)
  %d = call double @cbrt(double %c)
  %e = call double @llvm.exp.f64(double %d)
  %i = call i32 @ilogb(double %e)
  %v0 = insertelement <2 x float> poison, float %xf, i64 0
  %v1 = insertelement <2 x float> %v0, float %b, i64 1
  %v = call <2 x float> @llvm.log.v2f32(<2 x float> %v1)
  store <2 x float> %v, ptr %t, align 8
  %sc = call { double, double } @llvm.sincos.f64(double %x)
  %s = extractvalue { double, double } %sc, 0
  %r = call i64 @llvm.lround.i64.f64(double %s)
  %w = call double @llvm.powi.f64.i32(double %a, i32 %i)
  %q = call double @nearbyint(double %w)
  %t8 = getelementptr i8, ptr %t, i64 8
  store double %q, ptr %t8, align 8
  %t16 = getelementptr i8, ptr %t, i64 16
  store i64 %r, ptr %t16, align 8
  %t24 = getelementptr i8, ptr %t, i64 24
  %cp = call ptr @memcpy(ptr %t24, ptr %p, i64 %n)
  ret void
}
declare double @sin(double)
declare float @cosf(float)
declare double @pow(double, double)
declare double @cbrt(double)
declare i32 @ilogb(double)
declare double @nearbyint(double)
declare ptr @memcpy(ptr, ptr, i64)
declare double @llvm.exp.f64(double)
declare <2 x float> @llvm.log.v2f32(<2 x float>)
declare { double, double } @llvm.sincos.f64(double)
declare i64 @llvm.lround.i64.f64(double)
declare double @llvm.powi.f64.i32(double, i32)

; CHECK-LABEL: define internal void @m_main(
; CHECK:         %a = call double @_Z3sind(double %x)
; CHECK:         %b = call float @_Z3cosf(float %xf)
; CHECK:         %c = call double @_Z3powdd(double %x, double %bd)
; CHECK:         %d = call double @_Z4cbrtd(double %c)
; CHECK:         %e = call double @_Z3expd(double %d)
; CHECK:         %i = call i32 @_Z5ilogbd(double %e)
; CHECK:         call float @_Z3logf(float
; CHECK:         call float @_Z3logf(float
; CHECK:         call double @_Z3sind(double %x)
; CHECK:         call double @_Z3cosd(double %x)
; CHECK:         call double @llvm.round.f64(
; CHECK:         %r = fptosi double {{.*}} to i64
; CHECK:         %w = call double @_Z4powndi(double %a, i32 %i)
; CHECK:         %q = call double @_Z4rintd(double %w)
; CHECK:         call void @llvm.memcpy.p0.p0.i64(ptr %t24, ptr %p, i64 %n, i1 false)
; CHECK-DAG: define internal {{.*}}double @_Z3sind(double
; CHECK-DAG: define internal {{.*}}double @_Z3powdd(double
; CHECK-DAG: define internal {{.*}}float @_Z3logf(float

; PTX: .entry __tc_kernel_m(
