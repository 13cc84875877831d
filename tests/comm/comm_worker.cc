// One rank of a multi-process communicator test, started N times by comm_collectives_test:
//
//   comm_worker MODE RANK WORLD PORT        (job secret in PARTRAIN_JOB_SECRET)
//
// MODE collectives  every collective on several group shapes against exact expected values
// MODE abort        world 2: rank 0 aborts a blocked all-reduce; both ranks fail promptly
// MODE peer_death   world 3: rank 2 dies; the survivors' all-reduce fails, never hangs
//
// Inputs are small integers in float32, so sums are exact and the expected values below,
// computed with integer arithmetic from each rank's formula, must match bit for bit.
// Exit 0 when every check passed; failures are printed to stderr.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/communicator.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/secret.h"
#include "comm/rendezvous/client.h"

namespace pc = partrain::comm;
using Clock = std::chrono::steady_clock;

namespace {

int g_rank = 0;
int g_failures = 0;
int g_compared = 0;  // buffers compared, printed so a run that checked nothing stands out

#define CHECK_OR_COUNT(cond, ...)                                               \
  do {                                                                          \
    if (!(cond)) {                                                              \
      ++g_failures;                                                             \
      if (g_failures < 20) {                                                    \
        fmt::print(stderr, "rank {}: check failed: {}: {}\n", g_rank, #cond,    \
                   fmt::format(__VA_ARGS__));                                   \
      }                                                                         \
    }                                                                           \
  } while (0)

void expect_ok(const partrain::Status& s, const std::string& what) {
  CHECK_OR_COUNT(s.is_ok(), "{}: {}", what, s.message());
}

void expect_equal(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ++g_compared;
  CHECK_OR_COUNT(got.size() == want.size(), "{}: size {} vs {}", what, got.size(), want.size());
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (got[i] != static_cast<float>(want[i])) {
      CHECK_OR_COUNT(false, "{}: element {} is {} expected {}", what, i, got[i], want[i]);
      return;
    }
  }
}

// Each op's expected result from the per-rank input formula, computed independently.
double reduce_expected(pc::ReduceOp op, const std::vector<double>& per_rank) {
  double sum = 0, mx = -1e300;
  for (double v : per_rank) {
    sum += v;
    mx = std::max(mx, v);
  }
  if (op == pc::ReduceOp::kMax) return mx;
  if (op == pc::ReduceOp::kAvg) {
    // One correctly rounded float division of the exact sum, as the backend performs.
    return static_cast<double>(static_cast<float>(sum) / static_cast<float>(per_rank.size()));
  }
  return sum;
}

const pc::ReduceOp kOps[] = {pc::ReduceOp::kSum, pc::ReduceOp::kAvg, pc::ReduceOp::kMax};

void check_all_reduce(pc::Communicator& c) {
  const auto& m = c.group().members;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1027}}) {
    for (auto op : kOps) {
      // Member g contributes (g + 1) * (i % 17 + 1) + g % 2: sums not divisible by the group
      // size, so kAvg's rounding is checked too.
      auto value = [](int g, size_t i) { return static_cast<double>((g + 1) * (i % 17 + 1) + g % 2); };
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(value(m[c.rank()], i));
      std::vector<double> want(count);
      for (size_t i = 0; i < count; ++i) {
        std::vector<double> per;
        for (int g : m) per.push_back(value(g, i));
        want[i] = reduce_expected(op, per);
      }
      std::string what = fmt::format("{} all_reduce {} n={}", c.group().name, pc::reduce_op_name(op), count);
      expect_ok(c.all_reduce(data.data(), count, op)->wait(), what);
      expect_equal(data, want, what);
    }
  }
}

void check_reduce_scatter(pc::Communicator& c) {
  const auto& m = c.group().members;
  const size_t n = m.size();
  std::vector<std::vector<size_t>> shapes = {std::vector<size_t>(n, 1), std::vector<size_t>(n, 5),
                                             std::vector<size_t>(n, 0)};
  std::vector<size_t> uneven(n);
  for (size_t q = 0; q < n; ++q) uneven[q] = (q * 3 + 2) % 4;  // 2, 1, 0, 3: not divisible, one empty
  shapes.push_back(uneven);
  for (const auto& counts : shapes) {
    size_t total = 0, offset = 0;
    for (size_t q = 0; q < n; ++q) {
      if (static_cast<int>(q) < c.rank()) offset += counts[q];
      total += counts[q];
    }
    for (auto op : kOps) {
      std::vector<float> in(total);
      for (size_t j = 0; j < total; ++j) in[j] = static_cast<float>((m[c.rank()] + 1) * (j + 1));
      std::vector<float> out(counts[c.rank()], -1.0f);
      std::vector<double> want(counts[c.rank()]);
      for (size_t k = 0; k < want.size(); ++k) {
        std::vector<double> per;
        for (int g : m) per.push_back(static_cast<double>((g + 1) * (offset + k + 1)));
        want[k] = reduce_expected(op, per);
      }
      std::string what = fmt::format("{} reduce_scatter {} counts [{}]", c.group().name, pc::reduce_op_name(op),
                                     fmt::join(counts, ","));
      expect_ok(c.reduce_scatter(in.data(), out.data(), counts, op)->wait(), what);
      expect_equal(out, want, what);
    }
  }
}

