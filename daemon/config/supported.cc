// See supported.h.
#include "config/supported.h"

#include <fmt/format.h>

namespace partrain::config {

Status check_supported(const JobConfig& job, const Layout& layout) {
  const std::string what = "--partrain=" + job.parallelism.to_string();
  if (layout.cp() != 1) {
    return Status::invalid(fmt::format("{}: this partrain runs tensor-, pipeline-, expert- and data-parallel "
                                       "layouts only (cp 1); the context-parallel runtime is not installed yet",
                                       what));
  }
  if (layout.ep() > 1 && (layout.tp() > 1 || job.parallelism.zero > 0)) {
    return Status::invalid(fmt::format("{}: expert parallelism runs with plain data and pipeline parallelism "
                                       "only (tp1, zero0) in this version; drop tp/zeroN, or drop ep", what));
  }
  if (job.device != "cpu" && layout.pp() > 1) {
    return Status::invalid(fmt::format("{}: [job] device = {}: the pipeline executor runs on CPU ranks (Gloo) "
                                       "in this version; use --device cpu, or drop pp", what, job.device));
  }
  if (job.device == "cuda" && layout.tp() > 1) {
    return Status::invalid(fmt::format("tp{} with [job] device = cuda: tensor parallelism runs on fp32 CPU "
                                       "ranks in this version (the CUDA backend keeps bf16); use dp alone on "
                                       "GPUs, or train tp on CPU ranks (--device cpu)", layout.tp()));
  }
  return Status::ok();
}

}  // namespace partrain::config
