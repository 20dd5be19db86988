/**
 * @file tc.h
 * @brief libtc: ship injected functions (ifuncs) to where the data is.
 *
 * A source process registers an ifunc from its fat archive (built by tc-cc),
 * creates messages (the ifunc's payload_init fills the payload) and sends
 * them to endpoints. A target process runs a worker: each arriving message
 * runs NAME_main(payload, payload_size, target_args) there, after the code
 * was JIT-compiled for the target's CPU on first contact. The archive
 * travels once per (endpoint, code identity); later messages carry a header
 * of a few bytes (3 for a cached TSI message) and the payload.
 *
 * Conventions follow UCX: opaque handles end in _h; parameter structs have a
 * field_mask naming the fields that are set (others are never read); outputs
 * come last with a _p suffix and are written only on TC_OK; every create has
 * a destroy.
 *
 * Threads: a worker and everything created from it (endpoints, ifuncs,
 * messages) belong to the thread that calls tc_worker_progress() /
 * tc_worker_wait() on it; call them only from that thread, or from ifunc
 * code running on it (an ifunc may create and send messages, which is how
 * a pointer chase forwards itself). ifunc code may call tc_worker_progress()
 * and tc_worker_wait() on its own worker; where its message came as an
 * active message (inside UCX's progress, which cannot be re-entered) they
 * do all but progress UCX, and the wait returns at once: an answer carried
 * by an active message arrives only after the ifunc returns, so forward a
 * continuation rather than wait for one. Different workers may be used from
 * different threads concurrently. Contexts may be shared; create and destroy
 * them from one thread. A worker that receives new code compiles it on a
 * helper thread of its own (tc_worker_params_t::compile_thread); callbacks
 * and ifunc code still run only on the worker's thread.
 */
#ifndef TC_TC_H
#define TC_TC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TC_BIT(i) (1ull << (i))

/** Status codes. Negative values are errors; never renumbered. */
typedef enum {
    TC_OK                   = 0,
    TC_INPROGRESS           = 1,   /**< Started; a callback reports the end. */
    TC_ERR_INVALID_PARAM    = -1,
    TC_ERR_NO_MEMORY        = -2,
    TC_ERR_NOT_FOUND        = -3,  /**< No such ifunc in the search path. */
    TC_ERR_BAD_ARCHIVE      = -4,  /**< Archive malformed or not runnable here. */
    TC_ERR_IO               = -5,  /**< Transport failure. */
    TC_ERR_UNREACHABLE      = -6,  /**< Could not connect or listen. */
    TC_ERR_CONNECTION_RESET = -7,  /**< The peer went away. */
    TC_ERR_PAYLOAD          = -8,  /**< payload_bound/payload_init failed. */
    TC_ERR_REMOTE           = -9,  /**< The target rejected a message. */
    TC_ERR_TIMED_OUT        = -10,
    TC_ERR_UNSUPPORTED      = -11, /**< Not built into this libtc (PMIx). */
    TC_ERR_LAST             = -12,
    /* Never returned: they make every int a valid tc_status_t, so a value
       a C caller passes is well defined in libtc's C++ too. */
    TC_STATUS_RANGE_MIN_    = -0x7fffffff - 1,
    TC_STATUS_RANGE_MAX_    = 0x7fffffff
} tc_status_t;

typedef struct tc_context *tc_context_h; /**< Configuration and JIT state. */
typedef struct tc_worker  *tc_worker_h;  /**< A progress engine + transport. */
typedef struct tc_ep      *tc_ep_h;      /**< A connection to a peer worker. */
typedef struct tc_ifunc   *tc_ifunc_h;   /**< A registered ifunc. */
typedef struct tc_msg     *tc_msg_h;     /**< A message of one ifunc. */

