// partrain_hf_logits DIR IDS OUT.safetensors: partrain's side of reference/hf_check.py.
// Builds the model from DIR's config.json (engine/model/hf_config.h), loads DIR's weights
// (model.safetensors or the sharded index, memory-mapped), runs the comma-separated token
// ids through the decoder and writes F32 tensors:
//   "logits"     [T, V]  every position in one pass
//   "logits_kv"  [T, V]  the first 3 positions in one pass, then one token at a time (KV cache)
// Exit 0 on success, 2 with a message otherwise.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/io/safetensors.h"
#include "engine/model/decoder.h"
#include "engine/model/hf_config.h"
#include "engine/model/hf_io.h"
#include "engine/model/model.h"

using namespace partrain;
using namespace partrain::engine;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: partrain_hf_logits DIR IDS OUT.safetensors\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::ifstream in(dir + "/config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto o = model::model_options_from_hf_config(text, dir + "/config.json");
  auto be = make_backend("cpu");
  if (!o || !be) {
    std::fprintf(stderr, "%s\n", (!o ? o.status() : be.status()).message().c_str());
    return 2;
  }
  auto m = model::Model::create(*o, be->get(), 1, 0);
  if (!m) return std::fprintf(stderr, "%s\n", m.status().message().c_str()), 2;
  if (Status s = model::load_hf(**m, dir); !s) return std::fprintf(stderr, "%s\n", s.message().c_str()), 2;
  std::vector<int32_t> ids;
  std::stringstream ss(argv[2]);
  for (std::string t; std::getline(ss, t, ',');) ids.push_back(std::stoi(t));
  auto d = model::Decoder::create(*o, (*m)->params_to_host());
  if (!d) return std::fprintf(stderr, "%s\n", d.status().message().c_str()), 2;
  std::vector<float> full, kv, step;
  if (Status s = (*d)->step(ids, &full, true); !s) return std::fprintf(stderr, "%s\n", s.message().c_str()), 2;
  (*d)->reset();
  const size_t first = std::min<size_t>(3, ids.size());
  if (Status s = (*d)->step(std::span(ids).first(first), &kv, true); !s) return 2;
  for (size_t t = first; t < ids.size(); ++t) {
    if (Status s = (*d)->step(std::span(ids).subspan(t, 1), &step); !s) return 2;
    kv.insert(kv.end(), step.begin(), step.end());
  }
  const int64_t T = static_cast<int64_t>(ids.size()), V = o->vocab_size;
  if (Status s = io::write_safetensors(argv[3], {io::from_f32("logits", {T, V}, full.data()),
                                                 io::from_f32("logits_kv", {T, V}, kv.data())});
      !s)
    return std::fprintf(stderr, "%s\n", s.message().c_str()), 2;
  return 0;
}
