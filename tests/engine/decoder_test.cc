// The generation path (engine/model/decoder.h, sampling.h): the KV cache gives the logits
// of recomputing the whole prefix; the decoder's cross-entropy equals the training model's
// loss on the same sequence; sampling's hand-worked example; the same seed, the same draws.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include <fmt/format.h>

#include "test_util.h"

#include "engine/backend.h"
#include "engine/model/decoder.h"
#include "engine/model/hf_config.h"
#include "engine/model/model.h"
#include "engine/model/sampling.h"

namespace partrain::engine::model {
namespace {

ModelOptions tiny(Arch arch) {
  ModelOptions o;
  o.arch = arch;
  o.vocab_size = 97;
  o.seq_len = 24;
  o.layers = 2;
  o.hidden = 32;
  o.heads = 4;
  o.kv_heads = arch == Arch::kLlama ? 2 : 0;
  o.tie_embeddings = arch == Arch::kGpt2;
  o.init_std = 0.2f;  // large enough that every layer shapes the logits
  return o;
}

// Weights of a model of `o` after init, with biases and norms moved off 0 and 1 so that a
// wrongly read bias or norm weight shows.
std::vector<float> weights(const ModelOptions& o, std::unique_ptr<Backend>* be, std::unique_ptr<Model>* m) {
  auto b = make_backend("cpu");
  EXPECT_TRUE(b.is_ok());
  *be = std::move(*b);
  auto made = Model::create(o, be->get(), 1, 7);
  EXPECT_TRUE(made.is_ok()) << made.status().message();
  *m = std::move(*made);
  std::vector<float> host = (*m)->params_to_host();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> jitter(-0.1f, 0.1f);
  for (float& v : host) v += jitter(rng);
  (*m)->params_from_host(host);
  return host;
}

std::vector<int32_t> sequence(int n, int vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[i] = (i * 37 + 11) % vocab;
  return ids;
}

class DecoderTest : public ::testing::TestWithParam<Arch> {};

TEST_P(DecoderTest, KvCacheEqualsRecomputingThePrefix) {
  const ModelOptions o = tiny(GetParam());
  std::unique_ptr<Backend> be;
  std::unique_ptr<Model> m;
  auto d = Decoder::create(o, weights(o, &be, &m));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  const auto ids = sequence(o.seq_len, o.vocab_size);
  std::vector<float> full;
  ASSERT_TRUE((*d)->step(ids, &full, /*all_positions=*/true).is_ok());
  (*d)->reset();
  std::vector<float> logits;
  const int prompt = 5;
  ASSERT_TRUE((*d)->step(std::span(ids).first(prompt), &logits).is_ok());
  for (int t = prompt - 1; t < o.seq_len; ++t) {
    if (t >= prompt) {
      ASSERT_TRUE((*d)->step(std::span(ids).subspan(t, 1), &logits).is_ok());
    }
    for (int v = 0; v < o.vocab_size; ++v)
      ASSERT_NEAR(logits[v], full[static_cast<size_t>(t) * o.vocab_size + v], 1e-5f)
          << "position " << t << " token " << v;
  }
  EXPECT_EQ((*d)->length(), o.seq_len);
  auto past = (*d)->step(std::span(ids).first(1), &logits);
  ASSERT_FALSE(past.is_ok());
  EXPECT_EQ(past.message(), "generate: 25 positions pass the model's seq_len 24; ask for fewer "
                            "--max-tokens or a shorter prompt");
}

TEST_P(DecoderTest, CrossEntropyEqualsTheTrainingModelsLoss) {
  const ModelOptions o = tiny(GetParam());
  std::unique_ptr<Backend> be;
  std::unique_ptr<Model> m;
  auto d = Decoder::create(o, weights(o, &be, &m));
  ASSERT_TRUE(d.is_ok());
  const auto all = sequence(o.seq_len + 1, o.vocab_size);
  const std::vector<int32_t> in(all.begin(), all.end() - 1), tgt(all.begin() + 1, all.end());
  auto loss = m->forward(MicroBatch{in.data(), tgt.data(), 1, 0, 0});
  ASSERT_TRUE(loss.is_ok());
  std::vector<float> logits;
  ASSERT_TRUE((*d)->step(in, &logits, true).is_ok());
  double ce = 0;
  for (int t = 0; t < o.seq_len; ++t) {
    const float* row = logits.data() + static_cast<size_t>(t) * o.vocab_size;
    double mx = row[0], sum = 0;
    for (int v = 0; v < o.vocab_size; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    for (int v = 0; v < o.vocab_size; ++v) sum += std::exp(row[v] - mx);
    ce += mx + std::log(sum) - row[tgt[t]];
  }
  EXPECT_NEAR(ce / o.seq_len, loss->ce, 2e-5);
}

INSTANTIATE_TEST_SUITE_P(Archs, DecoderTest, ::testing::Values(Arch::kGpt2, Arch::kLlama),
                         [](const auto& p) { return p.param == Arch::kGpt2 ? "Gpt2" : "Llama"; });

TEST(Sampling, TheHeaderExample) {
  // logits [2, 1, 0]: p = [0.665, 0.245, 0.090]; top-k 2, top-p 0.7 keep ids 0 and 1.
  const std::vector<float> logits{2, 1, 0};
  SamplingOptions o;
  o.top_k = 2;
  o.top_p = 0.7f;
  // Find draws below and above 0.665 / 0.910 of the kept mass to exercise both ids.
  int zero = 0, one = 0, two = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    const int32_t t = sample_token(logits, o, i);
    zero += t == 0, one += t == 1, two += t == 2;
  }
  EXPECT_EQ(two, 0);                         // cut by top-k
  EXPECT_NEAR(zero / 2000.0, 0.665 / 0.910, 0.03);  // renormalised over the kept two
  EXPECT_NEAR(one / 2000.0, 0.245 / 0.910, 0.03);
  o.temperature = 0;
  EXPECT_EQ(sample_token(std::vector<float>{1, 3, 3}, o, 0), 1);  // greedy: the lower id of a tie
}

TEST(Sampling, TheSameSeedGivesTheSameDraws) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::sin(static_cast<float>(i));
  SamplingOptions a, b;
  a.seed = b.seed = 42;
  std::vector<int32_t> x, y, z;
  for (uint64_t i = 0; i < 100; ++i) {
    x.push_back(sample_token(logits, a, i));
    y.push_back(sample_token(logits, b, i));
  }
  b.seed = 43;
  for (uint64_t i = 0; i < 100; ++i) z.push_back(sample_token(logits, b, i));
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
}

// Issue 31, item 26: a config.json key written twice gave its first value, while Python's
// json (what transformers reads the file with) takes the last. Each value against
// /usr/bin/python3's.
TEST(HfConfig, RepeatedKeyTakesTheLastValueAsPythonDoes) {
  const std::string text = R"({"model_type": "gpt2", "vocab_size": 256, "n_positions": 64, "n_layer": 2, )"
                           R"("n_embd": 128, "n_head": 2, "layer_norm_epsilon": 1e-05, "n_head": 4, )"
                           R"("layer_norm_epsilon": 1e-06})";
  const partrain::testing::Outcome py = partrain::testing::run_shell(
      "/usr/bin/python3 -c 'import json,sys; d=json.loads(sys.argv[1]); v=list(d.values()); "
      "print(v[5], v[6])' '" + text + "'");
  ASSERT_EQ(py.rc, 0) << py.err;
  Result<ModelOptions> o = model_options_from_hf_config(text, "config.json");
  ASSERT_TRUE(o) << o.status().message();
  EXPECT_EQ(fmt::format("{} {}\n", o->heads, o->norm_eps), py.out);
  EXPECT_EQ(o->heads, 4);
}

// Issue 31, item 26: a negative layer_norm_epsilon was imported into a job file that `run`
// then refused ([model] norm_eps must be > 0). Import refuses it, in one line naming the key.
TEST(HfConfig, ANormEpsilonThatIsNotPositiveIsRefusedAtImport) {
  for (const char* eps : {"-1e-05", "0"}) {
    const std::string text = std::string(R"({"model_type": "gpt2", "vocab_size": 256, "n_positions": 64, )") +
                             R"("n_layer": 2, "n_embd": 128, "n_head": 2, "layer_norm_epsilon": )" + eps + "}";
    Result<ModelOptions> o = model_options_from_hf_config(text, "hf/config.json");
    ASSERT_FALSE(o) << eps;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(o.status().message(), fmt::format("hf/config.json: \"layer_norm_epsilon\" is {}; it must be a "
                                                "positive number (typically 1e-5): fix config.json", eps));
  }
  const std::string llama = R"({"model_type": "llama", "vocab_size": 256, "max_position_embeddings": 64, )"
                            R"("num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, )"
                            R"("intermediate_size": 256, "rms_norm_eps": -1e-06})";
  Result<ModelOptions> l = model_options_from_hf_config(llama, "config.json");
  ASSERT_FALSE(l);
  EXPECT_NE(l.status().message().find("\"rms_norm_eps\" is -1e-06; it must be a positive number"),
            std::string::npos) << l.status().message();
}

}  // namespace
}  // namespace partrain::engine::model
