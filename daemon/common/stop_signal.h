// SIGTERM, SIGINT and SIGHUP as a request to stop at the next step boundary (scancel, a
// Slurm time limit's signal, Ctrl-C, a closed terminal), for every partrain process:
// install once, then read the flag.
// The handler only stores to atomics, so it is async-signal-safe.
#pragma once

#include <atomic>

namespace partrain {

// Installs the handler (idempotent); the returned flag becomes true at the first signal and
// stays true.
const std::atomic<bool>& install_stop_signal();

// The signal received since the last call (SIGTERM, SIGINT or SIGHUP), cleared by the call; 0 when
// none. For a supervisor that forwards each new signal once.
int take_stop_signal();

}  // namespace partrain