/** How targets run code. */
typedef enum {
    TC_EXEC_AUTO    = 0, /**< JIT bitcode; link an object if no bitcode. */
    TC_EXEC_BITCODE = 1, /**< JIT-compile a bitcode member, tuned to the CPU. */
    TC_EXEC_OBJECT  = 2, /**< Link a native object member, no code generation. */
    /** JIT a bitcode member instrumented so that it touches only its
     *  payload, declared regions, own locals and globals, calls only
     *  allowed functions and stops when its fuel runs out; a trap ends that
     *  message only (the sender gets TC_ERR_REMOTE, "sandbox trap").
     *  Object members are refused. See docs/ifunc-abi.md. */
    TC_EXEC_SANDBOX = 3,
    TC_EXEC_RANGE_MAX_ = 0x7fffffff /**< Never valid: widens the enum to int. */
} tc_exec_mode_t;

/** When a sender attaches the archive to a message. */
typedef enum {
    TC_SHIP_CODE_ONCE   = 0, /**< First message per (endpoint, identity). */
    /** Every message (targets find the identity loaded by its hash): the
     *  "uncached" mode of the benchmarks, not for production. */
    TC_SHIP_CODE_ALWAYS = 1,
    TC_SHIP_CODE_RANGE_MAX_ = 0x7fffffff /**< Never valid. */
} tc_ship_code_t;

enum tc_context_params_field {
    TC_CONTEXT_PARAM_FIELD_IFUNC_PATH = TC_BIT(0),
    TC_CONTEXT_PARAM_FIELD_EXEC_MODE  = TC_BIT(1),
    TC_CONTEXT_PARAM_FIELD_MAX_LOADED = TC_BIT(2),
    TC_CONTEXT_PARAM_FIELD_DEP_DIRS   = TC_BIT(3),
    TC_CONTEXT_PARAM_FIELD_ALLOW      = TC_BIT(4),
    TC_CONTEXT_PARAM_FIELD_CACHE_DIR  = TC_BIT(5),
    TC_CONTEXT_PARAM_FIELD_SHIP_CODE  = TC_BIT(6),
    TC_CONTEXT_PARAM_FIELD_TRUST      = TC_BIT(7),
    TC_CONTEXT_PARAM_FIELD_SANDBOX    = TC_BIT(8),
    TC_CONTEXT_PARAM_FIELD_PREWARM    = TC_BIT(9)
};

enum tc_sandbox_params_field {
    TC_SANDBOX_PARAM_FIELD_FUEL        = TC_BIT(0),
    TC_SANDBOX_PARAM_FIELD_ALLOW_CALLS = TC_BIT(1),
    TC_SANDBOX_PARAM_FIELD_REGIONS     = TC_BIT(2),
    TC_SANDBOX_PARAM_FIELD_STACK_SIZE  = TC_BIT(3)
};

/** Memory sandboxed code may read and write. */
typedef struct tc_sandbox_region {
    void  *base;
    size_t size;
} tc_sandbox_region_t;

/** The policy of TC_EXEC_SANDBOX (copied by tc_context_create). */
typedef struct tc_sandbox_params {
    uint64_t field_mask;
    /** Fuel per message: one unit per function call and loop iteration;
     *  default 100000000. */
    uint64_t fuel;
    /** Functions allowed besides the default list (libm, memcpy & co with
     *  checked ranges, tc_msg_create/_payload/_send); their pointer
     *  arguments are not checked. */
    const char *const *allow_calls;
    size_t             allow_count;
    /** The memory sandboxed code may touch besides its payload, locals and
     *  globals: target_args has no size, so declare it here. The regions
     *  must outlive the context. */
    const tc_sandbox_region_t *regions;
    size_t                     region_count;
    /** Machine stack a message may use; default 1 MiB. */
    size_t   stack_size;
} tc_sandbox_params_t;

