// Loading a plugin in a throw-away child process first: a library whose constructors fault,
// abort or hang takes down (or holds) only the child, and the caller gets a refusal naming
// the file and what happened instead of dying with it. `partrain plugins` describes every
// library this way; the agent probes each plugin a job needs before it starts any worker
// (worker/strategies.h check_strategies).
//
// How: fork(); the child runs the probe (which opens the library, running its constructors
// and the family checks) and writes its answer to a pipe, then _exit(0)s without running
// the parent's exit handlers; the parent reads the pipe until end of file or the timeout,
// kills a child that is still running, and reaps it.
//
// Worked example: a plugin whose constructor dereferences a null pointer gives
//   "/opt/p/bad.so: refused: loading it killed the process with signal 11 (SIGSEGV) before
//    partrain could call it (its constructors fault); fix the plugin or remove it"
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace partrain::plugin {

// Runs `probe` in a child process and returns what it returned. When the child dies of a
// signal, exits without answering or runs past `timeout`, returns invalid naming `path`.
Result<std::string> run_probe_in_child(const std::string& path, const std::function<std::string()>& probe,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(30));

// How a loader opens a plugin: kChild probes it in a child process first (find_probed below:
// the agent's check before any worker starts, `partrain plugins`), kDirect opens it in this
// process (a worker, once the agent's check of the same plugins passed).
enum class Open { kChild, kDirect };

// P::find(dir, name), once the same call made in a child process succeeded: a plugin whose
// constructors fault or hang is refused (invalid) instead of taking this process down.
template <typename P>
Result<std::unique_ptr<P>> find_probed(const std::string& dir, const std::string& name) {
  Result<std::string> verdict = run_probe_in_child(dir + "/" + name + ".so", [&dir, &name] {
    Result<std::unique_ptr<P>> p = P::find(dir, name);
    return p ? std::string() : p.status().message();
  });
  if (!verdict) return verdict.status();
  if (!verdict->empty()) return Status::invalid(*verdict);
  return P::find(dir, name);
}

// find_probed (kChild) or P::find (kDirect).
template <typename P>
Result<std::unique_ptr<P>> find_plugin(const std::string& dir, const std::string& name, Open open) {
  return open == Open::kChild ? find_probed<P>(dir, name) : P::find(dir, name);
}

}  // namespace partrain::plugin
