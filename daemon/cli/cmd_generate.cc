// `partrain generate SOURCE --prompt TEXT`: text from a trained model, token by token with
// a KV cache (engine/model/decoder.h), on the CPU.
//
//   partrain generate etc/examples/tiny.toml --prompt "Permission is" --max-tokens 80
//   partrain generate runs/tiny --job etc/examples/tiny.toml --prompt "..." --step 100
//   partrain generate hf/gpt2-small --prompt "Hello" --temperature 0.8 --top-k 40 --seed 7
//
// SOURCE: cli/model_source.h. The tokenizer: --tokenizer, else the one beside the weights,
// else byte-level for a 256-token vocabulary. A tokenizer with a separator starts the
// sequence with it (as every document in a shard starts) and generation stops when the model
// writes it. The same SOURCE, prompt and options give the same text on any run
// (engine/model/sampling.h: counter-based draws keyed by --seed).
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <omp.h>

#include "cli/commands.h"
#include "common/cli_checks.h"
#include "common/cpu_budget.h"
#include "common/exit_codes.h"
#include "cli/fail.h"
#include "cli/model_source.h"
#include "common/units.h"
#include "engine/model/decoder.h"
#include "engine/model/sampling.h"
#include "tokenize/tokenizer.h"

namespace partrain::cli {
namespace {

constexpr int64_t kNoStep = INT64_MIN;

struct GenerateArgs {
  std::string source, job, prompt, tokenizer;
  int64_t step = kNoStep;  // --step; kNoStep: the newest checkpoint
  int max_tokens = 64;
  int threads = 0;  // --threads; 0: thread_count()'s default
  engine::model::SamplingOptions sampling;
};

Result<std::unique_ptr<tokenize::Tokenizer>> pick_tokenizer(const GenerateArgs& a, const ModelSource& src) {
  const std::string path = !a.tokenizer.empty() ? a.tokenizer : src.tokenizer;
  if (!path.empty()) return tokenize::load_tokenizer(path);
  if (src.model.vocab_size <= 256) return tokenize::make_byte_tokenizer();
  return Status::invalid(fmt::format("generate: {} has a {}-token vocabulary and no tokenizer "
                                     "beside it; name the one it was trained with: --tokenizer FILE",
                                     src.what, src.model.vocab_size));
}

int run_generate(const GenerateArgs& a) {
  if (a.max_tokens < 0 || a.sampling.temperature < 0 || a.sampling.top_k < 0 ||
      !(a.sampling.top_p > 0 && a.sampling.top_p <= 1))
    return fail(Status::invalid("generate: --max-tokens, --temperature and --top-k must be >= 0 "
                                "and --top-p in (0, 1]"));
  if (!std::isfinite(a.sampling.temperature))
    return fail(Status::invalid(fmt::format("generate: --temperature {} is not a number; give a finite "
                                            "T >= 0 (0 = greedy, 1 = the model's own distribution)",
                                            a.sampling.temperature)));
  if (a.step != kNoStep && a.step < 0)
    return fail(Status::invalid(fmt::format("generate: --step {}: checkpoint steps are >= 0; leave "
                                            "--step out for the newest (`partrain ckpt list` shows them)",
                                            a.step)));
  omp_set_num_threads(thread_count(a.threads));
  auto src = open_model_source(a.source, a.job, a.step == kNoStep ? -1 : a.step);
  if (!src) return fail(src.status());
  auto tok = pick_tokenizer(a, *src);
  if (!tok) return fail(tok.status());
  if ((*tok)->vocab_size() > static_cast<uint32_t>(src->model.vocab_size))
    return fail(Status::invalid(fmt::format("generate: the tokenizer has {} tokens, the model {}; "
                                            "pass the model's own tokenizer", (*tok)->vocab_size(),
                                            src->model.vocab_size)));
  auto dec = engine::model::Decoder::create(src->model, std::move(src->weights));
  if (!dec) return fail(dec.status());

  std::string prompt = a.prompt;
  tokenize::to_valid_utf8(&prompt);
  std::vector<uint32_t> ids;
  if ((*tok)->has_separator()) ids.push_back((*tok)->separator());
  (*tok)->encode(prompt, &ids);
  if (ids.empty())
    return fail(Status::invalid("generate: the prompt is empty and the tokenizer has no separator "
                                "to start from; give --prompt TEXT"));
  std::vector<int32_t> context(ids.begin(), ids.end());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  if (Status s = (*dec)->step(context, &logits); !s) return fail(s);
  std::fputs(prompt.c_str(), stdout);
  std::vector<uint32_t> generated;
  std::string shown;
  const char* why = "--max-tokens";
  for (int i = 0; i < a.max_tokens; ++i) {
    const int32_t next = engine::model::sample_token(logits, a.sampling, static_cast<uint64_t>(i));
    if ((*tok)->has_separator() && static_cast<uint32_t>(next) == (*tok)->separator()) {
      why = "the end-of-document token";
      break;
    }
    generated.push_back(static_cast<uint32_t>(next));
    const std::string text = (*tok)->decode(generated);
    std::fwrite(text.data() + shown.size(), 1, text.size() - shown.size(), stdout);
    std::fflush(stdout);
    shown = text;
    if ((*dec)->length() >= (*dec)->max_length()) {
      why = "the model's seq_len";
      break;
    }
    const int32_t one[1] = {next};
    if (Status s = (*dec)->step(one, &logits); !s) return fail(s);
  }
  std::fputs("\n", stdout);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "partrain: %s from %s (%s) in %s, %s tokens/s; stopped at %s\n",
               plural(static_cast<int64_t>(generated.size()), "token").c_str(), src->what.c_str(),
               (*tok)->describe().c_str(), human_ms(ms).c_str(),
               human_count(ms > 0 ? static_cast<double>(generated.size()) * 1000.0 / ms : 0).c_str(), why);
  return kExitOk;
}

}  // namespace

void register_generate(CLI::App& app, CommandResult* result) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Sample text from a trained model (KV cache, CPU): a job file, run folder, "
                  "Hugging Face folder or safetensors file");
  cmd->add_option("source", a->source,
                  "job file (its run's newest checkpoint), run folder (with --job), Hugging Face "
                  "folder, or .safetensors (with --job)")->required();
  cmd->add_option("--prompt", a->prompt, "the text to continue")->required();
  cmd->add_option("--job", a->job, "the job file whose model a run folder or .safetensors holds")
      ->check(CLI::ExistingFile);
  cmd->add_option("--step", a->step, "the checkpoint's step (default: the newest)");
  cmd->add_option("--tokenizer", a->tokenizer,
                  "tokenizer.json, .tiktoken or SentencePiece .model (default: beside the weights; "
                  "byte-level for 256 tokens)")->check(CLI::ExistingFile);
  cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate (default 64)");
  cmd->add_option("--temperature", a->sampling.temperature, "0 = greedy (default 1)");
  cmd->add_option("--top-k", a->sampling.top_k, "sample from the k most probable tokens (default 0: all)");
  cmd->add_option("--top-p", a->sampling.top_p, "nucleus: the most probable tokens holding this mass (default 1)");
  cmd->add_option("--seed", a->sampling.seed, "the draws' seed: same seed, same text (default 0)");
  cmd->add_option("--threads", a->threads,
                  "CPU threads (default: OMP_NUM_THREADS, else the CPUs this process may use: its affinity "
                  "mask within its cgroup's CPU quota)")
      ->check(cli_checks::kPositive);
  cmd->callback([a, result] { result->exit_code = run_generate(*a); });
}

}  // namespace partrain::cli
