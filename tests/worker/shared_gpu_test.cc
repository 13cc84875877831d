// Ranks that share one GPU, as a worker makes their group (worker/transports.h): each
// publishes its GPU's id, the group sees that they share one and takes the staged transport,
// which, bound to each rank's CUDA backend, moves device tensors (bf16, f32, i32) through
// host memory: all-reduce (bf16 summed in fp32), reduce-scatter, all-gather, broadcast and a
// point-to-point exchange give the exact results, and a host pointer is refused.
//
// Built twice from this file: shared_gpu_test (label gpu) on the real GPU module and one
// device, skipping (exit 77) without one; shared_gpu_emulated_test (label unit) on the
// emulated module (daemon/gpu/emu), so CI runs the same path. Two ranks are two threads.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend.h"
#include "gpu/cuda_module.h"
#include "plugin/thread_ranks.h"
#include "worker/transports.h"

namespace partrain::worker {
namespace {

constexpr const char* kSecret = "shared-gpu-test-secret-0123456789abcd";

using comm::Buffer;
using comm::Memory;
using comm::ReduceOp;
using engine::Tensor;

bool have_device() {
#if defined(PARTRAIN_GPU_EMU_MODULE)
  ::setenv("PARTRAIN_CUDA_MODULE", PARTRAIN_GPU_EMU_MODULE, 1);
#elif defined(PARTRAIN_CUDA_MODULE_FILE)
  // The build's module: a test program is not in bin/, so the loader would look under its
  // own folder (common/install_dir.h). A module named by the caller (gpu-check) wins.
  ::setenv("PARTRAIN_CUDA_MODULE", PARTRAIN_CUDA_MODULE_FILE, 0);
#endif
  Result<const gpu::CudaModule*> m = gpu::cuda_module();
  return m.is_ok() && (*m)->device_available();
}

Tensor alloc(engine::Backend& be, DType t, int64_t n) {
  Result<Tensor> x = be.alloc(engine::MemCategory::kWorkspace, t, engine::Shape{n});
  EXPECT_TRUE(x.is_ok()) << x.status().message();
  return *x;
}

Buffer dev(const Tensor& t) { return tensor_buffer(t, Memory::kDevice); }

void run_rank(int rank, int port) {
  auto store = comm::RendezvousClient::connect("127.0.0.1", port, kSecret);
  ASSERT_TRUE(store.is_ok()) << store.status().message();
  Result<GpuIds> ids = GpuIds::publish(**store, "t/", rank, std::chrono::seconds(20));
  ASSERT_TRUE(ids.is_ok()) << ids.status().message();
  comm::GlooOptions gloo;
  gloo.host = "127.0.0.1";
  const comm::GroupSpec spec{"t/shared0", {0, 1}, rank};
  Result<Choice> choice = choose_transport("cuda", spec.members, &*ids);
  ASSERT_TRUE(choice.is_ok()) << choice.status().message();
  EXPECT_EQ(choice->transport, Transport::kStaged);
  EXPECT_NE(choice->why.find("ranks 0 and 1 share GPU"), std::string::npos) << choice->why;
  Result<GroupComms> g = make_group(spec, **store, "cuda", gloo, &*ids);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  comm::Communicator& c = *g->comm;
  ASSERT_NE(g->host, nullptr);  // the host channel of the group's scalars
  EXPECT_STREQ(c.backend(), "staged");
  EXPECT_EQ(c.memory(), Memory::kDevice);

  Result<std::unique_ptr<engine::Backend>> made = engine::make_backend("cuda", "bf16");
  ASSERT_TRUE(made.is_ok()) << made.status().message();
  engine::Backend& be = **made;
  const Tensor x = alloc(be, DType::kBF16, 5);
  // Before the backend is bound, the transport cannot reach the device and says so.
  const Status unbound = c.all_reduce(dev(x), ReduceOp::kSum)->wait();
  EXPECT_NE(unbound.message().find("has no device yet"), std::string::npos) << unbound.message();
  ASSERT_TRUE(bind_to_backend(c, be).is_ok());

  // bf16 all-reduce: 0.5 + r + k summed over two ranks, exact in bf16.
  std::vector<float> v(5);
  for (int k = 0; k < 5; ++k) v[static_cast<size_t>(k)] = 0.5f + static_cast<float>(rank + k);
  be.to_device(x, v.data());
  ASSERT_TRUE(c.all_reduce(dev(x), ReduceOp::kSum)->wait().is_ok());
  be.to_host(v.data(), x);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(v[static_cast<size_t>(k)], static_cast<float>(2 + 2 * k)) << k;
  // i32 max.
  const Tensor i = alloc(be, DType::kI32, 2);
  const std::vector<int32_t> iv = {7 * rank, -rank};
  be.to_device_i32(i, iv.data());
  ASSERT_TRUE(c.all_reduce(dev(i), ReduceOp::kMax)->wait().is_ok());
  std::vector<int32_t> imax(2);
  be.to_host_i32(imax.data(), i);
  EXPECT_EQ(imax, (std::vector<int32_t>{7, 0}));
  // f32 reduce-scatter of uneven shares (3 and 1), then all-gather them back.
  const Tensor full = alloc(be, DType::kF32, 4), part = alloc(be, DType::kF32, rank == 0 ? 3 : 1),
               again = alloc(be, DType::kF32, 4);
  const std::vector<float> fv = {1.0f + rank, 2.0f, 3.0f, 4.0f * rank};
  be.to_device(full, fv.data());
  ASSERT_TRUE(c.reduce_scatter(dev(full), dev(part), {3, 1}, ReduceOp::kSum)->wait().is_ok());
  ASSERT_TRUE(c.all_gather(dev(part), dev(again), {3, 1})->wait().is_ok());
  std::vector<float> got(4);
  be.to_host(got.data(), again);
  EXPECT_EQ(got, (std::vector<float>{3.0f, 4.0f, 6.0f, 4.0f}));
  // Broadcast of rank 1's bf16 values, and an exchange.
  const Tensor b = alloc(be, DType::kBF16, 3), s = alloc(be, DType::kBF16, 3), r = alloc(be, DType::kBF16, 3);
  const std::vector<float> bv = {-1.0f * rank, 2.5f * rank, 0.25f}, sv = {10.0f * rank, 1.0f, -1.0f};
  be.to_device(b, bv.data());
  be.to_device(s, sv.data());
  ASSERT_TRUE(c.broadcast(dev(b), 1)->wait().is_ok());
  ASSERT_TRUE(c.batch_send_recv({{true, dev(s), 1 - rank}, {false, dev(r), 1 - rank}})->wait().is_ok());
  std::vector<float> bb(3), rr(3);
  be.to_host(bb.data(), b);
  be.to_host(rr.data(), r);
  EXPECT_EQ(bb, (std::vector<float>{-1.0f, 2.5f, 0.25f}));
  EXPECT_EQ(rr, (std::vector<float>{10.0f * (1 - rank), 1.0f, -1.0f}));
  // Host memory refused: this is a device transport.
  std::vector<float> host(2, 1.0f);
  const Status refused = c.all_reduce(comm::host_f32(host.data(), 2), ReduceOp::kSum)->wait();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.message();
  // The host channel moves the host's scalars.
  float loss = 1.5f + static_cast<float>(rank);
  ASSERT_TRUE(g->host->all_reduce(&loss, 1, ReduceOp::kSum)->wait().is_ok());
  EXPECT_EQ(loss, 4.0f);
  EXPECT_TRUE(be.status().is_ok()) << be.status().message();
}

TEST(SharedGpu, RanksOnOneGpuStageTheirTensorsThroughTheHost) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  testing::run_thread_ranks(2, kSecret, run_rank);
}

}  // namespace
}  // namespace partrain::worker
