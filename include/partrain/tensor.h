/* partrain tensor-parallel plugin ABI, version 1. FROZEN: never change a field of a _v1
 * struct; a new ABI adds partrain_tensor_v2 (and _v2 structs) next to these.
 *
 * The tensor family has its own struct, apart from the data family's
 * partrain_strategy_v<N>_t (plugin.h) and the pipeline family's partrain_schedule_v1_t
 * (schedule.h). A tensor plugin is a shared object in the site's plugin directory that
 * exports
 *
 *     const partrain_tensor_v1_t partrain_tensor_v1;    (extern "C", default visibility)
 *
 * partrain probes partrain_tensor_v<N> newest first and checks that the struct's
 * abi_version equals N. No exception may cross the boundary (tensor_sdk.h wraps C++).
 *
 * What it does: the communication of Megatron's tensor-parallel regions, on the host's
 * communicator of this rank's tensor-parallel group. The host's model splits each layer
 * (heads, MLP columns, vocabulary rows) and calls, at each region boundary:
 *   reduce  (SUM)  copy_to_region backward, reduce_from_region forward (no sequence
 *                  parallelism), a sequence-parallel norm's parameter gradients, and the
 *                  vocabulary-parallel loss's sum-exp and target logit;
 *          (MAX)   the vocabulary-parallel loss's row max;
 *   gather         gather_from_sequence forward, reduce_scatter_to_sequence backward;
 *   scatter        reduce_scatter_to_sequence forward, gather_from_sequence backward.
 * Every call is blocking: the result is in place when it returns (the host's next layer
 * needs it). Buffers hold float32 where the host's backend keeps tensors (host memory on
 * CPU ranks).
 *
 * Error convention: as plugin.h: PARTRAIN_OK (0), or a PARTRAIN_E* code with a
 * NUL-terminated message (at most err_len bytes with the NUL) in err saying what is wrong
 * and how to fix it. err is never NULL and err_len is at least 256. Threading: one
 * instance is called from one thread, between init and finalize.
 */
#ifndef PARTRAIN_TENSOR_H_
#define PARTRAIN_TENSOR_H_

#include <stddef.h>
#include <stdint.h>

#include "partrain/abi.h" /* PARTRAIN_OK, PARTRAIN_E*, PARTRAIN_CAP_*, partrain_comm_v2_t */

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes, and its exported symbol. */
#define PARTRAIN_TENSOR_ABI_VERSION 1
#define PARTRAIN_TENSOR_SYMBOL_V1 "partrain_tensor_v1"

/* What a tensor plugin is given at init. */
typedef struct partrain_tensor_init_args_v1 {
  uint32_t struct_size;          /* sizeof(partrain_tensor_init_args_v1_t) as the host compiled it */
  const char* config_toml;       /* the job's [plugins.NAME] table as TOML text; "" if none */
  const partrain_comm_v2_t* tp;  /* the tensor-parallel group of this rank; never NULL */
  int sequence_parallel;         /* 1: sp (norms and dropout on token shards), 0: nosp */
  int global_rank;               /* this process's rank in the job */
  int world_size;                /* ranks in the job */
} partrain_tensor_init_args_v1_t;

/* Communication statistics of one optimizer step (filled by step_end). */
typedef struct partrain_tensor_stats_v1 {
  double comm_ms;        /* wall time spent inside reduce, gather and scatter this step; all
                          * of it is exposed (the host waits for each) */
  uint64_t bytes;        /* payload bytes this rank sent into collectives */
  uint32_t collectives;  /* collectives run */
} partrain_tensor_stats_v1_t;

typedef struct partrain_tensor_v1 {
  uint32_t abi_version;    /* PARTRAIN_TENSOR_ABI_VERSION the plugin was built with */
  const char* name;        /* as named in --partrain, e.g. "tp" */
  const char* version;     /* the plugin's own version, e.g. "1.0.0" */
  uint64_t capabilities;   /* PARTRAIN_CAP_* bits (CPU, CUDA) */
  const char* description; /* one line for `partrain plugins` */

  /* Creates an instance for this rank; *state receives it (opaque to the host). Refuses
   * (PARTRAIN_EINVAL) an unknown [plugins.NAME] key. */
  int (*init)(const partrain_tensor_init_args_v1_t* args, void** state, char* err, size_t err_len);
  /* In place: data[i] becomes op (PARTRAIN_REDUCE_SUM or _MAX) over the group, i < count. */
  int (*reduce)(void* state, float* data, size_t count, int op, char* err, size_t err_len);
  /* full[r * count .. (r+1) * count) <- rank r's rows[0 .. count), for every rank r. */
  int (*gather)(void* state, const float* rows, float* full, size_t count, char* err,
                size_t err_len);
  /* rows[0 .. count) <- the sum over the group of full[rank * count .. (rank+1) * count). */
  int (*scatter)(void* state, const float* full, float* rows, size_t count, char* err,
                 size_t err_len);
  /* The step is over: fill *stats with the step's totals and start the next step's. */
  int (*step_end)(void* state, partrain_tensor_stats_v1_t* stats, char* err, size_t err_len);
  /* Destroys the instance; called once, also after an error. Must not fail. */
  void (*finalize)(void* state);
} partrain_tensor_v1_t;

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* PARTRAIN_TENSOR_H_ */
