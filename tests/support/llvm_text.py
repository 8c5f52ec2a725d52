"""LLVM IR texts the target tests share."""

#: a loop forced to vectorise whose body cannot be (an opaque call): LLVM prints a
#: remark and a warning on stderr and leaves it scalar
FORCED_BUT_SCALAR = r'''
declare void @opaque(i64)
define void @f(i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%j, %loop]
  call void @opaque(i64 %i)
  %j = add i64 %i, 1
  %c = icmp slt i64 %j, %n
  br i1 %c, label %loop, label %exit, !llvm.loop !0
exit:
  ret void
}
!0 = distinct !{!0, !1}
!1 = !{!"llvm.loop.vectorize.enable", i1 true}
'''
