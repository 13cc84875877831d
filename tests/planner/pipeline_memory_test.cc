// Pipeline memory per stage: what each stage's rank holds (its blocks, the embeddings on
// the first stage, the final norm and head on the last, a tied embedding on both) and
// the micro-batches' activations it keeps, by hand arithmetic; the in-flight counts
// against the shipped schedule plugins' own action lists (pipeline/simulate.h
// peak_in_flight), so the planner counts what the schedule the runtime runs keeps.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pipeline/simulate.h"
#include "planner/memory.h"
#include "plugin/schedule_loader.h"

namespace partrain::planner {
namespace {

// tiny.toml's GPT-2 with 4 blocks: V 256, T 64, C 128, H 4, F 4C, tied embeddings.
ModelDims gpt2_4() {
  engine::ModelOptions o;
  o.vocab_size = 256;
  o.seq_len = 64;
  o.layers = 4;
  o.hidden = 128;
  o.heads = 4;
  return model_dims(o);
}

constexpr double C = 128, V = 256, T = 64, H = 4;
// One GPT-2 block: c_attn 3C*C + 3C, c_proj C*C + C, two LayerNorms 4C, c_fc 4C*C + 4C,
// c_proj 4C*C + C.
constexpr double kBlock = 3 * C * C + 3 * C + C * C + C + 4 * C + 4 * C * C + 4 * C + 4 * C * C + C;
const Precision kFp32{4, 4, 4, false};

PlanLayout pipeline(int pp, int m, const std::string& sched) {
  PlanLayout l;
  l.pp = pp;
  l.grad_accum = m;
  l.sched = sched;
  l.micro_batch = 1;  // N = T = 64 tokens
  return l;
}

TEST(PlannerPipeline, StagesHoldTheirBlocksEmbeddingsOnTheFirstHeadOnTheLast) {
  ModelDims m = gpt2_4();
  const PlanLayout l = pipeline(2, 4, "1f1b");
  std::vector<MemoryBreakdown> s = all_stage_memory(m, l, kFp32, 0, 0);
  ASSERT_EQ(s.size(), 2u);
  // Stage 0: blocks 0-1, wte V*C and wpe T*C. Stage 1: blocks 2-3, ln_f 2C and, tied,
  // its own copy of wte for the head.
  EXPECT_DOUBLE_EQ(s[0].params, 2 * kBlock + V * C + T * C);
  EXPECT_DOUBLE_EQ(s[1].params, 2 * kBlock + 2 * C + V * C);
  // fp32 weights, gradients, and two AdamW moments of exactly those.
  for (const MemoryBreakdown& b : s) {
    EXPECT_DOUBLE_EQ(b.weights, 4 * b.params);
    EXPECT_DOUBLE_EQ(b.grads, 4 * b.params);
    EXPECT_DOUBLE_EQ(b.optimizer, 8 * b.params);
  }
  // Untied: the last stage holds lm_head V*C instead of the copy (the same size), and the
  // first stage is unchanged.
  m.tied = false;
  s = all_stage_memory(m, l, kFp32, 0, 0);
  EXPECT_DOUBLE_EQ(s[0].params, 2 * kBlock + V * C + T * C);
  EXPECT_DOUBLE_EQ(s[1].params, 2 * kBlock + 2 * C + V * C);
  // The whole model is the two stages less the tied copy.
  EXPECT_DOUBLE_EQ(count_params(gpt2_4()).total, 4 * kBlock + V * C + T * C + 2 * C);
  // Tensor parallel inside the stages: blocks' matrices and column biases split, the
  // vocabulary by rows (128 each); positions, norms and row biases whole.
  PlanLayout tp = l;
  tp.tp = 2;
  m.tied = true;
  s = all_stage_memory(m, tp, kFp32, 0, 0);
  const double split = 12 * C * C + 7 * C, repl = 6 * C;
  EXPECT_DOUBLE_EQ(s[0].params, 2 * (split / 2 + repl) + (V / 2) * C + T * C);
  EXPECT_DOUBLE_EQ(s[1].params, 2 * (split / 2 + repl) + 2 * C + (V / 2) * C);
}

TEST(PlannerPipeline, ActivationsForTheScheduleInFlightMicroBatches) {
  const ModelDims m = gpt2_4();
  // One micro-batch (a slot) of N = 64 tokens on a stage of 2 blocks, fp32, no recompute:
  // the block inputs res_[lo..hi] 3 N C; per block ln1 res2 ln2 3 N C, four [N]
  // statistics, qkv fc act N (3C + 4C + 4C), attention output N C and log-sum-exp H T.
  // The first stage's slot also keeps its token ids [N]; the last stage's its targets [N],
  // ln_f N C + 2N statistics, logits N V, losses and log-sum-exp 2N.
  const double N = T;
  const double block = 3 * N * C + 4 * N + N * 11 * C + N * C + H * T;
  const double body = 4 * (3 * N * C + 2 * block);
  const double first_slot = body + 4 * N, last_slot = body + 4 * (N + N * C + 2 * N + N * V + 2 * N);
  // 1F1B, p 2, m 4: stage 0 keeps 2 micro-batches, stage 1 one.
  std::vector<MemoryBreakdown> s = all_stage_memory(m, pipeline(2, 4, "1f1b"), kFp32, 0, 0);
  EXPECT_DOUBLE_EQ(s[0].in_flight, 2);
  EXPECT_DOUBLE_EQ(s[1].in_flight, 1);
  EXPECT_DOUBLE_EQ(s[0].activations, 2 * first_slot);
  EXPECT_DOUBLE_EQ(s[1].activations, last_slot);
  // Backward scratch of each stage: branch, dres, dbranch, dln, datt [N, C] and dqkv dfc
  // dact [N, 11C]; the last stage adds dloss [N] and dlogits [N, V]. The transfers: stage
  // 0 receives its output's gradient into one [N, C] per slot, stage 1 sends its input's
  // gradient from one [N, C] per micro-batch. Both receive the other's gradient of the
  // tied embedding [V, C] to sum them.
  const double scratch = 4 * (5 * N * C + 11 * N * C), tied = 4 * V * C;
  EXPECT_DOUBLE_EQ(s[0].workspace, scratch + 2 * 4 * N * C + tied);
  EXPECT_DOUBLE_EQ(s[1].workspace, scratch + 4 * (N + N * V) + 4 * 4 * N * C + tied);
  EXPECT_DOUBLE_EQ(s[0].comm_buffers, 0);  // the transfers are the engine's, above
  // GPipe keeps all m = 4 on both.
  s = all_stage_memory(m, pipeline(2, 4, "gpipe"), kFp32, 0, 0);
  EXPECT_DOUBLE_EQ(s[0].activations, 4 * first_slot);
  EXPECT_DOUBLE_EQ(s[1].activations, 4 * last_slot);
  // The worst rank decides the fit: GPipe's last stage, 1F1B's first.
  EXPECT_EQ(peak_memory(m, pipeline(2, 4, "gpipe"), kFp32, 0, 0).stage, 1);
  EXPECT_EQ(peak_memory(m, pipeline(2, 4, "1f1b"), kFp32, 0, 0).stage, 0);
  // Full recompute keeps only the block inputs (and token ids) per slot, one block's
  // worth shared: the attention core and the rest.
  ModelDims full = m;
  full.recompute = engine::Recompute::kFull;
  s = all_stage_memory(full, pipeline(2, 4, "1f1b"), kFp32, 0, 0);
  const double rest = 4 * (3 * N * C + 4 * N + N * 11 * C), core = 4 * (N * C + H * T);
  EXPECT_DOUBLE_EQ(s[0].activations, 2 * 4 * (3 * N * C + N) + core + rest);
  // ZB-H1 keeps every GEMM's output gradient in the slot until the weight gradient: per
  // block [N, C] (MLP and attention projections), [N, 4C] (c_fc), [N, 3C] (c_attn); the
  // head's [N, V] on the last stage. p in flight on both stages.
  s = all_stage_memory(m, pipeline(2, 4, "zbh1"), kFp32, 0, 0);
  const double kept_grads = 4 * 2 * N * (C + 4 * C + C + 3 * C);
  EXPECT_DOUBLE_EQ(s[0].activations, 2 * (first_slot + kept_grads));
  EXPECT_DOUBLE_EQ(s[1].activations, 2 * (last_slot + kept_grads + 4 * N * V));
  // pp4 on 4 blocks, 1F1B m 8: 4, 3, 2, 1 in flight (at most p).
  for (int r = 0; r < 4; ++r) EXPECT_DOUBLE_EQ(in_flight_micro_batches(pipeline(4, 8, "1f1b"), r), 4 - r);
}

TEST(PlannerPipeline, TheStagesSplitAsTheRuntimePartitionsThem) {
  // Given boundaries (pipeline/partition.h's, from make_plan) decide each stage's blocks:
  // 3 + 1 of 4 blocks puts three blocks' weights on stage 0.
  const ModelDims m = gpt2_4();
  PlanLayout l = pipeline(2, 4, "1f1b");
  l.stage_bounds = {0, 3, 4};
  const std::vector<MemoryBreakdown> s = all_stage_memory(m, l, kFp32, 0, 0);
  EXPECT_DOUBLE_EQ(s[0].params, 3 * kBlock + V * C + T * C);
  EXPECT_DOUBLE_EQ(s[1].params, kBlock + 2 * C + V * C);
}

TEST(PlannerPipeline, InterleavedChunksByHand) {
  // Interleaved p 4, v 2, m 8 (plugins/pipeline/interleaved): rank 0 runs (4-0-1)*2 +
  // (2-1)*4 = 10 warm-up forwards, k = 0..9 on chunk (k mod 8) / 4: chunk 0 holds 6
  // (k 0-3, 8, 9), chunk 1 four; then forward 10 and 11 (chunk 0: 7, 8) alternate with
  // backwards 0 and 1 (chunk 1), and chunk 1 never passes 4 again: slots 8 and 4, 6 whole
  // micro-batches (Megatron's rank peak is 5.5: the chunks peak at different times).
  // Rank 3: 4 warm-up forwards on chunk 0, then forward 4.. (chunk 1) each followed by
  // its backward (chunk 1): 1; forward 8 brings chunk 0 to 5: slots 5 and 1. With m == p
  // every forward runs first: m = 4 slots on each chunk.
  PlanLayout l = pipeline(4, 8, "interleaved");
  l.virtual_stages = 2;
  EXPECT_EQ(chunk_slots(l, 0), (std::vector<double>{8, 4}));
  EXPECT_EQ(chunk_slots(l, 3), (std::vector<double>{5, 1}));
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(l, 0), 6);
  l.grad_accum = 4;
  EXPECT_EQ(chunk_slots(l, 3), (std::vector<double>{4, 4}));
  // ZB-H1 keeps each input until its delayed weight gradient: p on every rank.
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(pipeline(4, 8, "zbh1"), 3), 4);
}

