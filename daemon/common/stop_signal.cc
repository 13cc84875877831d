// See stop_signal.h.
#include "common/stop_signal.h"

#include <signal.h>

namespace partrain {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int sig) {
  g_signal.store(sig);
  g_stop.store(true);
}

}  // namespace

const std::atomic<bool>& install_stop_signal() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR1, &sa, nullptr);  // sbatch --signal=USR1@SECONDS: the time limit is near
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);  // a closed terminal or session: save and stop, as for SIGTERM
  return g_stop;
}

int take_stop_signal() { return g_signal.exchange(0); }

}  // namespace partrain
