// The emulated GPU (daemon/gpu/emu) bites where a GPU would: it is loaded as `--device cuda`
// loads the real module (PARTRAIN_CUDA_MODULE), and each test makes a mistake a strategy
// could make and checks that it fails, naming the mistake:
//   - a host load through a device pointer crashes (SIGSEGV), as on a GPU;
//   - a host pointer, or a device buffer marked host, handed to a device collective;
//   - a bf16 allocation handed to a collective (or a kernel) as f32;
//   - receives that rely on tags: messages between two ranks match in issue order;
//   - ranks of one group calling different collectives;
//   - two ranks of one communicator on one GPU (NCCL's "Duplicate GPU detected");
//   - a kernel given a host pointer, a range past its allocation, or mixed dtypes.
// And it computes: a tensor round-trips, a typed all-reduce and a ring exchange on device
// buffers give the exact sums. Ranks are threads of this process with an in-process
// rendezvous server (tests/plugin/thread_ranks.h).
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/rendezvous/client.h"
#include "engine/backend.h"
#include "gpu/cuda_module.h"
#include "plugin/thread_ranks.h"

namespace partrain {
namespace {

constexpr const char* kSecret = "emu-test-secret-0123456789abcdef0123";

using comm::Buffer;
using comm::Memory;
using comm::ReduceOp;
using engine::MemCategory;
using engine::Shape;
using engine::Tensor;

const gpu::CudaModule& module() {
  ::setenv("PARTRAIN_CUDA_MODULE", PARTRAIN_GPU_EMU_MODULE, 1);
  Result<const gpu::CudaModule*> m = gpu::cuda_module();
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return **m;
}

std::unique_ptr<engine::Backend> backend(DType storage = DType::kF32) {
  Result<std::unique_ptr<engine::Backend>> b = module().make_backend(0, storage);
  EXPECT_TRUE(b.is_ok()) << b.status().message();
  return std::move(b).value();
}

Tensor alloc(engine::Backend& be, DType dtype, int64_t n) {
  Result<Tensor> t = be.alloc(MemCategory::kWorkspace, dtype, Shape{n});
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return *t;
}

Buffer device(const Tensor& t) { return Buffer{t.data, t.dtype, static_cast<size_t>(t.numel()), Memory::kDevice}; }

// `world` ranks, each with its emulated NCCL communicator of all of them on GPU `gpu(rank)`.
template <typename Fn>
void with_group(int world, const std::string& name, Fn fn, int (*gpu)(int) = [](int r) { return r; }) {
  testing::run_thread_ranks(world, kSecret, [&](int rank, int port) {
    auto store = comm::RendezvousClient::connect("127.0.0.1", port, kSecret);
    ASSERT_TRUE(store.is_ok()) << store.status().message();
    std::vector<int> members(static_cast<size_t>(world));
    for (int i = 0; i < world; ++i) members[static_cast<size_t>(i)] = i;
    comm::NcclOptions o;
    o.device = gpu(rank);
    o.host = "127.0.0.1";
    o.timeout = std::chrono::seconds(20);
    o.connect_timeout = std::chrono::seconds(20);
    auto c = module().create_nccl(comm::GroupSpec{name, members, rank}, **store, o);
    fn(rank, c);
  });
}

TEST(EmulatedGpu, HostLoadThroughADevicePointerCrashes) {
  auto be = backend();
  const Tensor t = alloc(*be, DType::kF32, 16);
  std::vector<float> ones(16, 1.0f);
  be->to_device(t, ones.data());  // fine: the module writes the backing
  ASSERT_TRUE(be->status().is_ok());
  EXPECT_DEATH({ std::printf("%f\n", static_cast<double>(*static_cast<volatile float*>(t.data))); }, "");
}

TEST(EmulatedGpu, TensorsRoundTripAndKernelsRefuseWhatCudaRefuses) {
  auto be = backend(DType::kBF16);
  EXPECT_NE(be->name().find("emulated"), std::string::npos);
  const Tensor x = alloc(*be, DType::kBF16, 5);
  const std::vector<float> in = {1.0f, -2.5f, 3.0f, 1.00390625f, 0.0f};
  be->to_device(x, in.data());
  std::vector<float> out(5);
  be->to_host(out.data(), x);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.5f, 3.0f, 1.0f, 0.0f}));  // stored as bf16 (1 + 2^-8 rounds to 1)
  // A bf16 allocation viewed as f32: refused, the error kept, later ops skipped.
  be->scale(Tensor{x.data, DType::kF32, Shape{2}}, 2.0f);
  ASSERT_FALSE(be->status().is_ok());
  EXPECT_NE(be->status().message().find("a bf16 allocation read as f32"), std::string::npos) << be->status().message();

  auto b2 = backend();
  std::vector<float> host(8, 1.0f);
  b2->scale(Tensor{host.data(), DType::kF32, Shape{8}}, 2.0f);  // a host pointer
  EXPECT_NE(b2->status().message().find("is not device memory"), std::string::npos) << b2->status().message();
  auto b3 = backend();
  const Tensor y = alloc(*b3, DType::kF32, 8);
  b3->zero(y.slice(4, Shape{8}));  // past the end
  EXPECT_NE(b3->status().message().find("run past the end of its 32-byte allocation by 16 bytes"), std::string::npos)
      << b3->status().message();
  auto b4 = backend();
  const Tensor a = alloc(*b4, DType::kF32, 4), h = alloc(*b4, DType::kI32, 4);
  b4->gelu_forward(a, Tensor{h.data, DType::kI32, Shape{4}});
  EXPECT_NE(b4->status().message().find("gelu_forward: mixes f32 and i32"), std::string::npos)
      << b4->status().message();
}

