// See step_metrics.h.
#include "engine/train/step_metrics.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>


#include <fmt/format.h>

namespace partrain::engine::train {

namespace {

bool parallel(const StepMetrics& m) {
  return m.dp > 1 || m.tp > 1 || m.pp > 1 || m.cp > 1 || m.collectives > 0;
}

}  // namespace

std::string metrics_json(const StepMetrics& m) {
  // {} prints the shortest text that reads back to the same float: metrics are exact.
  std::string line = fmt::format(
      "{{\"step\":{},\"loss\":{},\"lr\":{},\"grad_norm\":{},\"tokens\":{},\"step_ms\":{:.3f},\"time\":{:.3f},"
      "\"fwd_ms\":{:.3f},\"bwd_ms\":{:.3f},\"opt_ms\":{:.3f},\"data_ms\":{:.3f}",
      m.step, m.loss, m.lr, m.grad_norm, m.tokens, m.step_ms, m.time, m.fwd_ms, m.bwd_ms, m.opt_ms, m.data_ms);
  if (m.val_loss >= 0) line += fmt::format(",\"val_loss\":{}", m.val_loss);
  if (m.save_stall_ms > 0) {
    line += fmt::format(",\"save_stall_ms\":{:.3f}", m.save_stall_ms);
    if (m.save_mb_per_s >= 0) line += fmt::format(",\"save_mb_s\":{:.1f}", m.save_mb_per_s);
  }
  if (m.save_wait_ms > 0) line += fmt::format(",\"save_wait_ms\":{:.3f}", m.save_wait_ms);
  line += fmt::format(",\"tokens_per_s\":{:.1f},\"tokens_per_s_per_rank\":{:.1f}", m.tokens_per_s,
                      m.tokens_per_s_per_rank);
  if (m.mfu > 0) line += fmt::format(",\"mfu\":{:.4f}", m.mfu);
  line += ",\"peak_mib\":{";
  for (int c = 0; c < kNumMemCategories; ++c) {
    line += fmt::format("{}\"{}\":{:.3f}", c > 0 ? "," : "", mem_category_name(static_cast<MemCategory>(c)),
                        static_cast<double>(m.peak_bytes[static_cast<size_t>(c)]) / (1 << 20));
  }
  line += "}";
  if (m.experts > 0) {
    // One array per MoE block, E counts each.
    line += ",\"expert_tokens\":[";
    const size_t E = static_cast<size_t>(m.experts);
    for (size_t b = 0; b * E < m.expert_tokens.size(); ++b) {
      line += b > 0 ? ",[" : "[";
      for (size_t e = 0; e < E; ++e) line += fmt::format("{}{}", e > 0 ? "," : "", m.expert_tokens[b * E + e]);
      line += "]";
    }
    line += "]";
    line += fmt::format(",\"dropped_tokens\":{},\"aux_loss\":{}", m.dropped_tokens, m.aux_loss);
  }
  if (m.ep > 1) line += fmt::format(",\"ep\":{}", m.ep);
  if (parallel(m)) {
    const double share = m.step_ms > 0 ? m.exposed_ms / m.step_ms : 0.0;
    line += fmt::format(",\"comm_ms\":{:.3f},\"exposed_ms\":{:.3f},\"exposed_share\":{:.4f},"
                        "\"collectives\":{},\"dp\":{}", m.comm_ms, m.exposed_ms, share,
                        m.collectives, m.dp);
    if (m.tp > 1) line += fmt::format(",\"tp\":{}", m.tp);
    if (m.cp > 1) line += fmt::format(",\"cp\":{}", m.cp);
    for (int a = 0; a < kNumCommAxes; ++a) {
      const AxisComm& x = m.axes[static_cast<size_t>(a)];
      if (x.collectives == 0) continue;
      const char* name = comm_axis_name(static_cast<CommAxis>(a));
      line += fmt::format(",\"{}_comm_ms\":{:.3f},\"{}_exposed_ms\":{:.3f}", name, x.comm_ms, name,
                          x.exposed_ms);
      if (x.bytes > 0) line += fmt::format(",\"{}_bytes\":{}", name, x.bytes);
    }
  }
  if (m.pp > 1) line += fmt::format(",\"pp\":{},\"bubble_share\":{:.4f}", m.pp, m.bubble_share);
  return line + "}";
}

std::string step_summary(const StepMetrics& m) {
  std::string out;
  if (m.pp > 1) out += fmt::format(" | bubble {:.1f}%", 100 * m.bubble_share);
  if (m.experts > 0) {
    out += fmt::format(" | aux {:.4g}, dropped {}, experts", m.aux_loss, m.dropped_tokens);
    const size_t E = static_cast<size_t>(m.experts);
    for (size_t i = 0; i < m.expert_tokens.size(); ++i) {
      out += fmt::format("{}{}", i % E == 0 ? (i == 0 ? " " : " / ") : ",", m.expert_tokens[i]);
    }
  }
  if (parallel(m)) {
    // "comm 12.0 ms, exposed dp 1.5 + tp 8.0 ms (40% of the step)"
    std::string exposed;
    for (int a = 0; a < kNumCommAxes; ++a) {
      const AxisComm& x = m.axes[static_cast<size_t>(a)];
      if (x.collectives == 0) continue;
      exposed += fmt::format("{}{} {:.1f}", exposed.empty() ? "" : " + ",
                             comm_axis_name(static_cast<CommAxis>(a)), x.exposed_ms);
    }
    if (exposed.empty()) exposed = fmt::format("{:.1f}", m.exposed_ms);
    out += fmt::format(" | comm {:.1f} ms, exposed {} ms ({:.0f}% of the step)", m.comm_ms, exposed,
                       m.step_ms > 0 ? 100 * m.exposed_ms / m.step_ms : 0.0);
  }
  if (m.save_stall_ms > 0) {
    out += m.save_mb_per_s >= 0
               ? fmt::format(" | checkpoint: {:.1f} ms stall, {:.1f} MB/s", m.save_stall_ms, m.save_mb_per_s)
               : fmt::format(" | checkpoint: {:.1f} ms stall, writing in the background", m.save_stall_ms);
  }
  if (m.save_wait_ms > 0) out += fmt::format(" | waited {:.1f} ms for the checkpoint's copy", m.save_wait_ms);
  return out;
}

Status write_tensorboard(metrics::TbWriter& tb, const StepMetrics& m) {
  auto put = [&](const std::string& tag, double value) { return tb.scalar(tag, m.step, static_cast<float>(value), m.time); };
  PARTRAIN_RETURN_IF_ERROR(put("train/loss", m.loss));
  if (m.val_loss >= 0) PARTRAIN_RETURN_IF_ERROR(put("val/loss", m.val_loss));
  PARTRAIN_RETURN_IF_ERROR(put("train/lr", m.lr));
  PARTRAIN_RETURN_IF_ERROR(put("train/grad_norm", m.grad_norm));
  PARTRAIN_RETURN_IF_ERROR(put("perf/tokens_per_s", m.tokens_per_s));
  PARTRAIN_RETURN_IF_ERROR(put("perf/step_ms", m.step_ms));
  if (m.mfu > 0) PARTRAIN_RETURN_IF_ERROR(put("perf/mfu", m.mfu));
  for (int c = 0; c < kNumMemCategories; ++c) {
    PARTRAIN_RETURN_IF_ERROR(put(std::string("memory/peak_mib/") + mem_category_name(static_cast<MemCategory>(c)),
                                 static_cast<double>(m.peak_bytes[static_cast<size_t>(c)]) / (1 << 20)));
  }
  for (int a = 0; a < kNumCommAxes; ++a) {
    const AxisComm& x = m.axes[static_cast<size_t>(a)];
    if (x.collectives == 0) continue;
    const std::string name = comm_axis_name(static_cast<CommAxis>(a));
    PARTRAIN_RETURN_IF_ERROR(put("comm/" + name + "_ms", x.comm_ms));
    PARTRAIN_RETURN_IF_ERROR(put("comm/" + name + "_exposed_ms", x.exposed_ms));
  }
  if (m.experts > 0) {
    PARTRAIN_RETURN_IF_ERROR(put("moe/aux_loss", m.aux_loss));
    PARTRAIN_RETURN_IF_ERROR(put("moe/dropped_tokens", static_cast<double>(m.dropped_tokens)));
  }
  if (m.pp > 1) PARTRAIN_RETURN_IF_ERROR(put("pp/bubble_share", m.bubble_share));
  return tb.flush();
}

Result<std::unique_ptr<RunFolderLock>> RunFolderLock::take(const std::string& run_dir) {
  const std::string path = run_dir + "/.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::io_error(fmt::format("{}: cannot open the run folder's lock: {}", path, std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char who[256] = {};
    const ssize_t n = ::pread(fd, who, sizeof who - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) {
      return Status::io_error(fmt::format("{}: cannot lock the run folder: {}", path, std::strerror(err)));
    }
    std::string holder(who, static_cast<size_t>(std::max<ssize_t>(n, 0)));
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    return Status::invalid(fmt::format("{}: in use by another partrain run{}, which writes its metrics.jsonl there; "
                                       "stop that run, or give this job another run_dir", run_dir,
                                       holder.empty() ? "" : " (" + holder + ")"));
  }
  char host[256] = {};
  (void)::gethostname(host, sizeof host - 1);
  const std::string who = fmt::format("pid {} on {}\n", ::getpid(), host);
  // A failure here costs only a later refusal's naming of the holder: the lock is held.
  const bool said = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, who.data(), who.size(), 0) == static_cast<ssize_t>(who.size());
  (void)said;
  return std::unique_ptr<RunFolderLock>(new RunFolderLock(fd));
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