void check_all_gather(pc::Communicator& c) {
  const auto& m = c.group().members;
  const size_t n = m.size();
  std::vector<std::vector<size_t>> shapes = {std::vector<size_t>(n, 1), std::vector<size_t>(n, 6),
                                             std::vector<size_t>(n, 0)};
  std::vector<size_t> uneven(n);
  for (size_t q = 0; q < n; ++q) uneven[q] = q % 3;  // 0, 1, 2, 0
  shapes.push_back(uneven);
  for (const auto& counts : shapes) {
    std::vector<float> in(counts[c.rank()]);
    for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(100 * m[c.rank()] + k);
    std::vector<double> want;
    for (size_t q = 0; q < n; ++q) {
      for (size_t k = 0; k < counts[q]; ++k) want.push_back(100.0 * m[q] + k);
    }
    std::vector<float> out(want.size(), -1.0f);
    std::string what = fmt::format("{} all_gather counts [{}]", c.group().name, fmt::join(counts, ","));
    expect_ok(c.all_gather(in.data(), out.data(), counts)->wait(), what);
    expect_equal(out, want, what);
  }
}

void check_all_to_allv(pc::Communicator& c) {
  const auto& m = c.group().members;
  const size_t n = m.size();
  const size_t r = static_cast<size_t>(c.rank());
  // Rank a sends (a + 2b) % 4 elements to rank b: counts differ per pair, some are 0.
  auto count_from_to = [](size_t a, size_t b) { return (a + 2 * b) % 4; };
  std::vector<size_t> send(n), recv(n);
  std::vector<float> in;
  for (size_t b = 0; b < n; ++b) {
    send[b] = count_from_to(r, b);
    recv[b] = count_from_to(b, r);
    for (size_t k = 0; k < send[b]; ++k) in.push_back(static_cast<float>(10000 * m[r] + 100 * b + k));
  }
  std::vector<double> want;
  for (size_t a = 0; a < n; ++a) {
    for (size_t k = 0; k < recv[a]; ++k) want.push_back(10000.0 * m[a] + 100.0 * r + k);
  }
  std::vector<float> out(want.size(), -1.0f);
  std::string what = fmt::format("{} all_to_allv send [{}] recv [{}]", c.group().name, fmt::join(send, ","),
                                 fmt::join(recv, ","));
  expect_ok(c.all_to_allv(in.data(), send, out.data(), recv)->wait(), what);
  expect_equal(out, want, what);
}

void check_broadcast(pc::Communicator& c) {
  const auto& m = c.group().members;
  for (int root = 0; root < c.size(); ++root) {
    for (size_t count : {size_t{1}, size_t{9}}) {
      std::vector<float> data(count, -1.0f);
      if (c.rank() == root) {
        for (size_t k = 0; k < count; ++k) data[k] = static_cast<float>(1000 * m[root] + k);
      }
      std::vector<double> want(count);
      for (size_t k = 0; k < count; ++k) want[k] = 1000.0 * m[root] + k;
      std::string what = fmt::format("{} broadcast root {} n={}", c.group().name, root, count);
      expect_ok(c.broadcast(data.data(), count, root)->wait(), what);
      expect_equal(data, want, what);
    }
  }
}