// The executor's slot rule on a real action list: a micro-batch holds a slot of its chunk
// from its first receive-activation or forward there to its backward (or, split, its
// backward-weight).
std::vector<int> held_per_chunk(const pipeline::Schedule& s, int rank) {
  const int v = s.shape.v, m = s.shape.m;
  std::vector<int> now(static_cast<size_t>(v), 0), peak(static_cast<size_t>(v), 0);
  std::vector<std::vector<bool>> held(static_cast<size_t>(v), std::vector<bool>(static_cast<size_t>(m)));
  for (const pipeline::Action& a : s.ranks[static_cast<size_t>(rank)]) {
    const size_t c = static_cast<size_t>(a.chunk);
    const bool in = a.kind == pipeline::Kind::kRecvActivation || a.kind == pipeline::Kind::kForward;
    if (in && !held[c][static_cast<size_t>(a.mb)]) {
      held[c][static_cast<size_t>(a.mb)] = true;
      peak[c] = std::max(peak[c], ++now[c]);
    } else if (a.kind == pipeline::Kind::kBackward || a.kind == pipeline::Kind::kBackwardWeight) {
      --now[c];
    }
  }
  return peak;
}

// The planner's slots equal the shipped schedules' own: GPipe's and 1F1B's activations
// waiting for a backward and ZB-H1's inputs held until their weight gradient as the
// simulator counts them (pipeline/simulate.h peak_in_flight), and every schedule's slots
// per chunk as the executor's rule counts them on the plugin's action list.
TEST(PlannerPipeline, SlotsEqualTheShippedSchedules) {
  struct Sched {
    const char* name;
    std::vector<int> vs;
  };
  for (const Sched& s : {Sched{"gpipe", {1}}, Sched{"1f1b", {1}}, Sched{"zbh1", {1}},
                         Sched{"interleaved", {2, 3, 4}}}) {
    Result<std::unique_ptr<plugin::SchedulePlugin>> plug =
        plugin::SchedulePlugin::find(PARTRAIN_BUILD_PLUGINDIR, s.name);
    ASSERT_TRUE(plug) << plug.status().message();
    for (int p : {2, 3, 4, 8}) {
      for (int v : s.vs) {
        for (int m : {p, 2 * p, 3 * p}) {
          SCOPED_TRACE(std::string(s.name) + " p=" + std::to_string(p) + " v=" + std::to_string(v) +
                       " m=" + std::to_string(m));
          Result<pipeline::Schedule> sched = plugin::build_schedule(**plug, p, m, v);
          ASSERT_TRUE(sched) << sched.status().message();
          const std::vector<pipeline::InFlight> f = pipeline::peak_in_flight(*sched);
          PlanLayout l = pipeline(p, m, s.name);
          l.virtual_stages = v;
          for (int r = 0; r < p; ++r) {
            const std::vector<double> slots = chunk_slots(l, r);
            const std::vector<int> held = held_per_chunk(*sched, r);
            ASSERT_EQ(slots.size(), held.size()) << "rank " << r;
            for (size_t c = 0; c < slots.size(); ++c) EXPECT_EQ(slots[c], held[c]) << "rank " << r << " chunk " << c;
            if (v == 1) {
              EXPECT_EQ(slots[0], std::string(s.name) == "zbh1" ? f[r].held : f[r].activations) << "rank " << r;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace partrain::planner