Status metrics_write_failed(const std::string& path, int err) {
  return Status::io_error(fmt::format("{}: cannot write the run's metrics: {}; free space on its disk (or give the "
                                      "job another run_dir) and run the same command again: it resumes from its "
                                      "newest checkpoint", path, std::strerror(err != 0 ? err : EIO)));
}

}  // namespace

Status append_metrics(std::ofstream& out, const std::string& path, const std::string& line) {
  errno = 0;
  out << line << '\n' << std::flush;
  if (!out) return metrics_write_failed(path, errno);
  return Status::ok();
}

Status write_pending_metrics(const std::string& path, const std::string& line) {
  std::ofstream out(path + ".pending", std::ios::trunc);
  if (!out) return metrics_write_failed(path + ".pending", errno);
  return append_metrics(out, path + ".pending", line);
}

void drop_pending_metrics(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path + ".pending", ec);
}

namespace {

// How much of metrics.jsonl a start reads: its last lines, never the whole file.
constexpr std::streamoff kTail = 1 << 20;

// The last kTail bytes of the file at `path`, from its first whole line on; "" when it is
// missing. *nonempty: whether it holds any byte. A path that is there but no regular file
// (a FIFO would block the start, /dev/full or /dev/zero would never end) is refused.
Result<std::string> read_tail(const std::string& path, bool* nonempty) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || st.type() == std::filesystem::file_type::not_found) return std::string();
  if (st.type() != std::filesystem::file_type::regular) {
    return Status::invalid(fmt::format("{}: not a regular file; remove it (a run writes its metrics there) or give "
                                       "the job another run_dir", path));
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::io_error(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  const std::streamoff size = in.tellg();
  *nonempty = size > 0;
  const std::streamoff from = std::max<std::streamoff>(0, size - kTail);
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  tail.resize(static_cast<size_t>(in.gcount()));
  if (from > 0) {  // cut inside a line: start at the next whole one
    const size_t nl = tail.find('\n');
    tail.erase(0, nl == std::string::npos ? tail.size() : nl + 1);
  }
  return tail;
}

}  // namespace

