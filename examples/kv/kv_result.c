/* kv_result: an owner's answer, run on the requesting rank
 * (examples/kv/kv_msg.h): get answers are stored by request id (when the
 * requester keeps room for them), counted and summed; dumped entries are
 * appended for the word count's collection. Its payload_init, run by the
 * owner, gathers the answer's parts (kv_parts_t) into the payload. */
#include <tc/ifunc.h>

#include "kv_msg.h"

TC_IFUNC(kv_result)

static void take_answers(kv_client_t *c, const kv_result_hdr_t *h,
                         const unsigned char *body, uint64_t size) {
  if (h->n > size / 8 || size - h->n * 8 != (h->n + 7) / 8) {
    ++c->bad;
    return;
  }
  const unsigned char *found = body + h->n * 8;
  for (uint64_t i = 0; i < h->n; ++i) {
    uint64_t v = kv_load64(body + i * 8);
    int hit = (found[i / 8] >> (i % 8)) & 1;
    if (c->values && h->id < c->slots && i < c->slots - h->id) {
      c->values[h->id + i] = v;
      c->found[h->id + i] = (unsigned char)hit;
    }
    c->hits += (uint64_t)hit;
    if (hit)
      c->sum += v;
  }
  c->answers += h->n;
}

static void take_entries(kv_client_t *c, const kv_result_hdr_t *h,
                         const unsigned char *body, uint64_t size) {
  if (h->n != size) {
    ++c->bad;
    return;
  }
  if (c->entries_len + size > c->entries_cap) {
    uint64_t cap = c->entries_cap * 2;
    if (cap < c->entries_len + size)
      cap = c->entries_len + size;
    unsigned char *e = (unsigned char *)realloc(c->entries, cap);
    if (!e) {
      c->error = KV_ERR_NOMEM;
      return;
    }
    c->entries = e;
    c->entries_cap = cap;
  }
  memcpy(c->entries + c->entries_len, body, size);
  c->entries_len += size;
  c->dump_next = h->id;
  c->dump_done = h->done != 0;
  ++c->dump_answers;
}

void kv_result_main(void *payload, size_t payload_size, void *target_args) {
  kv_client_t *c = (kv_client_t *)target_args;
  kv_result_hdr_t h;
  if (payload_size < sizeof h) {
    ++c->bad;
    return;
  }
  memcpy(&h, payload, sizeof h);
  const unsigned char *body = (const unsigned char *)payload + sizeof h;
  uint64_t size = payload_size - sizeof h;
  if (h.kind == KV_RESULT_GET)
    take_answers(c, &h, body, size);
  else if (h.kind == KV_RESULT_ENTRIES)
    take_entries(c, &h, body, size);
  else
    ++c->bad;
}

size_t kv_result_payload_bound(void *source_args, size_t source_args_size) {
  if (source_args_size != sizeof(kv_parts_t))
    return 0;
  const kv_parts_t *p = (const kv_parts_t *)source_args;
  return p->len[0] + p->len[1] + p->len[2];
}

int kv_result_payload_init(void *source_args, size_t source_args_size,
                           void *payload, size_t *payload_size) {
  if (source_args_size != sizeof(kv_parts_t))
    return -1;
  const kv_parts_t *p = (const kv_parts_t *)source_args;
  unsigned char *out = (unsigned char *)payload;
  size_t n = 0;
  for (int i = 0; i < 3; ++i) {
    if (p->len[i])
      memcpy(out + n, p->part[i], p->len[i]);
    n += p->len[i];
  }
  *payload_size = n;
  return 0;
}