void check_send_recv(pc::Communicator& c) {
  if (c.size() < 2) return;
  const auto& m = c.group().members;
  const int n = c.size(), r = c.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // A ring where every rank sends two messages and receives them in the order they were
  // sent (messages between two ranks match in issue order, never by tag), the receives
  // posted before the sends.
  std::vector<float> a(5), b(3), got_a(5, -1.0f), got_b(3, -1.0f);
  for (size_t k = 0; k < a.size(); ++k) a[k] = static_cast<float>(7 * m[r] + k);
  for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<float>(-3 * m[r] - static_cast<int>(k));
  auto ra = c.recv(got_a.data(), got_a.size(), prev);
  auto rb = c.recv(got_b.data(), got_b.size(), prev);
  auto sa = c.send(a.data(), a.size(), next);
  auto sb = c.send(b.data(), b.size(), next);
  std::string what = fmt::format("{} send/recv ring", c.group().name);
  expect_ok(sa->wait(), what + " first send");
  expect_ok(sb->wait(), what + " second send");
  expect_ok(rb->wait(), what + " second recv");
  expect_ok(ra->wait(), what + " first recv");
  std::vector<double> want_a(5), want_b(3);
  for (size_t k = 0; k < 5; ++k) want_a[k] = 7.0 * m[prev] + k;
  for (size_t k = 0; k < 3; ++k) want_b[k] = -3.0 * m[prev] - static_cast<double>(k);
  expect_equal(got_a, want_a, what + " first message");
  expect_equal(got_b, want_b, what + " second message");

  // The same exchange in both directions as one batch (the portable form for NCCL too).
  std::vector<float> to_next(4), to_prev(2), from_prev(4, -1.0f), from_next(2, -1.0f);
  for (size_t k = 0; k < 4; ++k) to_next[k] = static_cast<float>(11 * m[r] + k);
  for (size_t k = 0; k < 2; ++k) to_prev[k] = static_cast<float>(13 * m[r] + k);
  using Op = pc::Communicator::P2pOp;
  std::vector<Op> ops = {Op{true, pc::host_f32(to_next.data(), 4), next},
                         Op{false, pc::host_f32(from_prev.data(), 4), prev}};
  if (n > 2) {  // with two ranks next == prev; one pair of messages is enough
    ops.push_back(Op{true, pc::host_f32(to_prev.data(), 2), prev});
    ops.push_back(Op{false, pc::host_f32(from_next.data(), 2), next});
  }
  expect_ok(c.batch_send_recv(ops)->wait(), what + " batch");
  std::vector<double> want_prev(4), want_next(2);
  for (size_t k = 0; k < 4; ++k) want_prev[k] = 11.0 * m[prev] + k;
  for (size_t k = 0; k < 2; ++k) want_next[k] = 13.0 * m[next] + k;
  expect_equal(from_prev, want_prev, what + " batch from prev");
  if (n > 2) expect_equal(from_next, want_next, what + " batch from next");
}

// The typed buffers: i32 sums and maxima exact, bf16 reduced in fp32 (small integers are
// exact in bf16), bf16 gathered and broadcast as stored, i32 through the all-to-all; a
// device buffer handed to this host transport, an i32 average and a dtype mismatch refused.
void check_typed(pc::Communicator& c) {
  const auto& m = c.group().members;
  const int n = c.size(), r = c.rank();
  const std::string what = c.group().name + " typed";
  std::vector<int32_t> ints(7);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = 1000 * m[r] - static_cast<int32_t>(i);
  expect_ok(c.all_reduce(pc::Buffer{ints.data(), partrain::DType::kI32, ints.size()}, pc::ReduceOp::kSum)->wait(),
            what + " i32 sum");
  int64_t members_sum = 0;
  for (int g : m) members_sum += g;
  bool ok = true;
  for (size_t i = 0; i < ints.size(); ++i) ok = ok && ints[i] == 1000 * members_sum - n * static_cast<int64_t>(i);
  ++g_compared;
  CHECK_OR_COUNT(ok, "{}: i32 sum wrong, element 0 is {}", what, ints[0]);
  std::vector<uint16_t> half(9);
  for (size_t i = 0; i < half.size(); ++i) half[i] = partrain::to_bf16(static_cast<float>(m[r] + i));
  const pc::Buffer hb{half.data(), partrain::DType::kBF16, half.size()};
  expect_ok(c.all_reduce(hb, pc::ReduceOp::kSum)->wait(), what + " bf16 sum");
  std::vector<float> got(half.size()), want_bf(half.size());
  for (size_t i = 0; i < half.size(); ++i) {
    got[i] = partrain::from_bf16(half[i]);
    want_bf[i] = static_cast<float>(members_sum + n * static_cast<int64_t>(i));
  }
  expect_equal(got, std::vector<double>(want_bf.begin(), want_bf.end()), what + " bf16 sum");
  std::vector<uint16_t> mine(3), all(3 * static_cast<size_t>(n));
  for (size_t i = 0; i < 3; ++i) mine[i] = partrain::to_bf16(static_cast<float>(-m[r] - 0.5f * i));
  expect_ok(c.all_gather(pc::Buffer{mine.data(), partrain::DType::kBF16, 3},
                         pc::Buffer{all.data(), partrain::DType::kBF16, all.size()},
                         std::vector<size_t>(static_cast<size_t>(n), 3))->wait(), what + " bf16 gather");
  ok = true;
  for (int q = 0; q < n; ++q) {
    for (size_t i = 0; i < 3; ++i) ok = ok && all[3 * q + i] == partrain::to_bf16(static_cast<float>(-m[q] - 0.5f * i));
  }
  ++g_compared;
  CHECK_OR_COUNT(ok, "{}: bf16 all_gather not bit-exact", what);
  // Refusals: invalid at once, naming the group; nothing is sent.
  const partrain::Status dev = c.all_reduce(pc::Buffer{ints.data(), partrain::DType::kI32, 1, pc::Memory::kDevice},
                                            pc::ReduceOp::kSum)->wait();
  CHECK_OR_COUNT(dev.code() == partrain::StatusCode::kInvalidArgument &&
                     dev.message().find("a device buffer given to a transport that moves host memory") !=
                         std::string::npos, "{}: device buffer gave '{}'", what, dev.message());
  const partrain::Status avg = c.all_reduce(pc::Buffer{ints.data(), partrain::DType::kI32, 1}, pc::ReduceOp::kAvg)->wait();
  CHECK_OR_COUNT(avg.code() == partrain::StatusCode::kInvalidArgument, "{}: i32 average gave '{}'", what, avg.message());
  const partrain::Status mixed = c.all_gather(pc::Buffer{mine.data(), partrain::DType::kBF16, 3},
                                              pc::Buffer{got.data(), partrain::DType::kF32, 3 * static_cast<size_t>(n)},
                                              std::vector<size_t>(static_cast<size_t>(n), 3))->wait();
  CHECK_OR_COUNT(mixed.code() == partrain::StatusCode::kInvalidArgument, "{}: bf16 into f32 gave '{}'", what,
                 mixed.message());
}

