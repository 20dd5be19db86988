; TSI for this host: adds the payload's first byte to *(size_t *)target_args.
; Target and source entry points in one module; tc-ar packs it twice, once
; per role. The source args, if any, give the byte to add (default 1).
define void @tsi_main(ptr %payload, i64 %size, ptr %args) {
  %b = load i8, ptr %payload
  %w = zext i8 %b to i64
  %v = load i64, ptr %args
  %n = add i64 %v, %w
  store i64 %n, ptr %args
  ret void
}

define i64 @tsi_payload_bound(ptr %src, i64 %n) {
  ret i64 1
}

define i32 @tsi_payload_init(ptr %src, i64 %n, ptr %payload, ptr %size) {
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
