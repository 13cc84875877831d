#include "engine/model/hf_config.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "engine/io/json.h"
#include "engine/model/params.h"

namespace partrain::engine::model {
namespace {

using io::JsonValue;

const JsonValue* member(const JsonValue& obj, std::string_view key) {
  // A key written twice: its last value, as Python's json (transformers) reads the file.
  const JsonValue* last = nullptr;
  for (const auto& [k, v] : obj.members)
    if (k == key) last = &v;
  return last;
}

class ConfigReader {
 public:
  ConfigReader(const JsonValue& root, const std::string& path) : root_(root), path_(path) {}

  Status integer(const char* key, int* out, bool required = true) {
    const JsonValue* v = member(root_, key);
    if (v == nullptr || v->kind == JsonValue::Kind::kNull) {
      return required ? Status::invalid(fmt::format("{}: config.json has no \"{}\"", path_, key))
                      : Status::ok();
    }
    uint64_t u = 0;
    if (!v->as_u64(&u) || u > (1u << 30))
      return Status::invalid(fmt::format("{}: \"{}\" must be a positive integer", path_, key));
    *out = static_cast<int>(u);
    return Status::ok();
  }
  Status number(const char* key, float* out) {
    const JsonValue* v = member(root_, key);
    if (v == nullptr || v->kind == JsonValue::Kind::kNull) return Status::ok();
    if (v->kind != JsonValue::Kind::kNumber)
      return Status::invalid(fmt::format("{}: \"{}\" must be a number", path_, key));
    *out = std::strtof(v->text.c_str(), nullptr);
    return Status::ok();
  }
  // number(), and then it must be finite and > 0 (as the job file's key refuses otherwise).
  Status positive(const char* key, float* out, const char* typical) {
    const float before = *out;
    PARTRAIN_RETURN_IF_ERROR(number(key, out));
    if (*out == before || (std::isfinite(*out) && *out > 0)) return Status::ok();
    return Status::invalid(fmt::format("{}: \"{}\" is {}; it must be a positive number (typically "
                                       "{}): fix config.json",
                                       path_, key, member(root_, key)->text, typical));
  }
  void boolean(const char* key, bool* out) {
    const JsonValue* v = member(root_, key);
    if (v != nullptr && v->kind == JsonValue::Kind::kBool) *out = v->boolean;
  }
  std::string text(const char* key) {
    const JsonValue* v = member(root_, key);
    return v != nullptr && v->kind == JsonValue::Kind::kString ? v->text : "";
  }
  // A key whose presence (non-null, non-false) changes the model partrain would compute.
  Status refuse_if_set(const char* key, const char* why) {
    const JsonValue* v = member(root_, key);
    if (v == nullptr || v->kind == JsonValue::Kind::kNull ||
        (v->kind == JsonValue::Kind::kBool && !v->boolean))
      return Status::ok();
    return Status::invalid(fmt::format("{}: \"{}\" is set; {}", path_, key, why));
  }

