/* partrain strategy-plugin ABI, version 1. FROZEN: never change a field of a _v1 struct;
 * a new ABI adds partrain_strategy_v2 (and _v2 structs) next to these.
 *
 * A strategy plugin is a shared object in the site's plugin directory that exports
 *
 *     const partrain_strategy_v1_t partrain_strategy_v1;    (extern "C", default visibility)
 *
 * partrain looks for partrain_strategy_v<N> for the newest N it knows, then N-1, ... down
 * to the oldest it still supports, and checks that the struct's abi_version equals N. The
 * boundary is plain C so that a plugin built with another compiler or standard library
 * works; no exception may cross it (plugin_sdk.h wraps a C++ class so none does).
 *
 * Error convention of every function pointer: returns PARTRAIN_OK (0) on success, or a
 * PARTRAIN_E* code with a NUL-terminated message of at most err_len bytes (including the
 * NUL) written to err, saying what is wrong and how to fix it. err is never NULL and
 * err_len is at least 256.
 *
 * Threading: the host calls one plugin instance from one thread. Communicator handles
 * (partrain_comm_v1_t) may be used only from that thread, between init and finalize.
 */
#ifndef PARTRAIN_PLUGIN_H_
#define PARTRAIN_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes. */
#define PARTRAIN_PLUGIN_ABI_VERSION 1
/* The exported symbol for PARTRAIN_PLUGIN_ABI_VERSION. */
#define PARTRAIN_STRATEGY_SYMBOL_V1 "partrain_strategy_v1"

/* Return codes. */
#define PARTRAIN_OK 0
#define PARTRAIN_EINVAL 1      /* bad configuration or arguments (the user must fix something) */
#define PARTRAIN_EUNAVAIL 2    /* a peer or device failed; the job may be retried */
#define PARTRAIN_EINTERNAL 3   /* a bug, or an exception the SDK caught */

/* Strategy families: where in the training step a plugin acts. */
typedef enum partrain_family_v1 {
  PARTRAIN_FAMILY_DATA = 1,     /* data parallel: gradient synchronisation (dp, zero1-3) */
  PARTRAIN_FAMILY_TENSOR = 2,   /* tensor parallel (tp, tp+sp) */
  PARTRAIN_FAMILY_PIPELINE = 3, /* pipeline schedule (gpipe, 1f1b, interleaved, ...) */
  PARTRAIN_FAMILY_EXPERT = 4    /* expert parallel (ep) */
} partrain_family_v1;

/* Capability bits (partrain_strategy_v1_t.capabilities). */
#define PARTRAIN_CAP_CPU ((uint64_t)1 << 0)           /* works on host (CPU) buffers */
#define PARTRAIN_CAP_CUDA ((uint64_t)1 << 1)          /* works on CUDA device buffers */
#define PARTRAIN_CAP_OVERLAP ((uint64_t)1 << 2)       /* starts communication before grads_done */
#define PARTRAIN_CAP_SHARDED_STATE ((uint64_t)1 << 3) /* shards optimizer state (ZeRO) */

/* Reduction operators of partrain_comm_v1_t.all_reduce. */
#define PARTRAIN_REDUCE_SUM 0
#define PARTRAIN_REDUCE_AVG 1
#define PARTRAIN_REDUCE_MAX 2

/* A communicator of one layout group, provided by the host. All buffers hold float32 and
 * live where the host's backend keeps tensors (host memory on CPU ranks). */
typedef struct partrain_comm_v1 {
  void* ctx;   /* the host's; pass it back as the first argument */
  int rank;    /* this process's rank inside the group, 0 <= rank < size */
  int size;    /* number of ranks in the group */
  /* Starts an in-place all-reduce of data[0..count) with op (PARTRAIN_REDUCE_*) and
   * returns at once; *work receives a handle to pass to wait exactly once. Operations of
   * one communicator run in the order started. data must stay valid until wait returns. */
  int (*all_reduce)(void* ctx, float* data, size_t count, int op, void** work, char* err,
                    size_t err_len);
  /* Blocks until the operation of `work` finished and releases the handle. Returns
   * PARTRAIN_EUNAVAIL (with the group and operation named in err) when a peer failed. */
  int (*wait)(void* ctx, void* work, char* err, size_t err_len);
} partrain_comm_v1_t;

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
  uint32_t abi_version;     /* PARTRAIN_PLUGIN_ABI_VERSION the plugin was built with */
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

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* PARTRAIN_PLUGIN_H_ */
