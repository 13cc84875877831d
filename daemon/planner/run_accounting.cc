// See run_accounting.h.
#include "planner/run_accounting.h"

#include "planner/hardware.h"
#include "planner/memory.h"
#include "planner/step_time.h"

namespace partrain::planner {

Result<RunAccounting> run_accounting(const engine::ModelOptions& model, const std::string& device,
                                     const std::string& hardware, const std::string& hardware_dir) {
  RunAccounting a;
  const ModelDims dims = model_dims(model);
  a.model_flops_per_token = flops_per_token(dims, count_params(dims)).model_per_token;
  const bool cpu = device == "cpu";
  const std::string name = !hardware.empty() ? hardware : cpu ? "cpu" : "";
  if (name.empty()) return a;
  Result<HardwareProfile> hw = load_hardware(name, hardware_dir);
  if (!hw) {
    if (hardware.empty()) return a;  // the default profile is not installed: no MFU
    return hw.status();  // names --hardware and the profiles that exist
  }
  a.peak_flops_per_rank = cpu ? hw->peak_fp32 : hw->peak();
  a.profile = name;
  return a;
}

}  // namespace partrain::planner
