/* partrain expert-parallel plugin ABI, version 1. FROZEN: never change a field of a _v1
 * struct; a new ABI adds partrain_expert_v2 (and _v2 structs) next to these.
 *
 * The expert family has its own struct, apart from the data family's
 * partrain_strategy_v<N>_t (plugin.h), the pipeline family's partrain_schedule_v1_t
 * (schedule.h) and the tensor family's partrain_tensor_v1_t (tensor.h). An expert plugin is
 * a shared object in the site's plugin directory that exports
 *
 *     const partrain_expert_v1_t partrain_expert_v1;    (extern "C", default visibility)
 *
 * partrain probes partrain_expert_v<N> newest first and checks that the struct's
 * abi_version equals N. No exception may cross the boundary (expert_sdk.h wraps C++).
 *
 * What it does: the communication of a mixture-of-experts layer whose experts are sharded
 * over the expert-parallel (ep) group, E/ep experts per rank. The host's model routes each
 * rank's tokens itself (top-k, capacity, dropping) and calls:
 *   all_to_all   the dispatch of the kept token rows to the ranks holding their experts and
 *                the combine that brings the expert outputs back (in backward: the output
 *                gradients out, the input gradients back), and the per-expert row counts
 *                before each dispatch; variable counts per rank, some of them 0;
 *   reduce       a SUM over the ep group (the gradient norm's squares of the expert shards);
 *   reduce_expert_grads  once per optimizer step: the experts' gradients summed over the
 *                expert-data-parallel group (the ranks holding the same experts), scaled.
 * Every call is blocking: the result is in place when it returns (the host's next layer
 * needs it). Buffers hold float32 where the host's backend keeps tensors (host memory on CPU
 * ranks).
 *
 * Error convention: as plugin.h: PARTRAIN_OK (0), or a PARTRAIN_E* code with a
 * NUL-terminated message (at most err_len bytes with the NUL) in err saying what is wrong
 * and how to fix it. err is never NULL and err_len is at least 256. Threading: one
 * instance is called from one thread, between init and finalize.
 */
#ifndef PARTRAIN_EXPERT_H_
#define PARTRAIN_EXPERT_H_

#include <stddef.h>
#include <stdint.h>

#include "partrain/abi.h" /* PARTRAIN_OK, PARTRAIN_E*, PARTRAIN_CAP_*, partrain_comm_v2_t */

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes, and its exported symbol. */
#define PARTRAIN_EXPERT_ABI_VERSION 1
#define PARTRAIN_EXPERT_SYMBOL_V1 "partrain_expert_v1"

/* The host's all-to-all on one group (partrain_comm_v2_t has none). As there: the operation
 * starts at once, *work receives a handle for wait (exactly once), buffers stay untouched
 * until wait returned, counts arrays are copied before the call returns. */
typedef struct partrain_alltoall_v1 {
  void* ctx;  /* the host's; pass it back as the first argument */
  int rank;   /* this process's rank inside the group */
  int size;   /* ranks in the group */
  /* Rank r sends send_counts[p] elements of in (consecutive, in rank order) to rank p and
   * receives recv_counts[q] elements from rank q into out, in rank order. send_counts[p] on
   * rank r must equal recv_counts[r] on rank p; any of them may be 0. */
  int (*all_to_allv)(void* ctx, const float* in, const size_t* send_counts, float* out,
                     const size_t* recv_counts, void** work, char* err, size_t err_len);
  int (*wait)(void* ctx, void* work, char* err, size_t err_len);
} partrain_alltoall_v1_t;

/* What an expert plugin is given at init. */
typedef struct partrain_expert_init_args_v1 {
  uint32_t struct_size;             /* sizeof(partrain_expert_init_args_v1_t) as the host compiled it */
  const char* config_toml;          /* the job's [plugins.NAME] table as TOML text; "" if none */
  const partrain_comm_v2_t* ep;     /* the expert-parallel group of this rank; never NULL */
  const partrain_alltoall_v1_t* ep_all_to_all;  /* the same group's all-to-all; never NULL */
  const partrain_comm_v2_t* expert_dp; /* the ranks holding the same experts; NULL when
                                        * there is only this one (dp == ep) */
  int num_experts;                  /* E of every MoE block; E % ep size == 0 */
  int global_rank;                  /* this process's rank in the job */
  int world_size;                   /* ranks in the job */
} partrain_expert_init_args_v1_t;

/* Communication statistics of one optimizer step (filled by step_end). */
typedef struct partrain_expert_stats_v1 {
  double comm_ms;        /* wall time inside all_to_all, reduce and reduce_expert_grads this
                          * step; all of it is exposed (the host waits for each) */
  uint64_t bytes;        /* payload bytes this rank sent */
  uint32_t collectives;  /* collectives run */
} partrain_expert_stats_v1_t;

typedef struct partrain_expert_v1 {
  uint32_t abi_version;    /* PARTRAIN_EXPERT_ABI_VERSION the plugin was built with */
  const char* name;        /* e.g. "ep" */
  const char* version;     /* the plugin's own version, e.g. "1.0.0" */
  uint64_t capabilities;   /* PARTRAIN_CAP_* bits (CPU, CUDA) */
  const char* description; /* one line for `partrain plugins` */

  /* Creates an instance for this rank; *state receives it (opaque to the host). Refuses
   * (PARTRAIN_EINVAL) an unknown [plugins.NAME] key. */
  int (*init)(const partrain_expert_init_args_v1_t* args, void** state, char* err, size_t err_len);
  /* The ep group's all-to-all, counts as partrain_alltoall_v1_t's (each has ep size entries). */
  int (*all_to_all)(void* state, const float* in, const size_t* send_counts, float* out,
                    const size_t* recv_counts, char* err, size_t err_len);
  /* In place: data[i] becomes the sum over the ep group, i < count. */
  int (*reduce)(void* state, float* data, size_t count, char* err, size_t err_len);
  /* In place: data[i] becomes scale * (the sum over the expert-data-parallel group), i <
   * count (scale * data[i] when that group is this rank alone). */
  int (*reduce_expert_grads)(void* state, float* data, size_t count, float scale, char* err,
                             size_t err_len);
  /* The step is over: fill *stats with the step's totals and start the next step's. */
  int (*step_end)(void* state, partrain_expert_stats_v1_t* stats, char* err, size_t err_len);
  /* Destroys the instance; called once, also after an error. Must not fail. */
  void (*finalize)(void* state);
} partrain_expert_v1_t;

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* PARTRAIN_EXPERT_H_ */
