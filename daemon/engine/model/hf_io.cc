// Hugging Face safetensors import/export of the parameter table.
#include "engine/model/hf_io.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include <fmt/format.h>

#include "engine/io/atomic_file.h"
#include "engine/io/json.h"
#include "engine/model/hf_config.h"

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

namespace {

// Fills `model` from `find` (name -> view, or null), checking names and shapes.
Status load_views(Model& model, const std::function<const io::TensorView*(const std::string&)>& find,
                  const std::string& path) {
  PARTRAIN_RETURN_IF_ERROR(refuse_tp(model, path));
  std::vector<float> host(static_cast<size_t>(model.num_params()));
  std::vector<float> staging;
  for (const ParamSpec& p : model.table().specs()) {
    const io::TensorView* t = find(p.name);
    if (t == nullptr) t = find("transformer." + p.name);
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
    float* dst = host.data() + p.offset;
    if (p.hf_transposed && p.shape.ndim == 2) {
      // The file is [in, out] = [shape[1], shape[0]]; back to [out, in].
      staging.resize(static_cast<size_t>(p.numel()));
      PARTRAIN_RETURN_IF_ERROR(io::view_to_f32(*t, staging.data()).prefixed(path + ": "));
      const std::vector<float> back = transposed(staging.data(), p.shape[1], p.shape[0]);
      std::copy(back.begin(), back.end(), dst);
    } else {
      PARTRAIN_RETURN_IF_ERROR(io::view_to_f32(*t, dst).prefixed(path + ": "));
    }
  }
  model.params_from_host(host);
  return Status::ok();
}

const io::JsonValue* member(const io::JsonValue& obj, std::string_view key) {
  // A key written twice: its last value, as Python's json (transformers) reads the file.
  const io::JsonValue* last = nullptr;
  for (const auto& [k, v] : obj.members)
    if (k == key) last = &v;
  return last;
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(fmt::format("{}: cannot open", path));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

Status load_hf(Model& model, const io::SafetensorsFile& file, const std::string& path) {
  std::vector<io::TensorView> views;
  for (const auto& t : file.tensors) views.push_back(io::view_of(t));
  return load_views(model, [&](const std::string& name) -> const io::TensorView* {
    for (const auto& v : views)
      if (v.name == name) return &v;
    return nullptr;
  }, path);
}

Status load_hf(Model& model, const HfWeights& weights) {
  return load_views(model, [&](const std::string& name) { return weights.find(name); },
                    weights.path());
}

Status read_hf_range(const HfWeights& weights, const std::string& name, const std::vector<int64_t>& shape,
                     bool hf_transposed, int64_t begin, int64_t end, float* out) {
  if (begin >= end) return Status::ok();
  const io::TensorView* t = weights.find(name);
  if (t == nullptr) t = weights.find("transformer." + name);
  if (t == nullptr) {
    return Status::invalid(fmt::format("{}: no tensor '{}'; the file does not match [model] (arch, layers, "
                                       "experts, tie_embeddings)", weights.path(), name));
  }
  const bool transposed = hf_transposed && shape.size() == 2;
  std::vector<int64_t> want = shape;
  if (transposed) std::swap(want[0], want[1]);
  if (t->shape != want) {
    return Status::invalid(fmt::format("{}: tensor '{}' has shape {}, the model needs {}; check [model] "
                                       "hidden/heads/vocab_size/seq_len", weights.path(), name,
                                       shape_text(t->shape), shape_text(want)));
  }
  const std::string where = weights.path() + ": ";
  if (!transposed) return io::view_range_to_f32(*t, begin, end, out).prefixed(where);
  // Ours is [rows, cols], the file's [cols, rows]: our rows r0..r1 are the file's columns
  // r0..r1, one contiguous run in each of its `cols` rows.
  const int64_t rows = shape[0], cols = shape[1];
  const int64_t r0 = begin / cols, r1 = (end - 1) / cols;
  std::vector<float> run(static_cast<size_t>(r1 - r0 + 1));
  for (int64_t c = 0; c < cols; ++c) {
    PARTRAIN_RETURN_IF_ERROR(io::view_range_to_f32(*t, c * rows + r0, c * rows + r1 + 1, run.data()).prefixed(where));
    for (int64_t r = r0; r <= r1; ++r) {
      const int64_t i = r * cols + c;
      if (i >= begin && i < end) out[i - begin] = run[static_cast<size_t>(r - r0)];
    }
  }
  return Status::ok();
}

Status load_hf(Model& model, const std::string& path) {
  auto w = HfWeights::open(path);
  if (!w) return w.status();
  return load_hf(model, *w);
}

Result<HfWeights> HfWeights::open(const std::string& path) {
  namespace fs = std::filesystem;
  HfWeights w;
  w.path_ = path;
  std::vector<std::string> files;
  if (!fs::is_directory(path)) {
    files.push_back(path);
  } else if (fs::exists(fs::path(path) / "model.safetensors.index.json")) {
    const std::string index = (fs::path(path) / "model.safetensors.index.json").string();
    auto text = read_text(index);
    if (!text) return text.status();
    auto root = io::parse_json(*text);
    const io::JsonValue* map = root ? member(*root, "weight_map") : nullptr;
    if (map == nullptr || map->kind != io::JsonValue::Kind::kObject)
      return Status::invalid(fmt::format("{}: expected {{\"weight_map\": {{NAME: FILE}}}}", index));
    for (const auto& [name, file] : map->members)
      if (std::find(files.begin(), files.end(), file.text) == files.end()) files.push_back(file.text);
    for (auto& f : files) {
      if (f.find('/') != std::string::npos)
        return Status::invalid(fmt::format("{}: shard '{}' is not a file name in the folder", index, f));
      f = (fs::path(path) / f).string();
    }
  } else if (fs::exists(fs::path(path) / "model.safetensors")) {
    files.push_back((fs::path(path) / "model.safetensors").string());
  } else {
    return Status::not_found(fmt::format("{}: neither model.safetensors nor "
                                         "model.safetensors.index.json is in the folder", path));
  }
  for (const auto& f : files) {
    auto m = io::MappedSafetensors::open(f);
    if (!m) return m.status();
    w.files_.push_back(std::move(*m));
  }
  return w;
}

const io::TensorView* HfWeights::find(const std::string& name) const {
  for (const auto& f : files_)
    if (const io::TensorView* v = f->find(name)) return v;
  return nullptr;
}

Status save_hf_dir(Model& model, const std::string& dir, const HfDirOptions& o) {
  namespace fs = std::filesystem;
  PARTRAIN_RETURN_IF_ERROR(refuse_tp(model, dir));
  auto config = hf_config_json(model.options(), o.token_ids);
  if (!config) return config.status();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::io_error(fmt::format("{}: cannot create the folder: {}", dir, ec.message()));
  PARTRAIN_RETURN_IF_ERROR(io::write_file_atomic((fs::path(dir) / "config.json").string(), *config));
  // Shards in table order, a new one when the next tensor would pass the limit.
  std::vector<io::SafeTensor> tensors = export_hf(model);
  std::vector<std::vector<io::SafeTensor>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (auto& t : tensors) {
    if (in_shard > 0 && in_shard + t.bytes.size() > o.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    in_shard += t.bytes.size();
    total += t.bytes.size();
    shards.back().push_back(std::move(t));
  }
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  if (shards.size() == 1) {
    PARTRAIN_RETURN_IF_ERROR(
        io::write_safetensors((fs::path(dir) / "model.safetensors").string(), shards[0], meta));
  } else {
    std::string index = fmt::format("{{\n  \"metadata\": {{\"total_size\": {}}},\n  \"weight_map\": {{", total);
    bool first = true;
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
      PARTRAIN_RETURN_IF_ERROR(io::write_safetensors((fs::path(dir) / name).string(), shards[i], meta));
      for (const auto& t : shards[i]) {
        index += first ? "\n    " : ",\n    ";
        first = false;
        io::append_json_string(t.name, &index);
        index += ": ";
        io::append_json_string(name, &index);
      }
    }
    index += "\n  }\n}\n";
    PARTRAIN_RETURN_IF_ERROR(
        io::write_file_atomic((fs::path(dir) / "model.safetensors.index.json").string(), index));
  }
  for (const auto& f : o.extra_files) {
    fs::copy_file(f, fs::path(dir) / fs::path(f).filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::io_error(fmt::format("{}: cannot copy into {}: {}", f, dir, ec.message()));
  }
  return Status::ok();
}

}  // namespace partrain::engine::model
