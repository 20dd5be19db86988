; The zstd dictionary's x86_64 part (docs/archive-format.md, "The dictionary"):
; tc-cc's prepared target module for tc_dict.c, as written by
;   tc-cc --name tc_dict --target=x86_64-unknown-linux-gnu -emit-llvm -S tc_dict.c
; The build assembles it with the host's llvm-as 22 (dict/Dictionary.cmake).
; ModuleID = 'tc_dict.c'
; An explicit source_filename: without it llvm-as records the path of this
; file, and the dictionary would depend on where the source tree is.
source_filename = "tc_dict.c"
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

; Function Attrs: nofree norecurse nosync nounwind memory(argmem: readwrite)
define dso_local void @tc_dict_main(ptr noundef readonly captures(none) %0, i64 noundef %1, ptr noundef captures(none) %2) local_unnamed_addr #0 {
  %4 = icmp eq i64 %1, 0
  br i1 %4, label %28, label %5

5:                                                ; preds = %3
  %6 = and i64 %1, 3
  %7 = icmp ult i64 %1, 4
  br i1 %7, label %12, label %8

8:                                                ; preds = %5
  %9 = and i64 %1, -4
  br label %32

10:                                               ; preds = %32
  %11 = icmp eq i64 %6, 0
  br i1 %11, label %28, label %12

12:                                               ; preds = %10, %5
  %13 = phi i64 [ 0, %5 ], [ %59, %10 ]
  %14 = phi i64 [ 0, %5 ], [ %58, %10 ]
  %15 = icmp ne i64 %6, 0
  tail call void @llvm.assume(i1 %15)
  br label %16

16:                                               ; preds = %16, %12
  %17 = phi i64 [ %25, %16 ], [ %13, %12 ]
  %18 = phi i64 [ %24, %16 ], [ %14, %12 ]
  %19 = phi i64 [ %26, %16 ], [ 0, %12 ]
  %20 = mul i64 %18, 31
  %21 = getelementptr inbounds nuw i8, ptr %0, i64 %17
  %22 = load i8, ptr %21, align 1, !tbaa !3
  %23 = zext i8 %22 to i64
  %24 = add i64 %20, %23
  %25 = add nuw i64 %17, 1
  %26 = add i64 %19, 1
  %27 = icmp eq i64 %26, %6
  br i1 %27, label %28, label %16, !llvm.loop !6

28:                                               ; preds = %10, %16, %3
  %29 = phi i64 [ 0, %3 ], [ %58, %10 ], [ %24, %16 ]
  %30 = load i64, ptr %2, align 8, !tbaa !8
  %31 = add i64 %30, %29
  store i64 %31, ptr %2, align 8, !tbaa !8
  ret void

32:                                               ; preds = %32, %8
  %33 = phi i64 [ 0, %8 ], [ %59, %32 ]
  %34 = phi i64 [ 0, %8 ], [ %58, %32 ]
  %35 = phi i64 [ 0, %8 ], [ %60, %32 ]
  %36 = mul i64 %34, 31
  %37 = getelementptr inbounds nuw i8, ptr %0, i64 %33
  %38 = load i8, ptr %37, align 1, !tbaa !3
  %39 = zext i8 %38 to i64
  %40 = add i64 %36, %39
  %41 = mul i64 %40, 31
  %42 = getelementptr inbounds nuw i8, ptr %0, i64 %33
  %43 = getelementptr inbounds nuw i8, ptr %42, i64 1
  %44 = load i8, ptr %43, align 1, !tbaa !3
  %45 = zext i8 %44 to i64
  %46 = add i64 %41, %45
  %47 = mul i64 %46, 31
  %48 = getelementptr inbounds nuw i8, ptr %0, i64 %33
  %49 = getelementptr inbounds nuw i8, ptr %48, i64 2
  %50 = load i8, ptr %49, align 1, !tbaa !3
  %51 = zext i8 %50 to i64
  %52 = add i64 %47, %51
  %53 = mul i64 %52, 31
  %54 = getelementptr inbounds nuw i8, ptr %0, i64 %33
  %55 = getelementptr inbounds nuw i8, ptr %54, i64 3
  %56 = load i8, ptr %55, align 1, !tbaa !3
  %57 = zext i8 %56 to i64
  %58 = add i64 %53, %57
  %59 = add nuw i64 %33, 4
  %60 = add i64 %35, 4
  %61 = icmp eq i64 %60, %9
  br i1 %61, label %10, label %32, !llvm.loop !10
}

; Function Attrs: nocallback nofree nosync nounwind willreturn memory(inaccessiblemem: write)
declare void @llvm.assume(i1 noundef) #1

attributes #0 = { nofree norecurse nosync nounwind memory(argmem: readwrite) "min-legal-vector-width"="0" "no-trapping-math"="true" }
attributes #1 = { nocallback nofree nosync nounwind willreturn memory(inaccessiblemem: write) }

!llvm.module.flags = !{!0, !1, !2}

!0 = !{i32 1, !"wchar_size", i32 4}
!1 = !{i32 8, !"PIC Level", i32 2}
!2 = !{i32 7, !"PIE Level", i32 2}
!3 = !{!4, !4, i64 0}
!4 = !{!"omnipotent char", !5, i64 0}
!5 = !{!"Simple C/C++ TBAA"}
!6 = distinct !{!6, !7}
!7 = !{!"llvm.loop.unroll.disable"}
!8 = !{!9, !9, i64 0}
!9 = !{!"long", !4, i64 0}
!10 = distinct !{!10, !11}
!11 = !{!"llvm.loop.mustprogress"}