void check_overlap(pc::Communicator& c) {
  const auto& m = c.group().members;
  const size_t count = 4099;
  std::vector<float> x(count), y(count);
  for (size_t i = 0; i < count; ++i) {
    x[i] = static_cast<float>(m[c.rank()] + 1);
    y[i] = static_cast<float>((m[c.rank()] + 1) * (i % 5));
  }
  std::vector<float> gathered(count * m.size(), -1.0f);
  // Three operations outstanding at once, waited in reverse order.
  auto w1 = c.all_reduce(x.data(), count, pc::ReduceOp::kSum);
  auto w2 = c.all_gather(y.data(), gathered.data(), count);
  auto w3 = c.barrier();
  expect_ok(w3->wait(), "overlap barrier");
  expect_ok(w2->wait(), "overlap all_gather");
  expect_ok(w1->wait(), "overlap all_reduce");
  double sum = 0;
  for (int g : m) sum += g + 1;
  expect_equal(x, std::vector<double>(count, sum), c.group().name + " overlap all_reduce");
  std::vector<double> want;
  for (int g : m) {
    for (size_t i = 0; i < count; ++i) want.push_back(static_cast<double>((g + 1) * (i % 5)));
  }
  // y was the all_gather input while the all_reduce ran on x: untouched and gathered intact.
  expect_equal(gathered, want, c.group().name + " overlap all_gather");
}

void check_everything(pc::Communicator& c) {
  check_all_reduce(c);
  check_reduce_scatter(c);
  check_all_gather(c);
  check_all_to_allv(c);
  check_broadcast(c);
  check_send_recv(c);
  check_typed(c);
  check_overlap(c);
  expect_ok(c.barrier()->wait(), c.group().name + " barrier");
}

std::unique_ptr<pc::Communicator> make(pc::RendezvousClient& store, const std::string& name, std::vector<int> members,
                                       pc::GlooOptions options = {}) {
  pc::GroupSpec spec{name, std::move(members), g_rank};
  if (options.host.empty()) options.host = "127.0.0.1";
  auto comm = pc::create_gloo_communicator(spec, store, options);
  if (!comm) {
    fmt::print(stderr, "rank {}: cannot create '{}': {}\n", g_rank, name, comm.status().message());
    std::exit(2);
  }
  return std::move(comm).value();
}

