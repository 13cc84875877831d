// See supported.h.
#include "config/supported.h"

#include <climits>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

namespace partrain::config {

Status check_supported(const JobConfig& job, const Layout& layout) {
  const std::string what = "--partrain=" + job.parallelism.to_string();
  // cp cuts every sequence into 2cp chunks (layout/validate.h refuses a seq_len that does not
  // split); sequence parallelism then splits each rank's seq_len / cp rows over tp.
  const int local_seq = job.model.seq_len / layout.cp();
  if (layout.cp() > 1 && layout.tp() > 1 && job.parallelism.sequence_parallel() && local_seq % layout.tp() != 0) {
    return Status::invalid(fmt::format("{}: sequence parallelism splits each cp rank's {} of seq_len {} over "
                                       "tp{}, which does not divide it; use a seq_len that is a multiple of "
                                       "2 x cp{} x tp{} = {}, or nosp", what, local_seq, job.model.seq_len,
                                       layout.tp(), layout.cp(), layout.tp(), 2 * layout.cp() * layout.tp()));
  }
  // Each tp rank routes its own 1/tp of its (cp rank's) rows of every micro-batch.
  if (layout.tp() > 1 && job.model.moe_experts > 0 && local_seq % layout.tp() != 0) {
    if (layout.cp() > 1) {
      return Status::invalid(fmt::format("{}: [model] seq_len {} leaves each cp rank {} tokens, not a multiple of "
                                         "tp{}: on a mixture-of-experts model each tp rank routes its own 1/tp of "
                                         "them; use a seq_len that is a multiple of 2 x cp{} x tp{} = {}", what,
                                         job.model.seq_len, local_seq, layout.tp(), layout.cp(), layout.tp(),
                                         2 * layout.cp() * layout.tp()));
    }
    return Status::invalid(fmt::format("{}: [model] seq_len {} is not a multiple of tp{}: on a mixture-of-experts "
                                       "model each tp rank routes its own 1/tp of every micro-batch's tokens; pick "
                                       "a tp dividing seq_len", what, job.model.seq_len, layout.tp()));
  }
  // bf16 storage (a test mode on CPU ranks, the default on GPUs) runs plain dp only: the other
  // strategies move fp32 buffers through the plugins' fp32 ABI in this version.
  const bool bf16 = job.precision == "bf16" || (job.device != "cpu" && job.precision.empty());
  if (bf16 && (layout.tp() > 1 || layout.ep() > 1 || layout.pp() > 1 || layout.cp() > 1 || job.parallelism.zero > 0)) {
    if (job.device == "cpu") {
      return Status::invalid(fmt::format(
          "{}: [job] precision = \"bf16\" on CPU ranks runs plain data parallelism only in this version "
          "(tp, ep, pp, cp and zeroN move fp32 buffers); use precision = \"fp32\"", what));
    }
    return Status::invalid(fmt::format(
        "{}: [job] precision = \"bf16\" (the default on GPUs) runs plain data parallelism only in this "
        "version (tp, ep, pp, cp and zeroN move fp32 buffers); set [job] precision = \"fp32\" in the job "
        "file, or drop them", what));
  }
  return Status::ok();
}

Status check_job(const JobConfig& job, int world) {
  const Status s = [&]() -> Status {
    Result<Layout> layout = Layout::create(world, job.parallelism);
    if (!layout) return layout.status();
    if (Result<int> ga = grad_accum_steps(job, layout->dp()); !ga) return ga.status();
    PARTRAIN_RETURN_IF_ERROR(validate_layout(job, world));
    PARTRAIN_RETURN_IF_ERROR(check_supported(job, *layout));
    return check_paths(job);
  }();
  // Whatever the check that refused it, it is the job's configuration: a usage error (exit 2).
  return s ? s : Status::invalid(s.message());
}

Status check_paths(const JobConfig& job) {
  const std::string checkpoints = job.checkpoint.dir.empty() ? job.run_dir + "/checkpoints" : job.checkpoint.dir;
  const std::pair<std::string, const char*> folders[] = {
      {job.run_dir, "run folder ([job] run_dir, PARTRAIN_RUN_DIR)"},
      {checkpoints, "checkpoint folder ([checkpoint] dir)"}};
  for (const auto& [folder, what] : folders) {
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(folder, ec).lexically_normal().string();
    if (abs.size() + kDerivedPathReserve >= PATH_MAX)
      return Status::invalid(fmt::format(
          "{}: the {} is {} bytes long; the files written under it need up to {} more, over "
          "PATH_MAX ({}); choose a folder with a shorter path",
          abs, what, abs.size(), kDerivedPathReserve, PATH_MAX));
    for (const auto& part : std::filesystem::path(abs))
      if (part.native().size() > NAME_MAX)
        return Status::invalid(fmt::format("{}: a folder name in the {} is {} bytes, over NAME_MAX "
                                           "({}); shorten it",
                                           abs, what, part.native().size(), NAME_MAX));
  }
  return Status::ok();
}

}  // namespace partrain::config
