// The rendezvous store's data and parked requests without sockets (comm/rendezvous/kv_store.h):
// GET and WAIT park and are answered by the SET that completes them, a WAIT watches one
// missing key at a time, a BARRIER counts each rank once, cancel forgets, and the quota
// refuses what would pass it and leaves the store as it was.
#include "comm/rendezvous/kv_store.h"

#include <gtest/gtest.h>

namespace partrain::comm {
namespace {

using wire::Frame;
using wire::Op;
using wire::Reply;

Frame req(Op op, std::vector<std::string> f) { return Frame{static_cast<uint8_t>(op), std::move(f)}; }
uint8_t code(Reply r) { return static_cast<uint8_t>(r); }

TEST(KvStore, GetParksUntilTheKeyIsSet) {
  KvStore s(1 << 20);
  EXPECT_FALSE(s.handle(7, req(Op::kGet, {"k", wire::encode_i64(1000)})).has_value());
  EXPECT_EQ(s.parked(), 1u);
  EXPECT_TRUE(s.take_ready().empty());
  auto ok = s.handle(8, req(Op::kSet, {"k", "v"}));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->code, code(Reply::kOk));
  auto ready = s.take_ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].first, 7u);
  EXPECT_EQ(ready[0].second.fields, std::vector<std::string>{"v"});
  EXPECT_EQ(s.parked(), 0u);
  // Present now: answered at once.
  auto now = s.handle(7, req(Op::kGet, {"k", wire::encode_i64(0)}));
  ASSERT_TRUE(now);
  EXPECT_EQ(now->fields, std::vector<std::string>{"v"});
}

TEST(KvStore, WaitMovesFromMissingKeyToMissingKey) {
  KvStore s(1 << 20);
  s.handle(1, req(Op::kSet, {"b", "1"}));
  EXPECT_FALSE(s.handle(9, req(Op::kWait, {wire::encode_i64(1000), "a", "b", "c"})).has_value());
  s.handle(1, req(Op::kSet, {"c", "1"}));
  EXPECT_TRUE(s.take_ready().empty());  // still waits for a
  s.handle(1, req(Op::kSet, {"a", "1"}));
  auto ready = s.take_ready();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].first, 9u);
  EXPECT_EQ(ready[0].second.code, code(Reply::kOk));
}

TEST(KvStore, BarrierCountsEachRankOnceAndAnswersEveryoneWhenFull) {
  KvStore s(1 << 20);
  auto enter = [&](KvStore::Waiter w, int64_t rank) {
    return s.handle(w, req(Op::kBarrier, {"b", wire::encode_i64(rank), wire::encode_i64(3), wire::encode_i64(1000)}));
  };
  EXPECT_FALSE(enter(10, 0).has_value());
  EXPECT_FALSE(enter(11, 0).has_value());  // rank 0 again (a retry): still 1 of 3
  EXPECT_FALSE(enter(12, 1).has_value());
  EXPECT_TRUE(s.take_ready().empty());
  auto last = enter(13, 2);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->code, code(Reply::kOk));
  auto ready = s.take_ready();
  ASSERT_EQ(ready.size(), 3u);  // 10, 11 and 12
  // Over: a late entry passes at once; another world is a malformed request.
  EXPECT_TRUE(enter(14, 1).has_value());
  auto wrong = s.handle(15, req(Op::kBarrier, {"b", wire::encode_i64(0), wire::encode_i64(4), wire::encode_i64(0)}));
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->code, code(Reply::kBadRequest));
  auto outside = s.handle(15, req(Op::kBarrier, {"c", wire::encode_i64(5), wire::encode_i64(4), wire::encode_i64(0)}));
  EXPECT_EQ(outside->code, code(Reply::kBadRequest));
}

TEST(KvStore, CancelledRequestsAreNeverAnswered) {
  KvStore s(1 << 20);
  s.handle(3, req(Op::kGet, {"k", wire::encode_i64(1000)}));
  s.cancel(3);
  s.handle(4, req(Op::kSet, {"k", "v"}));
  EXPECT_TRUE(s.take_ready().empty());
  EXPECT_EQ(s.parked(), 0u);
}

TEST(KvStore, TheQuotaRefusesWhatWouldPassItAndChangesNothing) {
  KvStore s(100);  // bytes of keys and values
  EXPECT_EQ(s.handle(1, req(Op::kSet, {"a", std::string(60, 'x')}))->code, code(Reply::kOk));
  EXPECT_EQ(s.bytes(), 61u);
  auto refused = s.handle(1, req(Op::kSet, {"b", std::string(60, 'y')}));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code, code(Reply::kRefused));
  EXPECT_EQ(refused->fields[0], "SET of 'b' (61 bytes) refused: the store holds 61 bytes and its quota is 100 "
                                "(max_store_bytes)");
  EXPECT_EQ(s.bytes(), 61u);
  EXPECT_EQ(s.handle(1, req(Op::kCheck, {"b"}))->fields[0], wire::encode_i64(0));
  // Replacing a value counts only the difference; deleting frees.
  EXPECT_EQ(s.handle(1, req(Op::kSet, {"a", std::string(90, 'z')}))->code, code(Reply::kOk));
  EXPECT_EQ(s.bytes(), 91u);
  s.handle(1, req(Op::kDelete, {"a"}));
  EXPECT_EQ(s.bytes(), 0u);
  EXPECT_EQ(s.handle(1, req(Op::kSet, {"b", std::string(60, 'y')}))->code, code(Reply::kOk));
}

TEST(KvStore, MalformedRequestsAreBadRequests) {
  KvStore s(1 << 20);
  for (const Frame& f : {req(Op::kSet, {"only-key"}), req(Op::kGet, {"k", "not-8-bytes"}),
                         req(Op::kGet, {"k", wire::encode_i64(-1)}), req(Op::kSet, {"", "v"}),
                         req(Op::kSet, {std::string(wire::kMaxKeyBytes + 1, 'k'), "v"}),
                         req(Op::kBarrier, {"b", wire::encode_i64(0), wire::encode_i64(int64_t{1} << 40),
                                            wire::encode_i64(0)}),
                         Frame{99, {}}}) {
    auto r = s.handle(1, f);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->code, code(Reply::kBadRequest)) << static_cast<int>(f.code);
  }
}

}  // namespace
}  // namespace partrain::comm
