// partrain_reference_dump DIR: partrain's side of the independent PyTorch check
// (tests/engine/reference/torch_reference.py computes the same from the equations).
//
// Reads DIR/config.json, a flat JSON object with these keys (all required unless noted):
//   arch            "gpt2" | "llama"
//   vocab_size, seq_len, layers, hidden, heads, kv_heads (0 = heads), ffn_hidden (0 = default)
//   norm_eps, rope_theta, tie_embeddings (true|false)
//   lr, beta1, beta2, eps, weight_decay, grad_clip      one AdamW step at t = 1, this lr
//   B, T                                                batch shape (T <= seq_len)
//   seed (optional, default 1337)                       init and batch when they are made here
// Uses DIR/weights.safetensors (Hugging Face names) when present, else writes partrain's
// initial weights there; uses DIR/batch.safetensors ("inputs", "targets": I32 [B, T]) when
// present, else writes a random batch there. Then runs forward, backward and one AdamW
// step (dropout 0) and writes DIR/partrain_out.safetensors (F32):
//   "loss"        [1]  mean cross-entropy over the B*T positions
//   "grad.<name>"      d loss / d <name> before clipping, in Hugging Face layout
//   "step.<name>"      <name> after the AdamW step, clipping included
// Exit 0 on success, 2 on a bad DIR (message on stderr).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "engine/model/hf_io.h"
#include "engine/model/model.h"
#include "engine/train/optimizer.h"

namespace {

using namespace partrain;
using namespace partrain::engine;

struct Config {
  ModelOptions model;
  TrainOptions train;
  int B = 0, T = 0;
  uint64_t seed = 1337;
};

Result<Config> read_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::not_found(path + ": cannot open (write the config.json first)");
  std::stringstream ss;
  ss << in.rdbuf();
  Result<io::JsonValue> j = io::parse_json(ss.str());
  if (!j) return j.status().prefixed(path + ": ");
  std::map<std::string, const io::JsonValue*> kv;
  for (const auto& [k, v] : j->members) kv[k] = &v;
  auto num = [&](const char* key, double* out) -> Status {
    auto it = kv.find(key);
    if (it == kv.end() || it->second->kind != io::JsonValue::Kind::kNumber)
      return Status::invalid(path + ": missing number '" + key + "'");
    *out = std::stod(it->second->text);
    return Status::ok();
  };
  Config c;
  auto arch = kv.find("arch");
  if (arch == kv.end() || (arch->second->text != "gpt2" && arch->second->text != "llama"))
    return Status::invalid(path + ": 'arch' must be \"gpt2\" or \"llama\"");
  c.model.arch = arch->second->text == "gpt2" ? Arch::kGpt2 : Arch::kLlama;
  auto tie = kv.find("tie_embeddings");
  if (tie == kv.end() || tie->second->kind != io::JsonValue::Kind::kBool)
    return Status::invalid(path + ": missing boolean 'tie_embeddings'");
  c.model.tie_embeddings = tie->second->boolean;
  double v = 0;
  struct IntKey { const char* k; int* dst; };
  for (IntKey ik : {IntKey{"vocab_size", &c.model.vocab_size}, IntKey{"seq_len", &c.model.seq_len},
                    IntKey{"layers", &c.model.layers}, IntKey{"hidden", &c.model.hidden},
                    IntKey{"heads", &c.model.heads}, IntKey{"kv_heads", &c.model.kv_heads},
                    IntKey{"ffn_hidden", &c.model.ffn_hidden}, IntKey{"B", &c.B}, IntKey{"T", &c.T}}) {
    PARTRAIN_RETURN_IF_ERROR(num(ik.k, &v));
    *ik.dst = static_cast<int>(v);
  }
  struct FloatKey { const char* k; float* dst; };
  for (FloatKey fk : {FloatKey{"norm_eps", &c.model.norm_eps}, FloatKey{"rope_theta", &c.model.rope_theta},
                      FloatKey{"lr", &c.train.lr}, FloatKey{"beta1", &c.train.beta1},
                      FloatKey{"beta2", &c.train.beta2}, FloatKey{"eps", &c.train.eps},
                      FloatKey{"weight_decay", &c.train.weight_decay},
                      FloatKey{"grad_clip", &c.train.grad_clip}}) {
    PARTRAIN_RETURN_IF_ERROR(num(fk.k, &v));
    *fk.dst = static_cast<float>(v);
  }
  if (kv.count("seed")) {
    PARTRAIN_RETURN_IF_ERROR(num("seed", &v));
    c.seed = static_cast<uint64_t>(v);
  }
  if (c.T < 1 || c.T > c.model.seq_len || c.B < 1)
    return Status::invalid(path + ": need 1 <= T <= seq_len and B >= 1");
  c.model.dropout = 0.0f;
  return c;
}

