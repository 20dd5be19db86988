; Source side of a test ifunc NAME (sed NAME): the payload is one byte, the
; first byte of the source args, or 1 without source args.
define i64 @NAME_payload_bound(ptr %src, i64 %n) {
  ret i64 1
}

define i32 @NAME_payload_init(ptr %src, i64 %n, ptr %payload, ptr %size) {
entry:
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %one, label %copy
one:
  store i8 1, ptr %payload
  br label %done
copy:
  %b = load i8, ptr %src
  store i8 %b, ptr %payload
  br label %done
done:
  store i64 1, ptr %size
  ret i32 0
}
