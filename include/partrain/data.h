/* partrain data-family plugin ABI (dp, zero1-3), versions 1 and 2. FROZEN: never change a
 * field of a _v1 or _v2 struct; a new ABI adds partrain_strategy_v3 (and _v3 structs) next to
 * these. What every family shares (return codes, capabilities, communicators) is in abi.h.
 *
 * A data plugin is a shared object in the site's plugin directory that exports
 *
 *     const partrain_strategy_v2_t partrain_strategy_v2;    (extern "C", default visibility)
 *
 * (or, built against an older partrain, const partrain_strategy_v1_t partrain_strategy_v1).
 * data_sdk.h wraps a C++ class into that struct.
 */
#ifndef PARTRAIN_DATA_H_
#define PARTRAIN_DATA_H_

#include <stddef.h>
#include <stdint.h>

#include "partrain/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The newest ABI this header describes, and each version's number and exported symbol. */
#define PARTRAIN_PLUGIN_ABI_VERSION 2
#define PARTRAIN_PLUGIN_ABI_V1 1
#define PARTRAIN_PLUGIN_ABI_V2 2
#define PARTRAIN_STRATEGY_SYMBOL_V1 "partrain_strategy_v1"
#define PARTRAIN_STRATEGY_SYMBOL_V2 "partrain_strategy_v2"

/* What a data-family plugin is given at init. */
typedef struct partrain_init_args_v1 {
  uint32_t struct_size;        /* sizeof(partrain_init_args_v1_t) as the host compiled it */
  const char* config_toml;     /* the job's [plugins.NAME] table as TOML text; "" if none */
  const partrain_comm_v1_t* dp; /* the data-parallel group of this rank; never NULL */
  int global_rank;             /* this process's rank in the job */
  int world_size;              /* ranks in the job */
  size_t num_grads;            /* elements of the flat gradient buffer the host syncs */
} partrain_init_args_v1_t;

/* Communication statistics of one optimizer step (filled by grads_done). */
typedef struct partrain_sync_stats_v1 {
  double comm_ms;     /* wall time from the first collective started to the last finished */
  double exposed_ms;  /* of that, time the host waited in grads_done (not hidden by compute) */
  uint64_t bytes;     /* payload bytes all-reduced */
  uint32_t collectives; /* collectives started */
} partrain_sync_stats_v1_t;

/* The strategy. Every function pointer may be NULL where its family does not use it. */
typedef struct partrain_strategy_v1 {
  uint32_t abi_version;     /* PARTRAIN_PLUGIN_ABI_V1 */
  const char* name;         /* as named in --partrain, e.g. "dp" or "myschedule" */
  partrain_family_v1 family;
  const char* version;      /* the plugin's own version, e.g. "1.0.0" */
  uint64_t capabilities;    /* PARTRAIN_CAP_* bits */
  const char* description;  /* one line for `partrain plugins` */

  /* Creates an instance for this rank; *state receives it (opaque to the host). */
  int (*init)(const partrain_init_args_v1_t* args, void** state, char* err, size_t err_len);
  /* Called once at the start of every optimizer step, before the first micro-batch. */
  int (*step_begin)(void* state, int64_t step, char* err, size_t err_len);
  /* Data family: grads[offset .. offset+count) of the flat gradient buffer `grads`
   * (num_grads elements) are final for this step: no later micro-batch or layer writes
   * them again. The host calls it as backward finishes ranges, each element exactly once
   * per step, usually from the end of the buffer towards its start. The plugin may start
   * communicating on them at once and must not touch them after grads_done returned. */
  int (*grads_ready)(void* state, float* grads, size_t offset, size_t count, char* err,
                     size_t err_len);
  /* Data family: every range was passed to grads_ready; finish all communication so that
   * grads holds the synchronised (for dp: averaged) gradient, and fill *stats. */
  int (*grads_done)(void* state, float* grads, partrain_sync_stats_v1_t* stats, char* err,
                    size_t err_len);
  /* Destroys the instance; called once, also after an error. Must not fail. */
  void (*finalize)(void* state);
} partrain_strategy_v1_t;

