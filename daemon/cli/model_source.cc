#include "cli/model_source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <cstdio>

#include <fmt/format.h>

#include "common/units.h"

#include "config/job_config.h"
#include "engine/backend.h"
#include "engine/model/hf_config.h"
#include "engine/model/hf_io.h"
#include "engine/model/model.h"
#include "store/shard_file.h"
#include "tokenize/tokenizer.h"

namespace partrain::cli {
namespace {

namespace fs = std::filesystem;

// tokenizer.json, tokenizer.model or a .tiktoken file in `dir`, or "".
std::string tokenizer_beside(const fs::path& dir) {
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (fs::exists(dir / name)) return (dir / name).string();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".tiktoken") return e.path().string();
  return "";
}

Result<std::unique_ptr<engine::model::Model>> cpu_model(const engine::ModelOptions& o,
                                                        std::unique_ptr<engine::Backend>* be,
                                                        uint64_t seed) {
  auto b = engine::make_backend("cpu");
  if (!b) return b.status();
  *be = std::move(*b);
  return engine::model::Model::create(o, be->get(), 1, seed);
}

Result<ModelSource> from_hf_folder(const std::string& dir) {
  const std::string config = (fs::path(dir) / "config.json").string();
  std::ifstream in(config, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto o = engine::model::model_options_from_hf_config(text, config);
  if (!o) return o.status();
  std::unique_ptr<engine::Backend> be;
  auto m = cpu_model(*o, &be, 0);
  if (!m) return m.status();
  PARTRAIN_RETURN_IF_ERROR(engine::model::load_hf(**m, dir));
  return ModelSource{*o, (*m)->params_to_host(), tokenizer_beside(dir), dir};
}

Result<ModelSource> from_checkpoint(const std::string& run_dir, const config::JobConfig& job,
                                    const std::string& job_path, int64_t step) {
  auto o = open_run(run_dir);
  if (!o) return o.status();
  if (step >= 0) PARTRAIN_RETURN_IF_ERROR(pick_checkpoint(*o, step).status());
  std::unique_ptr<engine::Backend> be;
  auto m = cpu_model(job.model, &be, job.training.seed);
  if (!m) return m.status();
  std::vector<float> host(static_cast<size_t>((*m)->num_params()));
  // step's checkpoint, or the newest that verifies: a damaged one is named and skipped, as a
  // resume skips it.
  for (const store::Checkpoint& c : o->checkpoints) {
    if (step >= 0 && c.state.step != step) continue;
    Status s = Status::ok();
    for (const engine::model::ParamSpec& p : (*m)->table().specs()) {
      s = store::read_range(o->root, c, p.name, store::Role::kWeight, 0, p.numel(), host.data() + p.offset);
      if (!s) break;
    }
    if (s.code() == StatusCode::kInvalidArgument) {
      return s.prefixed(fmt::format("{} does not fit [model] of {}: ", o->root, job_path));
    }
    if (!s) {
      if (step >= 0) return s.prefixed(fmt::format("checkpoint of step {} is damaged: ", c.state.step));
      std::fprintf(stderr, "partrain: checkpoint of step %lld is damaged: %s; trying the previous one\n",
                   static_cast<long long>(c.state.step), s.message().c_str());
      continue;
    }
    return ModelSource{job.model, std::move(host), "", fmt::format("{}, step {}", o->root, c.state.step)};
  }
  if (o->checkpoints.empty()) return Status::not_found(o->root + ": no committed checkpoint");
  return Status::corruption(fmt::format("{}: no committed checkpoint verifies; `partrain ckpt verify {}` "
                                        "names the damage", o->root, run_dir));
}

// "5GB" -> 5e9, "500MB", "100KB", "123" (bytes); decimal units as save_pretrained's.
Result<uint64_t> parse_size(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  if (used == 0 || scale == 0 || v <= 0)
    return Status::invalid(fmt::format("--max-shard-size {}: expected a size such as 5GB, 500MB, "
                                       "100KB or a number of bytes", text));
  return static_cast<uint64_t>(v * scale);
}

// config.json's bos/eos ids from the first --tokenizer file partrain reads: eos is the
// document separator, bos Llama 3's <|begin_of_text|> or SentencePiece's <s> when there is
// one, else the separator (GPT-2's convention). None (null, null) for the byte-level
// tokenizer, which has no special token, or when no file is a tokenizer partrain reads.
// An id outside the model's vocabulary means the tokenizer is not the model's: refused.
Result<engine::model::HfTokenIds> token_ids_of(const std::vector<std::string>& files, int64_t vocab) {
  for (const std::string& f : files) {
    auto tok = tokenize::load_tokenizer(f);
    if (!tok || !(*tok)->has_separator()) continue;
    engine::model::HfTokenIds ids;
    ids.eos = (*tok)->separator();
    ids.bos = ids.eos;
    for (const char* text : {"<|begin_of_text|>", "<s>"}) {
      if (int64_t id = (*tok)->special_id(text); id >= 0) {
        ids.bos = id;
        break;
      }
    }
    if (std::max(ids.bos, ids.eos) >= vocab)
      return Status::invalid(fmt::format("--tokenizer {}: its special token id {} is outside the model's vocabulary "
                                         "of {} tokens ([model] vocab_size); give the tokenizer the model was trained with",
                                         f, std::max(ids.bos, ids.eos), vocab));
    return ids;
  }
  return engine::model::HfTokenIds{};
}

}  // namespace

Result<std::unique_ptr<engine::model::Model>> model_of(const ModelSource& src,
                                                       std::unique_ptr<engine::Backend>* backend) {
  auto m = cpu_model(src.model, backend, 0);
  if (!m) return m.status();
  (*m)->params_from_host(src.weights);
  return m;
}

void add_export_options(CLI::App* cmd, ExportTarget* t) {
  cmd->add_option("-o,--output", t->file, "output file (.safetensors), or use --hf");
  cmd->add_option("--hf", t->hf_dir,
                  "write a Hugging Face model folder: config.json, model.safetensors or shards "
                  "with model.safetensors.index.json");
  cmd->add_option("--tokenizer", t->tokenizers,
                  "tokenizer files to copy into the --hf folder (tokenizer.json, tokenizer.model, ...)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--max-shard-size", t->max_shard_size,
                  "largest --hf shard: 5GB (default), 500MB, 100KB or bytes");
}

Status write_export(engine::model::Model& m, const ExportTarget& t, const std::string& what) {
  if (t.file.empty() == t.hf_dir.empty())
    return Status::invalid("export: name one output: -o FILE.safetensors or --hf DIR");
  if (!t.file.empty()) {
    if (!t.tokenizers.empty())
      return Status::invalid("export: --tokenizer goes with --hf DIR (a file holds weights only)");
    PARTRAIN_RETURN_IF_ERROR(engine::model::save_hf(m, t.file));
    std::printf("wrote %s: %s, %s parameters in %zu tensors (Hugging Face names)\n", t.file.c_str(),
                what.c_str(), human_count(static_cast<double>(m.num_params())).c_str(),
                m.table().specs().size());
    return Status::ok();
  }
  auto max = parse_size(t.max_shard_size);
  if (!max) return max.status();
  engine::model::HfDirOptions o;
  o.max_shard_bytes = *max;
  o.extra_files = t.tokenizers;
  auto ids = token_ids_of(t.tokenizers, m.options().vocab_size);
  if (!ids) return ids.status();
  o.token_ids = *ids;
  PARTRAIN_RETURN_IF_ERROR(engine::model::save_hf_dir(m, t.hf_dir, o));
  size_t shards = 0;
  for (const auto& e : fs::directory_iterator(t.hf_dir))
    shards += e.path().extension() == ".safetensors" ? 1 : 0;
  std::printf("wrote %s: %s; config.json, %s (%s parameters)%s\n", t.hf_dir.c_str(), what.c_str(),
              shards == 1 ? "model.safetensors" : fmt::format("{} shards with model.safetensors.index.json", shards).c_str(),
              human_count(static_cast<double>(m.num_params())).c_str(),
              t.tokenizers.empty() ? "" : fmt::format(", {}", plural(static_cast<int64_t>(t.tokenizers.size()), "tokenizer file")).c_str());
  return Status::ok();
}

Result<OpenedRun> open_run(const std::string& run_dir) {
  OpenedRun o;
  o.root = fs::exists(fs::path(run_dir) / "state.db") ? run_dir : run_dir + "/checkpoints";
  if (!fs::exists(fs::path(o.root) / "state.db")) {
    return Status::not_found(fmt::format("{}: no checkpoints here (neither {}/state.db nor {}/checkpoints/state.db); "
                                         "give the run folder or the [checkpoint] dir", run_dir, run_dir, run_dir));
  }
  Result<std::unique_ptr<store::StateStore>> st = store::StateStore::open(o.root, /*read_only=*/true);
  if (!st) return st.status();
  o.store = std::move(st).value();
  Result<std::vector<store::Checkpoint>> c = o.store->checkpoints();
  if (!c) return c.status();
  o.checkpoints = std::move(c).value();
  return o;
}

Result<const store::Checkpoint*> pick_checkpoint(const OpenedRun& o, int64_t step) {
  for (const store::Checkpoint& c : o.checkpoints) {
    if (step < 0 || c.state.step == step) return &c;
  }
  if (o.checkpoints.empty()) return Status::not_found(o.root + ": no committed checkpoint");
  return Status::not_found(fmt::format("{}: no committed checkpoint of step {}; `partrain ckpt list {}` "
                                       "shows those there are", o.root, step, o.root));
}

Result<ModelSource> open_model_source(const std::string& source, const std::string& job_path, int64_t step) {
  if (fs::is_directory(source) && fs::exists(fs::path(source) / "config.json")) return from_hf_folder(source);
  const bool is_job = fs::path(source).extension() == ".toml";
  const std::string jp = is_job ? source : job_path;
  if (jp.empty())
    return Status::invalid(fmt::format("{}: not a Hugging Face folder (no config.json); name the "
                                       "job whose model it holds with --job JOB.toml", source));
  auto job = config::load_job(jp);
  if (!job) return job.status();
  PARTRAIN_RETURN_IF_ERROR(config::apply_environment(&job.value()));  // as `partrain run` reads it
  if (is_job) {
    // Where the run commits: [checkpoint] dir, else <run_dir>/checkpoints.
    const std::string root = store::checkpoint_root(job->checkpoint.dir, job->run_dir);
    if (!fs::exists(fs::path(root) / "state.db"))
      return Status::not_found(fmt::format("{}: no committed checkpoint in {} (the run has saved none yet)", jp, root));
    return from_checkpoint(root, *job, jp, step);
  }
  if (fs::is_directory(source)) return from_checkpoint(source, *job, jp, step);
  std::unique_ptr<engine::Backend> be;
  auto m = cpu_model(job->model, &be, job->training.seed);
  if (!m) return m.status();
  PARTRAIN_RETURN_IF_ERROR(engine::model::load_hf(**m, source));
  return ModelSource{job->model, (*m)->params_to_host(), tokenizer_beside(fs::path(source).parent_path().empty() ? "." : fs::path(source).parent_path()), source};
}

}  // namespace partrain::cli
