// The job file: one table of every accepted key (job_rules), the cross-key checks the
// table cannot express, and the precedence chain site < file < environment < command line.
#include "config/job_config.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "config/key_table.h"
#include "config/site_config.h"
#include "layout/validate.h"

namespace partrain::config {
namespace {

using detail::KeyRule;
using detail::Range;
using detail::SeenKeys;
using detail::Source;

// What the rules write into: the config, plus the [parallelism] items, which are only
// turned into a ParallelSpec once the whole table is read (spec first, then the keys).
struct JobDraft {
  JobConfig job;
  std::string spec;                          // [parallelism] spec
  std::map<std::string, std::string> items;  // [parallelism] key -> spec item: "tp" -> "tp2"
};

// The individual [parallelism] keys, in the order they are laid over `spec`.
const std::vector<std::string>& parallel_item_keys() {
  static const std::vector<std::string> kKeys = {"tp", "pp", "dp", "ep", "cp", "zero", "sp", "sched", "cpimpl", "grad", "mb"};
  return kKeys;
}

// A [parallelism] key whose integer value becomes the spec item PREFIX + value.
KeyRule<JobDraft> integer_item(const std::string& key, const std::string& prefix, Range range) {
  return {"parallelism", key,
          [key, prefix, range](const toml::node& node, JobDraft* d, const Source&) -> Status {
            auto v = detail::read_integer(node, range);
            if (!v) return v.status();
            d->items[key] = prefix + std::to_string(*v);
            return Status::ok();
          }};
}

// [parallelism] KEY = "NAME": the spec item KEY=NAME (sched, cpimpl, grad).
KeyRule<JobDraft> string_item(const std::string& key) {
  return {"parallelism", key,
          [key](const toml::node& node, JobDraft* d, const Source&) -> Status {
            auto v = detail::read_string(node);
            if (!v) return v.status();
            d->items[key] = key + "=" + *v;
            return Status::ok();
          }};
}

#define FIELD(expr) [](JobDraft& d) -> auto& { return d.job.expr; }

// [[data.sources]]: an array of tables {name, files, weight}.
Status read_sources(const toml::node& node, JobDraft* d, const Source& src) {
  const toml::array* list = node.as_array();
  if (list == nullptr || list->empty() || !list->is_array_of_tables())
    return Status::invalid("must be one or more [[data.sources]] tables, each with files and weight");
  d->job.data.sources.clear();
  for (size_t i = 0; i < list->size(); ++i) {
    const toml::table& t = *list->get(i)->as_table();
    engine::DataSource s;
    s.name = fmt::format("source{}", i);
    bool have_files = false;
    for (const auto& [k, v] : t) {
      const std::string key(k.str());
      auto fail = [&](const std::string& why) {
        return Status::invalid(fmt::format("[[data.sources]] #{} key '{}' {}", i + 1, key, why));
      };
      if (key == "name") {
        auto n = detail::read_string(v);
        if (!n) return fail(n.status().message());
        s.name = *n;
      } else if (key == "files") {
        auto files = detail::read_string_array(v);
        if (!files) return fail(files.status().message());
        if (files->empty()) return fail("must name at least one file");
        for (const auto& f : *files) s.files.push_back(detail::resolve_path(src.base_dir, f));
        have_files = true;
      } else if (key == "weight") {
        auto w = detail::read_number(v, detail::above(0));
        if (!w) return fail(w.status().message());
        s.weight = *w;
      } else {
        return fail("is unknown; a source has name, files and weight");
      }
    }
    if (!have_files)
      return Status::invalid(fmt::format("[[data.sources]] #{} ('{}') has no files; list its "
                                         "token shards, e.g. files = [\"data/web.bin\"]", i + 1, s.name));
    d->job.data.sources.push_back(std::move(s));
  }
  return Status::ok();
}

// Every key a job file may set. The parser, the suggestions, known_job_keys() and the
// man-page test all read this one table; partrain.toml(5) documents each entry.
const std::vector<KeyRule<JobDraft>>& job_rules() {
  using detail::above;
  using detail::at_least;
  using detail::closed;
  using detail::half_open;
  using engine::Arch;
  using engine::Recompute;
  static const std::vector<KeyRule<JobDraft>> kRules = {
      detail::string_key<JobDraft>("job", "name", FIELD(name), true),
      detail::string_key<JobDraft>("job", "run_dir", FIELD(run_dir), true),
      detail::choice_key<JobDraft>("job", "device", FIELD(device),
                                   std::vector<std::pair<std::string, std::string>>{
                                       {"cpu", "cpu"}, {"cuda", "cuda"}}),

      detail::choice_key<JobDraft>("job", "precision", FIELD(precision),
                                   std::vector<std::pair<std::string, std::string>>{
                                       {"fp32", "fp32"}, {"bf16", "bf16"}}),

      detail::choice_key<JobDraft>("model", "arch", FIELD(model.arch),
                                   std::vector<std::pair<std::string, Arch>>{
                                       {"gpt2", Arch::kGpt2}, {"llama", Arch::kLlama}}),
      detail::integer_key<JobDraft>("model", "vocab_size", FIELD(model.vocab_size), at_least(1)),
      detail::integer_key<JobDraft>("model", "seq_len", FIELD(model.seq_len), at_least(1)),
      detail::integer_key<JobDraft>("model", "layers", FIELD(model.layers), at_least(1)),
      detail::integer_key<JobDraft>("model", "hidden", FIELD(model.hidden), at_least(1)),
      detail::integer_key<JobDraft>("model", "heads", FIELD(model.heads), at_least(1)),
      detail::integer_key<JobDraft>("model", "kv_heads", FIELD(model.kv_heads), at_least(0)),
      detail::integer_key<JobDraft>("model", "ffn_hidden", FIELD(model.ffn_hidden), at_least(0)),
      detail::number_key<JobDraft>("model", "norm_eps", FIELD(model.norm_eps), above(0)),
      detail::number_key<JobDraft>("model", "rope_theta", FIELD(model.rope_theta), above(0)),
      detail::bool_key<JobDraft>("model", "tie_embeddings", FIELD(model.tie_embeddings)),
      detail::number_key<JobDraft>("model", "dropout", FIELD(model.dropout), half_open(0, 1)),
      detail::number_key<JobDraft>("model", "init_std", FIELD(model.init_std), at_least(0)),
      detail::integer_key<JobDraft>("model", "moe_experts", FIELD(model.moe_experts), at_least(0)),
      detail::integer_key<JobDraft>("model", "moe_top_k", FIELD(model.moe_top_k), at_least(1)),
      detail::integer_key<JobDraft>("model", "moe_every", FIELD(model.moe_every), at_least(1)),
      detail::number_key<JobDraft>("model", "moe_capacity_factor",
                                   FIELD(model.moe_capacity_factor), above(0)),
      detail::number_key<JobDraft>("model", "moe_aux_loss_coef", FIELD(model.moe_aux_loss_coef),
                                   at_least(0)),
      detail::choice_key<JobDraft>("model", "recompute", FIELD(model.recompute),
                                   std::vector<std::pair<std::string, Recompute>>{
                                       {"none", Recompute::kNone},
                                       {"selective", Recompute::kSelective},
                                       {"full", Recompute::kFull}}),

      detail::path_list_key<JobDraft>("data", "train_files", FIELD(data.train_files)),
      {"data", "sources", read_sources},
      detail::choice_key<JobDraft>("data", "format", FIELD(data.format),
                                   std::vector<std::pair<std::string, std::string>>{
                                       {"auto", "auto"}, {"llmc", "llmc"},
                                       {"raw-u16", "raw-u16"}, {"raw-u32", "raw-u32"}}),
      detail::path_list_key<JobDraft>("data", "val_files", FIELD(data.val_files)),
      detail::integer_key<JobDraft>("data", "eval_every", FIELD(data.eval_every), at_least(0)),
      detail::integer_key<JobDraft>("data", "eval_batches", FIELD(data.eval_batches), at_least(1)),

      detail::integer_key<JobDraft>("training", "steps", FIELD(training.steps), at_least(1)),
      detail::integer_key<JobDraft>("training", "global_batch", FIELD(training.global_batch),
                                    at_least(1)),
      detail::integer_key<JobDraft>("training", "micro_batch", FIELD(training.micro_batch),
                                    at_least(1)),
      detail::integer_key<JobDraft>("training", "seed", FIELD(training.seed), at_least(0)),
      detail::number_key<JobDraft>("training", "lr", FIELD(training.lr), above(0)),
      detail::number_key<JobDraft>("training", "min_lr", FIELD(training.min_lr), at_least(0)),
      detail::integer_key<JobDraft>("training", "warmup_steps", FIELD(training.warmup_steps),
                                    at_least(0)),
      detail::choice_key<JobDraft>("training", "lr_schedule", FIELD(training.lr_schedule),
                                   std::vector<std::pair<std::string, engine::LrSchedule>>{
                                       {"cosine", engine::LrSchedule::kCosine},
                                       {"linear", engine::LrSchedule::kLinear},
                                       {"constant", engine::LrSchedule::kConstant},
                                       {"wsd", engine::LrSchedule::kWsd}}),
      detail::integer_key<JobDraft>("training", "decay_steps", FIELD(training.decay_steps), at_least(0)),
      detail::integer_key<JobDraft>("training", "cooldown_steps", FIELD(training.cooldown_steps), at_least(0)),
      detail::number_key<JobDraft>("training", "beta1", FIELD(training.beta1), half_open(0, 1)),
      detail::number_key<JobDraft>("training", "beta2", FIELD(training.beta2), half_open(0, 1)),
      detail::number_key<JobDraft>("training", "eps", FIELD(training.eps), above(0)),
      detail::number_key<JobDraft>("training", "weight_decay", FIELD(training.weight_decay),
                                   at_least(0)),
      detail::number_key<JobDraft>("training", "grad_clip", FIELD(training.grad_clip),
                                   at_least(0)),
      detail::integer_key<JobDraft>("training", "log_every", FIELD(training.log_every),
                                    at_least(1)),

      detail::string_key<JobDraft>("parallelism", "spec",
                                   [](JobDraft& d) -> auto& { return d.spec; }),
      integer_item("tp", "tp", at_least(1)),
      integer_item("pp", "pp", at_least(1)),
      integer_item("dp", "dp", at_least(1)),
      integer_item("ep", "ep", at_least(1)),
      integer_item("cp", "cp", at_least(1)),
      integer_item("zero", "zero", closed(0, 3)),
      {"parallelism", "sp",
       [](const toml::node& node, JobDraft* d, const Source&) -> Status {
         auto v = detail::read_bool(node);
         if (!v) return v.status();
         d->items["sp"] = *v ? "sp" : "nosp";
         return Status::ok();
       }},
      {"parallelism", "stage_layers",
       [](const toml::node& node, JobDraft* d, const Source&) -> Status {
         auto v = detail::read_integer_array(node, at_least(1));
         if (!v) return v.status();
         d->job.stage_layers.assign(v->begin(), v->end());
         return Status::ok();
       }},
      string_item("sched"),
      string_item("cpimpl"),
      string_item("grad"),
      integer_item("mb", "mb=", at_least(1)),

      detail::string_key<JobDraft>("checkpoint", "dir", FIELD(checkpoint.dir)),
      detail::integer_key<JobDraft>("checkpoint", "every", FIELD(checkpoint.every), at_least(0)),
      detail::integer_key<JobDraft>("checkpoint", "keep", FIELD(checkpoint.keep), at_least(1)),
      detail::bool_key<JobDraft>("checkpoint", "async", FIELD(checkpoint.async)),
      detail::integer_key<JobDraft>("checkpoint", "max_restarts", FIELD(checkpoint.max_restarts), at_least(0)),
      {"checkpoint", "resume",
       [](const toml::node& node, JobDraft* d, const Source&) -> Status {
         if (node.is_integer()) {
           auto v = detail::read_integer(node, at_least(1));
           if (!v) return v.status();
           d->job.checkpoint.resume = ResumeMode{ResumeMode::Kind::kStep, *v};
           return Status::ok();
         }
         const std::optional<std::string> v = node.value<std::string>();
         if (!v || (*v != "auto" && *v != "never")) {
           return Status::invalid(std::string("must be \"auto\", \"never\" or the step of a committed checkpoint "
                                              "(>= 1)") + (v ? " (got \"" + *v + "\")" : ""));
         }
         d->job.checkpoint.resume.kind = *v == "auto" ? ResumeMode::Kind::kAuto : ResumeMode::Kind::kNever;
         return Status::ok();
       }},
  };
  return kRules;
}

#undef FIELD

using detail::respell_spec_error;

bool valid_name(const std::string& name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.';
  });
}

