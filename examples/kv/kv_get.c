/* kv_get: a batch of keys for one owner, looked up where it arrives; the
 * owner answers the requesting rank with one kv_result message holding
 * every key's value and which were found (examples/kv/kv_msg.h), as the
 * DAPC chaser answers with dapc_result, through the answer function the
 * owner's process put in its shard. */
#include <tc/ifunc.h>

#include "kv_msg.h"

TC_IFUNC(kv_get)

/* Answers rank hdr->from with the n answers (kv_msg.h: kv_answer_fn). */
static void answer(kv_shard_t *s, const kv_get_hdr_t *hdr, uint64_t n,
                   const uint64_t *values, const unsigned char *found) {
  kv_result_hdr_t out = {KV_RESULT_GET, s->self, hdr->id, n, 0};
  kv_parts_t parts = {{&out, values, found},
                      {sizeof out, (size_t)n * 8, (size_t)(n + 7) / 8}};
  if (!s->answer || s->answer(s->answer_ctx, hdr->from, &parts))
    ++s->unanswered;
}

void kv_get_main(void *payload, size_t payload_size, void *target_args) {
  kv_shard_t *s = (kv_shard_t *)target_args;
  kv_get_hdr_t hdr;
  if (payload_size < sizeof hdr) {
    ++s->bad;
    return;
  }
  memcpy(&hdr, payload, sizeof hdr);
  const unsigned char *begin = (const unsigned char *)payload + sizeof hdr;
  const unsigned char *end = (const unsigned char *)payload + payload_size;
  const unsigned char *p = begin, *key;
  uint64_t len, n = 0;
  int r;
  while ((r = kv_next_record(&p, end, &key, &len, NULL)) > 0)
    ++n;
  if (r < 0 || (s->ranks && hdr.from >= s->ranks)) {
    ++s->bad;
    return;
  }
  /* One key (the latency path) needs no allocation. */
  uint64_t one;
  unsigned char one_found;
  uint64_t *values = n > 1 ? (uint64_t *)malloc(n * 8) : &one;
  unsigned char *found = n > 8 ? (unsigned char *)calloc((n + 7) / 8, 1)
                               : &one_found;
  if (!values || !found) {
    if (n > 1)
      free(values);
    if (n > 8)
      free(found);
    ++s->unanswered;
    return;
  }
  if (n <= 8)
    one_found = 0;
  uint64_t i = 0;
  for (p = begin; kv_next_record(&p, end, &key, &len, NULL) > 0; ++i) {
    const unsigned char *v = kv_table_find(&s->table, key, len,
                                           kv_hash(key, len));
    values[i] = v ? kv_value(v) : 0;
    if (v) {
      found[i / 8] |= (unsigned char)(1u << (i % 8));
      ++s->hits;
      s->hit_sum += values[i];
    }
  }
  s->gets += n;
  answer(s, &hdr, n, values, found);
  if (n > 1)
    free(values);
  if (n > 8)
    free(found);
}

size_t kv_get_payload_bound(void *source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int kv_get_payload_init(void *source_args, size_t source_args_size,
                        void *payload, size_t *payload_size) {
  if (source_args_size < sizeof(kv_get_hdr_t))
    return -1;
  memcpy(payload, source_args, source_args_size);
  *payload_size = source_args_size;
  return 0;
}