 private:
  const JsonValue& root_;
  const std::string& path_;
};

Result<ModelOptions> gpt2_options(ConfigReader& r, const std::string& path) {
  ModelOptions o;
  o.arch = Arch::kGpt2;
  o.tie_embeddings = true;
  PARTRAIN_RETURN_IF_ERROR(r.integer("vocab_size", &o.vocab_size));
  PARTRAIN_RETURN_IF_ERROR(r.integer("n_positions", &o.seq_len));
  PARTRAIN_RETURN_IF_ERROR(r.integer("n_layer", &o.layers));
  PARTRAIN_RETURN_IF_ERROR(r.integer("n_embd", &o.hidden));
  PARTRAIN_RETURN_IF_ERROR(r.integer("n_head", &o.heads));
  PARTRAIN_RETURN_IF_ERROR(r.integer("n_inner", &o.ffn_hidden, false));
  PARTRAIN_RETURN_IF_ERROR(r.positive("layer_norm_epsilon", &o.norm_eps, "1e-5"));
  PARTRAIN_RETURN_IF_ERROR(r.number("initializer_range", &o.init_std));
  r.boolean("tie_word_embeddings", &o.tie_embeddings);
  const std::string act = r.text("activation_function");
  if (!act.empty() && act != "gelu_new" && act != "gelu_pytorch_tanh")
    return Status::invalid(fmt::format("{}: activation_function \"{}\": partrain's GPT-2 computes "
                                       "the tanh GELU (\"gelu_new\")", path, act));
  PARTRAIN_RETURN_IF_ERROR(r.refuse_if_set("scale_attn_by_inverse_layer_idx",
                                           "partrain scales attention by 1/sqrt(head_dim) only"));
  PARTRAIN_RETURN_IF_ERROR(r.refuse_if_set("reorder_and_upcast_attn", "not supported"));
  return o;
}

Result<ModelOptions> llama_options(ConfigReader& r, const std::string& path, bool mixtral) {
  ModelOptions o;
  o.arch = Arch::kLlama;
  o.tie_embeddings = false;
  PARTRAIN_RETURN_IF_ERROR(r.integer("vocab_size", &o.vocab_size));
  PARTRAIN_RETURN_IF_ERROR(r.integer("max_position_embeddings", &o.seq_len));
  PARTRAIN_RETURN_IF_ERROR(r.integer("num_hidden_layers", &o.layers));
  PARTRAIN_RETURN_IF_ERROR(r.integer("hidden_size", &o.hidden));
  PARTRAIN_RETURN_IF_ERROR(r.integer("num_attention_heads", &o.heads));
  PARTRAIN_RETURN_IF_ERROR(r.integer("num_key_value_heads", &o.kv_heads, false));
  PARTRAIN_RETURN_IF_ERROR(r.integer("intermediate_size", &o.ffn_hidden));
  PARTRAIN_RETURN_IF_ERROR(r.positive("rms_norm_eps", &o.norm_eps, "1e-5 or 1e-6"));
  PARTRAIN_RETURN_IF_ERROR(r.positive("rope_theta", &o.rope_theta, "10000 or 500000"));
  PARTRAIN_RETURN_IF_ERROR(r.number("initializer_range", &o.init_std));
  r.boolean("tie_word_embeddings", &o.tie_embeddings);
  int head_dim = 0;
  PARTRAIN_RETURN_IF_ERROR(r.integer("head_dim", &head_dim, false));
  if (head_dim != 0 && o.heads > 0 && head_dim * o.heads != o.hidden)
    return Status::invalid(fmt::format("{}: head_dim {} x num_attention_heads {} != hidden_size {}; "
                                       "partrain needs head_dim = hidden_size / heads", path,
                                       head_dim, o.heads, o.hidden));
  const std::string act = r.text("hidden_act");
  if (!act.empty() && act != "silu")
    return Status::invalid(fmt::format("{}: hidden_act \"{}\": partrain's LLaMA computes SwiGLU "
                                       "with silu", path, act));
  PARTRAIN_RETURN_IF_ERROR(r.refuse_if_set("rope_scaling", "partrain computes plain RoPE (no scaling)"));
  PARTRAIN_RETURN_IF_ERROR(r.refuse_if_set("attention_bias", "partrain's LLaMA has no biases"));
  PARTRAIN_RETURN_IF_ERROR(r.refuse_if_set("mlp_bias", "partrain's LLaMA has no biases"));
  PARTRAIN_RETURN_IF_ERROR(r.refuse_if_set("sliding_window", "partrain attends to the whole context"));
  if (mixtral) {
    PARTRAIN_RETURN_IF_ERROR(r.integer("num_local_experts", &o.moe_experts));
    PARTRAIN_RETURN_IF_ERROR(r.integer("num_experts_per_tok", &o.moe_top_k));
    PARTRAIN_RETURN_IF_ERROR(r.number("router_aux_loss_coef", &o.moe_aux_loss_coef));
    o.moe_every = 1;
  }
  return o;
}

}  // namespace

Result<std::string> hf_config_json(const ModelOptions& opts, const HfTokenIds& ids) {
  const ModelOptions o = resolved(opts);
  for (auto [key, id] : {std::pair<const char*, int64_t>{"bos_token_id", ids.bos}, {"eos_token_id", ids.eos}}) {
    if (id >= o.vocab_size)
      return Status::invalid(fmt::format("{} {} is outside the model's vocabulary of {} tokens; the tokenizer does "
                                         "not belong to this model", key, id, o.vocab_size));
  }
  auto id_text = [](int64_t id) { return id < 0 ? std::string("null") : std::to_string(id); };
  const std::string token_ids = fmt::format("  \"bos_token_id\": {},\n  \"eos_token_id\": {},\n", id_text(ids.bos),
                                            id_text(ids.eos));
  if (o.arch == Arch::kGpt2) {
    if (o.moe_experts > 0)
      return Status::invalid("GPT-2 with experts has no Hugging Face model class; export its "
                             "weights without --hf (safetensors only)");
    return fmt::format(
        "{{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
        "  \"vocab_size\": {},\n  \"n_positions\": {},\n  \"n_ctx\": {},\n  \"n_layer\": {},\n"
        "  \"n_embd\": {},\n  \"n_head\": {},\n  \"n_inner\": {},\n"
        "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": {},\n"
        "  \"initializer_range\": {},\n  \"tie_word_embeddings\": {},\n"
        "  \"resid_pdrop\": {},\n  \"embd_pdrop\": {},\n  \"attn_pdrop\": 0.0,\n"
        "  \"scale_attn_weights\": true,\n{}  \"use_cache\": true,\n  \"torch_dtype\": \"float32\"\n}}\n",
        o.vocab_size, o.seq_len, o.seq_len, o.layers, o.hidden, o.heads, o.ffn_hidden, o.norm_eps,
        o.init_std, o.tie_embeddings, o.dropout, o.dropout, token_ids);
  }
  const bool mixtral = o.moe_experts > 0;
  if (mixtral && o.moe_every != 1)
    return Status::invalid(fmt::format("a LLaMA with experts on every {} blocks has no Hugging "
                                       "Face class (Mixtral has experts on every block)", o.moe_every));
  std::string experts;
  if (mixtral)
    experts = fmt::format("  \"num_local_experts\": {},\n  \"num_experts_per_tok\": {},\n"
                          "  \"router_aux_loss_coef\": {},\n  \"output_router_logits\": false,\n",
                          o.moe_experts, o.moe_top_k, o.moe_aux_loss_coef);
  return fmt::format(
      "{{\n  \"architectures\": [\"{}\"],\n  \"model_type\": \"{}\",\n  \"vocab_size\": {},\n"
      "  \"max_position_embeddings\": {},\n  \"num_hidden_layers\": {},\n  \"hidden_size\": {},\n"
      "  \"num_attention_heads\": {},\n  \"num_key_value_heads\": {},\n  \"head_dim\": {},\n"
      "  \"intermediate_size\": {},\n  \"hidden_act\": \"silu\",\n  \"rms_norm_eps\": {},\n"
      "  \"rope_theta\": {},\n  \"rope_scaling\": null,\n  \"attention_bias\": false,\n"
      "  \"mlp_bias\": false,\n  \"attention_dropout\": 0.0,\n{}  \"initializer_range\": {},\n"
      "  \"tie_word_embeddings\": {},\n{}  \"use_cache\": true,\n  \"torch_dtype\": \"float32\"\n}}\n",
      mixtral ? "MixtralForCausalLM" : "LlamaForCausalLM", mixtral ? "mixtral" : "llama",
      o.vocab_size, o.seq_len, o.layers, o.hidden, o.heads, o.kv_heads, o.hidden / o.heads,
      o.ffn_hidden, o.norm_eps, o.rope_theta, experts, o.init_std, o.tie_embeddings, token_ids);
}

Result<ModelOptions> model_options_from_hf_config(const std::string& text, const std::string& path) {
  auto root = io::parse_json(text);
  if (!root) return Status::invalid(fmt::format("{}: {}", path, root.status().message()));
  if (root->kind != JsonValue::Kind::kObject)
    return Status::invalid(fmt::format("{}: config.json is not a JSON object", path));
  ConfigReader r(*root, path);
  const std::string type = r.text("model_type");
  if (type == "gpt2") return gpt2_options(r, path);
  if (type == "llama") return llama_options(r, path, false);
  if (type == "mixtral") return llama_options(r, path, true);
  return Status::invalid(fmt::format("{}: model_type \"{}\" is not one partrain trains; it "
                                     "imports gpt2, llama and mixtral", path, type));
}

}  // namespace partrain::engine::model
