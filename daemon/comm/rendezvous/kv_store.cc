// See kv_store.h.
#include "comm/rendezvous/kv_store.h"

#include <fmt/format.h>

namespace partrain::comm {
namespace {

using wire::Frame;
using wire::Op;
using wire::Reply;

// A GET, WAIT or BARRIER may not ask to block longer than this.
constexpr int64_t kMaxWaitMs = 24LL * 3600 * 1000;
// Participants of one barrier at most (a bit each).
constexpr int64_t kMaxBarrierWorld = int64_t{1} << 24;

Frame reply(Reply code, std::vector<std::string> fields = {}) {
  return Frame{static_cast<uint8_t>(code), std::move(fields)};
}
Frame bad(std::string why) { return reply(Reply::kBadRequest, {std::move(why)}); }

bool bad_key(const std::string& k) { return k.empty() || k.size() > wire::kMaxKeyBytes; }

std::optional<Frame> check_keys(const std::vector<std::string>& keys, size_t first) {
  for (size_t i = first; i < keys.size(); ++i) {
    if (bad_key(keys[i])) return bad(fmt::format("key of {} bytes (allowed 1..{})", keys[i].size(), wire::kMaxKeyBytes));
  }
  return std::nullopt;
}

std::optional<Frame> check_timeout(const std::string& field) {
  Result<int64_t> ms = wire::decode_i64(field);
  if (!ms) return bad(ms.status().message());
  if (*ms < 0 || *ms > kMaxWaitMs) return bad(fmt::format("timeout of {} ms out of range", *ms));
  return std::nullopt;
}

}  // namespace

Result<std::chrono::milliseconds> KvStore::timeout_of(const Frame& request) {
  const auto& f = request.fields;
  size_t at = 0;
  switch (static_cast<Op>(request.code)) {
    case Op::kGet: at = 1; break;
    case Op::kWait: at = 0; break;
    case Op::kBarrier: at = 3; break;
    default: return Status::invalid("not a blocking request");
  }
  if (f.size() <= at) return Status::invalid("no timeout field");
  Result<int64_t> ms = wire::decode_i64(f[at]);
  if (!ms) return ms.status();
  return std::chrono::milliseconds(*ms);
}

std::optional<Frame> KvStore::handle(Waiter w, const Frame& req) {
  const auto& f = req.fields;
  switch (static_cast<Op>(req.code)) {
    case Op::kSet:
      if (f.size() != 2) return bad("SET takes key and value");
      if (auto b = check_keys({f[0]}, 0)) return b;
      return set(f[0], f[1]);
    case Op::kGet:
      if (f.size() != 2) return bad("GET takes key and timeout");
      if (auto b = check_keys({f[0]}, 0)) return b;
      if (auto b = check_timeout(f[1])) return b;
      return get(w, f[0]);
    case Op::kAdd: {
      if (f.size() != 2) return bad("ADD takes key and delta");
      if (auto b = check_keys({f[0]}, 0)) return b;
      Result<int64_t> delta = wire::decode_i64(f[1]);
      if (!delta) return bad(delta.status().message());
      return add(f[0], *delta);
    }
    case Op::kDelete: {
      if (f.size() != 1) return bad("DELETE takes one key");
      auto it = data_.find(f[0]);
      const bool existed = it != data_.end();
      if (existed) {
        bytes_ -= it->first.size() + it->second.size();
        data_.erase(it);
      }
      return reply(Reply::kOk, {wire::encode_i64(existed ? 1 : 0)});
    }
    case Op::kWait: {
      if (f.empty()) return bad("WAIT takes a timeout and keys");
      if (auto b = check_keys(f, 1)) return b;
      if (auto b = check_timeout(f[0])) return b;
      return wait(w, std::vector<std::string>(f.begin() + 1, f.end()));
    }
    case Op::kCheck: {
      if (auto b = check_keys(f, 0)) return b;
      bool all = true;
      for (const auto& k : f) all = all && data_.count(k) > 0;
      return reply(Reply::kOk, {wire::encode_i64(all ? 1 : 0)});
    }
    case Op::kBarrier: {
      if (f.size() != 4) return bad("BARRIER takes name, rank, world and timeout");
      if (auto b = check_keys({f[0]}, 0)) return b;
      if (auto b = check_timeout(f[3])) return b;
      Result<int64_t> rank = wire::decode_i64(f[1]), world = wire::decode_i64(f[2]);
      if (!rank || !world) return bad("BARRIER rank and world are integers");
      if (*world < 1 || *world > kMaxBarrierWorld || *rank < 0 || *rank >= *world) {
        return bad(fmt::format("BARRIER rank {} of world {} (world 1..{})", *rank, *world, kMaxBarrierWorld));
      }
      return barrier(w, f[0], *rank, *world);
    }
  }
  return bad(fmt::format("unknown request code {}", req.code));
}

Frame KvStore::set(const std::string& key, std::string value) {
  auto it = data_.find(key);
  const size_t old = it == data_.end() ? 0 : key.size() + it->second.size();
  const size_t now = key.size() + value.size();
  if (bytes_ - old + now > max_bytes_) {
    return reply(Reply::kRefused, {fmt::format("SET of '{}' ({} bytes) refused: the store holds {} bytes and its quota "
                                               "is {} (max_store_bytes)", key.substr(0, 80), now, bytes_, max_bytes_)});
  }
  bytes_ = bytes_ - old + now;
  const bool is_new = it == data_.end();
  if (is_new) {
    data_.emplace(key, std::move(value));
    arrived(key);
  } else {
    it->second = std::move(value);
  }
  return reply(Reply::kOk);
}

Frame KvStore::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    Result<int64_t> old = wire::decode_i64(it->second);
    if (!old) return bad(fmt::format("ADD on key '{}' that holds a non-counter value", key.substr(0, 80)));
    value = *old;
  }
  value += delta;
  Frame r = set(key, wire::encode_i64(value));
  if (r.code != static_cast<uint8_t>(Reply::kOk)) return r;
  return reply(Reply::kOk, {wire::encode_i64(value)});
}

