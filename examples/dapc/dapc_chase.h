/* What a DAPC server keeps for the chaser, and the local part of one chase.
 * Shared by the chaser ifunc (dapc.c, shipped and JIT-compiled) and the
 * active-message baseline in tc-bench (the same walk linked into the
 * server), so both modes run the same loop and differ only in how the
 * chase travels. */
#ifndef TC_EXAMPLES_DAPC_CHASE_H
#define TC_EXAMPLES_DAPC_CHASE_H

#include <stdint.h>
#include <tc/tc.h>

/* The chaser's payload. */
typedef struct dapc_args {
  uint64_t addr;  /* the entry to read next (owned by the receiving server) */
  uint64_t depth; /* hops still to do, >= 1 on arrival */
  uint64_t id;    /* the client's chase number, echoed in the result */
} dapc_args_t;

/* A server's state: its shard and whom to send to (its target_args). */
typedef struct dapc_server {
  const uint64_t *shard; /* entries [lo, hi) of the table */
  uint64_t lo, hi, n;    /* n: entries in the whole table */
  uint32_t servers, self;
  tc_ep_h *peers;        /* by server number; peers[self] unused */
  tc_ep_h client;        /* where results go */
  tc_msg_h forward;      /* a chaser message reused for every forward */
  tc_msg_h result;       /* a dapc_result message reused for every result */
  uint64_t hops;         /* entries read here (checked by tc-bench) */
} dapc_server_t;

/* Follows the chase while the entries are local. Returns 1 when the chase
 * is done (a->addr is the end value), 0 when it must go on at server
 * dapc_owner(s->n, s->servers, a->addr). */
static inline int dapc_walk(dapc_server_t *s, dapc_args_t *a) {
  while (a->addr >= s->lo && a->addr < s->hi) {
    a->addr = s->shard[a->addr - s->lo];
    ++s->hops;
    if (--a->depth == 0)
      return 1;
  }
  return 0;
}

/* The client's state for results (target_args of dapc_result). */
typedef struct dapc_client {
  uint64_t done;  /* results received */
  uint64_t *ends; /* end value by chase id */
  uint64_t count; /* size of ends */
} dapc_client_t;

#endif /* TC_EXAMPLES_DAPC_CHASE_H */
