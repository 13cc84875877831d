// The job file: every key lands in its field, defaults hold where a key is absent, relative
// data paths follow the job file, plugin tables pass through, and every kind of mistake is
// refused with the exact message (file:line, the key, the fix).
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <toml++/toml.h>

#include "config/job_config.h"
#include "test_util.h"

namespace partrain::config {
namespace {

using engine::Arch;
using engine::Recompute;
using testing::ScratchDir;

constexpr const char* kEveryKey = R"(# every key, none at its default
[job]
name = "full-run"
run_dir = "out/full"

[model]
arch = "llama"
vocab_size = 512
seq_len = 128
layers = 4
hidden = 256
heads = 8
kv_heads = 2
ffn_hidden = 704
norm_eps = 1e-6
rope_theta = 500000.0
tie_embeddings = true
dropout = 0.1
init_std = 0.01
moe_experts = 8
moe_top_k = 1
moe_every = 2
moe_capacity_factor = 1.0
moe_aux_loss_coef = 0.001
recompute = "selective"

[data]
train_files = ["shards/a.bin", "/abs/b.bin"]
format = "raw-u16"

[training]
steps = 500
global_batch = 256
micro_batch = 4
seed = 42
lr = 6e-4
min_lr = 6e-5
warmup_steps = 50
beta1 = 0.8
beta2 = 0.99
eps = 1e-6
weight_decay = 0.05
grad_clip = 0.5
log_every = 10

[parallelism]
spec = "tp2,pp2"
tp = 4
dp = 8
ep = 2
cp = 2
zero = 1
sp = false
sched = "interleaved:2"
cpimpl = "allgather"
mb = 16

[checkpoint]
dir = "ckpt"
every = 100
keep = 5

[plugins.myschedule]
chunks = 4
[plugins.myschedule.inner]
mode = "fast"
)";

TEST(JobConfig, EveryKeyLandsInItsField) {
  ScratchDir dir;
  const std::string path = dir.write("jobs/full.toml", kEveryKey);
  auto job = load_job(path);
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  EXPECT_EQ(job->path, path);
  EXPECT_EQ(job->name, "full-run");
  EXPECT_EQ(job->run_dir, "out/full");

  const auto& m = job->model;
  EXPECT_EQ(m.arch, Arch::kLlama);
  EXPECT_EQ(m.vocab_size, 512);
  EXPECT_EQ(m.seq_len, 128);
  EXPECT_EQ(m.layers, 4);
  EXPECT_EQ(m.hidden, 256);
  EXPECT_EQ(m.heads, 8);
  EXPECT_EQ(m.kv_heads, 2);
  EXPECT_EQ(m.ffn_hidden, 704);
  EXPECT_FLOAT_EQ(m.norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(m.rope_theta, 500000.0f);
  EXPECT_TRUE(m.tie_embeddings);  // said explicitly, so llama's untied default does not apply
  EXPECT_FLOAT_EQ(m.dropout, 0.1f);
  EXPECT_FLOAT_EQ(m.init_std, 0.01f);
  EXPECT_EQ(m.moe_experts, 8);
  EXPECT_EQ(m.moe_top_k, 1);
  EXPECT_EQ(m.moe_every, 2);
  EXPECT_FLOAT_EQ(m.moe_capacity_factor, 1.0f);
  EXPECT_FLOAT_EQ(m.moe_aux_loss_coef, 0.001f);
  EXPECT_EQ(m.recompute, Recompute::kSelective);

  // Relative shard paths are resolved against the job file's folder, absolute ones kept.
  ASSERT_EQ(job->data.train_files.size(), 2u);
  EXPECT_EQ(job->data.train_files[0], (dir.path() / "jobs/shards/a.bin").string());
  EXPECT_EQ(job->data.train_files[1], "/abs/b.bin");
  EXPECT_EQ(job->data.format, "raw-u16");

  const auto& t = job->training;
  EXPECT_EQ(t.steps, 500);
  EXPECT_EQ(t.global_batch, 256);
  EXPECT_EQ(t.micro_batch, 4);
  EXPECT_EQ(t.seed, 42u);
  EXPECT_FLOAT_EQ(t.lr, 6e-4f);
  EXPECT_FLOAT_EQ(t.min_lr, 6e-5f);
  EXPECT_EQ(t.warmup_steps, 50);
  EXPECT_FLOAT_EQ(t.beta1, 0.8f);
  EXPECT_FLOAT_EQ(t.beta2, 0.99f);
  EXPECT_FLOAT_EQ(t.eps, 1e-6f);
  EXPECT_FLOAT_EQ(t.weight_decay, 0.05f);
  EXPECT_FLOAT_EQ(t.grad_clip, 0.5f);
  EXPECT_EQ(t.log_every, 10);

  // spec first, then the single keys over it: tp = 4 beats the spec's tp2, pp2 stays.
  const auto& p = job->parallelism;
  EXPECT_EQ(p.tp, 4);
  EXPECT_EQ(p.pp, 2);
  ASSERT_TRUE(p.dp.has_value());
  EXPECT_EQ(*p.dp, 8);
  EXPECT_EQ(p.ep, 2);
  EXPECT_EQ(p.cp, 2);
  EXPECT_EQ(p.cp_impl, "allgather");
  EXPECT_EQ(p.zero, 1);
  ASSERT_TRUE(p.sp.has_value());
  EXPECT_FALSE(*p.sp);
  EXPECT_EQ(p.sched, "interleaved");
  EXPECT_EQ(p.virtual_stages, 2);
  ASSERT_TRUE(p.mb.has_value());
  EXPECT_EQ(*p.mb, 16);
  EXPECT_EQ(job->parallelism_items,
            (std::vector<std::string>{"tp2,pp2", "tp4", "dp8", "ep2", "cp2", "zero1", "nosp",
                                      "sched=interleaved:2", "cpimpl=allgather", "mb=16"}));

  EXPECT_EQ(job->checkpoint.dir, "ckpt");
  EXPECT_EQ(job->checkpoint.every, 100);
  EXPECT_EQ(job->checkpoint.keep, 5);

  // The plugin's table comes back as TOML text holding the same values.
  ASSERT_EQ(job->plugin_tables.size(), 1u);
  ASSERT_TRUE(job->plugin_tables.count("myschedule"));
  toml::table plugin = toml::parse(job->plugin_tables.at("myschedule"));
  EXPECT_EQ(plugin["chunks"].value<int64_t>(), 4);
  EXPECT_EQ(plugin["inner"]["mode"].value<std::string>(), "fast");
}

TEST(JobConfig, AbsentKeysKeepTheEngineDefaults) {
  auto job = parse_job("[data]\ntrain_files = [\"t.bin\"]\n", "/some/where/tiny-job.toml");
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  const engine::ModelOptions m;
  EXPECT_EQ(job->model.arch, m.arch);
  EXPECT_EQ(job->model.vocab_size, m.vocab_size);
  EXPECT_EQ(job->model.layers, m.layers);
  EXPECT_EQ(job->model.hidden, m.hidden);
  EXPECT_EQ(job->model.heads, m.heads);
  EXPECT_TRUE(job->model.tie_embeddings);  // gpt2 ties the head
  EXPECT_EQ(job->model.recompute, Recompute::kNone);
  const engine::TrainOptions t;
  EXPECT_EQ(job->training.steps, t.steps);
  EXPECT_EQ(job->training.global_batch, t.global_batch);
  EXPECT_EQ(job->training.seed, t.seed);
  EXPECT_FLOAT_EQ(job->training.lr, t.lr);
  EXPECT_EQ(job->data.format, "auto");
  EXPECT_EQ(job->data.train_files, std::vector<std::string>{"/some/where/t.bin"});
  // [job] defaults: the file's stem and runs/<name>.
  EXPECT_EQ(job->name, "tiny-job");
  EXPECT_EQ(job->run_dir, "runs/tiny-job");
  EXPECT_EQ(job->checkpoint.dir, "");
  EXPECT_EQ(job->checkpoint.every, 0);
  EXPECT_EQ(job->checkpoint.keep, 3);
  EXPECT_EQ(job->parallelism.tp, 1);
  EXPECT_EQ(job->parallelism.pp, 1);
  EXPECT_FALSE(job->parallelism.dp.has_value());
  EXPECT_FALSE(job->parallelism.mb.has_value());
  EXPECT_TRUE(job->parallelism_items.empty());
  EXPECT_TRUE(job->plugin_tables.empty());
}

TEST(JobConfig, LlamaUntiesTheHeadUnlessTold) {
  auto untied = parse_job("[model]\narch = \"llama\"\n[data]\ntrain_files = [\"t.bin\"]\n", "j.toml");
  ASSERT_TRUE(untied.is_ok()) << untied.status().message();
  EXPECT_FALSE(untied->model.tie_embeddings);
  auto gpt2 = parse_job("[model]\narch = \"gpt2\"\n[data]\ntrain_files = [\"t.bin\"]\n", "j.toml");
  ASSERT_TRUE(gpt2.is_ok());
  EXPECT_TRUE(gpt2->model.tie_embeddings);
  auto gpt2_untied = parse_job(
      "[model]\ntie_embeddings = false\n[data]\ntrain_files = [\"t.bin\"]\n", "j.toml");
  ASSERT_TRUE(gpt2_untied.is_ok());
  EXPECT_FALSE(gpt2_untied->model.tie_embeddings);
}

TEST(JobConfig, IntegersAreAcceptedWhereANumberIsExpected) {
  auto job = parse_job("[model]\ndropout = 0\n[training]\nlr = 1\nmin_lr = 0\n"
                       "[data]\ntrain_files = [\"t.bin\"]\n", "j.toml");
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  EXPECT_EQ(job->model.dropout, 0.0f);
  EXPECT_EQ(job->training.lr, 1.0f);
}

TEST(JobConfig, MissingFileIsNotFoundAndNamesIt) {
  auto job = load_job("/nonexistent/partrain/job.toml");
  ASSERT_FALSE(job.is_ok());
  EXPECT_EQ(job.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(job.status().message(),
            "/nonexistent/partrain/job.toml: no such job file; check the path");
}

// A mistake in a job file and the exact message the user sees.
struct BadJob {
  const char* text;
  const char* message;
};

class JobConfigErrors : public ::testing::TestWithParam<BadJob> {};

TEST_P(JobConfigErrors, ExactMessage) {
  auto job = parse_job(GetParam().text, "job.toml");
  ASSERT_FALSE(job.is_ok()) << "accepted:\n" << GetParam().text;
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), GetParam().message);
}

#define DATA "[data]\ntrain_files = [\"t.bin\"]\n"

INSTANTIATE_TEST_SUITE_P(
    EveryKind, JobConfigErrors,
    ::testing::Values(
        // Unknown keys: the nearest known key, the table it belongs in, or the list.
        BadJob{"[training]\nsteps = 10\n\nlr_max = 1e-3\n",
               "job.toml:4: [training] key 'lr_max' is unknown; did you mean 'lr'?"},
        BadJob{"[model]\nlayres = 2\n",
               "job.toml:2: [model] key 'layres' is unknown; did you mean 'layers'?"},
        BadJob{"[model]\nmoe_expert = 4\n",
               "job.toml:2: [model] key 'moe_expert' is unknown; did you mean 'moe_experts'?"},
        BadJob{"[training]\nvocab_size = 256\n",
               "job.toml:2: [training] key 'vocab_size' is unknown; it belongs in [model]"},
        BadJob{"[checkpoint]\nzzzzzzzz = 1\n",
               "job.toml:2: [checkpoint] key 'zzzzzzzz' is unknown; the keys of [checkpoint] "
               "are: dir, every, keep, async, max_restarts, resume"},
        BadJob{DATA "[checkpoint]\nresume = \"latest\"\n",
               "job.toml:4: [checkpoint] key 'resume' must be \"auto\", \"never\" or the step of a committed "
               "checkpoint (>= 1) (got \"latest\")"},
        BadJob{DATA "[training]\nwarmup_steps = 10\ndecay_steps = 10\n",
               "job.toml:5: [training] decay_steps = 10 is not above warmup_steps = 10; decay_steps is the step the "
               "decay ends at, warm-up included: raise it, or remove it for the run's steps"},
        BadJob{DATA "[training]\nlr_schedule = \"step\"\n",
               "job.toml:4: [training] key 'lr_schedule' must be one of \"cosine\", \"linear\", \"constant\", "
               "\"wsd\" (got \"step\")"},
        // Unknown tables and keys outside any table.
        BadJob{"[trainig]\nsteps = 1\n",
               "job.toml:1: table [trainig] is unknown; did you mean [training]?"},
        BadJob{"\n[optimizer]\nlr = 1\n",
               "job.toml:2: table [optimizer] is unknown; the tables are [job] [model] [data] "
               "[training] [parallelism] [checkpoint], and [plugins.NAME] for the settings of "
               "strategy plugin NAME"},
        BadJob{"lr = 1e-3\n",
               "job.toml:1: key 'lr' is outside any table; put it under [training]"},
        BadJob{"model = 3\n",
               "job.toml:1: 'model' must be one table: write [model] on a line of its own, then "
               "its keys"},
        BadJob{"[[training]]\nsteps = 1\n",
               "job.toml:1: 'training' must be one table: write [training] on a line of its "
               "own, then its keys"},
        BadJob{"colour = \"blue\"\n",
               "job.toml:1: key 'colour' is outside any table; every key belongs under a "
               "[table] header"},
        BadJob{"[model.extra]\nx = 1\n",
               "job.toml:1: [model] key 'extra' is unknown; the keys of [model] are: arch, "
               "vocab_size, seq_len, layers, hidden, heads, kv_heads, ffn_hidden, norm_eps, "
               "rope_theta, tie_embeddings, dropout, init_std, moe_experts, moe_top_k, "
               "moe_every, moe_capacity_factor, moe_aux_loss_coef, recompute"},
        // Wrong types.
        BadJob{"[model]\nlayers = \"2\"\n",
               "job.toml:2: [model] key 'layers' must be an integer (got a string)"},
        BadJob{"[model]\nlayers = 2.5\n",
               "job.toml:2: [model] key 'layers' must be a whole number (got 2.5)"},
        BadJob{"[training]\nlr = \"fast\"\n",
               "job.toml:2: [training] key 'lr' must be a number (got a string)"},
        BadJob{"[model]\ntie_embeddings = 1\n",
               "job.toml:2: [model] key 'tie_embeddings' must be true or false (got an integer)"},
        BadJob{"[job]\nname = 7\n",
               "job.toml:2: [job] key 'name' must be a string in quotes (got an integer)"},
        BadJob{"[data]\ntrain_files = \"a.bin\"\n",
               "job.toml:2: [data] key 'train_files' must be an array of strings, e.g. "
               "[\"a.bin\", \"b.bin\"] (got a string)"},
        BadJob{"[data]\ntrain_files = [\"a.bin\", 3]\n",
               "job.toml:2: [data] key 'train_files' must be an array of strings (item 2 is an "
               "integer)"},
        BadJob{"[model]\narch = \"gpt3\"\n",
               "job.toml:2: [model] key 'arch' must be one of \"gpt2\", \"llama\" (got \"gpt3\")"},
        BadJob{"[model]\nrecompute = true\n",
               "job.toml:2: [model] key 'recompute' must be a string in quotes (got a boolean)"},
        // Ranges.
        BadJob{"[model]\nlayers = 0\n", "job.toml:2: [model] key 'layers' must be >= 1 (got 0)"},
        BadJob{"[model]\nhidden = 3000000000\n",
               "job.toml:2: [model] key 'hidden' must be <= 2147483647 (got 3000000000)"},
        BadJob{"[model]\ndropout = 1.0\n",
               "job.toml:2: [model] key 'dropout' must be in [0, 1) (got 1)"},
        BadJob{"[model]\ndropout = -0.1\n",
               "job.toml:2: [model] key 'dropout' must be in [0, 1) (got -0.1)"},
        BadJob{"[training]\nlr = 0\n", "job.toml:2: [training] key 'lr' must be > 0 (got 0)"},
        BadJob{"[training]\nlr = nan\n", "job.toml:2: [training] key 'lr' must be finite (got nan)"},
        BadJob{"[training]\nseed = -1\n",
               "job.toml:2: [training] key 'seed' must be >= 0 (got -1)"},
        BadJob{"[training]\nmicro_batch = -4\n",
               "job.toml:2: [training] key 'micro_batch' must be >= 1 (got -4)"},
        BadJob{"[checkpoint]\nkeep = 0\n",
               "job.toml:2: [checkpoint] key 'keep' must be >= 1 (got 0)"},
        BadJob{"[parallelism]\nzero = 4\n",
               "job.toml:2: [parallelism] key 'zero' must be in [0, 3] (got 4)"},
        BadJob{"[parallelism]\ntp = 0\n",
               "job.toml:2: [parallelism] key 'tp' must be >= 1 (got 0)"},
        BadJob{"[data]\ntrain_files = []\n",
               "job.toml:2: [data] key 'train_files' must name at least one file"},
        BadJob{"[job]\nname = \"\"\n", "job.toml:2: [job] key 'name' must not be empty"},
        // Between keys.
        BadJob{DATA "[model]\nhidden = 128\nheads = 5\n",
               "job.toml:5: [model] heads = 5 does not divide hidden = 128; choose heads so "
               "that hidden % heads == 0"},
        BadJob{DATA "[model]\nheads = 4\nkv_heads = 3\n",
               "job.toml:5: [model] kv_heads = 3 does not divide heads = 4; choose kv_heads so "
               "that heads % kv_heads == 0 (or 0 for kv_heads = heads)"},
        BadJob{DATA "[model]\nmoe_experts = 2\nmoe_top_k = 3\n",
               "job.toml:5: [model] moe_top_k = 3 is more than moe_experts = 2; a token cannot "
               "visit more experts than there are"},
        BadJob{DATA "[model]\nlayers = 2\nmoe_experts = 4\nmoe_every = 3\n",
               "job.toml:6: [model] moe_every = 3 is more than layers = 2, so no block would "
               "have experts; lower moe_every or set moe_experts = 0"},
        BadJob{DATA "[training]\nlr = 1e-4\nmin_lr = 1e-3\n",
               "job.toml:5: [training] min_lr = 0.001 is above lr = 0.0001; the schedule "
               "decays from lr to min_lr"},
        BadJob{DATA "[training]\nglobal_batch = 20\nmicro_batch = 8\n",
               "job.toml:4: [training] global_batch = 20 is not a multiple of micro_batch = 8; "
               "global_batch = micro_batch x grad_accum x dp, so choose them so that "
               "micro_batch divides global_batch"},
        // A cross-key check on a key left at its default points at the file.
        BadJob{DATA "[model]\nheads = 3\n",
               "job.toml:4: [model] heads = 3 does not divide hidden = 128; choose heads so "
               "that hidden % heads == 0"},
        BadJob{"[model]\nlayers = 2\n",
               "job.toml: [data] train_files is missing; name the token shards to train on, "
               "e.g. train_files = [\"data/train.bin\"] (or a mixture: [[data.sources]])"},
        BadJob{DATA "[job]\nname = \"my job\"\n",
               "job.toml:4: [job] key 'name' = \"my job\" may hold only letters, digits, '_', "
               "'-' and '.'"},
        // Plugin tables.
        BadJob{DATA "[plugins]\nfoo = 1\n",
               "job.toml:4: [plugins] key 'foo' must be a table [plugins.foo] holding that "
               "plugin's settings"},
        BadJob{"plugins = 1\n" DATA,
               "job.toml:1: 'plugins' must be a table of plugin tables, e.g. [plugins.myschedule]"}));

TEST(JobConfig, SyntaxErrorsNameFileAndLine) {
  auto job = parse_job("[model]\nlayers = 2\nlayers = 3\n", "job.toml");
  ASSERT_FALSE(job.is_ok());
  EXPECT_EQ(job.status().message().rfind("job.toml:3: TOML syntax error: ", 0), 0u)
      << job.status().message();
  auto broken = parse_job("[model]\nlayers =\n", "job.toml");
  ASSERT_FALSE(broken.is_ok());
  EXPECT_EQ(broken.status().message().rfind("job.toml:2: TOML syntax error: ", 0), 0u)
      << broken.status().message();
}

TEST(JobConfig, BadSpecItemsPointAtTheirLine) {
  auto spec = parse_job(DATA "[parallelism]\nspec = \"tp2,tpx\"\n", "job.toml");
  ASSERT_FALSE(spec.is_ok());
  const std::string& m = spec.status().message();
  EXPECT_EQ(m.rfind("job.toml:4: [parallelism] key 'spec': 'tpx'", 0), 0u) << m;
  EXPECT_EQ(m.find("--partrain"), std::string::npos) << m;  // it did not come from the flag

  auto sched = parse_job(DATA "[parallelism]\ntp = 2\nsched = \"inter leaved\"\n", "job.toml");
  ASSERT_FALSE(sched.is_ok());
  EXPECT_EQ(sched.status().message().rfind("job.toml:5: [parallelism] key 'sched': ", 0), 0u)
      << sched.status().message();
}

// [parallelism] grad names the data plugin as the spec item grad=NAME does; a bad name
// points at its line.
TEST(JobConfig, GradientPluginKey) {
  auto job = parse_job(DATA "[parallelism]\ndp = 2\ngrad = \"onebit\"\n", "job.toml");
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  EXPECT_EQ(job->parallelism.grad, "onebit");
  EXPECT_EQ(job->parallelism_items, (std::vector<std::string>{"dp2", "grad=onebit"}));
  auto bad = parse_job(DATA "[parallelism]\ngrad = \"one bit\"\n", "job.toml");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message().rfind("job.toml:4: [parallelism] key 'grad': ", 0), 0u)
      << bad.status().message();
}

