/* partrain context-parallel plugin ABI, version 1. FROZEN: never change a field of a _v1
 * struct; a new ABI adds partrain_context_v2 (and _v2 structs) next to these.
 *
 * The context family has its own struct, apart from the other families' (plugin.h,
 * tensor.h, expert.h, schedule.h). A context plugin is a shared object in the site's
 * plugin directory that exports
 *
 *     const partrain_context_v1_t partrain_context_v1;    (extern "C", default visibility)
 *
 * partrain probes partrain_context_v<N> newest first and checks that the struct's
 * abi_version equals N. No exception may cross the boundary (context_sdk.h wraps C++).
 * `--partrain=cp4,cpimpl=NAME` picks the plugin NAME (default "ring").
 *
 * What it does: context parallelism splits every sequence over the cp group (rank i holds
 * chunks i and 2cp-1-i of 2cp); attention needs every rank's keys and values. The host
 * packs this rank's K and V into one block of `count` floats (every rank's block has the
 * same size) and calls forward / backward; the plugin decides how the blocks travel and
 * calls the host back once per cp rank's block, which the host computes on:
 *   forward    attend(source, kv) exactly once for every group rank `source`, kv holding
 *              that rank's block (the host merges the partial results; any order);
 *   backward   attend_backward(source, kv, dkv) once per source, which ADDS this rank's
 *              gradient for source's block into dkv; on return, blocks->dkv must hold the
 *              sum over the group of every rank's gradient for this rank's block;
 *   gather     an all-gather over the group (the MoE router's logits).
 * Every call is blocking: the result is in place when it returns. The plugin may overlap
 * its transfers with the host's compute (the ring sends the next block while the host
 * attends to this one). Buffers hold float32 where the host's backend keeps tensors (host
 * memory on CPU ranks); the plugin moves them only through the host's functions (comm,
 * p2p, and the blocks' zero/add), so it never reads them itself.
 *
 * Error convention: as abi.h: PARTRAIN_OK (0), or a PARTRAIN_E* code with a NUL-terminated
 * message (at most err_len bytes with the NUL) in err saying what is wrong and how to fix
 * it. err is never NULL and err_len is at least 256. Threading: one instance is called from
 * one thread, between init and finalize; the host's callbacks run on that thread.
 */
#ifndef PARTRAIN_CONTEXT_H_
#define PARTRAIN_CONTEXT_H_

#include <stddef.h>
#include <stdint.h>

#include "partrain/abi.h" /* PARTRAIN_OK, PARTRAIN_E*, PARTRAIN_CAP_*, partrain_comm_v2_t */

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes, and its exported symbol. */
#define PARTRAIN_CONTEXT_ABI_VERSION 1
#define PARTRAIN_CONTEXT_SYMBOL_V1 "partrain_context_v1"

/* The host's point-to-point transfers on one group (partrain_comm_v2_t has none). As
 * there: the operation starts at once, *work receives a handle for wait (exactly once),
 * buffers stay untouched until wait returned. Messages between two ranks match in the
 * order they were started (NCCL's rule): every rank must start its exchanges in the same
 * order as its peers. */
typedef struct partrain_p2p_v1 {
  void* ctx;  /* the host's; pass it back as the first argument */
  int rank;   /* this process's rank inside the group */
  int size;   /* ranks in the group */
  /* One exchange, started together: send[0..send_count) to group rank `to` and
   * recv[0..recv_count) from group rank `from`. A count of 0 leaves out that half. */
  int (*exchange)(void* ctx, const float* send, size_t send_count, int to, float* recv,
                  size_t recv_count, int from, void** work, char* err, size_t err_len);
  int (*wait)(void* ctx, void* work, char* err, size_t err_len);
} partrain_p2p_v1_t;