int64_t line_of(const SeenKeys& seen, const std::string& key) {
  auto it = seen.find(key);
  return it == seen.end() ? 0 : it->second;
}

// Checks between keys that a per-key range cannot express. Each error points at the line
// of the key to change (or at the file when that key was left at its default).
Status check_model_and_training(const JobConfig& job, const SeenKeys& seen, const Source& src) {
  const auto& m = job.model;
  const auto& t = job.training;
  if (m.hidden % m.heads != 0) {
    return Status::invalid(fmt::format(
        "{}[model] heads = {} does not divide hidden = {}; choose heads so that hidden % heads == 0",
        detail::where(src, line_of(seen, "model.heads")), m.heads, m.hidden));
  }
  if (m.kv_heads > 0 && (m.kv_heads > m.heads || m.heads % m.kv_heads != 0)) {
    return Status::invalid(fmt::format(
        "{}[model] kv_heads = {} does not divide heads = {}; choose kv_heads so that heads % "
        "kv_heads == 0 (or 0 for kv_heads = heads)",
        detail::where(src, line_of(seen, "model.kv_heads")), m.kv_heads, m.heads));
  }
  if (m.moe_experts > 0 && m.moe_top_k > m.moe_experts) {
    return Status::invalid(fmt::format(
        "{}[model] moe_top_k = {} is more than moe_experts = {}; a token cannot visit more "
        "experts than there are",
        detail::where(src, line_of(seen, "model.moe_top_k")), m.moe_top_k, m.moe_experts));
  }
  if (m.moe_experts > 0 && m.moe_every > m.layers) {
    return Status::invalid(fmt::format(
        "{}[model] moe_every = {} is more than layers = {}, so no block would have experts; "
        "lower moe_every or set moe_experts = 0",
        detail::where(src, line_of(seen, "model.moe_every")), m.moe_every, m.layers));
  }
  if (t.min_lr > t.lr) {
    return Status::invalid(fmt::format(
        "{}[training] min_lr = {} is above lr = {}; the schedule decays from lr to min_lr",
        detail::where(src, line_of(seen, "training.min_lr")), t.min_lr, t.lr));
  }
  if (t.decay_steps > 0 && t.decay_steps <= t.warmup_steps) {
    return Status::invalid(fmt::format(
        "{}[training] decay_steps = {} is not above warmup_steps = {}; decay_steps is the step the decay "
        "ends at, warm-up included: raise it, or remove it for the run's steps",
        detail::where(src, line_of(seen, "training.decay_steps")), t.decay_steps, t.warmup_steps));
  }
  if (t.cooldown_steps > 0 && t.decay_steps > 0 && t.cooldown_steps > t.decay_steps - t.warmup_steps) {
    return Status::invalid(fmt::format(
        "{}[training] cooldown_steps = {} is longer than the {} steps from the warm-up's end to decay_steps = {}; "
        "lower it", detail::where(src, line_of(seen, "training.cooldown_steps")), t.cooldown_steps,
        t.decay_steps - t.warmup_steps, t.decay_steps));
  }
  if (t.global_batch % t.micro_batch != 0) {
    return Status::invalid(fmt::format(
        "{}[training] global_batch = {} is not a multiple of micro_batch = {}; global_batch = "
        "micro_batch x grad_accum x dp, so choose them so that micro_batch divides global_batch",
        detail::where(src, line_of(seen, "training.global_batch")), t.global_batch,
        t.micro_batch));
  }
  if (job.data.train_files.empty() && job.data.sources.empty()) {
    return Status::invalid(detail::where(src, 0) +
                           "[data] train_files is missing; name the token shards to train on, "
                           "e.g. train_files = [\"data/train.bin\"] (or a mixture: [[data.sources]])");
  }
  if (!job.data.train_files.empty() && !job.data.sources.empty()) {
    return Status::invalid(detail::where(src, line_of(seen, "data.sources")) +
                           "[data] has both train_files and [[data.sources]]; use one: a single "
                           "list of shards, or a mixture of sources with weights");
  }
  return Status::ok();
}

