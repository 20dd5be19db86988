; The zstd dictionary's aarch64 part (docs/archive-format.md, "The dictionary"):
; tc-cc's prepared target module for tc_dict.c, as written by
;   tc-cc --name tc_dict --target=aarch64-unknown-linux-gnu -emit-llvm -S tc_dict.c
; The build assembles it with the host's llvm-as 22 (dict/Dictionary.cmake).
; ModuleID = 'tc_dict.c'
; An explicit source_filename: without it llvm-as records the path of this
; file, and the dictionary would depend on where the source tree is.
source_filename = "tc_dict.c"
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i8:8:32-i16:16:32-i64:64-i128:128-n32:64-S128-Fn32"
target triple = "aarch64-unknown-linux-gnu"

; Function Attrs: nofree norecurse nosync nounwind memory(argmem: readwrite)
define dso_local void @tc_dict_main(ptr noundef readonly captures(none) %0, i64 noundef %1, ptr noundef captures(none) %2) local_unnamed_addr #0 {
  %4 = icmp eq i64 %1, 0
  br i1 %4, label %5, label %9

5:                                                ; preds = %9, %3
  %6 = phi i64 [ 0, %3 ], [ %16, %9 ]
  %7 = load i64, ptr %2, align 8, !tbaa !4
  %8 = add i64 %7, %6
  store i64 %8, ptr %2, align 8, !tbaa !4
  ret void

9:                                                ; preds = %3, %9
  %10 = phi i64 [ %17, %9 ], [ 0, %3 ]
  %11 = phi i64 [ %16, %9 ], [ 0, %3 ]
  %12 = mul i64 %11, 31
  %13 = getelementptr inbounds nuw i8, ptr %0, i64 %10
  %14 = load i8, ptr %13, align 1, !tbaa !8
  %15 = zext i8 %14 to i64
  %16 = add i64 %12, %15
  %17 = add nuw i64 %10, 1
  %18 = icmp eq i64 %17, %1
  br i1 %18, label %5, label %9, !llvm.loop !9
}

attributes #0 = { nofree norecurse nosync nounwind memory(argmem: readwrite) "frame-pointer"="non-leaf-no-reserve" "no-trapping-math"="true" }

!llvm.module.flags = !{!0, !1, !2, !3}

!0 = !{i32 1, !"wchar_size", i32 4}
!1 = !{i32 8, !"PIC Level", i32 2}
!2 = !{i32 7, !"PIE Level", i32 2}
!3 = !{i32 7, !"frame-pointer", i32 4}
!4 = !{!5, !5, i64 0}
!5 = !{!"long", !6, i64 0}
!6 = !{!"omnipotent char", !7, i64 0}
!7 = !{!"Simple C/C++ TBAA"}
!8 = !{!6, !6, i64 0}
!9 = distinct !{!9, !10}
!10 = !{!"llvm.loop.mustprogress"}
