#include "pipeline/streams.h"

#include <map>
#include <string>
#include <tuple>

namespace partrain::pipeline {
namespace {

// (sender, receiver, gradients?) names one stream.
using Key = std::tuple<int, int, bool>;

std::string at(int rank, size_t pos, const Action& a) {
  return "rank " + std::to_string(rank) + ", action " + std::to_string(pos) + " (" + describe(a) +
         ")";
}

}  // namespace

Result<Matching> match_streams(const Schedule& s) {
  const Shape& sh = s.shape;
  std::map<Key, std::vector<size_t>> sends;  // positions on the sender, in order
  for (size_t a = 0; a < s.ranks.size(); ++a) {
    for (size_t i = 0; i < s.ranks[a].size(); ++i) {
      const Action& x = s.ranks[a][i];
      if ((is_send(x.kind) || is_recv(x.kind)) &&
          (x.peer < 0 || x.peer >= static_cast<int>(s.ranks.size()))) {
        return Status::invalid(at(static_cast<int>(a), i, x) + ": no rank " +
                               std::to_string(x.peer) + " in a pipeline of " +
                               std::to_string(s.ranks.size()));
      }
      if (is_send(x.kind)) {
        sends[Key(static_cast<int>(a), x.peer, x.kind == Kind::kSendGrad)].push_back(i);
      }
    }
  }
  Matching m;
  m.send_of.resize(s.ranks.size());
  std::map<Key, size_t> received;  // receives seen so far per stream
  for (size_t b = 0; b < s.ranks.size(); ++b) {
    m.send_of[b].resize(s.ranks[b].size());
    for (size_t i = 0; i < s.ranks[b].size(); ++i) {
      const Action& y = s.ranks[b][i];
      if (!is_recv(y.kind)) continue;
      const bool grad = y.kind == Kind::kRecvGrad;
      const Key key(y.peer, static_cast<int>(b), grad);
      const size_t k = received[key]++;
      const std::vector<size_t>& list = sends[key];
      if (k >= list.size()) {
        return Status::invalid(at(static_cast<int>(b), i, y) + ": no matching send: rank " +
                               std::to_string(y.peer) + " sends only " +
                               std::to_string(list.size()) + (grad ? " gradients" : " activations") +
                               " to rank " + std::to_string(b));
      }
      const Action& x = s.ranks[y.peer][list[k]];
      const int from = sh.stage(y.peer, x.chunk);
      const int to = sh.stage(static_cast<int>(b), y.chunk);
      if (x.mb != y.mb || to != (grad ? from - 1 : from + 1)) {
        return Status::invalid(
            at(static_cast<int>(b), i, y) + ": receive #" + std::to_string(k) + " of this " +
            (grad ? "gradient" : "activation") + " stream meets send #" + std::to_string(k) +
            " of rank " + std::to_string(y.peer) + ", action " + std::to_string(list[k]) + " (" +
            describe(x) + "): list the transfers between the two ranks in the same order");
      }
      m.send_of[b][i] = Ref{y.peer, list[k]};
    }
  }
  for (const auto& [key, list] : sends) {
    const size_t got = received.count(key) ? received[key] : 0;
    if (got < list.size()) {
      const int a = std::get<0>(key);
      return Status::invalid(at(a, list[got], s.ranks[a][list[got]]) +
                             ": never received: rank " + std::to_string(std::get<1>(key)) +
                             " lists no matching receive");
    }
  }
  return m;
}

}  // namespace partrain::pipeline