// [plugins.NAME] tables, each kept as TOML text for the plugin NAME to read.
Status read_plugin_tables(const toml::table& root, const Source& src, JobConfig* job) {
  const toml::node* plugins = root.get("plugins");
  if (plugins == nullptr) return Status::ok();
  const toml::table* table = plugins->as_table();
  if (table == nullptr) {
    return Status::invalid(detail::where(src, plugins->source().begin.line) +
                           "'plugins' must be a table of plugin tables, e.g. [plugins.myschedule]");
  }
  for (const auto& [key, node] : *table) {
    const std::string name(key.str());
    const toml::table* settings = node.as_table();
    if (settings == nullptr) {
      return Status::invalid(detail::where(src, key.source().begin.line) + "[plugins] key '" +
                             name + "' must be a table [plugins." + name +
                             "] holding that plugin's settings");
    }
    if (!valid_name(name)) {
      return Status::invalid(detail::where(src, key.source().begin.line) + "[plugins." + name +
                             "]: a plugin name has letters, digits, '_', '-' and '.' only");
    }
    std::ostringstream text;
    text << toml::toml_formatter(*settings);
    job->plugin_tables[name] = text.str();
  }
  return Status::ok();
}

// Builds the ParallelSpec: `spec` first, then each individual key over it, so a key wins
// over the same item inside `spec`. Errors point at the line that holds the bad item.
Status build_parallelism(const JobDraft& draft, const SeenKeys& seen, const Source& src,
                         JobConfig* job) {
  ParallelSpec spec;
  std::vector<std::string> items;
  if (!draft.spec.empty()) items.push_back(draft.spec);
  for (const auto& key : parallel_item_keys()) {
    auto it = draft.items.find(key);
    if (it != draft.items.end()) items.push_back(it->second);
  }
  size_t index = 0;
  for (const auto& item : items) {
    const bool is_spec = index++ == 0 && !draft.spec.empty();
    auto next = overlay_spec(spec, item);
    if (!next) {
      std::string key = is_spec ? "spec" : item.substr(0, item.find_first_of("0123456789="));
      if (item == "nosp") key = "sp";
      return Status::invalid(detail::where(src, line_of(seen, "parallelism." + key)) +
                             "[parallelism] key '" + key + "': " +
                             respell_spec_error(next.status().message(), ""));
    }
    spec = *next;
  }
  job->parallelism = spec;
  job->parallelism_items = items;
  return Status::ok();
}

