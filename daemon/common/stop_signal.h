// SIGTERM, SIGINT, SIGHUP and SIGUSR1 as a request to save and stop at the next step
// boundary (scancel, a Slurm time limit's SIGTERM, Ctrl-C, a closed terminal, the early
// warning of sbatch --signal=USR1@SECONDS), for every partrain process: install once, then
// read the flag.
// The handler only stores to atomics, so it is async-signal-safe.
#pragma once

#include <atomic>

namespace partrain {

// Installs the handler (idempotent); the returned flag becomes true at the first signal and
// stays true.
const std::atomic<bool>& install_stop_signal();

// The signal received since the last call (SIGTERM, SIGINT, SIGHUP or SIGUSR1), cleared by the call; 0 when
// none. For a supervisor that forwards each new signal once.
int take_stop_signal();

}  // namespace partrain