typedef struct tc_context_params {
    uint64_t       field_mask;  /**< Which fields below are set. */
    /** ':'-separated directories searched for NAME.tcfb; default: the
     *  TC_IFUNC_PATH environment variable, else ".". */
    const char    *ifunc_path;
    tc_exec_mode_t exec_mode;   /**< Default TC_EXEC_AUTO. */
    size_t         max_loaded;  /**< Most code identities loaded; 0: no limit. */
    /** ':'-separated directories a target may load deps from; default: any. */
    const char    *dep_dirs;
    /** Allowed archive hashes (32 bytes each); only these run on targets. */
    const uint8_t (*allow_hashes)[32];
    size_t         allow_count;
    /** Persistent cache of compiled objects; may be shared by processes. */
    const char    *cache_dir;
    tc_ship_code_t ship_code;   /**< Default TC_SHIP_CODE_ONCE. */
    /** Trusted Ed25519 public keys (32 bytes each, as in a `tc-ar keygen`
     *  KEY.pub file); only archives signed by one of them run on targets
     *  (with allow_hashes too, both must admit an archive). */
    const uint8_t (*trusted_keys)[32];
    size_t         trusted_key_count;
    /** The sandbox's policy (TC_EXEC_SANDBOX); default: only the default
     *  calls, no memory beyond payload, locals and globals. */
    const tc_sandbox_params_t *sandbox;
    /** Non-zero: tc_worker_create() takes the path of a first contact once,
     *  with a built-in ifunc it then unloads (no code, counter or cache file
     *  stays), so the worker's first compile costs what a later one does
     *  instead of several times that; the worker's creation takes that much
     *  longer (tc_worker_stats_t::prewarm_ms). Default 0. */
    int            prewarm;
} tc_context_params_t;

enum tc_worker_params_field {
    TC_WORKER_PARAM_FIELD_TARGET_ARGS = TC_BIT(0),
    TC_WORKER_PARAM_FIELD_ERROR_CB    = TC_BIT(1),
    TC_WORKER_PARAM_FIELD_ACCEPT_CB   = TC_BIT(2),
    TC_WORKER_PARAM_FIELD_COALESCE    = TC_BIT(3),
    TC_WORKER_PARAM_FIELD_BOOTSTRAP   = TC_BIT(4),
    TC_WORKER_PARAM_FIELD_MAILBOX     = TC_BIT(5),
    TC_WORKER_PARAM_FIELD_COMPILE_THREAD = TC_BIT(6)
};

/* --- PMIx bootstrap (issue #20) */
/** How a worker learns its peers. */
typedef enum {
    TC_BOOTSTRAP_NONE = 0, /**< By hand: tc_ep_connect(), addresses. */
    /** Through the PMIx server of the launcher that started the process
     *  (mpirun, srun --mpi=pmix): tc_worker_create() publishes the worker
     *  address under the process's rank and waits in a fence for every
     *  rank of the job to do the same; then tc_ep_connect_rank() reaches
     *  any rank. Every rank must create its bootstrap worker (the fence is
     *  collective), one per process. TC_ERR_UNSUPPORTED when libtc was
     *  built without PMIx, TC_ERR_UNREACHABLE when the process was not
     *  started by a PMIx launcher. */
    TC_BOOTSTRAP_PMIX = 1,
    TC_BOOTSTRAP_RANGE_MAX_ = 0x7fffffff /**< Never valid. */
} tc_bootstrap_t;
/* --- end PMIx bootstrap */

/** Called on the source when a target rejected one of its messages. */
typedef void (*tc_remote_error_cb_t)(void *arg, tc_ep_h ep, uint32_t seq,
                                     tc_status_t status, const char *message);

/** Called on a listening worker for each connection it accepts. @p ep is
 *  the application's (send on it to answer the peer; tc_ep_destroy() it
 *  when done). Without this callback accepted connections get no handle. */
typedef void (*tc_accept_cb_t)(void *arg, tc_ep_h ep);