// "12" -> 12; anything else (sign, fraction, junk, overflow) -> nullopt.
std::optional<uint64_t> parse_unsigned(const std::string& text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

// Where an override came from, for messages: PARTRAIN_STEPS or --steps.
struct OverrideNames {
  std::string spec, steps, seed, run_dir, device, resume;
  bool from_environment;
};

// All or nothing: *out changes only when every override is valid.
Status apply_overrides(const Overrides& o, const OverrideNames& names, JobConfig* out) {
  JobConfig copy = *out;
  JobConfig* job = &copy;
  if (o.spec) {
    auto next = overlay_spec(job->parallelism, *o.spec);
    if (!next) {
      // The spec's own message already speaks of --partrain.
      if (!names.from_environment) return next.status();
      return Status::invalid(respell_spec_error(next.status().message(), names.spec));
    }
    job->parallelism = *next;
  }
  if (o.steps) {
    if (*o.steps < 1) {
      return Status::invalid(fmt::format("{} {}: steps must be a positive whole number, e.g. {} 100",
                                         names.steps, *o.steps, names.steps));
    }
    job->training.steps = *o.steps;
  }
  if (o.seed) job->training.seed = *o.seed;
  if (o.checkpoint_every) job->checkpoint.every = *o.checkpoint_every;
  if (o.run_dir) {
    if (o.run_dir->empty()) return Status::invalid(names.run_dir + ": the run folder must not be empty");
    job->run_dir = *o.run_dir;
  }
  if (o.device) {
    // Every worker of a job gets its own GPU: one named device ("cuda:1") fits one rank only.
    if (*o.device != "cpu" && *o.device != "cuda") {
      const std::string given = names.from_environment ? fmt::format("{}='{}'", names.device, *o.device)
                                                       : fmt::format("{} {}", names.device, *o.device);
      return Status::invalid(fmt::format("{}: the workers' device is cpu or cuda (each worker gets its "
                                         "own GPU), e.g. {}{}cuda", given, names.device,
                                         names.from_environment ? "=" : " "));
    }
    job->device = *o.device;
  }
  if (o.resume) {
    const std::string given = names.from_environment ? fmt::format("{}='{}'", names.resume, *o.resume)
                                                     : fmt::format("{} {}", names.resume, *o.resume);
    Result<ResumeMode> mode = parse_resume(*o.resume, given);
    if (!mode) return mode.status();
    job->checkpoint.resume = *mode;
  }
  *out = std::move(copy);
  return Status::ok();
}

}  // namespace

