// Helpers of the end-to-end runtime tests: the fixture that runs partraind as a user would,
// example jobs with extra TOML, the losses and MoE routing of a metrics file. Shared by the
// tests of this folder; processes and files are tests/test_util.h, the one-rank references
// tests/reference_runs.h.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "reference_runs.h"
#include "test_util.h"

namespace partrain::testing {

using Clock = std::chrono::steady_clock;

// The example jobs the runs start from (data paths relative: job_copy() makes them absolute).
inline const std::string kTiny = std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/tiny.toml";
inline const std::string kLlama = std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/llama-tiny.toml";
inline const std::string kMoe = std::string(PARTRAIN_SOURCE_DIR) + "/etc/examples/moe-tiny.toml";

// The step lines of a metrics.jsonl as the run ended up with them: a restart marker
// ({"event":"restart","resumed_at_step":N,...}) replaces the lines of steps after N
// written before it (engine/train/step_metrics.h).
inline std::vector<std::string> step_lines(const std::string& metrics) {
  std::vector<std::string> out;
  std::ifstream in(metrics);
  std::string line;
  static const std::regex kRestart("\"resumed_at_step\":([0-9]+)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.find("\"event\":\"restart\"") == std::string::npos) {
      out.push_back(line);
    } else if (std::regex_search(line, m, kRestart)) {
      out.resize(std::min(out.size(), static_cast<size_t>(std::stoul(m[1].str()))));
    }
  }
  return out;
}

inline std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  static const std::regex kLoss("\"loss\":([-0-9.eE+]+)");
  for (const std::string& line : step_lines(metrics)) {
    std::smatch m;
    if (std::regex_search(line, m, kLoss)) out.push_back(std::stod(m[1].str()));
  }
  return out;
}

class Runtime : public ::testing::Test {
 protected:
  std::map<std::string, std::string> env(const std::string& run) const {
    return {{"PARTRAIN_SITE_CONFIG", PARTRAIN_SITE_CONFIG_FILE}, {"PARTRAIN_RUN_DIR", dir_ + "/" + run},
            {"OMP_NUM_THREADS", "1"}};
  }
  // partraind --standalone; returns its exit code.
  int agent(const std::string& run, const std::string& spec, int nproc, int steps,
            const std::string& job = kTiny) {
    Proc p = start({PARTRAIND, "--standalone", "--nproc", std::to_string(nproc), "--partrain", spec,
                    "--steps", std::to_string(steps), job},
                   env(run), dir_, run);
    const int code = wait_exit(p.pid);
    if (code != 0) ADD_FAILURE() << slurp(p.err);
    return code;
  }
  // `partrain run JOB --steps STEPS` on one rank, trained once for every test that compares
  // against it (tests/reference_runs.h); JOB's paths must be absolute (job_copy()).
  static ReferenceRun one_rank(const std::string& job, int steps) {
    return reference_run(job, {"--steps", std::to_string(steps)});
  }

  const ScratchDir scratch_{"partrain_runtime"};
  const std::string dir_ = scratch_.path().string();
};


// The workers partraind started ("rank R started: pid P" in its stderr), once `want` of them
// are logged and `metrics` holds a step; fewer when `timeout` passed first.
inline std::map<int, pid_t> started_workers(const Proc& agent, const std::string& metrics, size_t want,
                                            std::chrono::seconds timeout) {
  static const std::regex kStarted("rank ([0-9]+) started: pid ([0-9]+)");
  std::map<int, pid_t> pids;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    const std::string err = slurp(agent.err);
    pids.clear();
    for (std::sregex_iterator it(err.begin(), err.end(), kStarted), end; it != end; ++it) {
      pids[std::stoi((*it)[1].str())] = std::stoi((*it)[2].str());
    }
    if (pids.size() == want && fs::exists(metrics) && !slurp(metrics).empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pids;
}

// Two runs' loss trajectories (metrics.jsonl) agree within `tolerance` relative (1e-5 unless
// said) at every one of `steps` steps, and the reference really trains; prints the largest
// relative difference under `label`.
inline void expect_same_losses(const std::string& ref_metrics, const std::string& got_metrics,
                               int steps, const std::string& label, double tolerance = 1e-5) {
  const std::vector<double> ref = losses(ref_metrics);
  const std::vector<double> got = losses(got_metrics);
  ASSERT_EQ(ref.size(), static_cast<size_t>(steps));
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - ref[i]), tolerance * std::fabs(ref[i]))
        << label << " step " << i + 1 << ": " << got[i] << " vs one rank " << ref[i];
    worst = std::max(worst, std::fabs(got[i] - ref[i]) / std::fabs(ref[i]));
  }
  std::printf("%s: largest relative loss difference %.2e over %d steps\n", label.c_str(), worst, steps);
  EXPECT_LT(ref.back(), ref.front() - 0.5);  // a real trajectory
}