typedef struct tc_worker_params {
    uint64_t             field_mask;
    void                *target_args; /**< Default target_args for NAME_main. */
    tc_remote_error_cb_t error_cb;    /**< Errors targets send back. */
    void                *error_arg;
    tc_accept_cb_t       accept_cb;   /**< Accepted connections. */
    void                *accept_arg;
    /** Non-zero (the default): on each endpoint, the first small message
     *  between two progress calls leaves at once and the ones after it
     *  (and all while UCX still holds an earlier send) leave together, as
     *  one UCX active message, from the next progress call (or as soon as
     *  4 KiB have gathered). Zero: every message is its own active message,
     *  as with UCX alone. Either way messages arrive in order and each
     *  completion reports its own message. */
    int                  coalesce;
    tc_bootstrap_t       bootstrap;   /**< Default TC_BOOTSTRAP_NONE. */
    /** Non-zero (the default): reactive mailboxes. The worker offers each
     *  peer a ring of slots in registered memory; a peer whose process UCX
     *  can map it into (shared memory) writes messages sent without a
     *  callback into it, straight into its memory (up to 8,176 bytes of
     *  header and payload in the ring's slots, larger ones up to 65,535
     *  bytes in the area of 256 KiB behind it), which this worker polls
     *  instead of receiving active messages, and this worker does the same with
     *  the rings its peers offer; a full ring makes them wait for the
     *  receiver. Elsewhere (TCP, RDMA, larger messages or ones sent with a
     *  callback) messages go as active messages; the order of messages on
     *  an endpoint is kept across both paths. An idle worker in
     *  tc_worker_wait() watches its rings for a bounded spin, then sleeps;
     *  senders then wake it. Zero: active messages only. See
     *  docs/transport.md, "Mailboxes". */
    int                  mailbox;
    /** Non-zero (the default): code that arrives for an identity this
     *  worker has not loaded is verified and compiled on a helper thread
     *  of the worker; the endpoint's later messages wait for it, in order,
     *  while other endpoints' messages run. Zero: it compiles inside
     *  tc_worker_progress(), and every endpoint waits (for comparisons). */
    int                  compile_thread;
} tc_worker_params_t;

/** A function linked into the target, run by tc_ep_send_local(). */
typedef void (*tc_local_fn_t)(void *payload, size_t payload_size,
                              void *target_args);

/** Completion of a send or flush: TC_OK; TC_ERR_CONNECTION_RESET when the
 *  connection failed or was closed first (logged once for the connection,
 *  not once per callback); TC_ERR_REMOTE etc. from the target. A send
 *  completes when its message has left this process, not when it ran: only
 *  a completed flush (or region read) says the messages before it ran
 *  (docs/c-api.md, "When a target dies"). */
typedef void (*tc_send_cb_t)(void *arg, tc_status_t status);

/** Target-side counters. */
typedef struct tc_worker_stats {
    uint64_t received;       /**< Messages that arrived. */
    uint64_t executed;       /**< NAME_main calls. */
    uint64_t code_frames;    /**< Arrivals that carried an archive. */
    uint64_t cache_hits;     /**< Messages whose code was already loaded. */
    uint64_t compiles;       /**< JIT compiles or object links. */
    double   compile_ms;     /**< Their total time. */
    uint64_t code_requests;  /**< Times this target asked a sender for code. */
    uint64_t evictions;
    uint64_t errors;         /**< Messages dropped (all kinds). */
    uint64_t errors_received;/**< Rejections this worker got as a sender. */
    uint64_t frames_sent;    /**< Frames of any kind this worker sent. */
    uint64_t bytes_sent;     /**< Their bytes: headers + bodies. */
    uint64_t batches_sent;   /**< UCX active messages carrying several frames
                                  (see tc_worker_params_t::coalesce) */
    uint64_t batched_frames; /**< and the frames they carried. */
    uint64_t sandbox_traps;  /**< Sandboxed messages ended by a trap. */
    uint64_t mailbox_sent;     /**< Messages written into peers' mailboxes. */
    uint64_t mailbox_received; /**< Messages taken from this worker's. */
    double   prewarm_ms;     /**< Time tc_worker_create() spent prewarming
                                  (TC_CONTEXT_PARAM_FIELD_PREWARM); 0: none. */
    uint64_t mailbox_direct; /**< Of mailbox_sent, those the send fast path
                                  wrote itself (the transport's lane). */
    uint64_t mailbox_registered_bytes; /**< Memory registered now for
                                  mailboxes: rings offered, flags, areas. */
    uint64_t mailbox_areas;  /**< Large-frame areas registered now (one per
                                  peer that sent a message needing one). */
} tc_worker_stats_t;

const char *tc_status_string(tc_status_t status);

/* --- Error text (issue #42) */
/** @brief The message of the last error libtc reported on this thread (the
 *  line it logs, without `tc: error: `), or "" before the first. A call
 *  that returned an error status, or a completion callback called with
 *  one, may read it at once; it stays valid until the next error on this
 *  thread. For bindings that turn errors into exceptions. */
