// The NCCL communicator on real GPUs: one rank per device (threads of this process, ranks
// found through an in-process rendezvous server), every collective checked exactly on small
// integers for world 1, world 2 (two GPUs) and up to 4; a compute stream set after creation
// orders the operations. Skips (exit 77) where there is no CUDA device.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/gloo/gloo_communicator.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/rendezvous/server.h"

namespace partrain::comm {
namespace {

constexpr const char* kSecret = "nccl-test-secret-0123456789abcdef";

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

// A device buffer filled from host values, read back on demand.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<float>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<size_t>(1, size_) * sizeof(float)), cudaSuccess);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(ptr_, host.data(), size_ * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  explicit DeviceBuffer(size_t n) : DeviceBuffer(std::vector<float>(n, -1.0f)) {}
  ~DeviceBuffer() { cudaFree(ptr_); }
  float* get() { return ptr_; }
  std::vector<float> host() const {
    std::vector<float> out(size_);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(out.data(), ptr_, size_ * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }

 private:
  float* ptr_ = nullptr;
  size_t size_;
};

void run_rank(int rank, int world, int port) {
  ASSERT_EQ(cudaSetDevice(rank), cudaSuccess);
  RendezvousClientOptions copts;
  copts.connect_timeout = std::chrono::seconds(10);
  auto store = RendezvousClient::connect("127.0.0.1", port, kSecret, copts);
  ASSERT_TRUE(store.is_ok()) << store.status().message();
  std::vector<int> members(world);
  for (int i = 0; i < world; ++i) members[i] = i;
  NcclOptions options;
  options.device = rank;
  options.timeout = std::chrono::seconds(60);
  auto made = create_nccl_communicator(GroupSpec{"nccl_world", members, rank}, **store, options);
  ASSERT_TRUE(made.is_ok()) << made.status().message();
  Communicator& c = **made;
  EXPECT_STREQ(c.backend(), "nccl");
  const size_t n = static_cast<size_t>(world);

  // all_reduce: rank r holds (r + 1) * (i + 1).
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    std::vector<float> h(7);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>((rank + 1) * (i + 1));
    DeviceBuffer d(h);
    ASSERT_TRUE(c.all_reduce(d.get(), h.size(), op)->wait().is_ok());
    auto got = d.host();
    for (size_t i = 0; i < h.size(); ++i) {
      float sum = static_cast<float>(world * (world + 1) / 2 * (i + 1));
      float want = op == ReduceOp::kSum ? sum
                   : op == ReduceOp::kMax ? static_cast<float>(world * (i + 1))
                                          : sum / static_cast<float>(world);
      EXPECT_EQ(got[i], want) << reduce_op_name(op) << " element " << i;
    }
  }
  // reduce_scatter, even then uneven shares.
  for (bool uneven : {false, true}) {
    std::vector<size_t> counts(n);
    for (size_t q = 0; q < n; ++q) counts[q] = uneven ? (q * 3 + 2) % 4 + (n == 1 ? 1 : 0) : 3;
    size_t total = 0, offset = 0;
    for (size_t q = 0; q < n; ++q) {
      if (static_cast<int>(q) < rank) offset += counts[q];
      total += counts[q];
    }
    std::vector<float> h(total);
    for (size_t j = 0; j < total; ++j) h[j] = static_cast<float>((rank + 1) * (j + 1));
    DeviceBuffer in(h), out(counts[rank]);
    ASSERT_TRUE(c.reduce_scatter(in.get(), out.get(), counts, ReduceOp::kSum)->wait().is_ok());
    auto got = out.host();
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k], static_cast<float>(world * (world + 1) / 2 * (offset + k + 1))) << "reduce_scatter " << k;
    }
  }
  // all_gather with uneven blocks.
  {
    std::vector<size_t> counts(n);
    for (size_t q = 0; q < n; ++q) counts[q] = q % 3 + 1;
    std::vector<float> h(counts[rank]);
    for (size_t k = 0; k < h.size(); ++k) h[k] = static_cast<float>(100 * rank + k);
    std::vector<float> want;
    for (size_t q = 0; q < n; ++q) {
      for (size_t k = 0; k < counts[q]; ++k) want.push_back(static_cast<float>(100 * q + k));
    }
    DeviceBuffer in(h), out(want.size());
    ASSERT_TRUE(c.all_gather(in.get(), out.get(), counts)->wait().is_ok());
    EXPECT_EQ(out.host(), want);
  }
  // all_to_allv: rank a sends (a + 2b) % 4 + 1 elements to rank b.
  {
    std::vector<size_t> send(n), recv(n);
    std::vector<float> h, want;
    for (size_t b = 0; b < n; ++b) {
      send[b] = (rank + 2 * b) % 4 + 1;
      recv[b] = (b + 2 * rank) % 4 + 1;
      for (size_t k = 0; k < send[b]; ++k) h.push_back(static_cast<float>(10000 * rank + 100 * b + k));
      for (size_t k = 0; k < recv[b]; ++k) want.push_back(static_cast<float>(10000 * b + 100 * rank + k));
    }
    DeviceBuffer in(h), out(want.size());
    ASSERT_TRUE(c.all_to_allv(in.get(), send, out.get(), recv)->wait().is_ok());
    EXPECT_EQ(out.host(), want);
  }
  // broadcast from the last rank.
  {
    std::vector<float> h(9, -1.0f), want(9);
    for (size_t k = 0; k < 9; ++k) want[k] = static_cast<float>(1000 * (world - 1) + k);
    if (rank == world - 1) h = want;
    DeviceBuffer d(h);
    ASSERT_TRUE(c.broadcast(d.get(), 9, world - 1)->wait().is_ok());
    EXPECT_EQ(d.host(), want);
  }
  // A ring exchange as one batch.
  if (world > 1) {
    int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    std::vector<float> h(4);
    for (size_t k = 0; k < 4; ++k) h[k] = static_cast<float>(7 * rank + k);
    DeviceBuffer out(h), in(4);
    std::vector<Communicator::P2pOp> ops = {{true, c.f32(out.get(), 4), next}, {false, c.f32(in.get(), 4), prev}};
    ASSERT_TRUE(c.batch_send_recv(ops)->wait().is_ok());
    std::vector<float> want(4);
    for (size_t k = 0; k < 4; ++k) want[k] = static_cast<float>(7 * prev + k);
    EXPECT_EQ(in.host(), want);
  }
  // Typed buffers: i32 sums exact; bf16 small integers exact; a host pointer, or a buffer
  // marked host, refused before NCCL sees it.
  {
    std::vector<int32_t> hi(5);
    for (size_t k = 0; k < hi.size(); ++k) hi[k] = 1000 * rank - static_cast<int32_t>(k);
    void* di = nullptr;
    ASSERT_EQ(cudaMalloc(&di, hi.size() * sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(di, hi.data(), hi.size() * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_TRUE(c.all_reduce(Buffer{di, DType::kI32, hi.size(), Memory::kDevice}, ReduceOp::kSum)->wait().is_ok());
    ASSERT_EQ(cudaMemcpy(hi.data(), di, hi.size() * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t k = 0; k < hi.size(); ++k) {
      EXPECT_EQ(hi[k], 1000 * (world * (world - 1) / 2) - world * static_cast<int32_t>(k)) << "i32 " << k;
    }
    std::vector<uint16_t> hb(6);
    for (size_t k = 0; k < hb.size(); ++k) hb[k] = to_bf16(static_cast<float>(rank + k));
    void* db = nullptr;
    ASSERT_EQ(cudaMalloc(&db, hb.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(db, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_TRUE(c.all_reduce(Buffer{db, DType::kBF16, hb.size(), Memory::kDevice}, ReduceOp::kSum)->wait().is_ok());
    ASSERT_EQ(cudaMemcpy(hb.data(), db, hb.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t k = 0; k < hb.size(); ++k) {
      EXPECT_EQ(from_bf16(hb[k]), static_cast<float>(world * (world - 1) / 2 + world * static_cast<int>(k))) << k;
    }
    std::vector<float> host(4, 1.0f);
    const Status as_device = c.all_reduce(Buffer{host.data(), DType::kF32, 4, Memory::kDevice}, ReduceOp::kSum)->wait();
    EXPECT_EQ(as_device.code(), StatusCode::kInvalidArgument) << as_device.message();
    EXPECT_NE(as_device.message().find("is not device memory"), std::string::npos) << as_device.message();
    const Status as_host = c.all_reduce(Buffer{host.data(), DType::kF32, 4, Memory::kHost}, ReduceOp::kSum)->wait();
    EXPECT_EQ(as_host.code(), StatusCode::kInvalidArgument) << as_host.message();
    cudaFree(di);
    cudaFree(db);
  }
  // Two operations outstanding, then a barrier.
  {
    std::vector<float> h(1 << 20, static_cast<float>(rank + 1));
    DeviceBuffer a(h), b(h);
    auto w1 = c.all_reduce(a.get(), h.size(), ReduceOp::kSum);
    auto w2 = c.all_reduce(b.get(), h.size(), ReduceOp::kMax);
    ASSERT_TRUE(w2->wait().is_ok());
    ASSERT_TRUE(w1->wait().is_ok());
    EXPECT_EQ(a.host()[12345], static_cast<float>(world * (world + 1) / 2));
    EXPECT_EQ(b.host()[54321], static_cast<float>(world));
    ASSERT_TRUE(c.barrier()->wait().is_ok());
  }
  // abort(): later operations fail at once.
  c.abort("test");
  DeviceBuffer d(4);
  auto start = std::chrono::steady_clock::now();
  Status after = c.all_reduce(d.get(), 4, ReduceOp::kSum)->wait();
  EXPECT_EQ(after.code(), StatusCode::kUnavailable) << after.message();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
}

// `world` ranks, one thread and one GPU each, through an in-process rendezvous server.
void run_world(int world) {
  RendezvousServerOptions o;
  o.host = "127.0.0.1";
  auto server = RendezvousServer::start(kSecret, o);
  ASSERT_TRUE(server.is_ok()) << server.status().message();
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(run_rank, r, world, (*server)->port());
  for (auto& t : ranks) t.join();
}

TEST(NcclCommunicator, EveryCollectiveExactOnOneGpu) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  run_world(1);
}

TEST(NcclCommunicator, EveryCollectiveExactOnTwoGpus) {
  if (device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices (NCCL refuses two ranks on one), found " << device_count();
  run_world(2);
}

TEST(NcclCommunicator, EveryCollectiveExactOnEachVisibleGpu) {
  int devices = device_count();
  if (devices < 3) GTEST_SKIP() << "one and two GPUs are covered above; found " << devices;
  run_world(std::min(devices, 4));
}

// A rendezvous server of this process and one client of it (null client on failure).
struct LocalStore {
  std::unique_ptr<RendezvousServer> server;
  std::unique_ptr<RendezvousClient> client;
  LocalStore() {
    RendezvousServerOptions so;
    so.host = "127.0.0.1";
    auto s = RendezvousServer::start(kSecret, so);
    if (!s) return;
    server = std::move(s).value();
    auto c = RendezvousClient::connect("127.0.0.1", server->port(), kSecret);
    if (c) client = std::move(c).value();
  }
};

// Holds the stream it is enqueued on for 200 ms: work queued behind it waits that long.
void CUDART_CB hold_stream(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

// The worker makes its backend (and so its compute stream) after the communicator:
// set_nccl_compute_stream must order later operations after that stream's work. The input
// is written on the compute stream behind a 200 ms hold; an all-gather that did not wait
// would copy the old values.
TEST(NcclCommunicator, ComputeStreamSetLaterOrdersOperations) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  LocalStore local;
  ASSERT_TRUE(local.client) << "no rendezvous store";
  auto made = create_nccl_communicator(GroupSpec{"late_stream", {0}, 0}, *local.client, NcclOptions{.device = 0});
  ASSERT_TRUE(made.is_ok()) << made.status().message();
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_TRUE(set_nccl_compute_stream(**made, compute).is_ok());
  constexpr size_t kN = 1 << 16;
  DeviceBuffer in(std::vector<float>(kN, -1.0f)), out(kN);
  ASSERT_EQ(cudaLaunchHostFunc(compute, hold_stream, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(in.get(), 0, kN * sizeof(float), compute), cudaSuccess);  // 0.0f
  ASSERT_TRUE((*made)->all_gather(in.get(), out.get(), kN)->wait().is_ok());
  const std::vector<float> got = out.host();
  EXPECT_EQ(got.front(), 0.0f);
  EXPECT_EQ(got.back(), 0.0f);
  EXPECT_EQ(cudaStreamDestroy(compute), cudaSuccess);
}

TEST(NcclCommunicator, ComputeStreamIsRefusedForAnotherBackend) {
  // A Gloo group of one: it has no stream to wait for.
  LocalStore local;
  ASSERT_TRUE(local.client) << "no rendezvous store";
  auto gloo = create_gloo_communicator(GroupSpec{"cpu_group", {0}, 0}, *local.client, GlooOptions{.host = "127.0.0.1"});
  ASSERT_TRUE(gloo.is_ok()) << gloo.status().message();
  const Status s = set_nccl_compute_stream(**gloo, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "group 'cpu_group' is a gloo communicator, not NCCL: it has no compute stream");
}

}  // namespace
}  // namespace partrain::comm

// Exit 77 (CTest's skip) without a device; listing the tests (CTest discovery at build
// time) must work on machines without one.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (::testing::GTEST_FLAG(list_tests)) return RUN_ALL_TESTS();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device: skipping the NCCL tests\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
