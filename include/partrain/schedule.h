/* partrain pipeline-schedule plugin ABI, version 1. FROZEN: never change a field of a _v1
 * struct; a new ABI adds partrain_schedule_v2 (and _v2 structs) next to these.
 *
 * The pipeline family has its own struct, separate from the data family's
 * partrain_strategy_v1_t (plugin.h): a schedule is data, not a per-step callback. A
 * schedule plugin is a shared object in the site's plugin directory that exports
 *
 *     const partrain_schedule_v1_t partrain_schedule_v1;    (extern "C", default visibility)
 *
 * partrain probes partrain_schedule_v<N> newest first and checks that the struct's
 * abi_version equals N. No exception may cross the boundary (schedule_sdk.h wraps C++).
 *
 * The model: pp ranks, each holding v model chunks ("virtual stages"). The p*v pipeline
 * stages are numbered in model order; stage s = chunk * pp + rank (Megatron's and
 * torchtitan's looped placement), so stage s lives on rank s % pp as chunk s / pp. Every
 * one of m micro-batches goes forward through stages 0..p*v-1 and backward through them in
 * reverse. A schedule gives each rank its ordered list of actions; the host checks it
 * (daemon/pipeline/check.h) before it runs it or draws it.
 *
 * Transfers: a send returns once posted (the host keeps the buffer until the step ends);
 * a receive blocks until the matching send was posted. Activations and gradients are two
 * streams per ordered pair of ranks: the k-th send-activation of rank a to rank b matches
 * b's k-th recv-activation from a (likewise for gradients), so both ranks must list each
 * stream's transfers in the same order.
 *
 * Error convention: as plugin.h: PARTRAIN_OK (0), or a PARTRAIN_E* code with a
 * NUL-terminated message (at most err_len bytes with the NUL) in err saying what is wrong
 * and how to fix it. err is never NULL and err_len is at least 256.
 */
#ifndef PARTRAIN_SCHEDULE_H_
#define PARTRAIN_SCHEDULE_H_

#include <stddef.h>
#include <stdint.h>

#include "partrain/abi.h" /* PARTRAIN_OK, PARTRAIN_E* */

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes. */
#define PARTRAIN_SCHEDULE_ABI_VERSION 1
/* The exported symbol for PARTRAIN_SCHEDULE_ABI_VERSION. */
#define PARTRAIN_SCHEDULE_SYMBOL_V1 "partrain_schedule_v1"

/* What one action does. Compute actions run one micro-batch through one local chunk. */
typedef enum partrain_action_kind_v1 {
  PARTRAIN_ACTION_FORWARD = 1,         /* F: forward */
  PARTRAIN_ACTION_BACKWARD = 2,        /* B: whole backward (input and weight gradients) */
  PARTRAIN_ACTION_BACKWARD_INPUT = 3,  /* Bi: input gradient only; needs a later W */
  PARTRAIN_ACTION_BACKWARD_WEIGHT = 4, /* W: weight gradient, after that micro-batch's Bi */
  PARTRAIN_ACTION_SEND_ACTIVATION = 5, /* this chunk's forward output to the next stage */
  PARTRAIN_ACTION_RECV_ACTIVATION = 6, /* this chunk's forward input from the previous stage */
  PARTRAIN_ACTION_SEND_GRAD = 7,       /* this chunk's input gradient to the previous stage */
  PARTRAIN_ACTION_RECV_GRAD = 8        /* this chunk's output gradient from the next stage */
} partrain_action_kind_v1;

/* One entry of a rank's action list. */
typedef struct partrain_action_v1 {
  int32_t kind;       /* partrain_action_kind_v1 */
  int32_t microbatch; /* 0 <= microbatch < m */
  int32_t chunk;      /* the local chunk (virtual stage of this rank), 0 <= chunk < v */
  int32_t peer;       /* transfers: the other rank; compute actions: -1 */
} partrain_action_v1_t;

/* The schedule. */
typedef struct partrain_schedule_v1 {
  uint32_t abi_version;    /* PARTRAIN_SCHEDULE_ABI_VERSION the plugin was built with */
  const char* name;        /* as in --partrain sched=NAME, e.g. "1f1b" or "myschedule" */
  const char* version;     /* the plugin's own version, e.g. "1.0.0" */
  const char* description; /* one line for `partrain plugins` */

  /* Fills the action list of `rank` (0 <= rank < pp) for pp ranks, m micro-batches and v
   * chunks per rank. With actions == NULL it only stores the number of actions in *count;
   * otherwise it writes at most `capacity` entries to actions[] and the number written to
   * *count, failing (PARTRAIN_EINVAL) when capacity is too small. Refuses (PARTRAIN_EINVAL)
   * a (pp, m, v) it cannot schedule, saying which values would work. Pure: the same
   * arguments always give the same list; callable from any thread. */
  int (*build)(int32_t pp, int32_t m, int32_t v, int32_t rank, partrain_action_v1_t* actions,
               size_t capacity, size_t* count, char* err, size_t err_len);
} partrain_schedule_v1_t;

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* PARTRAIN_SCHEDULE_H_ */