const char *tc_last_error(void);
/** @brief Non-zero (the default): errors are logged to stderr as
 *  `tc: error: ...`; zero: they are only kept for tc_last_error().
 *  Process-wide; returns the previous setting. */
int         tc_set_error_logging(int enable);
/* --- end error text */

/** @brief Create a context. */
tc_status_t tc_context_create(const tc_context_params_t *params,
                              tc_context_h *context_p);
void        tc_context_destroy(tc_context_h context);

/** @brief Create a worker with its own UCX worker and JIT. */
tc_status_t tc_worker_create(tc_context_h context,
                             const tc_worker_params_t *params,
                             tc_worker_h *worker_p);
/** Not from ifunc code or a callback that runs on @p worker (inside its
 *  tc_worker_progress()): that call would return into a freed worker.
 *  Calls nothing back: the callbacks of sends, flushes and barriers still
 *  pending are dropped unrun (what their arg points to may be gone). Its
 *  connections are flushed and closed within 2 s, by force where a peer
 *  does not answer. Endpoints of the worker stay valid handles for
 *  tc_ep_destroy() only. */
void        tc_worker_destroy(tc_worker_h worker);

/** @brief Busy-poll: make progress; returns non-zero if anything happened. */
int         tc_worker_progress(tc_worker_h worker);
/** @brief Block until there may be work or @p timeout_ms passes (-1: none);
 *  an idle worker costs no CPU. Call tc_worker_progress() afterwards. */
tc_status_t tc_worker_wait(tc_worker_h worker, int timeout_ms);

/** @brief Accept connections on @p host : @p port (0: any free port).
 *  Whoever connects runs code in this process under the context's policy
 *  (allow_hashes, trusted_keys, exec_mode): libtc applies no protected mode,
 *  so a worker listening beyond loopback should set one (docs/c-api.md). */
tc_status_t tc_worker_listen(tc_worker_h worker, const char *host,
                             uint16_t port, uint16_t *port_p);
/** @brief This worker's address, for bootstrap by your own launcher. */
tc_status_t tc_worker_get_address(tc_worker_h worker, void **address_p,
                                  size_t *length_p);
void        tc_worker_release_address(tc_worker_h worker, void *address);

/** @brief target_args for NAME_main of ifunc @p name (NULL: every ifunc). */
tc_status_t tc_worker_set_target_args(tc_worker_h worker, const char *name,
                                      void *target_args);
/** @brief Expose [@p base, @p base + @p size) to senders' region reads
 *  (tc_ep_read_region_nb(), `tc-send --read-back`), as tc-serve exposes
 *  its target memory; NULL and 0: none (the default: reads are refused
 *  with TC_ERR_REMOTE). The memory must stay valid until the worker is
 *  destroyed or this is called again. */
tc_status_t tc_worker_set_region(tc_worker_h worker, const void *base,
                                 size_t size);
tc_status_t tc_worker_query_stats(tc_worker_h worker,
                                  tc_worker_stats_t *stats_p);
/** @brief Unload every ifunc this worker loaded as a target (frees its JIT
 *  memory; counted as evictions). Senders are asked for the code again the
 *  next time they use it. Not from inside NAME_main or a local function
 *  (TC_ERR_INVALID_PARAM there): the running code would be freed. */
tc_status_t tc_worker_evict_code(tc_worker_h worker);
/** @brief Lets sandboxed code on @p worker read and write
 *  [@p base, @p base + @p size) from now on (memory that exists only after
 *  the context was created). May be called from a local function
 *  (tc_worker_register_local), never from sandboxed code. */
tc_status_t tc_worker_add_sandbox_region(tc_worker_h worker, void *base,
                                         size_t size);

/** @brief Inside NAME_main or a local function: the endpoint the running
 *  message came on, to answer its sender; NULL elsewhere, or when the
 *  application holds no handle for that connection (accepted connections
 *  get handles through accept_cb). */
tc_ep_h     tc_worker_source_ep(tc_worker_h worker);

