// `partrain import hf DIR -o OUT`: a Hugging Face model folder (config.json and
// model.safetensors or a sharded index; GPT-2, LLaMA, Mixtral) to a partrain job:
//
//   OUT/job.toml            [model] from config.json (engine/model/hf_config.h), the rest
//                           defaults to edit; fine-tune with `partrain run OUT/job.toml
//                           --init OUT/model.safetensors`
//   OUT/model.safetensors   the weights, checked against the model (every name and shape)
//   OUT/<tokenizer files>   tokenizer.json / tokenizer.model / *.tiktoken copied as found
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "common/exit_codes.h"
#include "cli/fail.h"
#include "cli/model_source.h"
#include "common/units.h"
#include "engine/io/atomic_file.h"
#include "engine/model/hf_io.h"
#include "engine/model/params.h"

namespace partrain::cli {
namespace {

namespace fs = std::filesystem;

struct ImportArgs {
  std::string dir, output, name;
  std::vector<std::string> train_files;
};

// A TOML array of basic strings (backslash and quote escaped).
std::string toml_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    std::string quoted;
    for (char c : items[i]) quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    out += fmt::format("{}\"{}\"", i ? ", " : "", quoted);
  }
  return out + "]";
}

// A --train-files path as job.toml must hold it: [data] paths are read relative to the job
// file's folder (OUT), and the user named them relative to where they stand. A file under
// OUT stays relative to it (the folder can move); any other becomes absolute.
std::string path_for_job(const std::string& given, const std::string& out_dir) {
  std::error_code ec;
  const fs::path file = fs::weakly_canonical(fs::absolute(given), ec);
  const fs::path out = fs::weakly_canonical(fs::absolute(out_dir), ec);
  const fs::path rel = file.lexically_relative(out);
  if (!rel.empty() && *rel.begin() != "..") return rel.generic_string();
  return file.generic_string();
}

std::string job_toml(const engine::ModelOptions& in, const ImportArgs& a, const std::string& tokenizer) {
  const engine::ModelOptions o = engine::model::resolved(in);
  const bool llama = o.arch == engine::Arch::kLlama;
  std::string moe;
  if (o.moe_experts > 0)
    moe = fmt::format("moe_experts = {}\nmoe_top_k = {}\nmoe_every = {}\nmoe_aux_loss_coef = {}\n",
                      o.moe_experts, o.moe_top_k, o.moe_every, o.moe_aux_loss_coef);
  std::vector<std::string> train;
  for (const std::string& f : a.train_files) train.push_back(path_for_job(f, a.output));
  if (train.empty()) train.push_back("train.bin");
  return fmt::format(
      "# Imported from the Hugging Face folder {} by `partrain import hf`.\n"
      "# Fine-tune from its weights:\n#\n"
      "#   partrain run {}/job.toml --init {}/model.safetensors\n#\n"
      "# Every key is described in partrain.toml(5).\n\n"
      "[job]\nname = \"{}\"\n\n"
      "[model]\narch = \"{}\"\nvocab_size = {}\nseq_len = {}\nlayers = {}\nhidden = {}\nheads = {}\n"
      "kv_heads = {}\nffn_hidden = {}\nnorm_eps = {}\n{}tie_embeddings = {}\n{}\n"
      "[data]\n# llm.c token shards relative to this file, e.g. from\n"
      "#   partrain data encode --tokenizer {} corpus.jsonl -o {}/train.bin\n"
      "train_files = {}\n\n"
      "[training]\nsteps = 100\nglobal_batch = 8\nmicro_batch = 8\nlr = 3e-5\nmin_lr = 3e-6\n"
      "warmup_steps = 10\nweight_decay = 0.0\ngrad_clip = 1.0\nseed = 1337\n",
      a.dir, a.output, a.output, a.name.empty() ? fs::path(a.output).filename().string() : a.name,
      llama ? "llama" : "gpt2", o.vocab_size, o.seq_len, o.layers, o.hidden, o.heads, o.kv_heads,
      o.ffn_hidden, o.norm_eps, llama ? fmt::format("rope_theta = {}\n", o.rope_theta) : "",
      o.tie_embeddings, moe, tokenizer.empty() ? "TOKENIZER" : fs::path(tokenizer).filename().string(),
      a.output, toml_list(train));
}

int run_import(const ImportArgs& a) {
  auto src = open_model_source(a.dir, "", -1);
  if (!src) return fail(src.status());
  if (!fs::exists(fs::path(a.dir) / "config.json"))
    return fail(Status::invalid(fmt::format("import hf {}: not a Hugging Face model folder (no config.json)", a.dir)));
  std::error_code ec;
  fs::create_directories(a.output, ec);
  if (ec) return fail(Status::io_error(fmt::format("{}: cannot create the folder: {}", a.output, ec.message())));
  std::unique_ptr<engine::Backend> be;
  auto m = model_of(*src, &be);
  if (!m) return fail(m.status());
  const std::string weights = (fs::path(a.output) / "model.safetensors").string();
  if (Status s = engine::model::save_hf(**m, weights); !s) return fail(s);
  std::vector<std::string> copied;
  for (const auto& e : fs::directory_iterator(a.dir)) {
    const std::string name = e.path().filename().string();
    if (name == "tokenizer.json" || name == "tokenizer.model" || name == "tokenizer_config.json" ||
        e.path().extension() == ".tiktoken") {
      fs::copy_file(e.path(), fs::path(a.output) / name, fs::copy_options::overwrite_existing, ec);
      if (ec) return fail(Status::io_error(fmt::format("{}: cannot copy: {}", e.path().string(), ec.message())));
      copied.push_back(name);
    }
  }
  const std::string job = (fs::path(a.output) / "job.toml").string();
  if (Status s = engine::io::write_file_atomic(job, job_toml(src->model, a, src->tokenizer)); !s) return fail(s);
  std::printf("imported %s: %s %s-parameter model, %s\n", a.dir.c_str(),
              src->model.arch == engine::Arch::kGpt2 ? "GPT-2" : "LLaMA",
              human_count(static_cast<double>((*m)->num_params())).c_str(),
              plural(src->model.layers, "layer").c_str());
  std::printf("wrote %s, %s%s\n", job.c_str(), weights.c_str(),
              copied.empty() ? "" : fmt::format(" and {}", fmt::join(copied, ", ")).c_str());
  std::printf("fine-tune: partrain run %s --init %s\n", job.c_str(), weights.c_str());
  return kExitOk;
}

}  // namespace

void register_import(CLI::App& app, CommandResult* result) {
  CLI::App* cmd = app.add_subcommand("import", "Bring a model from another format into partrain");
  cmd->require_subcommand(1);
  auto args = std::make_shared<ImportArgs>();
  CLI::App* hf = cmd->add_subcommand(
      "hf", "A Hugging Face folder (config.json + model.safetensors or sharded index; GPT-2, "
            "LLaMA, Mixtral) to a job file and weights");
  hf->add_option("dir", args->dir, "the Hugging Face model folder")->required()->check(CLI::ExistingDirectory);
  hf->add_option("-o,--output", args->output, "folder to write job.toml and model.safetensors into")->required();
  hf->add_option("--name", args->name, "[job] name (default: the output folder's name)");
  hf->add_option("--train-files", args->train_files,
                 "token shards for [data] train_files, as paths from here: job.toml stores them relative to "
                 "OUT when inside it, else absolute");
  hf->callback([args, result] { result->exit_code = run_import(*args); });
}

}  // namespace partrain::cli
