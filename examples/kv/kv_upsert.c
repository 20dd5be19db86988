/* kv_upsert: a batch of (key, delta) records for one owner, applied to the
 * owner's shard where it arrives (examples/kv/kv_msg.h). The sender's
 * payload_init copies the batch it is given as source_args. */
#include <tc/ifunc.h>

#include "kv_msg.h"

TC_IFUNC(kv_upsert)

void kv_upsert_main(void *payload, size_t payload_size, void *target_args) {
  kv_shard_t *s = (kv_shard_t *)target_args;
  const unsigned char *begin = (const unsigned char *)payload;
  const unsigned char *end = begin + payload_size, *p = begin, *key;
  uint64_t len, delta;
  int r;
  /* The whole batch first: a malformed one changes nothing. */
  while ((r = kv_next_record(&p, end, &key, &len, &delta)) > 0) {
  }
  if (r < 0) {
    ++s->bad;
    return;
  }
  for (p = begin; kv_next_record(&p, end, &key, &len, &delta) > 0;) {
    uint64_t h = kv_hash(key, len);
    if (kv_owner(h, s->ranks) != s->self) {
      ++s->misrouted;
      continue;
    }
    /* A table that cannot grow keeps its error; tc-kv reports it. */
    if (kv_table_add(&s->table, key, len, h, delta) == 0)
      ++s->upserts;
  }
}

size_t kv_upsert_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int kv_upsert_payload_init(void *source_args, size_t source_args_size,
                           void *payload, size_t *payload_size) {
  memcpy(payload, source_args, source_args_size);
  *payload_size = source_args_size;
  return 0;
}