/** @brief Register @p fn (linked into this process) under @p name for
 *  tc_ep_send_local(): the active-message baseline, where no code travels.
 *  It gets the target_args an ifunc called @p name would. */
tc_status_t tc_worker_register_local(tc_worker_h worker, const char *name,
                                     tc_local_fn_t fn);

/** @brief Connect to a listening worker. */
tc_status_t tc_ep_connect(tc_worker_h worker, const char *host, uint16_t port,
                          tc_ep_h *ep_p);
/** @brief Connect by an address from tc_worker_get_address(). */
tc_status_t tc_ep_connect_address(tc_worker_h worker, const void *address,
                                  size_t length, tc_ep_h *ep_p);
/** @brief Non-blocking flush: @p cb runs once the target has processed
 *  (run or rejected) every message sent on @p ep before this call. */
tc_status_t tc_ep_flush_nb(tc_ep_h ep, tc_send_cb_t cb, void *arg);
/** Completion of tc_ep_read_region_nb(): @p data holds @p size bytes on
 *  TC_OK (valid during the call only), NULL on an error. */
typedef void (*tc_read_cb_t)(void *arg, tc_status_t status, const void *data,
                             size_t size);
/** @brief Read up to @p length bytes of the memory the target exposes (its
 *  region: tc-serve's --region-size bytes, the target_args its ifuncs
 *  get). The read is ordered after every message sent on @p ep before it,
 *  so its answer also says the target processed them (as a flush does).
 *  Returns TC_INPROGRESS; @p cb runs from tc_worker_progress() with the
 *  bytes, or with TC_ERR_REMOTE (the target exposes no region),
 *  TC_ERR_CONNECTION_RESET (the connection went) or TC_ERR_IO. */
tc_status_t tc_ep_read_region_nb(tc_ep_h ep, size_t length, tc_read_cb_t cb,
                                 void *arg);
/* --- PMIx bootstrap (issue #20) */
/** @brief This process's rank and the job's size (a TC_BOOTSTRAP_PMIX
 *  worker; TC_ERR_INVALID_PARAM for others). Either output may be NULL. */
tc_status_t tc_worker_query_rank(tc_worker_h worker, uint32_t *rank_p,
                                 uint32_t *size_p);
/** @brief Connect to the worker of rank @p rank (a TC_BOOTSTRAP_PMIX
 *  worker): by the address it published, no listener needed. Like
 *  tc_ep_connect(), messages may be sent at once; a rank that dies is
 *  reported as any peer death (sends fail with TC_ERR_CONNECTION_RESET). */
tc_status_t tc_ep_connect_rank(tc_worker_h worker, uint32_t rank,
                               tc_ep_h *ep_p);
/** @brief Enter a job-wide barrier: @p cb runs from tc_worker_progress()
 *  once every rank has called this (TC_OK), or with TC_ERR_IO when the
 *  barrier failed (a rank died). The usual end of a job: servers wait in
 *  their progress loop for it, the driving rank calls it when done. */
tc_status_t tc_worker_barrier_nb(tc_worker_h worker, tc_send_cb_t cb,
                                 void *arg);
/* --- end PMIx bootstrap */

/** @brief Flush, progressing the worker until done or @p timeout_ms
 *  (TC_ERR_TIMED_OUT, logged with the peer and the messages not
 *  acknowledged; that flush still ends later, harmlessly), or until the
 *  connection fails (TC_ERR_CONNECTION_RESET). From ifunc
 *  code that came as an active message, where the answer cannot be taken,
 *  TC_ERR_INVALID_PARAM at once: use tc_ep_flush_nb() there. */
tc_status_t tc_ep_flush(tc_ep_h ep, int timeout_ms);
void        tc_ep_destroy(tc_ep_h ep);

/** @brief Register NAME from NAME.tcfb in the context's ifunc path. */
tc_status_t tc_ifunc_register(tc_worker_h worker, const char *name,
                              tc_ifunc_h *ifunc_p);
/** @brief Register from an archive in memory (copied). */
tc_status_t tc_ifunc_register_archive(tc_worker_h worker, const void *archive,
                                      size_t size, tc_ifunc_h *ifunc_p);
