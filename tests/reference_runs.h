// A reference run, trained once and shared. Many tests compare a layout against the same
// uninterrupted run of the same job (one rank over 20 steps for tp2, tp4, tp2 x dp2, zero1
// ...), and CTest runs every test in a process of its own, so the run is kept on disk in
// the build tree and keyed by everything that decides its result: the job file's text, the
// arguments, and the build (size and modification time of the CLI, the agent, the worker,
// every plugin, the site config and the example data: a rebuild makes a new key). The
// first test that needs a run trains it (another that needs it meanwhile waits on the
// key's lock); the rest read it back. Only a run that succeeded is kept, and of it only
// metrics.jsonl, stdout and stderr, not its checkpoints.
//
//   const ReferenceRun one = reference_run(job, {"--steps", "20"});
//   expect_same_losses(one.metrics, dir_ + "/tp/metrics.jsonl", 20, "tp2");
//
// The job's paths must be absolute (job_copy() makes them so), since only its text is
// keyed. The build defines PARTRAIN_CLI, PARTRAIN_SITE_CONFIG_FILE,
// PARTRAIN_REFERENCE_RUNS_DIR (the folder of the runs) and PARTRAIN_REFERENCE_RUNS_INPUTS
// ('|'-separated files and folders whose files make the build's part of the key).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace partrain::testing {

// Where a finished run's files are (paths; read them with slurp()).
struct ReferenceRun {
  std::string metrics;  // metrics.jsonl
  std::string out;      // the command's stdout
  std::string err;      // the command's stderr
};

// "path size mtime_ns" of every file PARTRAIN_REFERENCE_RUNS_INPUTS names or holds (one
// level down).
inline std::string build_stamp() {
  std::string stamp;
  auto add = [&](const fs::path& p) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return;
    stamp += p.string() + " " + std::to_string(st.st_size) + " " +
             std::to_string(st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec) + "\n";
  };
  std::istringstream inputs(PARTRAIN_REFERENCE_RUNS_INPUTS);
  for (std::string item; std::getline(inputs, item, '|');) {
    std::error_code ec;
    if (fs::is_directory(item, ec)) {
      std::map<std::string, fs::path> files;  // sorted: the stamp does not depend on listing order
      for (const auto& e : fs::directory_iterator(item, ec)) {
        if (e.is_regular_file()) files[e.path().string()] = e.path();
      }
      for (const auto& [name, p] : files) add(p);
    } else {
      add(item);
    }
  }
  return stamp;
}

// 64-bit FNV-1a: a folder name for a key.
inline std::string key_hash(const std::string& key) {
  uint64_t h = 14695981039346656037ULL;
  for (const unsigned char c : key) h = (h ^ c) * 1099511628211ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, h);
  return hex;
}

// `partrain run JOB ARGS...` on this build, one thread per rank, trained at most once per
// (job text, args, environment, build); a test failure (with its stderr) when the run fails.
// `env` adds variables to the run's environment (e.g. PARTRAIN_CUDA_MODULE, the emulated
// GPU): they are part of the key, and so is the file a value names, as the build's are.
inline ReferenceRun reference_run(const std::string& job, const std::vector<std::string>& args,
                                  const std::map<std::string, std::string>& env = {}) {
  std::string key = slurp(job) + '\0';
  for (const std::string& a : args) key += a + '\0';
  key += build_stamp();
  for (const auto& [name, value] : env) {
    key += name + '=' + value + '\0';
    struct stat st {};
    if (!value.empty() && value[0] == '/' && ::stat(value.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      key += std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec) + '\0';
    }
  }
  const fs::path root = PARTRAIN_REFERENCE_RUNS_DIR;
  fs::create_directories(root);
  const fs::path done = root / key_hash(key);
  const ReferenceRun run{(done / "metrics.jsonl").string(), (done / "out").string(), (done / "err").string()};
  // One trainer per key at a time; the lock goes with the process.
  const std::string lock_path = done.string() + ".lock";
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  EXPECT_GE(lock, 0) << lock_path;
  if (lock >= 0) ::flock(lock, LOCK_EX);
  if (!fs::exists(done)) {
    const ScratchDir work("partrain-reference");
    std::vector<std::string> argv{PARTRAIN_CLI, "run", job};
    argv.insert(argv.end(), args.begin(), args.end());
    std::map<std::string, std::string> run_env = env;
    run_env["PARTRAIN_SITE_CONFIG"] = PARTRAIN_SITE_CONFIG_FILE;
    run_env["PARTRAIN_RUN_DIR"] = (work.path() / "run").string();
    run_env["OMP_NUM_THREADS"] = "1";
    const Proc p = start(argv, run_env, work.path().string(), "reference");
    const int code = wait_exit(p.pid);
    EXPECT_EQ(code, 0) << "reference run " << job << ": " << slurp(p.err);
    if (code == 0) {
      // Assembled next to `done`, then renamed: a reader sees all of it or nothing.
      const fs::path part = done.string() + ".part";
      fs::remove_all(part);
      fs::create_directories(part);
      fs::copy_file(work.path() / "run/metrics.jsonl", part / "metrics.jsonl");
      fs::copy_file(p.out, part / "out");
      fs::copy_file(p.err, part / "err");
      fs::rename(part, done);
    }
  }
  if (lock >= 0) ::close(lock);
  return run;
}

}  // namespace partrain::testing
