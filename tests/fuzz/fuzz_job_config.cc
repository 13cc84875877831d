// A job file (TOML) as `partrain run` reads it (config/job_config.h): parsed, then checked
// against a site config's defaults and against a few world sizes, as the CLI and agent do.
#include <cstdint>
#include <string_view>

#include "config/job_config.h"
#include "config/site_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  partrain::Result<partrain::config::JobConfig> job = partrain::config::parse_job(text, "job.toml");
  if (!job) return 0;
  partrain::config::SiteConfig site;
  if (!partrain::config::apply_site_defaults(site, &*job)) return 0;
  for (int world : {1, 2, 8}) {
    (void)partrain::config::validate_layout(*job, world);
    (void)partrain::config::grad_accum_steps(*job, world);
  }
  return 0;
}
