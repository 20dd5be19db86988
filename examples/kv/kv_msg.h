/* What tc-kv's ifuncs send and keep: the payloads of kv_upsert, kv_get,
 * kv_dump and kv_result, a rank's shard (the target_args of the first
 * three) and the requester's state (kv_result's target_args). Shared by the
 * ifuncs (examples/kv/kv_*.c) and tc-kv.c.
 *
 *   kv_upsert  records [LEB128 n][n key bytes][LEB128 delta] (kv_table.h):
 *              each delta is added to its key's value, a new key inserted.
 *   kv_get     kv_get_hdr_t, then records [LEB128 n][n key bytes]: the
 *              owner answers with one kv_result message (KV_RESULT_GET) to
 *              rank `from`: the value of every key in order and a bitmap
 *              of which were found.
 *   kv_dump    kv_dump_req_t: the owner answers with one kv_result message
 *              (KV_RESULT_ENTRIES) carrying its entries from arena offset
 *              `offset` on, whole entries of at most `max_bytes` in all (one
 *              at least), as they lie in its arena, and where to go on.
 *   kv_result  kv_result_hdr_t, then the answers or the entries.
 *
 * Every ifunc checks its payload against its size before it touches the
 * table; a malformed message changes nothing and is counted (`bad`).
 */
#ifndef TC_EXAMPLES_KV_MSG_H
#define TC_EXAMPLES_KV_MSG_H

#include "kv_table.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kv_get_hdr {
  uint32_t from;  /* the requesting rank: where the answers go */
  uint32_t pad;
  uint64_t id;    /* the first key's request id, echoed in the answer */
} kv_get_hdr_t;

typedef struct kv_dump_req {
  uint32_t from;      /* the requesting rank */
  uint32_t max_bytes; /* entries' bytes per answer */
  uint64_t offset;    /* where to start: 0, or a `next` answered before */
} kv_dump_req_t;

enum { KV_RESULT_GET = 1, KV_RESULT_ENTRIES = 2 };

typedef struct kv_result_hdr {
  uint32_t kind; /* KV_RESULT_GET or KV_RESULT_ENTRIES */
  uint32_t from; /* the answering rank */
  uint64_t id;   /* GET: kv_get_hdr_t::id; ENTRIES: the next offset */
  uint64_t n;    /* GET: keys answered; ENTRIES: bytes of entries */
  uint64_t done; /* ENTRIES: 1 when these are the shard's last */
} kv_result_hdr_t;

/* kv_result's source args: the answer in up to three parts, gathered into
 * the payload by kv_result_payload_init (in the answering process). */
typedef struct kv_parts {
  const void *part[3];
  size_t len[3];
} kv_parts_t;

/* How an owner answers: sends rank `to` a kv_result message made of
 * `parts`; returns 0 once it is sent. The owner's process provides it (in
 * tc-kv: tc_msg_create and tc_msg_send on its endpoint to that rank), so
 * the ifuncs themselves call nothing but libc and run on any target. */
typedef int (*kv_answer_fn)(void *ctx, uint32_t to, const kv_parts_t *parts);

/* A rank's shard: target_args of kv_upsert, kv_get and kv_dump. */
typedef struct kv_shard {
  kv_table_t table;
  uint32_t self, ranks;
  kv_answer_fn answer; /* NULL: nobody to answer */
  void *answer_ctx;
  uint64_t upserts;    /* records applied */
  uint64_t gets;       /* keys looked up */
  uint64_t bad;        /* malformed messages dropped */
  uint64_t misrouted;  /* records for a key this rank does not own */
  uint64_t unanswered; /* answers that could not be sent */
  uint64_t hits;       /* keys looked up and found */
  uint64_t hit_sum;    /* their values, summed (mod 2^64) */
} kv_shard_t;

/* A zeroed shard (ranks 0, no answer function) is a lone table that owns
 * every key: a plain target's memory, such as tc-serve's region, is one.
 * Its gets are looked up and counted, but answer nobody (`unanswered`). */

/* The requester: kv_result's target_args. */
typedef struct kv_client {
  /* GET answers: value and found flag by request id, when id < slots
   * (values may be NULL: then only counted and summed). */
  uint64_t *values;
  unsigned char *found;
  uint64_t slots;
  uint64_t answers;    /* keys answered */
  uint64_t hits;       /* of which found */
  uint64_t sum;        /* the found values, summed (mod 2^64) */
  /* ENTRIES: appended here, as they lie in the owners' arenas. */
  unsigned char *entries;
  uint64_t entries_len, entries_cap;
  uint64_t dump_next;    /* the offset to ask for next */
  uint32_t dump_done;    /* the last answer said done */
  uint32_t dump_answers; /* ENTRIES answers received */
  uint64_t bad;          /* malformed answers dropped */
  uint32_t error;        /* KV_ERR_NOMEM: entries could not be kept */
} kv_client_t;


#endif /* TC_EXAMPLES_KV_MSG_H */