Result<JobConfig> parse_job(std::string_view text, const std::string& path) {
  const Source src = Source::of(path);

  auto root = detail::parse_toml(src, text);
  if (!root) return root.status();

  JobDraft draft;
  draft.job.path = path;
  SeenKeys seen;
  const std::string hint = ", and [plugins.NAME] for the settings of strategy plugin NAME";
  PARTRAIN_RETURN_IF_ERROR(
      detail::apply_rules(*root, job_rules(), src, {"plugins"}, hint, &draft, &seen));
  PARTRAIN_RETURN_IF_ERROR(read_plugin_tables(*root, src, &draft.job));

  JobConfig& job = draft.job;
  if (!seen.count("job.name")) {
    // Default: the file's stem, made safe to use as a folder name.
    job.name = std::filesystem::path(path).stem().string();
    for (char& c : job.name) {
      if (!valid_name(std::string(1, c))) c = '_';
    }
    if (job.name.empty()) job.name = "job";
  } else if (!valid_name(job.name)) {
    return Status::invalid(detail::where(src, line_of(seen, "job.name")) + "[job] key 'name' = \"" +
                           job.name + "\" may hold only letters, digits, '_', '-' and '.'");
  }
  if (!seen.count("job.run_dir")) job.run_dir = "runs/" + job.name;
  // LLaMA unties the LM head unless the file says otherwise.
  if (job.model.arch == engine::Arch::kLlama && !seen.count("model.tie_embeddings")) {
    job.model.tie_embeddings = false;
  }
  PARTRAIN_RETURN_IF_ERROR(check_model_and_training(job, seen, src));
  PARTRAIN_RETURN_IF_ERROR(build_parallelism(draft, seen, src, &job));
  return std::move(draft.job);
}