TEST(JobConfig, DataSourcesMixture) {
  auto job = parse_job("[data]\n[[data.sources]]\nname = \"web\"\nfiles = [\"web_0.bin\", \"web_1.bin\"]\n"
                       "weight = 3\n\n[[data.sources]]\nfiles = [\"code.bin\"]\n",
                       "dir/job.toml");
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  const auto& s = job->data.sources;
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "web");
  EXPECT_EQ(s[0].weight, 3.0);
  ASSERT_EQ(s[0].files.size(), 2u);
  EXPECT_NE(s[0].files[1].find("dir/web_1.bin"), std::string::npos) << s[0].files[1];  // beside the job file
  EXPECT_EQ(s[1].name, "source1");  // the defaults
  EXPECT_EQ(s[1].weight, 1.0);
  EXPECT_TRUE(job->data.train_files.empty());
}

TEST(JobConfig, DataSourcesMistakes) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {
           Case{"[data]\ntrain_files = [\"t.bin\"]\n[[data.sources]]\nfiles = [\"a.bin\"]\n",
                "job.toml:3: [data] has both train_files and [[data.sources]]; use one: a single "
                "list of shards, or a mixture of sources with weights"},
           Case{"[[data.sources]]\nfiles = [\"a.bin\"]\nweight = 0\n",
                "job.toml:1: [data] key 'sources' [[data.sources]] #1 key 'weight' must be > 0 (got 0)"},
           Case{"[[data.sources]]\nfiles = [\"a.bin\"]\nweigth = 2\n",
                "job.toml:1: [data] key 'sources' [[data.sources]] #1 key 'weigth' is unknown; a "
                "source has name, files and weight"},
           Case{"[[data.sources]]\nname = \"web\"\n",
                "job.toml:1: [data] key 'sources' [[data.sources]] #1 ('web') has no files; list its "
                "token shards, e.g. files = [\"data/web.bin\"]"},
       }) {
    auto job = parse_job(c.text, "job.toml");
    ASSERT_FALSE(job.is_ok()) << c.text;
    EXPECT_EQ(job.status().message(), c.message) << c.text;
  }
}

TEST(JobConfig, KnownKeysComeFromTheParserTable) {
  auto keys = known_job_keys();
  std::set<std::string> unique(keys.begin(), keys.end());
  EXPECT_EQ(unique.size(), keys.size()) << "a key is listed twice";
  // 4 [job] + 19 [model] + 6 [data] + 16 [training] + 13 [parallelism] + 6 [checkpoint].
  EXPECT_EQ(keys.size(), 64u);
  for (const char* k : {"job.name", "model.arch", "model.recompute", "data.train_files",
                        "training.lr", "parallelism.spec", "parallelism.mb", "parallelism.stage_layers", "checkpoint.keep"}) {
    EXPECT_TRUE(unique.count(k)) << k;
  }
  // Each listed key is really accepted: a file setting it is not refused as unknown.
  for (const auto& k : keys) {
    const std::string table = k.substr(0, k.find('.')), key = k.substr(k.find('.') + 1);
    auto job = parse_job("[" + table + "]\n" + key + " = {}\n", "job.toml");
    ASSERT_FALSE(job.is_ok());
    EXPECT_EQ(job.status().message().find("unknown"), std::string::npos) << job.status().message();
  }
}

}  // namespace
}  // namespace partrain::config