// The batch: read from batch.safetensors, or made from the seed and written there.
Status get_batch(const std::string& path, const Config& c, std::vector<int32_t>* in,
                 std::vector<int32_t>* tgt) {
  const size_t n = static_cast<size_t>(c.B) * c.T;
  if (std::filesystem::exists(path)) {
    Result<io::SafetensorsFile> f = io::read_safetensors(path);
    if (!f) return f.status();
    for (auto [name, dst] : {std::pair{"inputs", in}, std::pair{"targets", tgt}}) {
      const io::SafeTensor* t = f->find(name);
      if (t == nullptr || t->dtype != io::SafeDType::kI32 || t->bytes.size() != n * 4)
        return Status::invalid(path + ": '" + name + "' must be I32 [B, T]");
      dst->resize(n);
      std::memcpy(dst->data(), t->bytes.data(), n * 4);
    }
    return Status::ok();
  }
  std::mt19937 gen(static_cast<uint32_t>(c.seed));
  std::uniform_int_distribution<int> d(0, c.model.vocab_size - 1);
  in->resize(n);
  tgt->resize(n);
  for (size_t i = 0; i < n; ++i) (*in)[i] = d(gen), (*tgt)[i] = d(gen);
  std::vector<io::SafeTensor> ts(2);
  for (int k = 0; k < 2; ++k) {
    ts[static_cast<size_t>(k)].name = k == 0 ? "inputs" : "targets";
    ts[static_cast<size_t>(k)].dtype = io::SafeDType::kI32;
    ts[static_cast<size_t>(k)].shape = {c.B, c.T};
    const auto* src = reinterpret_cast<const uint8_t*>((k == 0 ? in : tgt)->data());
    ts[static_cast<size_t>(k)].bytes.assign(src, src + n * 4);
  }
  return io::write_safetensors(path, ts);
}

Status run(const std::string& dir) {
  Result<Config> c = read_config(dir + "/config.json");
  if (!c) return c.status();
  ModelOptions mo = c->model;
  if (c->T != mo.seq_len) {
    return Status::invalid(dir + "/config.json: T must equal seq_len (partrain trains full windows)");
  }
  auto be = make_cpu_backend();
  auto m = model::Model::create(mo, be.get(), c->B, c->seed);
  if (!m) return m.status();
  model::Model& model = **m;
  const std::string weights = dir + "/weights.safetensors";
  if (std::filesystem::exists(weights)) {
    PARTRAIN_RETURN_IF_ERROR(model::load_hf(model, weights));
  } else {
    PARTRAIN_RETURN_IF_ERROR(model::save_hf(model, weights));
  }
  std::vector<int32_t> in, tgt;
  PARTRAIN_RETURN_IF_ERROR(get_batch(dir + "/batch.safetensors", *c, &in, &tgt));
  // One step: forward, backward, AdamW at t = 1 with the configured lr.
  model.zero_grads();
  Result<model::LossParts> loss = model.forward({in.data(), tgt.data(), c->B, 0, 0});
  if (!loss) return loss.status();
  model.backward(1.0f);
  std::vector<float> grads(static_cast<size_t>(model.num_params()));
  be->to_host(grads.data(), model.grads());
  auto opt = train::AdamW::create(&model, c->train);
  if (!opt) return opt.status();
  (*opt)->step(c->train.lr);
  // Output: loss, gradients and stepped weights, in Hugging Face layout.
  std::vector<io::SafeTensor> out;
  const float l = loss->loss;
  out.push_back(io::from_f32("loss", {1}, &l));
  std::vector<io::SafeTensor> stepped = model::export_hf(model);
  // Gradients go through the same export path: load them as "weights" of a twin model.
  auto twin = model::Model::create(mo, be.get(), 1, c->seed);
  if (!twin) return twin.status();
  (*twin)->params_from_host(grads);
  for (io::SafeTensor& t : model::export_hf(**twin)) {
    t.name = "grad." + t.name;
    out.push_back(std::move(t));
  }
  for (io::SafeTensor& t : stepped) {
    t.name = "step." + t.name;
    out.push_back(std::move(t));
  }
  return io::write_safetensors(dir + "/partrain_out.safetensors", out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: partrain_reference_dump DIR  (see the comment at the top of "
                         "tests/engine/reference_dump.cc)\n");
    return 2;
  }
  const partrain::Status s = run(argv[1]);
  if (!s) {
    std::fprintf(stderr, "partrain_reference_dump: %s\n", s.message().c_str());
    return 2;
  }
  return 0;
}