/** @brief The archive hash (32 bytes): the code's identity. */
const uint8_t *tc_ifunc_hash(tc_ifunc_h ifunc);
void        tc_ifunc_deregister(tc_ifunc_h ifunc);

/** @brief Create a message: runs NAME_payload_bound and NAME_payload_init
 *  on @p source_args. */
tc_status_t tc_msg_create(tc_ifunc_h ifunc, const void *source_args,
                          size_t source_args_size, tc_msg_h *msg_p);
/** @brief The message's payload, writable. A send may share a large
 *  payload until it has left: this call then gives the message a copy of
 *  its own first, so write only through the pointer it returned after the
 *  last tc_msg_send() of the message. */
void       *tc_msg_payload(tc_msg_h msg, size_t *size_p);
/** @brief Send @p msg on @p ep. Returns TC_INPROGRESS and later calls @p cb
 *  (may be NULL) from tc_worker_progress(); the message may be changed
 *  (through tc_msg_payload()), sent again or freed right after this call
 *  returns. With a NULL @p cb nothing is kept per send; a send that fails
 *  then surfaces as the endpoint's disconnect (later sends return
 *  TC_ERR_CONNECTION_RESET). */
tc_status_t tc_msg_send(tc_ep_h ep, tc_msg_h msg, tc_send_cb_t cb, void *arg);
void        tc_msg_free(tc_msg_h msg);

/** @brief Run the function the target registered as @p name on a copy of
 *  @p payload (an id and the payload travel, nothing else). Returns
 *  TC_INPROGRESS; @p cb as for tc_msg_send(). The payload may be reused
 *  when this returns. */
tc_status_t tc_ep_send_local(tc_ep_h ep, const char *name, const void *payload,
                             size_t size, tc_send_cb_t cb, void *arg);

/* --- Archive inspection (issue #42) */
/** One member of an archive, as `tc-ar list` and `tc-ar dump` show it. */
typedef struct tc_archive_member {
    const char *triple;      /**< Normalized target triple. */
    const char *cpu;         /**< "" for the triple's generic CPU. */
    const char *features;    /**< "+feat,-feat,..."; "" for none. */
    const char *kind;        /**< "bitcode" or "object". */
    const char *role;        /**< "target" (ships) or "source" (sender). */
    const char *compression; /**< "none", "zstd" or "zstd-dict". */
    size_t      size;        /**< Image bytes, uncompressed. */
    size_t      stored_size; /**< Image bytes as stored in the archive. */
    const char *const *symbols; /**< External symbols the image needs. */
    size_t      symbol_count;
    uint8_t     digest[32];  /**< The member's identity (BLAKE3). */
} tc_archive_member_t;

/** A signature an archive carries. */
typedef struct tc_archive_signature {
    const char *key_id;   /**< Key ID of the signer, as tc-ar prints it. */
    int         verifies; /**< Non-zero: it verifies over the archive's hash. */
} tc_archive_signature_t;

/** What tc_archive_inspect() read; one allocation, freed by
 *  tc_archive_info_free(). */
typedef struct tc_archive_info {
    const char    *name;           /**< The ifunc's name. */
    uint8_t        hash[32];       /**< The content hash (the identity). */
    unsigned       format_version; /**< The archive format version read. */
    const tc_archive_member_t *members;
    size_t         member_count;
    const char *const *deps;       /**< Shared libraries targets load. */
    size_t         dep_count;
    const tc_archive_signature_t *signatures;
    size_t         signature_count;
    size_t         omitted_count;  /**< Members a thin copy lists by digest. */
} tc_archive_info_t;

/** @brief Read an archive (tc-cc's or tc-ar's output) from memory for
 *  inspection: structure and content hash are checked as a target checks
 *  them (TC_ERR_BAD_ARCHIVE with the reader's message otherwise). No code
 *  is compiled or run. */
tc_status_t tc_archive_inspect(const void *archive, size_t size,
                               tc_archive_info_t **info_p);
void        tc_archive_info_free(tc_archive_info_t *info);
/* --- end archive inspection */

#ifdef __cplusplus
}
#endif

#endif /* TC_TC_H */