TEST(EmulatedGpu, DeviceCollectivesComputeTypedResults) {
  with_group(2, "sums", [](int rank, auto& c) {
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    comm::Communicator& g = **c;
    EXPECT_EQ(g.memory(), Memory::kDevice);
    auto be = backend(DType::kBF16);
    const Tensor x = alloc(*be, DType::kBF16, 6), i = alloc(*be, DType::kI32, 3);
    std::vector<float> v(6);
    for (int k = 0; k < 6; ++k) v[static_cast<size_t>(k)] = static_cast<float>(rank + k);
    be->to_device(x, v.data());
    const std::vector<int32_t> iv = {rank, 10 * rank, -rank};
    be->to_device_i32(i, iv.data());
    ASSERT_TRUE(g.all_reduce(device(x), ReduceOp::kSum)->wait().is_ok());
    ASSERT_TRUE(g.all_reduce(device(i), ReduceOp::kMax)->wait().is_ok());
    be->to_host(v.data(), x);
    for (int k = 0; k < 6; ++k) EXPECT_EQ(v[static_cast<size_t>(k)], static_cast<float>(1 + 2 * k));
    std::vector<int32_t> got(3);
    be->to_host_i32(got.data(), i);
    EXPECT_EQ(got, (std::vector<int32_t>{1, 10, 0}));
    // A ring exchange as one batch.
    const Tensor s = alloc(*be, DType::kF32, 3), r = alloc(*be, DType::kF32, 3);
    const std::vector<float> mine = {100.0f * rank, 1, 2};
    be->to_device(s, mine.data());
    ASSERT_TRUE(g.batch_send_recv({{true, device(s), 1 - rank}, {false, device(r), 1 - rank}})->wait().is_ok());
    std::vector<float> theirs(3);
    be->to_host(theirs.data(), r);
    EXPECT_EQ(theirs, (std::vector<float>{100.0f * (1 - rank), 1, 2}));
    EXPECT_TRUE(be->status().is_ok()) << be->status().message();
  });
}

TEST(EmulatedGpu, HostMemoryGivenToADeviceCollectiveIsRefused) {
  with_group(2, "host", [](int, auto& c) {
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    std::vector<float> host(4, 1.0f);
    const Status pointer = (*c)->all_reduce(Buffer{host.data(), DType::kF32, 4, Memory::kDevice}, ReduceOp::kSum)->wait();
    EXPECT_EQ(pointer.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(pointer.message().find("is not device memory"), std::string::npos) << pointer.message();
    const Status marked = (*c)->all_reduce(host.data(), 0, ReduceOp::kSum)->wait();  // nothing to move: fine
    EXPECT_TRUE(marked.is_ok()) << marked.message();
    const Status flagged = (*c)->all_reduce(Buffer{host.data(), DType::kF32, 4, Memory::kHost}, ReduceOp::kSum)->wait();
    EXPECT_NE(flagged.message().find("a host buffer given to a transport that moves device memory"),
              std::string::npos) << flagged.message();
  });
}

TEST(EmulatedGpu, Bf16ReadAsF32IsRefused) {
  with_group(2, "dtype", [](int, auto& c) {
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    auto be = backend(DType::kBF16);
    const Tensor x = alloc(*be, DType::kBF16, 8);
    const Status s = (*c)->all_reduce(Buffer{x.data, DType::kF32, 4, Memory::kDevice}, ReduceOp::kSum)->wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("a bf16 allocation read as f32"), std::string::npos) << s.message();
  });
}

TEST(EmulatedGpu, ReceivesMatchInIssueOrderNotByTag) {
  // Rank 0 sends 10 floats, then 20; rank 1 receives the 20 first, as a tag-matched
  // protocol could: the first message in issue order holds 10, and that is the error.
  with_group(2, "order", [](int rank, auto& c) {
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    auto be = backend();
    const Tensor a = alloc(*be, DType::kF32, 10), b = alloc(*be, DType::kF32, 20);
    if (rank == 0) {
      auto sa = (*c)->send(device(a), 1);
      auto sb = (*c)->send(device(b), 1);
      (void)sa->wait();  // fails or not: the receiver refuses and aborts the group
      (void)sb->wait();
      return;
    }
    auto rb = (*c)->recv(device(b), 0);
    auto ra = (*c)->recv(device(a), 0);
    const Status s = rb->wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find("expects 20 f32 elements, but the message rank 0 sent in its place (the next in "
                               "issue order) holds 10 f32"), std::string::npos) << s.message();
    (void)ra->wait();
  });
}

TEST(EmulatedGpu, RanksCallingDifferentCollectivesAreNamed) {
  with_group(2, "calls", [](int rank, auto& c) {
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    auto be = backend();
    const Tensor x = alloc(*be, DType::kF32, 8);
    const Status s = (*c)->all_reduce(device(x.slice(0, Shape{rank == 0 ? 4 : 8})), ReduceOp::kSum)->wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find(rank == 0 ? "rank 1 calls all_reduce(8 f32, op 0) where this rank calls "
                                           "all_reduce(4 f32, op 0)"
                                         : "rank 0 calls all_reduce(4 f32, op 0) where this rank calls "
                                           "all_reduce(8 f32, op 0)"),
              std::string::npos) << s.message();
  });
}

TEST(EmulatedGpu, TwoRanksOnOneGpuAreRefusedAsNcclDoes) {
  with_group(
      2, "shared",
      [](int, auto& c) {
        ASSERT_FALSE(c.is_ok());
        EXPECT_NE(c.status().message().find("ranks 0 and 1 are both on GPU EMU-0"), std::string::npos)
            << c.status().message();
      },
      [](int) { return 0; });
}

}  // namespace
}  // namespace partrain