/* ==== ABI version 2 ==========================================================================
 * Version 2 adds what ZeRO needs: a communicator with reduce-scatter, all-gather and
 * broadcast, a sharding plan the plugin returns from init, gradient ranges reduced into a
 * shard, and parameter ranges gathered from shards. A v2 data plugin either replicates
 * everything (stage 0, plain data parallel: it averages gradients in place as v1 did) or
 * shards the training state over the data-parallel group (ZeRO stage 1, 2 or 3).
 *
 * The flat buffer: the host's model keeps every parameter in one flat float32 buffer of
 * num_params elements (the gradient buffer has the same layout). A "range" is
 * [offset, offset + count) of that buffer. Under ZeRO, rank r of the data-parallel group owns
 * one contiguous range, its shard [shard_begin, shard_end); the shards of ranks 0..size-1
 * are consecutive and cover the buffer (the plugin chooses them; see partrain_data_plan_v2_t).
 */

/* Host features (partrain_init_args_v2_t.host_features): what this host can do with a plan. */
#define PARTRAIN_HOST_SHARD_OPTIMIZER ((uint64_t)1 << 0) /* AdamW on the shard only (stage 1) */
#define PARTRAIN_HOST_SHARD_GRADS ((uint64_t)1 << 1)     /* gradients kept as shards (stage 2) */
#define PARTRAIN_HOST_SHARD_PARAMS ((uint64_t)1 << 2)    /* parameters kept as shards (stage 3) */
/* (1 << 3) is PARTRAIN_HOST_CUDA_BUFFERS, abi.h.) Set with it on GPU ranks, stage >= 1: the
 * shard_grads grads_ready passes is the host's staging area of the gradient shard, and the
 * plugin WRITES its part of each averaged range there (it cannot add on the device); the host
 * adds it into the shard once a grads_release covering the range, or grads_done, returned.
 * Clear: the plugin adds into shard_grads itself, as grads_ready says. */
#define PARTRAIN_HOST_SHARD_STAGED ((uint64_t)1 << 4)

/* What a data-family plugin is given at init (v2). */
typedef struct partrain_init_args_v2 {
  uint32_t struct_size;         /* sizeof(partrain_init_args_v2_t) as the host compiled it */
  const char* config_toml;      /* the job's [plugins.NAME] table as TOML text; "" if none */
  const partrain_comm_v2_t* dp; /* the data-parallel group of this rank; never NULL */
  int global_rank;              /* this process's rank in the job */
  int world_size;               /* ranks in the job */
  size_t num_params;            /* elements of the flat parameter (and gradient) buffer */
  uint64_t host_features;       /* PARTRAIN_HOST_* bits; a plugin refuses a stage lacking one */
} partrain_init_args_v2_t;

/* What a data-family plugin tells the host at init (v2). The host fills it with the
 * defaults below before calling init; the plugin changes what it needs. */
typedef struct partrain_data_plan_v2 {
  uint32_t struct_size;  /* sizeof(partrain_data_plan_v2_t) as the host compiled it */
  /* 0: replicated (plain data parallel); 1: the optimizer state is sharded; 2: the
   * gradients too; 3: the parameters too. Default: 0. */
  int stage;
  /* This rank's shard [shard_begin, shard_end) of the flat buffer (stage >= 1); the shards
   * of ranks 0..size-1 are consecutive, in rank order, and cover [0, num_params).
   * Default: [0, num_params). */
  size_t shard_begin, shard_end;
  /* Stage 3: how many parameter segments (transformer blocks) the host gathers ahead of the
   * one it computes, >= 0. Default: 1. */
  int prefetch;
} partrain_data_plan_v2_t;

/* Communication statistics of one optimizer step (filled by step_end). */
typedef struct partrain_sync_stats_v2 {
  double comm_ms;        /* wall time from the first collective started to the last finished */
  double exposed_ms;     /* of that, time the host waited in the plugin (grads_release,
                          * grads_done, params_wait): not hidden by compute */
  uint64_t bytes;        /* payload bytes this rank sent into collectives */
  uint32_t collectives;  /* collectives started */
} partrain_sync_stats_v2_t;

