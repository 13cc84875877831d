// C++ side of the context-parallel plugin ABI (context.h). Write a class derived from
// partrain::sdk::ContextStrategy, then one line exports it:
//
//   class MyCp : public partrain::sdk::ContextStrategy {
//    public:
//     explicit MyCp(const partrain_context_init_args_v1_t& args) { ... }   // may throw
//     size_t scratch_blocks() override { return 1; }
//     void forward(const partrain::sdk::Blocks& b) override { ... b.attend(s, kv) ... }
//     void backward(const partrain::sdk::Blocks& b) override { ... }
//     void gather(const float* part, float* full, size_t count) override { ... }
//     void step_end(partrain_context_stats_v1_t* stats) override { ... }
//   };
//   PARTRAIN_CONTEXT_PLUGIN(MyCp, "mycp", "1.0.0", PARTRAIN_CAP_CPU, "what it does")
//
// The macro defines the exported `partrain_context_v1` struct; every call is wrapped in
// try/catch (sdk.h's guarded) so no exception crosses the C boundary. Blocks wraps the
// host's callbacks, start_exchange / wait drive its point-to-point table; each throws
// sdk::Error on failure.
//
// Header-only, C++17, standard library only: a plugin links nothing of partrain.
#ifndef PARTRAIN_CONTEXT_SDK_H_
#define PARTRAIN_CONTEXT_SDK_H_

#include <cstddef>

#include "partrain/context.h"
#include "partrain/sdk.h" /* sdk::Error, detail::guarded, the collectives */

namespace partrain::sdk {

// Starts one exchange on the host's point-to-point table (send to `to`, receive from `from`;
// a 0 count leaves that half out); throws Error on failure.
inline void* start_exchange(const partrain_p2p_v1_t& p, const float* send, size_t send_count, int to,
                            float* recv, size_t recv_count, int from) {
  char err[1024] = {0};
  void* work = nullptr;
  detail::check(p.exchange(p.ctx, send, send_count, to, recv, recv_count, from, &work, err, sizeof err), err);
  return work;
}

// Waits for an exchange started above; throws Error on failure.
inline void wait(const partrain_p2p_v1_t& p, void* work) {
  char err[1024] = {0};
  detail::check(p.wait(p.ctx, work, err, sizeof err), err);
}

// One forward or backward's blocks and the host's compute on them.
class Blocks {
 public:
  explicit Blocks(const partrain_context_blocks_v1_t& b) : b_(b) {}
  size_t count() const { return b_.count; }
  const float* kv() const { return b_.kv; }
  float* dkv() const { return b_.dkv; }
  // Scratch block i (i < scratch_blocks()).
  float* scratch(size_t i) const { return b_.scratch + i * b_.count; }
  void attend(int source, const float* kv) const {
    char err[1024] = {0};
    detail::check(b_.attend(b_.ctx, source, kv, err, sizeof err), err);
  }
  void attend_backward(int source, const float* kv, float* dkv) const {
    char err[1024] = {0};
    detail::check(b_.attend_backward(b_.ctx, source, kv, dkv, err, sizeof err), err);
  }
  void zero(float* data) const {
    char err[1024] = {0};
    detail::check(b_.zero(b_.ctx, data, b_.count, err, sizeof err), err);
  }
  void add(float* dst, const float* src) const {
    char err[1024] = {0};
    detail::check(b_.add(b_.ctx, dst, src, b_.count, err, sizeof err), err);
  }

 private:
  partrain_context_blocks_v1_t b_;
};

class ContextStrategy {
 public:
  virtual ~ContextStrategy() = default;
  virtual size_t scratch_blocks() = 0;
  virtual void forward(const Blocks& blocks) = 0;
  virtual void backward(const Blocks& blocks) = 0;
  virtual void gather(const float* part, float* full, size_t count) = 0;
  virtual void step_end(partrain_context_stats_v1_t* /*stats*/) {}
};

namespace detail {

template <typename T>
struct ContextTrampolines : TrampolineBase<ContextStrategy> {
  static int init(const partrain_context_init_args_v1_t* args, void** state, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
      if (args == nullptr || state == nullptr || args->cp == nullptr || args->cp_p2p == nullptr) {
        throw Error(PARTRAIN_EINVAL, "init: null argument");
      }
      *state = static_cast<ContextStrategy*>(new T(*args));
    });
  }
  static int scratch_blocks(void* state, size_t* blocks, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { *blocks = self(state)->scratch_blocks(); });
  }
  static int forward(void* state, const partrain_context_blocks_v1_t* b, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->forward(Blocks(*b)); });
  }
  static int backward(void* state, const partrain_context_blocks_v1_t* b, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->backward(Blocks(*b)); });
  }
  static int gather(void* state, const float* part, float* full, size_t count, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->gather(part, full, count); });
  }
  static int step_end(void* state, partrain_context_stats_v1_t* stats, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->step_end(stats); });
  }
};

}  // namespace detail
}  // namespace partrain::sdk

// Exports CLASS as the plugin's partrain_context_v1. Use once per shared object, at
// namespace scope.
#define PARTRAIN_CONTEXT_PLUGIN(CLASS, NAME, VERSION, CAPS, DESCRIPTION)                   \
  PARTRAIN_SDK_EXPORT(partrain_context_v1_t, partrain_context_v1) {                       \
      PARTRAIN_CONTEXT_ABI_VERSION,                                                       \
      NAME,                                                                               \
      VERSION,                                                                            \
      CAPS,                                                                               \
      DESCRIPTION,                                                                        \
      &::partrain::sdk::detail::ContextTrampolines<CLASS>::init,                          \
      &::partrain::sdk::detail::ContextTrampolines<CLASS>::scratch_blocks,                \
      &::partrain::sdk::detail::ContextTrampolines<CLASS>::forward,                       \
      &::partrain::sdk::detail::ContextTrampolines<CLASS>::backward,                      \
      &::partrain::sdk::detail::ContextTrampolines<CLASS>::gather,                        \
      &::partrain::sdk::detail::ContextTrampolines<CLASS>::step_end,                      \
      &::partrain::sdk::detail::ContextTrampolines<CLASS>::finalize,                      \
  };

#endif  // PARTRAIN_CONTEXT_SDK_H_