/* What a context plugin is given at init. */
typedef struct partrain_context_init_args_v1 {
  uint32_t struct_size;          /* sizeof(partrain_context_init_args_v1_t) as the host compiled it */
  const char* config_toml;       /* the job's [plugins.NAME] table as TOML text; "" if none */
  const partrain_comm_v2_t* cp;  /* the context-parallel group of this rank; never NULL */
  const partrain_p2p_v1_t* cp_p2p; /* the same group's point-to-point; never NULL */
  int global_rank;               /* this process's rank in the job */
  int world_size;                /* ranks in the job */
} partrain_context_init_args_v1_t;

/* One forward or backward of one attention layer: this rank's block and the host's
 * compute, for the plugin to drive. */
typedef struct partrain_context_blocks_v1 {
  void* ctx;          /* the host's; pass it back as the first argument */
  size_t count;       /* floats in one block (this rank's and every peer's) */
  const float* kv;    /* this rank's block */
  float* dkv;         /* backward: where the summed gradient of this rank's block goes (the
                       * host zeroed it); NULL in forward */
  float* scratch;     /* scratch_blocks(...) x count floats for the plugin's transfers */
  /* Forward: this rank's queries attend to group rank `source`'s block kv. */
  int (*attend)(void* ctx, int source, const float* kv, char* err, size_t err_len);
  /* Backward: adds this rank's gradient for source's block kv into dkv (count floats). */
  int (*attend_backward)(void* ctx, int source, const float* kv, float* dkv, char* err,
                         size_t err_len);
  /* data[0..n) = 0, and dst[i] += src[i] for i < n, where the host keeps tensors. */
  int (*zero)(void* ctx, float* data, size_t n, char* err, size_t err_len);
  int (*add)(void* ctx, float* dst, const float* src, size_t n, char* err, size_t err_len);
} partrain_context_blocks_v1_t;

/* Communication statistics of one optimizer step (filled by step_end). */
typedef struct partrain_context_stats_v1 {
  double comm_ms;        /* the time a transfer of this rank was in flight: from its start until
                          * its wait returned, transfers in flight together counted once (an
                          * upper bound of the time on the wire: a transfer hidden under the
                          * host's compute counts the compute it overlapped) */
  double exposed_ms;     /* the part the host waited for (inside wait, and blocking
                          * collectives), <= comm_ms */
  uint64_t bytes;        /* payload bytes this rank sent */
  uint32_t collectives;  /* transfers and collectives run */
} partrain_context_stats_v1_t;

typedef struct partrain_context_v1 {
  uint32_t abi_version;    /* PARTRAIN_CONTEXT_ABI_VERSION the plugin was built with */
  const char* name;        /* as named in cpimpl=, e.g. "ring" */
  const char* version;     /* the plugin's own version, e.g. "1.0.0" */
  uint64_t capabilities;   /* PARTRAIN_CAP_* bits (CPU, CUDA, OVERLAP) */
  const char* description; /* one line for `partrain plugins` */

  /* Creates an instance for this rank; *state receives it (opaque to the host). Refuses
   * (PARTRAIN_EINVAL) an unknown [plugins.NAME] key. */
  int (*init)(const partrain_context_init_args_v1_t* args, void** state, char* err, size_t err_len);
  /* How many blocks of scratch a forward or backward needs (the host allocates them once
   * and passes them in every call). */
  int (*scratch_blocks)(void* state, size_t* blocks, char* err, size_t err_len);
  int (*forward)(void* state, const partrain_context_blocks_v1_t* blocks, char* err, size_t err_len);
  int (*backward)(void* state, const partrain_context_blocks_v1_t* blocks, char* err, size_t err_len);
  /* full[r * count .. (r+1) * count) <- group rank r's part[0 .. count), for every r. */
  int (*gather)(void* state, const float* part, float* full, size_t count, char* err, size_t err_len);
  /* The step is over: fill *stats with the step's totals and start the next step's. */
  int (*step_end)(void* state, partrain_context_stats_v1_t* stats, char* err, size_t err_len);
  /* Destroys the instance; called once, also after an error. Must not fail. */
  void (*finalize)(void* state);
} partrain_context_v1_t;

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* PARTRAIN_CONTEXT_H_ */
