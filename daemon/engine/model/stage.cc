// The parameter table of a pipeline stage (stage.h).
#include "engine/model/stage.h"

#include <cstdlib>

namespace partrain::engine::model {

int block_of(const std::string& name) {
  for (const char* prefix : {"h.", "model.layers."}) {
    const std::string p = prefix;
    if (name.rfind(p, 0) != 0) continue;
    const char* digits = name.c_str() + p.size();
    char* end = nullptr;
    const long i = std::strtol(digits, &end, 10);
    if (end != digits && *end == '.') return static_cast<int>(i);
  }
  return -1;
}

namespace {

bool is_embedding(const std::string& name) {
  return name == "wte.weight" || name == "wpe.weight" || name == "model.embed_tokens.weight";
}

void copy_spec(ParamTable* t, const ParamSpec& s) {
  if (s.split()) {
    t->add_piece(s.name, s.shape, s.logical, s.pieces, s.init, s.init_std, s.no_decay, s.hf_transposed);
  } else {
    t->add(s.name, s.shape, s.init, s.init_std, s.no_decay, s.hf_transposed);
  }
  if (s.expert) t->mark_expert(static_cast<int>(t->specs().size()) - 1);
  if (s.tp_summed) t->mark_tp_summed(static_cast<int>(t->specs().size()) - 1);
}

}  // namespace

ParamTable build_stage_table(const ModelOptions& o, const TensorOptions& tp, const ExpertOptions& ep,
                             const StageOptions& stage) {
  ParamTable full = build_param_table(o, tp, ep);
  const int L = o.layers;
  const int lo = stage.first_block, hi = stage.end_block < 0 ? L : stage.end_block;
  if (lo == 0 && hi == L) return full;
  const bool first = lo == 0, last = hi == L;
  ParamTable t;
  const ParamSpec* tied = nullptr;
  for (const ParamSpec& s : full.specs()) {
    const int b = block_of(s.name);
    bool keep = false;
    if (b >= 0) {
      keep = b >= lo && b < hi;
    } else if (is_embedding(s.name)) {
      keep = first;
      if (!first && last && o.tie_embeddings && s.name != "wpe.weight") tied = &s;
    } else {
      keep = last;  // the final norm and an untied head
    }
    if (keep) copy_spec(&t, s);
  }
  if (tied != nullptr) copy_spec(&t, *tied);  // the head's copy of wte, after the final norm
  return t;
}

}  // namespace partrain::engine::model
