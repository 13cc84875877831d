// What the store's multi-process tests share (fault_matrix_test.cc, torture_test.cc): the
// demo job with checkpoints, `partrain run` into a run folder of a temp dir, the
// uninterrupted reference run of a layout, and the per-step loss and grad_norm text of a
// run's metrics.jsonl, compared bit for bit.
#pragma once

#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "reference_runs.h"
#include "test_util.h"

namespace partrain::testing {

inline constexpr int kSteps = 12;  // checkpoints at 4, 8 and 12

// Per step: the "loss" and "grad_norm" values as written (shortest round-trip text).
struct Point {
  std::string loss, grad_norm;
};
inline std::vector<Point> trajectory(const std::string& metrics) {
  std::vector<Point> out;
  std::ifstream in(metrics);
  std::string line;
  static const std::regex kRe("\"step\":([0-9]+),\"loss\":([^,]+),\"lr\":[^,]+,\"grad_norm\":([^,]+),");
  static const std::regex kRestart("\"event\":\"restart\",\"resumed_at_step\":([0-9]+)");
  while (std::getline(in, line)) {
    std::smatch m;
    // A restart marker: the steps after its resume point that a crash left are replaced.
    if (std::regex_search(line, m, kRestart)) {
      out.resize(std::min(out.size(), static_cast<size_t>(std::stoul(m[1].str()))));
      continue;
    }
    if (!std::regex_search(line, m, kRe)) continue;
    EXPECT_EQ(std::stoi(m[1].str()), static_cast<int>(out.size()) + 1) << metrics << ": steps out of order";
    out.push_back({m[2].str(), m[3].str()});
  }
  return out;
}

inline std::string fmt_step(size_t step) { return "checkpoint of step " + std::to_string(step); }

// The step a run resumed at, from its log, or -1.
inline int resumed_at(const std::string& log) {
  static const std::regex kRe("resum(?:e|ing) at step ([0-9]+)");
  std::smatch m;
  return std::regex_search(log, m, kRe) ? std::stoi(m[1].str()) : -1;
}

// A temp dir, the demo job (example_, edited by model_edit_) with checkpoints every 4
// steps, and the commands run in it.
class RunFixture : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!mounted_.empty()) ::umount2(mounted_.c_str(), MNT_DETACH);
  }

  // The demo job (example_, edited by model_edit_) with checkpoints every every_ (4) steps;
  // `extra` goes into [checkpoint].
  std::string job(const std::string& name, const std::string& extra = "") {
    const std::string src = std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/" + example_;
    std::string text = slurp(src);
    text = std::regex_replace(text, std::regex("\"data/"), "\"" + std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/data/");
    const std::string every = "every = " + std::to_string(every_) + "\n";
    if (const size_t at = text.find("every = 0"); at != std::string::npos) {
      text.replace(at, 9, every + extra);
    } else {
      text += "\n[checkpoint]\n" + every + extra;
    }
    if (!model_edit_.first.empty()) {
      const size_t at = text.find(model_edit_.first);
      EXPECT_NE(at, std::string::npos) << model_edit_.first;
      if (at != std::string::npos) text.replace(at, model_edit_.first.size(), model_edit_.second);
    }
    const std::string path = dir_ + "/" + name + ".toml";
    std::ofstream(path) << text;
    return path;
  }
  // `partrain run JOB --steps 12 [--partrain=SPEC --nproc N]` into run folder `run`
  // (steps_ steps when a test sets it).
  int run(const std::string& job_path, const std::string& run, const std::string& spec, int nproc,
          std::map<std::string, std::string> env = {}, std::string* log = nullptr,
          const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv{PARTRAIN_CLI, "run", job_path, "--steps", std::to_string(steps_)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (nproc > 0) {
      argv.push_back("--partrain=" + spec);
      argv.push_back("--nproc");
      argv.push_back(std::to_string(nproc));
    }
    env["PARTRAIN_SITE_CONFIG"] = PARTRAIN_SITE_CONFIG_FILE;
    env["PARTRAIN_RUN_DIR"] = dir_ + "/" + run;
    env["OMP_NUM_THREADS"] = "1";
    Proc p = start(argv, env, dir_, run + "." + std::to_string(++runs_));
    const int code = wait_exit(p.pid);
    if (log != nullptr) *log = slurp(p.err) + slurp(p.out);
    return code;
  }
  // `partrain ARGS...`; its exit code, stdout + stderr in *out.
  int cli(const std::vector<std::string>& args, std::string* out) {
    std::vector<std::string> argv{PARTRAIN_CLI};
    argv.insert(argv.end(), args.begin(), args.end());
    Proc p = start(argv, {}, dir_, "cli." + std::to_string(++runs_));
    const int code = wait_exit(p.pid);
    *out = slurp(p.out) + slurp(p.err);
    return code;
  }
  // The uninterrupted run of a layout, trained once for every test that needs it
  // (tests/reference_runs.h: keyed by the job's text and the arguments).
  std::vector<Point> reference(const std::string& spec, int nproc) {
    std::vector<std::string> args{"--steps", std::to_string(steps_)};
    if (nproc > 0) args.insert(args.end(), {"--partrain=" + spec, "--nproc", std::to_string(nproc)});
    std::vector<Point> t = trajectory(reference_run(job("ref"), args).metrics);
    EXPECT_EQ(t.size(), static_cast<size_t>(steps_));
    return t;
  }
  void expect_same(const std::vector<Point>& ref, const std::string& run) {
    const std::vector<Point> got = trajectory(dir_ + "/" + run + "/metrics.jsonl");
    ASSERT_EQ(got.size(), ref.size()) << run;
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(got[i].loss, ref[i].loss) << run << " step " << i + 1;
      EXPECT_EQ(got[i].grad_norm, ref[i].grad_norm) << run << " step " << i + 1;
    }
  }
  // Crashes `run` with PARTRAIN_FAULT=fault, runs the same command again and checks that it
  // resumed at `expect_resume` and ends on the uninterrupted trajectory.
  void crash_and_resume(const std::string& fault, int expect_resume, const std::string& spec, int nproc,
                        const std::string& extra = "") {
    const std::vector<Point> ref = reference(spec, nproc);
    const std::string j = job("crash", extra);
    std::string log;
    EXPECT_NE(run(j, "crash", spec, nproc, {{"PARTRAIN_FAULT", fault}}, &log), 0) << log;
    EXPECT_NE(log.find("PARTRAIN_FAULT: killing"), std::string::npos) << log;
    ASSERT_EQ(run(j, "crash", spec, nproc, {}, &log), 0) << log;
    EXPECT_EQ(resumed_at(log), expect_resume) << log;
    expect_same(ref, "crash");
    std::printf("fault case %s on %s: resumed at step %d, committed steps lost 0\n", fault.c_str(),
                nproc > 0 ? spec.c_str() : "one rank", resumed_at(log));
  }

  const ScratchDir scratch_{"partrain_faults"};
  const std::string dir_ = scratch_.path().string();
  std::string mounted_;
  std::string example_ = "tiny.toml";               // the example job() starts from
  std::pair<std::string, std::string> model_edit_;  // text job() replaces in it
  int runs_ = 0;
  int steps_ = kSteps;  // what run() asks for
  int every_ = 4;       // what job() writes as [checkpoint] every
};

}  // namespace partrain::testing
