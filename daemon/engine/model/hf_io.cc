// Hugging Face safetensors import/export of the parameter table.
#include "engine/model/hf_io.h"

#include <fmt/format.h>

namespace partrain::engine::model {
namespace {

// [rows, cols] -> [cols, rows]
std::vector<float> transposed(const float* src, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c * rows + r)] = src[r * cols + c];
  return out;
}

std::vector<int64_t> hf_shape(const ParamSpec& p) {
  std::vector<int64_t> s(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.ndim);
  if (p.hf_transposed && s.size() == 2) std::swap(s[0], s[1]);
  return s;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

std::vector<io::SafeTensor> export_hf(Model& model) {
  const std::vector<float> host = model.params_to_host();
  std::vector<io::SafeTensor> out;
  for (const ParamSpec& p : model.table().specs()) {
    const float* src = host.data() + p.offset;
    if (p.hf_transposed && p.shape.ndim == 2) {
      const std::vector<float> t = transposed(src, p.shape[0], p.shape[1]);
      out.push_back(io::from_f32(p.name, hf_shape(p), t.data()));
    } else {
      out.push_back(io::from_f32(p.name, hf_shape(p), src));
    }
  }
  return out;
}

// A tensor-parallel rank holds pieces only; gathering them into whole tensors is not done
// yet, so export and --init refuse rather than write or read the wrong shapes.
static Status refuse_tp(const Model& model, const std::string& path) {
  if (model.tensor().size == 1) return Status::ok();
  return Status::invalid(fmt::format("{}: Hugging Face export and --init need whole tensors; a "
                                     "tp{} rank holds pieces; run with tp1 to export or load",
                                     path, model.tensor().size));
}

Status save_hf(Model& model, const std::string& path) {
  PARTRAIN_RETURN_IF_ERROR(refuse_tp(model, path));
  const ModelOptions& o = model.options();
  std::map<std::string, std::string> meta{
      {"format", "pt"},
      {"partrain_arch", o.arch == Arch::kGpt2 ? "gpt2" : "llama"},
      {"partrain_layers", std::to_string(o.layers)},
      {"partrain_hidden", std::to_string(o.hidden)}};
  return io::write_safetensors(path, export_hf(model), meta);
}

Status load_hf(Model& model, const io::SafetensorsFile& file, const std::string& path) {
  PARTRAIN_RETURN_IF_ERROR(refuse_tp(model, path));
  std::vector<float> host(static_cast<size_t>(model.num_params()));
  for (const ParamSpec& p : model.table().specs()) {
    const io::SafeTensor* t = file.find(p.name);
    if (t == nullptr) t = file.find("transformer." + p.name);
    if (t == nullptr) {
      return Status::invalid(fmt::format(
          "{}: no tensor '{}'; the file does not match [model] (arch, layers, experts, "
          "tie_embeddings)", path, p.name));
    }
    const std::vector<int64_t> want = hf_shape(p);
    if (t->shape != want) {
      return Status::invalid(fmt::format("{}: tensor '{}' has shape {}, the model needs {}; "
                                         "check [model] hidden/heads/vocab_size/seq_len",
                                         path, p.name, shape_text(t->shape), shape_text(want)));
    }
    Result<std::vector<float>> v = io::to_f32(*t);
    if (!v) return v.status().prefixed(path + ": ");
    float* dst = host.data() + p.offset;
    if (p.hf_transposed && p.shape.ndim == 2) {
      // The file is [in, out] = [shape[1], shape[0]]; back to [out, in].
      const std::vector<float> back = transposed(v->data(), p.shape[1], p.shape[0]);
      std::copy(back.begin(), back.end(), dst);
    } else {
      std::copy(v->begin(), v->end(), dst);
    }
  }
  model.params_from_host(host);
  return Status::ok();
}

Status load_hf(Model& model, const std::string& path) {
  Result<io::SafetensorsFile> f = io::read_safetensors(path);
  if (!f) return f.status();
  return load_hf(model, *f, path);
}

}  // namespace partrain::engine::model
