#include "pipeline/schedule.h"

namespace partrain::pipeline {

bool is_compute(Kind k) {
  return k == Kind::kForward || k == Kind::kBackward || k == Kind::kBackwardInput ||
         k == Kind::kBackwardWeight;
}
bool is_send(Kind k) { return k == Kind::kSendActivation || k == Kind::kSendGrad; }
bool is_recv(Kind k) { return k == Kind::kRecvActivation || k == Kind::kRecvGrad; }
bool is_known(int32_t kind) { return kind >= 1 && kind <= 8; }

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kForward: return "forward";
    case Kind::kBackward: return "backward";
    case Kind::kBackwardInput: return "backward-input";
    case Kind::kBackwardWeight: return "backward-weight";
    case Kind::kSendActivation: return "send-activation";
    case Kind::kRecvActivation: return "recv-activation";
    case Kind::kSendGrad: return "send-grad";
    case Kind::kRecvGrad: return "recv-grad";
  }
  return "unknown";
}

std::string short_label(const Action& a, int v) {
  std::string s;
  switch (a.kind) {
    case Kind::kForward: s = "F"; break;
    case Kind::kBackward: s = "B"; break;
    case Kind::kBackwardInput: s = "b"; break;
    case Kind::kBackwardWeight: s = "W"; break;
    default: s = is_send(a.kind) ? ">" : "<"; break;
  }
  s += std::to_string(a.mb);
  if (v > 1) s += "." + std::to_string(a.chunk);
  return s;
}

std::string describe(const Action& a) {
  std::string s = std::string(kind_name(a.kind)) + " mb" + std::to_string(a.mb) + " chunk" +
                  std::to_string(a.chunk);
  if (is_send(a.kind)) s += " to rank " + std::to_string(a.peer);
  if (is_recv(a.kind)) s += " from rank " + std::to_string(a.peer);
  return s;
}

}  // namespace partrain::pipeline
