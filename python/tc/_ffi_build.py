"""Generates the C source of tc._tc_ffi, the cffi extension module over
libtc's C API (include/tc/tc.h), at build time:

    python3 _ffi_build.py OUT.c

CMake compiles OUT.c against tc.h and Python's headers and links it with
libtc (python/CMakeLists.txt). The declarations below are the part of
tc.h the package calls; in cffi's API mode the C compiler checks them
against the header (`...` lets it fill in layouts and enum values). The
small tcpy_* helpers keep the package's hot paths (a send, the wait for a
flush) to one call into C, with completions recorded in C rather than
through Python callbacks.
"""
import sys

import cffi

CDEF = r"""
typedef enum {
    TC_OK, TC_INPROGRESS, TC_ERR_INVALID_PARAM, TC_ERR_NO_MEMORY,
    TC_ERR_NOT_FOUND, TC_ERR_BAD_ARCHIVE, TC_ERR_IO, TC_ERR_UNREACHABLE,
    TC_ERR_CONNECTION_RESET, TC_ERR_PAYLOAD, TC_ERR_REMOTE, TC_ERR_TIMED_OUT,
    TC_ERR_UNSUPPORTED, ...
} tc_status_t;

typedef struct tc_context *tc_context_h;
typedef struct tc_worker  *tc_worker_h;
typedef struct tc_ep      *tc_ep_h;
typedef struct tc_ifunc   *tc_ifunc_h;
typedef struct tc_msg     *tc_msg_h;

#define TC_CONTEXT_PARAM_FIELD_IFUNC_PATH ...
#define TC_WORKER_PARAM_FIELD_TARGET_ARGS ...
#define TC_WORKER_PARAM_FIELD_ERROR_CB ...
#define TC_WORKER_PARAM_FIELD_BOOTSTRAP ...
typedef enum { TC_BOOTSTRAP_NONE, TC_BOOTSTRAP_PMIX, ... } tc_bootstrap_t;

typedef struct tc_context_params {
    uint64_t field_mask;
    const char *ifunc_path;
    ...;
} tc_context_params_t;

typedef void (*tc_remote_error_cb_t)(void *arg, tc_ep_h ep, uint32_t seq,
                                     tc_status_t status, const char *message);
typedef struct tc_worker_params {
    uint64_t field_mask;
    void *target_args;
    tc_remote_error_cb_t error_cb;
    void *error_arg;
    tc_bootstrap_t bootstrap;
    ...;
} tc_worker_params_t;

typedef struct tc_worker_stats {
    uint64_t received, executed, code_frames, cache_hits, compiles;
    double compile_ms;
    uint64_t code_requests, evictions, errors, errors_received;
    uint64_t frames_sent, bytes_sent, batches_sent, batched_frames;
    uint64_t sandbox_traps, mailbox_sent, mailbox_received;
    double prewarm_ms;
    uint64_t mailbox_direct, mailbox_registered_bytes, mailbox_areas;
    ...;
} tc_worker_stats_t;

typedef struct tc_archive_member {
    const char *triple, *cpu, *features, *kind, *role, *compression;
    size_t size, stored_size;
    const char *const *symbols;
    size_t symbol_count;
    uint8_t digest[32];
    ...;
} tc_archive_member_t;
typedef struct tc_archive_signature {
    const char *key_id;
    int verifies;
    ...;
} tc_archive_signature_t;
typedef struct tc_archive_info {
    const char *name;
    uint8_t hash[32];
    unsigned format_version;
    const tc_archive_member_t *members;
    size_t member_count;
    const char *const *deps;
    size_t dep_count;
    const tc_archive_signature_t *signatures;
    size_t signature_count;
    size_t omitted_count;
    ...;
} tc_archive_info_t;

const char *tc_status_string(tc_status_t status);
const char *tc_last_error(void);
int tc_set_error_logging(int enable);

tc_status_t tc_context_create(const tc_context_params_t *params,
                              tc_context_h *context_p);
void tc_context_destroy(tc_context_h context);
tc_status_t tc_worker_create(tc_context_h context,
                             const tc_worker_params_t *params,
                             tc_worker_h *worker_p);
void tc_worker_destroy(tc_worker_h worker);
int tc_worker_progress(tc_worker_h worker);
tc_status_t tc_worker_wait(tc_worker_h worker, int timeout_ms);
tc_status_t tc_worker_listen(tc_worker_h worker, const char *host,
                             uint16_t port, uint16_t *port_p);
tc_status_t tc_worker_get_address(tc_worker_h worker, void **address_p,
                                  size_t *length_p);
void tc_worker_release_address(tc_worker_h worker, void *address);
tc_status_t tc_worker_set_target_args(tc_worker_h worker, const char *name,
                                      void *target_args);
tc_status_t tc_worker_set_region(tc_worker_h worker, const void *base,
                                 size_t size);
tc_status_t tc_worker_query_stats(tc_worker_h worker,
                                  tc_worker_stats_t *stats_p);
tc_status_t tc_worker_query_rank(tc_worker_h worker, uint32_t *rank_p,
                                 uint32_t *size_p);
tc_status_t tc_ep_connect(tc_worker_h worker, const char *host,
                          uint16_t port, tc_ep_h *ep_p);
tc_status_t tc_ep_connect_address(tc_worker_h worker, const void *address,
                                  size_t length, tc_ep_h *ep_p);
tc_status_t tc_ep_connect_rank(tc_worker_h worker, uint32_t rank,
                               tc_ep_h *ep_p);
void tc_ep_destroy(tc_ep_h ep);
tc_status_t tc_ifunc_register_archive(tc_worker_h worker, const void *archive,
                                      size_t size, tc_ifunc_h *ifunc_p);
const uint8_t *tc_ifunc_hash(tc_ifunc_h ifunc);
void tc_ifunc_deregister(tc_ifunc_h ifunc);
tc_status_t tc_msg_create(tc_ifunc_h ifunc, const void *source_args,
                          size_t source_args_size, tc_msg_h *msg_p);
void *tc_msg_payload(tc_msg_h msg, size_t *size_p);
void tc_msg_free(tc_msg_h msg);
tc_status_t tc_archive_inspect(const void *archive, size_t size,
                               tc_archive_info_t **info_p);
void tc_archive_info_free(tc_archive_info_t *info);

/* The package's helpers (below). */
typedef struct tcpy_worker tcpy_worker_t;
typedef struct tcpy_op {
    int done;
    tc_status_t status;
    char *data;
    size_t size;
    ...;
} tcpy_op_t;
tcpy_worker_t *tcpy_worker_new(void);
void tcpy_worker_free(tcpy_worker_t *w);
void tcpy_worker_params(tcpy_worker_t *w, tc_worker_params_t *p);
int tcpy_take_error(tcpy_worker_t *w, tc_ep_h *ep_p, uint32_t *seq_p,
                    tc_status_t *status_p, char *message, size_t capacity);
tcpy_op_t *tcpy_op_new(void);
const char *tcpy_op_message(tcpy_op_t *op);
void tcpy_op_release(tcpy_op_t *op);
tc_status_t tcpy_flush(tc_ep_h ep, tcpy_op_t *op);
tc_status_t tcpy_read_region(tc_ep_h ep, size_t length, tcpy_op_t *op);
tc_status_t tcpy_barrier(tc_worker_h w, tcpy_op_t *op);
int tcpy_progress_until(tc_worker_h w, tcpy_op_t *op, int timeout_ms);
int tcpy_progress_some(tc_worker_h w, int timeout_ms);
tc_status_t tcpy_send(tcpy_worker_t *pw, tc_worker_h w, tc_ep_h ep,
                      tc_msg_h msg, uint64_t count);
tc_status_t tcpy_send_args(tcpy_worker_t *pw, tc_worker_h w, tc_ep_h ep,
                           tc_ifunc_h f, const void *args, size_t size,
                           uint64_t count);
"""