// The "collectives" count of the first step of a metrics.jsonl.
inline int first_collectives(const std::string& metrics_path) {
  static const std::regex kCollectives("\"collectives\":([0-9]+)");
  std::smatch m;
  const std::string metrics = slurp(metrics_path);
  if (!std::regex_search(metrics, m, kCollectives)) {
    ADD_FAILURE() << "no collectives in " << metrics;
    return 0;
  }
  return std::stoi(m[1].str());
}

// A whole number from a flat JSON object (e.g. memory.rank<R>.json).
inline double field(const std::string& json, const std::string& key) {
  const std::regex re("\"" + key + "\":([0-9]+)");
  std::smatch m;
  if (!std::regex_search(json, m, re)) {
    ADD_FAILURE() << key << " missing in " << json;
    return 0;
  }
  return std::stod(m[1].str());
}

// A copy of example job `job` in `dir` with its data paths (training and validation shards)
// made absolute and `extra` (TOML) appended; returns the copy's path.
inline std::string job_copy(const std::string& job, const std::string& dir, const std::string& name,
                            const std::string& extra) {
  std::string text = slurp(job);
  EXPECT_NE(text.find("\"data/"), std::string::npos) << job;
  text = std::regex_replace(text, std::regex("\"data/"), "\"" + fs::path(job).parent_path().string() + "/data/");
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text << "\n" << extra << "\n";
  return path;
}

// Replaces the first occurrence of each `from` in the file at `path` by its `to`, in order
// (a `from` not found is a test failure).
inline void edit_file(const std::string& path, const std::vector<std::pair<std::string, std::string>>& edits) {
  std::string text = slurp(path);
  for (const auto& [from, to] : edits) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from << " in " << path;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  std::ofstream(path) << text;
}

// A chain of runs with growing --steps, each resuming the last, trains what one run of
// `total` steps trains only when all follow one learning-rate schedule: the first run
// fixes its length in the checkpoint ([training] decay_steps, default that run's steps), so
// the job states it. `job` must have a [training] table.
inline void schedule_over(const std::string& job, int total) {
  edit_file(job, {{"[training]\n", "[training]\ndecay_steps = " + std::to_string(total) + "\n"}});
}

// One field of every line of a metrics.jsonl, as its JSON text.
inline std::vector<std::string> column(const std::string& metrics, const std::string& key) {
  std::vector<std::string> out;
  const std::regex re("\"" + key + "\":(\\[[\\]\\[0-9,]*\\]|[-0-9.eE+]+)");
  for (const std::string& line : step_lines(metrics)) {
    std::smatch m;
    out.push_back(std::regex_search(line, m, re) ? m[1].str() : "");
  }
  return out;
}

// The routing numbers of two runs agree at every step: token counts and dropped tokens
// exactly, the aux loss and the clipped norm within 1e-5 relative. Returns the dropped
// tokens over the run.
inline long long expect_same_routing(const std::string& ref, const std::string& got, const std::string& label) {
  const std::vector<std::string> tok1 = column(ref, "expert_tokens"), tok = column(got, "expert_tokens");
  const std::vector<std::string> drop1 = column(ref, "dropped_tokens"), drop = column(got, "dropped_tokens");
  EXPECT_EQ(tok, tok1) << label;
  EXPECT_EQ(drop, drop1) << label;
  for (const char* key : {"aux_loss", "grad_norm"}) {
    const std::vector<std::string> a = column(ref, key), b = column(got, key);
    EXPECT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (a[i].empty() || b[i].empty()) {
        ADD_FAILURE() << key << " missing at step " << i + 1 << " in " << ref << " or " << got;
        return 0;
      }
      EXPECT_LE(std::fabs(std::stod(b[i]) - std::stod(a[i])), 1e-5 * std::fabs(std::stod(a[i])))
          << label << " " << key << " step " << i + 1;
    }
  }
  long long dropped = 0;
  for (const std::string& d : drop1) dropped += d.empty() ? 0 : std::stoll(d);
  return dropped;
}

// Whether a capacity factor dropped tokens over a run (`dropped`, expect_same_routing's
// count): some when `drops`, none otherwise; printed under `label`.
inline void expect_drops(long long dropped, bool drops, const std::string& capacity, const std::string& label) {
  std::printf("%s: %lld tokens dropped, on one rank and on this layout alike\n", label.c_str(), dropped);
  if (drops) {
    EXPECT_GT(dropped, 0) << label << ": capacity " << capacity << " should drop tokens";
  } else {
    EXPECT_EQ(dropped, 0) << label;
  }
}

}  // namespace partrain::testing