std::optional<Frame> KvStore::get(Waiter w, const std::string& key) {
  auto it = data_.find(key);
  if (it != data_.end()) return reply(Reply::kOk, {it->second});
  const Pending& p = park(w, Op::kGet, {key});
  watchers_[key].emplace_back(w, p.seq);
  return std::nullopt;
}

std::optional<Frame> KvStore::wait(Waiter w, std::vector<std::string> keys) {
  size_t next = 0;
  while (next < keys.size() && data_.count(keys[next]) > 0) ++next;
  if (next == keys.size()) return reply(Reply::kOk);
  Pending& p = park(w, Op::kWait, std::move(keys));
  p.next = next;
  watchers_[p.keys[next]].emplace_back(w, p.seq);
  return std::nullopt;
}

std::optional<Frame> KvStore::barrier(Waiter w, const std::string& name, int64_t rank, int64_t world) {
  auto it = barriers_.find(name);
  if (it == barriers_.end()) {
    const size_t cost = name.size() + static_cast<size_t>(world) / 8 + 64;
    if (bytes_ + cost > max_bytes_) {
      return reply(Reply::kRefused, {fmt::format("BARRIER '{}' of {} refused: the store holds {} bytes and its quota "
                                                 "is {} (max_store_bytes)", name.substr(0, 80), world, bytes_,
                                                 max_bytes_)});
    }
    bytes_ += cost;
    Barrier b;
    b.world = world;
    b.in.assign(static_cast<size_t>(world), false);
    it = barriers_.emplace(name, std::move(b)).first;
  }
  Barrier& b = it->second;
  if (b.world != world) {
    return bad(fmt::format("BARRIER '{}' of world {} was entered with world {}", name.substr(0, 80), b.world, world));
  }
  if (!b.in[static_cast<size_t>(rank)]) {
    b.in[static_cast<size_t>(rank)] = true;
    ++b.arrived;
  }
  if (b.arrived == b.world) {
    for (const auto& [waiter, seq] : b.waiters) {
      auto p = pending_.find(waiter);
      if (p == pending_.end() || p->second.seq != seq) continue;
      pending_.erase(p);
      ready_.emplace_back(waiter, reply(Reply::kOk));
    }
    b.waiters.clear();
    b.waiters.shrink_to_fit();
    return reply(Reply::kOk);
  }
  const Pending& p = park(w, Op::kBarrier, {});
  b.waiters.emplace_back(w, p.seq);
  return std::nullopt;
}

KvStore::Pending& KvStore::park(Waiter w, Op op, std::vector<std::string> keys) {
  Pending& p = pending_[w];
  p.seq = ++seq_;
  p.op = op;
  p.keys = std::move(keys);
  p.next = 0;
  return p;
}

void KvStore::advance_wait(Waiter w, Pending& p) {
  while (p.next < p.keys.size() && data_.count(p.keys[p.next]) > 0) ++p.next;
  if (p.next == p.keys.size()) {
    pending_.erase(w);
    ready_.emplace_back(w, reply(Reply::kOk));
    return;
  }
  watchers_[p.keys[p.next]].emplace_back(w, p.seq);
}

void KvStore::arrived(const std::string& key) {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  std::vector<std::pair<Waiter, uint64_t>> list = std::move(it->second);
  watchers_.erase(it);
  for (const auto& [w, seq] : list) {
    auto p = pending_.find(w);
    if (p == pending_.end() || p->second.seq != seq) continue;  // gone, or parked again since
    if (p->second.op == Op::kGet) {
      ready_.emplace_back(w, reply(Reply::kOk, {data_.at(key)}));
      pending_.erase(p);
    } else {
      advance_wait(w, p->second);
    }
  }
}

std::vector<std::pair<KvStore::Waiter, Frame>> KvStore::take_ready() {
  std::vector<std::pair<Waiter, Frame>> out;
  out.swap(ready_);
  return out;
}

void KvStore::cancel(Waiter w) { pending_.erase(w); }

}  // namespace partrain::comm