Result<JobConfig> load_job(const std::string& path) {
  auto text = detail::read_file(path, "job file");
  if (!text) return text.status();
  return parse_job(*text, path);
}

Status apply_site_defaults(const SiteConfig& site, JobConfig* job) {
  auto spec = parse_spec(site.default_spec);
  if (!spec) {
    return Status::invalid(site.path + ": [defaults] key 'spec': " +
                           respell_spec_error(spec.status().message(), ""));
  }
  ParallelSpec merged = *spec;
  for (const auto& item : job->parallelism_items) {
    auto next = overlay_spec(merged, item);
    if (!next) return next.status().prefixed(job->path + ": [parallelism]: ");
    merged = *next;
  }
  job->parallelism = merged;
  return Status::ok();
}

Status apply_environment(const std::map<std::string, std::string>& env, JobConfig* job) {
  auto get = [&env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
  Overrides o;
  o.spec = get("PARTRAIN_SPEC");
  o.run_dir = get("PARTRAIN_RUN_DIR");
  o.device = get("PARTRAIN_DEVICE");
  o.resume = get("PARTRAIN_RESUME");
  if (auto steps = get("PARTRAIN_STEPS")) {
    auto v = parse_unsigned(*steps);
    if (!v || *v < 1 || *v > static_cast<uint64_t>(INT64_MAX)) {
      return Status::invalid("PARTRAIN_STEPS='" + *steps +
                             "': needs a positive whole number of optimizer steps, e.g. "
                             "PARTRAIN_STEPS=100");
    }
    o.steps = static_cast<int64_t>(*v);
  }
  if (auto seed = get("PARTRAIN_SEED")) {
    auto v = parse_unsigned(*seed);
    if (!v) {
      return Status::invalid("PARTRAIN_SEED='" + *seed +
                             "': needs a whole number >= 0, e.g. PARTRAIN_SEED=1337");
    }
    o.seed = *v;
  }
  if (auto every = get("PARTRAIN_CHECKPOINT_EVERY")) {
    auto v = parse_unsigned(*every);
    if (!v || *v > static_cast<uint64_t>(INT64_MAX)) {
      return Status::invalid("PARTRAIN_CHECKPOINT_EVERY='" + *every +
                             "': needs a whole number of steps between checkpoints (0: only at the "
                             "end and on SIGTERM), e.g. PARTRAIN_CHECKPOINT_EVERY=100");
    }
    o.checkpoint_every = static_cast<int64_t>(*v);
  }
  return apply_overrides(o, {"PARTRAIN_SPEC", "PARTRAIN_STEPS", "PARTRAIN_SEED", "PARTRAIN_RUN_DIR",
                             "PARTRAIN_DEVICE", "PARTRAIN_RESUME", true}, job);
}

Status apply_environment(JobConfig* job) {
  std::map<std::string, std::string> env;
  for (const char* name : {"PARTRAIN_SPEC", "PARTRAIN_STEPS", "PARTRAIN_SEED", "PARTRAIN_RUN_DIR",
                           "PARTRAIN_CHECKPOINT_EVERY", "PARTRAIN_DEVICE", "PARTRAIN_RESUME"}) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  return apply_environment(env, job);
}

Status apply_command_line(const Overrides& cli, JobConfig* job) {
  return apply_overrides(cli, {"--partrain", "--steps", "--seed", "--run-dir", "--device", "--resume", false}, job);
}

Status overlay_command_line_spec(std::string_view spec, JobConfig* job) {
  Overrides o;
  o.spec = std::string(spec);
  return apply_command_line(o, job);
}

Result<JobConfig> resolve_job(const std::string& path, const SiteConfig& site,
                              const Overrides& cli) {
  auto job = load_job(path);
  if (!job) return job;
  PARTRAIN_RETURN_IF_ERROR(apply_site_defaults(site, &*job));
  PARTRAIN_RETURN_IF_ERROR(apply_environment(&*job));
  PARTRAIN_RETURN_IF_ERROR(apply_command_line(cli, &*job));
  return job;
}

std::string ResumeMode::to_string() const {
  switch (kind) {
    case Kind::kAuto: return "auto";
    case Kind::kNever: return "never";
    case Kind::kStep: return std::to_string(step);
  }
  return "?";
}

Result<ResumeMode> parse_resume(std::string_view text, std::string_view what) {
  if (text == "auto") return ResumeMode{};
  if (text == "never") return ResumeMode{ResumeMode::Kind::kNever, 0};
  const std::optional<uint64_t> step = parse_unsigned(std::string(text));
  if (step && *step >= 1 && *step <= static_cast<uint64_t>(INT64_MAX)) {
    return ResumeMode{ResumeMode::Kind::kStep, static_cast<int64_t>(*step)};
  }
  return Status::invalid(fmt::format("{}: resume is auto (the newest checkpoint that verifies), never (start "
                                     "over) or the step of a committed checkpoint, e.g. 200", what));
}

Result<int> grad_accum_steps(const JobConfig& job, int dp) {
  const auto& t = job.training;
  if (dp < 1) return Status::invalid(fmt::format("data-parallel degree {} must be >= 1", dp));
  if (job.parallelism.mb) {
    const int64_t mb = *job.parallelism.mb;
    if (t.global_batch % (mb * dp) != 0) {
      return Status::invalid(fmt::format(
          "{}: global_batch = {} does not split into mb={} micro-batches on each of dp = {} "
          "ranks ({} x {} = {} does not divide {}); choose mb so that global_batch / (mb x dp) "
          "is whole",
          job.path, t.global_batch, mb, dp, mb, dp, mb * dp, t.global_batch));
    }
    return static_cast<int>(mb);
  }
  const int64_t per_step = static_cast<int64_t>(t.micro_batch) * dp;
  if (t.global_batch % per_step != 0) {
    const int64_t lower = (t.global_batch / per_step) * per_step;
    return Status::invalid(fmt::format(
        "{}: global_batch = {} is not a multiple of micro_batch x dp = {} x {} = {}; the "
        "gradient-accumulation count global_batch / (micro_batch x dp) must be whole: set "
        "global_batch = {} or change micro_batch",
        job.path, t.global_batch, t.micro_batch, dp, per_step,
        lower > 0 ? lower : per_step));
  }
  return static_cast<int>(t.global_batch / per_step);
}

Result<int> micro_batch_size(const JobConfig& job, int dp) {
  auto accum = grad_accum_steps(job, dp);
  if (!accum) return accum.status();
  if (!job.parallelism.mb) return job.training.micro_batch;
  return job.training.global_batch / (*accum * dp);
}

std::vector<std::string> known_job_keys() {
  std::vector<std::string> keys;
  for (const auto& rule : job_rules()) keys.push_back(rule.table + "." + rule.key);
  return keys;
}

Status validate_layout(const JobConfig& job, int world) {
  const engine::ModelOptions& m = job.model;
  ModelShape shape;
  shape.hidden = m.hidden;
  shape.heads = m.heads;
  shape.kv_heads = m.kv_heads > 0 ? m.kv_heads : m.heads;
  shape.layers = m.layers;
  shape.experts = m.moe_experts;
  shape.vocab = m.vocab_size;
  shape.seq_len = m.seq_len;
  PARTRAIN_RETURN_IF_ERROR(validate(job.parallelism, ClusterFacts{world, 0, 0}, shape));
  return check_stage_layers(job);
}

Status check_stage_layers(const JobConfig& job) {
  const ParallelSpec& s = job.parallelism;
  const int stages = s.pp * s.virtual_stages;
  // Without a pipeline there is one stage and nothing to split: the key is not used, so one
  // job file serves its pipeline layouts and a run on one rank or on dp alike.
  if (job.stage_layers.empty() || stages == 1) return Status::ok();
  int sum = 0;
  for (int n : job.stage_layers) sum += n;
  if (static_cast<int>(job.stage_layers.size()) != stages || sum != job.model.layers) {
    return Status::invalid(fmt::format(
        "{}: [parallelism] stage_layers lists {} stages holding {} layers, but pp{}{} has {} stages and [model] "
        "layers is {}; give one count per stage (>= 1 each) summing to {}, or remove stage_layers for the "
        "cost-balanced split", job.path, job.stage_layers.size(), sum, s.pp,
        s.virtual_stages > 1 ? fmt::format(" x {} virtual stages", s.virtual_stages) : "", stages,
        job.model.layers, job.model.layers));
  }
  return Status::ok();
}

}  // namespace partrain::config