Status open_metrics(const std::string& path, int64_t resumed_at, std::ofstream* out) {
  const std::string key = "{\"step\":", marker = "\"resumed_at_step\":";
  auto step_of = [&key](const std::string& line) {
    return line.rfind(key, 0) == 0 ? std::atoll(line.c_str() + key.size()) : -1;
  };
  // The last step a reader of the file takes as written: a restart marker replaces the
  // lines of steps after its resume point.
  // Only the file's tail is read (bounded, whatever its size): its last step line and the
  // markers after it decide.
  int64_t last = -1;
  bool written = false;
  {
    Result<std::string> tail = read_tail(path, &written);
    if (!tail) return tail.status();
    std::istringstream in(*tail);
    for (std::string line; std::getline(in, line);) {
      if (const int64_t s = step_of(line); s >= 0) {
        last = s;
      } else if (const size_t at = line.find(marker); at != std::string::npos) {
        last = std::min<int64_t>(last, std::atoll(line.c_str() + at + marker.size()));
      }
    }
  }
  // The process died after the step's checkpoint committed but before its line: the
  // pending copy written before the save has it; it goes in before the restart marker.
  std::string fill;
  if (resumed_at > 0 && last < resumed_at) {
    bool any = false;
    Result<std::string> pending = read_tail(path + ".pending", &any);
    std::istringstream in(pending ? *pending : std::string());
    if (std::string line; std::getline(in, line) && step_of(line) == resumed_at) fill = line;
  }
  std::error_code ec;
  std::filesystem::remove(path + ".pending", ec);
  errno = 0;
  out->open(path, std::ios::app);
  if (!*out) return metrics_write_failed(path, errno);
  if (!fill.empty()) PARTRAIN_RETURN_IF_ERROR(append_metrics(*out, path, fill));
  if (written) {
    // The same wall clock as the step lines' `time`: seconds since the Unix epoch.
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    PARTRAIN_RETURN_IF_ERROR(append_metrics(
        *out, path, fmt::format("{{\"event\":\"restart\",\"resumed_at_step\":{},\"time\":{:.3f}}}", resumed_at, now)));
  }
  return Status::ok();
}

}  // namespace partrain::engine::train