int mode_collectives(pc::RendezvousClient& store, int world) {
  std::vector<int> all(world);
  for (int i = 0; i < world; ++i) all[i] = i;
  auto whole = make(store, "world", all);
  check_everything(*whole);
  if (world == 4) {
    // dp-like strided pairs, tp-like consecutive pairs, and a group of three listed out of
    // order (group rank != global rank) that rank 0 is not in.
    auto strided = make(store, g_rank % 2 == 0 ? "dp_even" : "dp_odd", {g_rank % 2, g_rank % 2 + 2});
    check_everything(*strided);
    auto tp = make(store, g_rank < 2 ? "tp0" : "tp1", {g_rank / 2 * 2, g_rank / 2 * 2 + 1});
    check_everything(*tp);
    if (g_rank != 0) {
      auto trio = make(store, "trio", {3, 1, 2});
      CHECK_OR_COUNT(trio->rank() == (g_rank == 3 ? 0 : g_rank), "trio rank {}", trio->rank());
      check_everything(*trio);
    }
    auto solo = make(store, fmt::format("solo{}", g_rank), {g_rank});
    check_everything(*solo);
  }
  fmt::print(stderr, "rank {}: compared {} result buffers, {} failures\n", g_rank, g_compared, g_failures);
  return g_failures == 0 && g_compared > 0 ? 0 : 1;
}

int mode_abort(pc::RendezvousClient& store) {
  pc::GlooOptions options;
  options.timeout = std::chrono::seconds(30);
  auto c = make(store, "world", {0, 1}, options);
  std::vector<float> data(1000, 1.0f);
  auto start = Clock::now();
  if (g_rank == 0) {
    // Rank 1 never joins this all-reduce: it blocks until the abort.
    auto w = c->all_reduce(data.data(), data.size(), pc::ReduceOp::kSum);
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      c->abort("test: peer declared dead");
    });
    partrain::Status s = w->wait();
    killer.join();
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    CHECK_OR_COUNT(s.code() == partrain::StatusCode::kUnavailable, "aborted all_reduce gave '{}'", s.message());
    CHECK_OR_COUNT(s.message().find("world") != std::string::npos, "message names the group: {}", s.message());
    CHECK_OR_COUNT(secs < 3.0, "aborted all_reduce took {:.2f} s", secs);
    auto after = c->barrier()->wait();
    CHECK_OR_COUNT(after.code() == partrain::StatusCode::kUnavailable, "op after abort gave '{}'", after.message());
    fmt::print(stderr, "rank 0: abort returned after {:.3f} s: {}\n", secs, s.message());
  } else {
    // Blocked on rank 0, which aborts: the closed connection must fail this recv promptly.
    partrain::Status s = c->recv(data.data(), data.size(), 0)->wait();
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    CHECK_OR_COUNT(s.code() == partrain::StatusCode::kUnavailable, "peer of aborted rank gave '{}'", s.message());
    CHECK_OR_COUNT(secs < 5.0, "peer of aborted rank took {:.2f} s", secs);
    fmt::print(stderr, "rank 1: failed after {:.3f} s: {}\n", secs, s.message());
  }
  return g_failures == 0 ? 0 : 1;
}

int mode_peer_death(pc::RendezvousClient& store) {
  pc::GlooOptions options;
  options.timeout = std::chrono::seconds(30);
  auto c = make(store, "world", {0, 1, 2}, options);
  expect_ok(c->barrier()->wait(), "barrier before the death");
  if (g_rank == 2) ::kill(::getpid(), SIGKILL);  // as kill -9 would
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<float> data(100000, 1.0f);
  auto start = Clock::now();
  partrain::Status s = c->all_reduce(data.data(), data.size(), pc::ReduceOp::kSum)->wait();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  CHECK_OR_COUNT(s.code() == partrain::StatusCode::kUnavailable, "all_reduce with a dead peer gave '{}'",
                 s.message());
  CHECK_OR_COUNT(secs < 5.0, "all_reduce with a dead peer took {:.2f} s", secs);
  fmt::print(stderr, "rank {}: failed after {:.3f} s: {}\n", g_rank, secs, s.message());
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    fmt::print(stderr, "usage: comm_worker MODE RANK WORLD PORT\n");
    return 2;
  }
  std::string mode = argv[1];
  g_rank = std::atoi(argv[2]);
  int world = std::atoi(argv[3]);
  int port = std::atoi(argv[4]);
  auto secret = pc::secret_from_env();
  if (!secret) {
    fmt::print(stderr, "rank {}: {}\n", g_rank, secret.status().message());
    return 2;
  }
  pc::RendezvousClientOptions copts;
  copts.connect_timeout = std::chrono::seconds(10);
  auto store = pc::RendezvousClient::connect("127.0.0.1", port, *secret, copts);
  if (!store) {
    fmt::print(stderr, "rank {}: {}\n", g_rank, store.status().message());
    return 2;
  }
  if (mode == "collectives") return mode_collectives(**store, world);
  if (mode == "abort") return mode_abort(**store);
  if (mode == "peer_death") return mode_peer_death(**store);
  fmt::print(stderr, "unknown mode {}\n", mode);
  return 2;
}