/* The strategy (v2). Every function pointer may be NULL where its family or stage does not
 * use it, except init and finalize. The call order of one optimizer step on a data plugin:
 *   step_begin
 *   per micro-batch (stage >= 2), or once on the last micro-batch (stage 0 and 1):
 *     grads_ready for every range (and grads_release before the host reuses memory)
 *   grads_done
 *   stage 1/2, after the host's AdamW step on its shard: params_gather of the whole buffer
 *   stage 3, during forward and backward: params_gather / params_wait per segment
 *   step_end */
typedef struct partrain_strategy_v2 {
  uint32_t abi_version;     /* PARTRAIN_PLUGIN_ABI_V2 */
  const char* name;         /* as named in --partrain, e.g. "dp" or "zero3" */
  partrain_family_v1 family;
  const char* version;      /* the plugin's own version, e.g. "1.0.0" */
  uint64_t capabilities;    /* PARTRAIN_CAP_* bits */
  const char* description;  /* one line for `partrain plugins` */

  /* Creates an instance for this rank; *state receives it (opaque to the host). plan holds
   * the defaults (see partrain_data_plan_v2_t); a data plugin sets the stage and the shard. */
  int (*init)(const partrain_init_args_v2_t* args, partrain_data_plan_v2_t* plan, void** state,
              char* err, size_t err_len);
  /* Called once at the start of every optimizer step, before the first micro-batch. */
  int (*step_begin)(void* state, int64_t step, char* err, size_t err_len);
  /* Gradient range [offset, offset + count) is final for this micro-batch (stage >= 2) or
   * step (stage 0, 1); data points at its first element (data[0] is element `offset`).
   * Ranges arrive usually from the end of the buffer towards its start, each element once.
   *  - stage 0: average data over the group in place, finished when grads_done returns.
   *  - stage >= 1: average data over the group and ADD this rank's part of the result (the
   *    elements of the range inside its shard) into shard_grads, the rank's gradient shard
   *    (shard_end - shard_begin elements, shard_grads[0] is element shard_begin). The plugin
   *    may read data until a grads_release covering the range, or grads_done, returned.
   * shard_grads is NULL at stage 0. */
  int (*grads_ready)(void* state, float* data, size_t offset, size_t count, float* shard_grads,
                     char* err, size_t err_len);
  /* Blocks until the plugin no longer reads any range handed to grads_ready that overlaps
   * [offset, offset + count), and its result is in shard_grads: the host then reuses that
   * memory. Stage >= 2. */
  int (*grads_release)(void* state, size_t offset, size_t count, char* err, size_t err_len);
  /* Every range of the step was handed over: finish all gradient communication. */
  int (*grads_done)(void* state, char* err, size_t err_len);
  /* Starts gathering parameter range [offset, offset + count) into dst[0..count): each rank
   * sends the elements of the range inside its shard from shard_params (shard_end -
   * shard_begin elements, shard_params[0] is element shard_begin). dst may be the whole
   * flat buffer with shard_params inside it (stage 1 and 2 after the optimizer step).
   * Every rank calls it with the same ranges in the same order. Stage >= 1. */
  int (*params_gather)(void* state, const float* shard_params, float* dst, size_t offset,
                       size_t count, char* err, size_t err_len);
  /* Blocks until the gather into dst finished. Stage >= 1. */
  int (*params_wait)(void* state, float* dst, char* err, size_t err_len);
  /* The step is over (after the optimizer step and any gather): fill *stats. */
  int (*step_end)(void* state, partrain_sync_stats_v2_t* stats, char* err, size_t err_len);
  /* Destroys the instance; called once, also after an error. Must not fail. */
  void (*finalize)(void* state);
} partrain_strategy_v2_t;

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* PARTRAIN_DATA_H_ */