SOURCE = r"""
#include <tc/tc.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Remote errors (tc_remote_error_cb_t) a worker got, oldest first, until
 * the package takes them; at most TCPY_MAX_ERRORS are kept. */
#define TCPY_MAX_ERRORS 1024
typedef struct tcpy_error {
    struct tcpy_error *next;
    tc_ep_h ep;
    uint32_t seq;
    tc_status_t status;
    char message[];
} tcpy_error_t;

typedef struct tcpy_worker {
    tcpy_error_t *head, *tail;
    size_t count;
    unsigned sends; /* since the last progress of a send stream */
} tcpy_worker_t;

static void tcpy_on_error(void *arg, tc_ep_h ep, uint32_t seq,
                          tc_status_t status, const char *message) {
    tcpy_worker_t *w = (tcpy_worker_t *)arg;
    if (w->count >= TCPY_MAX_ERRORS)
        return;
    size_t n = strlen(message);
    tcpy_error_t *e = (tcpy_error_t *)malloc(sizeof *e + n + 1);
    if (!e)
        return;
    e->next = NULL;
    e->ep = ep;
    e->seq = seq;
    e->status = status;
    memcpy(e->message, message, n + 1);
    if (w->tail)
        w->tail->next = e;
    else
        w->head = e;
    w->tail = e;
    ++w->count;
}

static tcpy_worker_t *tcpy_worker_new(void) {
    return (tcpy_worker_t *)calloc(1, sizeof(tcpy_worker_t));
}

static void tcpy_worker_free(tcpy_worker_t *w) {
    while (w && w->head) {
        tcpy_error_t *e = w->head;
        w->head = e->next;
        free(e);
    }
    free(w);
}

static void tcpy_worker_params(tcpy_worker_t *w, tc_worker_params_t *p) {
    p->field_mask |= TC_WORKER_PARAM_FIELD_ERROR_CB;
    p->error_cb = tcpy_on_error;
    p->error_arg = w;
}

/* The oldest remote error: 1 and its fields (the message cut to fit), or 0
 * when there is none. */
static int tcpy_take_error(tcpy_worker_t *w, tc_ep_h *ep_p, uint32_t *seq_p,
                           tc_status_t *status_p, char *message,
                           size_t capacity) {
    tcpy_error_t *e = w->head;
    if (!e)
        return 0;
    w->head = e->next;
    if (!w->head)
        w->tail = NULL;
    --w->count;
    *ep_p = e->ep;
    *seq_p = e->seq;
    *status_p = e->status;
    strncpy(message, e->message, capacity - 1);
    message[capacity - 1] = '\0';
    free(e);
    return 1;
}

/* A flush, region read or barrier the package waits for. The completion
 * may come after the package gave up (a timeout): whichever of the two is
 * last frees it. */
typedef struct tcpy_op {
    int done;
    tc_status_t status;
    char *data; /* a region read's bytes */
    size_t size;
    int abandoned;
    char message[1024];
} tcpy_op_t;

static tcpy_op_t *tcpy_op_new(void) {
    return (tcpy_op_t *)calloc(1, sizeof(tcpy_op_t));
}

static const char *tcpy_op_message(tcpy_op_t *op) { return op->message; }

static void tcpy_op_free(tcpy_op_t *op) {
    free(op->data);
    free(op);
}

static void tcpy_op_release(tcpy_op_t *op) {
    if (!op)
        return;
    if (op->done)
        tcpy_op_free(op);
    else
        op->abandoned = 1;
}

static void tcpy_op_finish(tcpy_op_t *op, tc_status_t s) {
    op->done = 1;
    op->status = s;
    if (s != TC_OK) {
        strncpy(op->message, tc_last_error(), sizeof op->message - 1);
        op->message[sizeof op->message - 1] = '\0';
    }
}

static void tcpy_op_done(void *arg, tc_status_t s) {
    tcpy_op_t *op = (tcpy_op_t *)arg;
    if (op->abandoned) {
        tcpy_op_free(op);
        return;
    }
    tcpy_op_finish(op, s);
}

static void tcpy_op_read(void *arg, tc_status_t s, const void *data,
                         size_t size) {
    tcpy_op_t *op = (tcpy_op_t *)arg;
    if (op->abandoned) {
        tcpy_op_free(op);
        return;
    }
    if (s == TC_OK) {
        op->data = (char *)malloc(size ? size : 1);
        if (!op->data) {
            tcpy_op_finish(op, TC_ERR_NO_MEMORY);
            return;
        }
        memcpy(op->data, data, size);
        op->size = size;
    }
    tcpy_op_finish(op, s);
}

static tc_status_t tcpy_flush(tc_ep_h ep, tcpy_op_t *op) {
    return tc_ep_flush_nb(ep, tcpy_op_done, op);
}

static tc_status_t tcpy_read_region(tc_ep_h ep, size_t length,
                                    tcpy_op_t *op) {
    return tc_ep_read_region_nb(ep, length, tcpy_op_read, op);
}

static tc_status_t tcpy_barrier(tc_worker_h w, tcpy_op_t *op) {
    return tc_worker_barrier_nb(w, tcpy_op_done, op);
}

static double tcpy_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Progresses @w until @op completed (1) or @timeout_ms passed (0); an idle
 * worker sleeps in tc_worker_wait meanwhile. */
static int tcpy_progress_until(tc_worker_h w, tcpy_op_t *op,
                               int timeout_ms) {
    double end = tcpy_now_ms() + timeout_ms;
    while (!op->done) {
        if (tc_worker_progress(w))
            continue;
        double left = end - tcpy_now_ms();
        if (left <= 0)
            return 0;
        tc_worker_wait(w, left < 10 ? (int)left + 1 : 10);
    }
    return 1;
}

/* Progresses @w until something happened (1) or @timeout_ms passed (0). */
static int tcpy_progress_some(tc_worker_h w, int timeout_ms) {
    if (tc_worker_progress(w))
        return 1;
    if (timeout_ms > 0) {
        tc_worker_wait(w, timeout_ms);
        return tc_worker_progress(w) != 0;
    }
    return 0;
}

/* Sends @msg @count times without completions (libtc's fast path),
 * progressing the worker after every 64 sends of a stream, as tc-send
 * does, so that a long stream leaves as it is made. */
static tc_status_t tcpy_send(tcpy_worker_t *pw, tc_worker_h w, tc_ep_h ep,
                             tc_msg_h msg, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
        tc_status_t s = tc_msg_send(ep, msg, NULL, NULL);
        if (s != TC_INPROGRESS)
            return s;
        if ((++pw->sends & 63) == 0)
            tc_worker_progress(w);
    }
    return TC_INPROGRESS;
}

/* tcpy_send of a message made from @args (payload_bound/_init run once). */
static tc_status_t tcpy_send_args(tcpy_worker_t *pw, tc_worker_h w,
                                  tc_ep_h ep, tc_ifunc_h f, const void *args,
                                  size_t size, uint64_t count) {
    tc_msg_h m;
    tc_status_t s = tc_msg_create(f, size ? args : NULL, size, &m);
    if (s != TC_OK)
        return s;
    s = tcpy_send(pw, w, ep, m, count);
    tc_msg_free(m);
    return s;
}
"""


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: _ffi_build.py OUT.c")
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source("tc._tc_ffi", SOURCE)
    ffi.emit_c_code(sys.argv[1])


if __name__ == "__main__":
    main()
