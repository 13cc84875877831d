/* partrain plugin ABI: what every strategy family shares. FROZEN: never change a field of a
 * _v1 or _v2 struct; a new version adds _v3 structs next to these.
 *
 * The boundary is plain C so that a plugin built with another compiler or standard library
 * works; no exception may cross it (the *_sdk.h headers wrap a C++ class so none does).
 * Each family has its own header with its versioned struct and exported symbol:
 *   data.h (partrain_strategy_v<N>: dp, zero1-3), tensor.h (partrain_tensor_v<N>: tp),
 *   expert.h (partrain_expert_v<N>: ep), schedule.h (partrain_schedule_v<N>: pipelines),
 *   context.h (partrain_context_v<N>: cp's ring and allgather).
 * partrain looks for the newest N it knows, then N-1, ... down to the oldest it still
 * supports, and checks that the struct's abi_version equals N.
 *
 * Error convention of every function pointer: returns PARTRAIN_OK (0) on success, or a
 * PARTRAIN_E* code with a NUL-terminated message of at most err_len bytes (including the
 * NUL) written to err, saying what is wrong and how to fix it. err is never NULL and
 * err_len is at least 256.
 *
 * Threading: the host calls one plugin instance from one thread. Communicator handles
 * (partrain_comm_v1_t, partrain_comm_v2_t) may be used only from that thread, between init
 * and finalize.
 */
#ifndef PARTRAIN_ABI_H_
#define PARTRAIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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
  PARTRAIN_FAMILY_EXPERT = 4,   /* expert parallel (ep) */
  PARTRAIN_FAMILY_CONTEXT = 5   /* context parallel (cp: ring, allgather, ...) */
} partrain_family_v1;

/* Capability bits (partrain_strategy_v1_t.capabilities). */
#define PARTRAIN_CAP_CPU ((uint64_t)1 << 0)           /* works on host (CPU) buffers */
#define PARTRAIN_CAP_CUDA ((uint64_t)1 << 1)          /* works on CUDA device buffers (see
                                                        * PARTRAIN_HOST_CUDA_BUFFERS) */
#define PARTRAIN_CAP_OVERLAP ((uint64_t)1 << 2)       /* starts communication before grads_done */
#define PARTRAIN_CAP_SHARDED_STATE ((uint64_t)1 << 3) /* shards optimizer state (ZeRO) */

/* Reduction operators of partrain_comm_v1_t.all_reduce. */
#define PARTRAIN_REDUCE_SUM 0
#define PARTRAIN_REDUCE_AVG 1
#define PARTRAIN_REDUCE_MAX 2

/* A communicator of one layout group, provided by the host. All buffers hold float32 and
 * live where the host's backend keeps tensors: host memory on CPU ranks (Gloo), device
 * memory on GPU ranks (NCCL; see PARTRAIN_HOST_CUDA_BUFFERS). */
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

/* A communicator of one layout group (v2). All buffers hold float32 and live where the
 * host's backend keeps tensors: host memory on CPU ranks (Gloo), device memory on GPU ranks
 * (NCCL; see PARTRAIN_HOST_CUDA_BUFFERS). Every operation starts at once
 * and returns; *work receives a handle to pass to wait exactly once. Operations of one
 * communicator run in the order started. Buffers must stay valid, and must not be written
 * (outputs: read) by the caller, until wait returned. counts arrays are copied before the
 * call returns. Input and output buffers of one operation must not overlap. */
typedef struct partrain_comm_v2 {
  void* ctx;   /* the host's; pass it back as the first argument */
  int rank;    /* this process's rank inside the group, 0 <= rank < size */
  int size;    /* number of ranks in the group */
  /* In place: data[i] becomes op (PARTRAIN_REDUCE_*) over every rank's data[i], i < count. */
  int (*all_reduce)(void* ctx, float* data, size_t count, int op, void** work, char* err,
                    size_t err_len);
  /* in holds counts[0] + ... + counts[size-1] elements on every rank; this rank receives in
   * out the counts[rank] elements at offset counts[0] + ... + counts[rank-1], reduced with op
   * over all ranks. counts has size entries, equal on every rank; they may be uneven or 0. */
  int (*reduce_scatter)(void* ctx, const float* in, float* out, const size_t* counts, int op,
                        void** work, char* err, size_t err_len);
  /* Rank r contributes counts[r] elements from in; out receives every rank's elements in
   * rank order (counts[0] + ... + counts[size-1] of them). counts as for reduce_scatter. */
  int (*all_gather)(void* ctx, const float* in, float* out, const size_t* counts, void** work,
                    char* err, size_t err_len);
  /* Copies data[0..count) of group rank root to every rank's data. */
  int (*broadcast)(void* ctx, float* data, size_t count, int root, void** work, char* err,
                   size_t err_len);
  /* Blocks until the operation of `work` finished and releases the handle. Returns
   * PARTRAIN_EUNAVAIL (with the group and operation named in err) when a peer failed. */
  int (*wait)(void* ctx, void* work, char* err, size_t err_len);
} partrain_comm_v2_t;

/* Where the buffers live (a bit of the data family's init_args_v2.host_features; the
 * tensor and expert families see the same memory). Set: this rank trains on a GPU, and every
 * float* the host passes and every buffer given to or taken from partrain_comm_v1_t /
 * partrain_comm_v2_t is CUDA device memory on the rank's current device (the process sees
 * one GPU, cuda:0). The plugin must not read or write them from the host; it passes them
 * to the communicator (NCCL), whose operations run after everything the host queued on its
 * compute stream before the call, and are complete, on the device, when wait returned.
 * Pointer arithmetic (data - offset, base + lo) is fine. Clear: host memory, as before.
 * The host sets it only for a plugin whose capabilities include PARTRAIN_CAP_CUDA and
 * refuses, before init, a plugin without that bit on a GPU rank. A v1 plugin sees no
 * host_features: it gets device buffers exactly when it has PARTRAIN_CAP_CUDA. */
#define PARTRAIN_HOST_CUDA_BUFFERS ((uint64_t)1 << 3)

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* PARTRAIN_ABI_H_ */
