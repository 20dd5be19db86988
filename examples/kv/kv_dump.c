/* kv_dump: the owner sends the requesting rank a run of its entries, as
 * they lie in its arena, in one kv_result message (examples/kv/kv_msg.h,
 * through the shard's answer function);
 * the requester asks again from the offset the answer names until an
 * answer says done. tc-kv's word count collects every shard this way. */
#include <tc/ifunc.h>

#include "kv_msg.h"

TC_IFUNC(kv_dump)

void kv_dump_main(void *payload, size_t payload_size, void *target_args) {
  kv_shard_t *s = (kv_shard_t *)target_args;
  const kv_table_t *t = &s->table;
  kv_dump_req_t req;
  if (payload_size != sizeof req) {
    ++s->bad;
    return;
  }
  memcpy(&req, payload, sizeof req);
  if (req.from >= s->ranks || req.offset > t->used) {
    ++s->bad;
    return;
  }
  /* Whole entries from req.offset, at most max_bytes (one at least). */
  uint64_t next = req.offset;
  while (next < t->used) {
    uint64_t len;
    unsigned h = kv_get_varint(t->arena + next, t->arena + t->used, &len);
    if (!h || len > t->used - next - h || t->used - next - h - len < 8) {
      ++s->bad; /* not an entry boundary */
      return;
    }
    uint64_t size = h + len + 8;
    if (next > req.offset && next + size - req.offset > req.max_bytes)
      break;
    next += size;
  }
  kv_result_hdr_t out = {KV_RESULT_ENTRIES, s->self, next, next - req.offset,
                         next == t->used};
  kv_parts_t parts = {{&out, t->arena + req.offset, NULL},
                      {sizeof out, (size_t)(next - req.offset), 0}};
  if (!s->answer || s->answer(s->answer_ctx, req.from, &parts))
    ++s->unanswered;
}

size_t kv_dump_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  (void)source_args_size;
  return sizeof(kv_dump_req_t);
}

int kv_dump_payload_init(void *source_args, size_t source_args_size,
                         void *payload, size_t *payload_size) {
  if (source_args_size != sizeof(kv_dump_req_t))
    return -1;
  memcpy(payload, source_args, sizeof(kv_dump_req_t));
  *payload_size = sizeof(kv_dump_req_t);
  return 0;
}
