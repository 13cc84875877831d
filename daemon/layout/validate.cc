// The layout invariants (see validate.h), each failure phrased as what to change.
#include "layout/validate.h"

#include <string>

#include "layout/layout.h"

namespace partrain {
namespace {

std::string str(long long v) { return std::to_string(v); }

// "1, 2, 3, 6": the values a degree may take to divide n (for the fix in a message).
std::string divisors(long long n) {
  std::string out;
  for (long long d = 1; d <= n; ++d) {
    if (n % d != 0) continue;
    if (!out.empty()) out += ", ";
    out += str(d);
  }
  return out;
}

Status err(const std::string& msg) { return Status::invalid("partrain: " + msg); }

void check_degrees(const ParallelSpec& s, std::vector<Status>* out) {
  const std::pair<const char*, int> degrees[] = {
      {"tp", s.tp}, {"pp", s.pp}, {"cp", s.cp}, {"ep", s.ep}};
  for (const auto& [name, value] : degrees) {
    if (value < 1) {
      out->push_back(err(std::string(name) + str(value) + " is not a positive degree; use " +
                         name + "1 or more"));
    }
  }
  if (s.dp && *s.dp < 1) {
    out->push_back(err("dp" + str(*s.dp) + " is not a positive degree; use dp1 or more, or "
                       "leave dp out to derive it"));
  }
  if (s.zero < 0 || s.zero > 3) {
    out->push_back(err("zero" + str(s.zero) + " is not a ZeRO stage; use zero0..zero3"));
  } else if (s.zero > 0 && !s.grad.empty()) {
    out->push_back(err("grad=" + s.grad + " replaces plain data parallel's gradient average, and zero" +
                       str(s.zero) + " has a data plugin of its own; drop grad= or use zero0"));
  }
  if (s.virtual_stages < 1) {
    out->push_back(err("sched=" + s.sched + ":" + str(s.virtual_stages) +
                       " needs a positive virtual-stage count, e.g. sched=interleaved:2"));
  }
}

void check_nvlink(const ParallelSpec& s, const ClusterFacts& c, std::vector<Status>* out) {
  const int domain = c.nvlink_domain > 0 ? c.nvlink_domain : c.gpus_per_node;
  if (domain <= 0) return;
  const std::string where = c.nvlink_domain > 0
                                ? "the NVLink domain of " + str(domain) + " GPUs"
                                : str(domain) + " GPUs per node";
  if (s.tp > domain) {
    out->push_back(err("tp" + str(s.tp) + " is larger than " + where +
                       "; tensor parallelism needs NVLink, so use tp" + str(domain) +
                       " or less and add pp to split the model further"));
  } else if (domain % s.tp != 0) {
    out->push_back(err("tp" + str(s.tp) + " does not divide " + where +
                       "; use a tp that divides " + str(domain) + " (" + divisors(domain) +
                       ")"));
  }
}

void check_model(const ParallelSpec& s, const ModelShape& m, std::vector<Status>* out) {
  auto divides = [&](int n, int degree, const std::string& degree_text, const std::string& what,
                     const std::string& axis) {
    if (n > 0 && n % degree != 0) {
      out->push_back(err(degree_text + " does not divide the model's " + str(n) + " " + what +
                         "; use " + axis + " from " + divisors(n)));
    }
  };
  const std::string tp = "tp" + str(s.tp);
  divides(m.heads, s.tp, tp, "attention heads", "a tp");
  divides(m.kv_heads, s.tp, tp, "key/value heads", "a tp");
  divides(m.hidden, s.tp, tp, "hidden size", "a tp");
  if (m.seq_len > 0 && s.sequence_parallel() && m.seq_len % s.tp != 0) {
    out->push_back(err("sequence parallelism splits seq_len " + str(m.seq_len) + " over " + tp +
                       ", which does not divide it; use a seq_len that is a multiple of " +
                       str(s.tp) + ", or nosp"));
  }
  // Context parallelism cuts every sequence into 2 cp chunks (rank i holds chunks i and
  // 2cp-1-i, so causal attention work is balanced).
  if (s.cp > 1 && m.seq_len > 0 && m.seq_len % (2 * s.cp) != 0) {
    out->push_back(err("cp" + str(s.cp) + " cuts every sequence into " + str(2 * s.cp) +
                       " chunks, which do not divide seq_len " + str(m.seq_len) +
                       "; use a seq_len that is a multiple of " + str(2 * s.cp)));
  }
  // Stages need not hold equal layer counts (the partition balances cost, or the job's
  // [parallelism] stage_layers decides), but each holds at least one block.
  const long long chunks = 1LL * s.pp * s.virtual_stages;
  if (m.layers > 0 && m.layers < chunks) {
    std::string split = "pp" + str(s.pp);
    if (s.virtual_stages > 1) split += " x " + str(s.virtual_stages) + " virtual stages";
    out->push_back(err(str(m.layers) + " layers cannot fill " + split + " = " + str(chunks) +
                       " model chunks (each holds at least one block); use at most " +
                       str(m.layers) + " chunks, or add layers"));
  }
  if (s.ep > 1 && m.experts == 0) {
    out->push_back(err("ep" + str(s.ep) + " shards experts, but the model has none; drop ep" +
                       str(s.ep) + " or give the model experts"));
  }
  divides(m.experts, s.ep, "ep" + str(s.ep), "experts", "an ep");
}

// Whether mb=K micro-batches suit the schedule (1F1B-like: K >= pp; interleaved: K % pp == 0)
// and split the per_rank = global_batch / dp sequences of a rank evenly.
bool mb_fits(const ParallelSpec& s, long long per_rank, long long k) {
  const bool one_f_one_b = s.sched == "1f1b" || s.sched == "interleaved" || s.sched == "zbh1";
  if (per_rank % k != 0) return false;
  if (s.pp < 2) return true;
  if (one_f_one_b && k < s.pp) return false;
  return s.sched != "interleaved" || k % s.pp == 0;
}

// Returns the micro-batch count m when the batch settles it. With mb=M in the spec the
// per-rank micro-batch is global_batch / (M x dp) (config's grad_accum_steps), so the
// global batch must split into M x dp whole micro-batches.
std::optional<long long> check_batch(const ParallelSpec& s, const BatchShape& b, int dp,
                                     std::vector<Status>* out) {
  if (b.global_batch < 0 || b.micro_batch < 0) {
    out->push_back(err("global_batch and micro_batch must be positive; set them in [training]"));
    return std::nullopt;
  }
  if (s.mb) {
    const long long per_step = *s.mb * static_cast<long long>(dp);
    if (b.global_batch > 0 && b.global_batch % per_step != 0) {
      std::string fix;
      if (b.global_batch % dp == 0) {
        // The nearest counts that split global_batch / dp evenly (and suit the schedule),
        // below and above M.
        const long long per_rank = b.global_batch / dp;
        long long below = 0, above = 0;
        for (long long k = 1; k <= per_rank; ++k) {
          if (!mb_fits(s, per_rank, k)) continue;
          if (k < *s.mb) below = k;
          if (k > *s.mb && above == 0) above = k;
        }
        if (below > 0 || above > 0)
          fix = "use mb=" + (below > 0 ? str(below) + (above > 0 ? " or mb=" + str(above) : "") : str(above));
        else
          fix = "set global_batch to a multiple of " + str(per_step);
      } else {
        fix = "set global_batch to a multiple of " + str(per_step);
      }
      out->push_back(err("global_batch " + str(b.global_batch) + " does not split into mb=" + str(*s.mb) +
                         " micro-batches on each of dp" + str(dp) + " (" + str(*s.mb) + " x " + str(dp) + " = " +
                         str(per_step) + " does not divide it); " + fix + ", or drop mb= to derive the count"));
    }
    return *s.mb;
  }
  if (b.global_batch == 0 || b.micro_batch == 0) return std::nullopt;
  Result<int> m = derive_grad_accum(b, dp);
  if (!m.is_ok()) {
    out->push_back(m.status());
    return std::nullopt;
  }
  return *m;
}

// The smallest micro-batch count mb=K a pipeline schedule accepts (K >= pp, a multiple of
// pp for interleaved) that also splits the global batch over dp (when it is known), so the
// suggestion works when taken; 0 when there is none.
long long schedule_mb(const ParallelSpec& s, const BatchShape& b, int dp) {
  if (b.global_batch <= 0 || dp <= 0) return s.pp;
  if (b.global_batch % dp != 0) return 0;
  const long long per_rank = b.global_batch / dp;
  for (long long k = s.pp; k <= per_rank; ++k) {
    if (mb_fits(s, per_rank, k)) return k;
  }
  return 0;
}

void check_schedule(const ParallelSpec& s, long long m, const BatchShape& b, int dp, std::vector<Status>* out) {
  if (s.pp < 2) return;
  // 1F1B's warm-up (and interleaved's, and ZB-H1's, which keeps 1F1B's in-flight bound)
  // fills the pipeline with p micro-batches before the first backward.
  const bool one_f_one_b = s.sched == "1f1b" || s.sched == "interleaved" || s.sched == "zbh1";
  const long long k = schedule_mb(s, b, dp);
  const std::string set_mb = k > 0 ? "set mb=" + str(k) : "";
  if (one_f_one_b && m < s.pp) {
    out->push_back(err("sched=" + s.sched + " with pp" + str(s.pp) + " needs at least " +
                       str(s.pp) + " micro-batches per step, but there are " + str(m) +
                       "; raise global_batch or lower micro_batch" + (k > 0 ? " (or " + set_mb + ")" : "") +
                       ", or use sched=gpipe"));
  } else if (s.sched == "interleaved" && m % s.pp != 0) {
    out->push_back(err("sched=interleaved:" + str(s.virtual_stages) +
                       " needs the micro-batch count (" + str(m) + ") to be a multiple of pp" +
                       str(s.pp) + "; " + (k > 0 ? set_mb + ", or change" : "change") +
                       " global_batch or micro_batch accordingly"));
  }
}

}  // namespace

Result<int> derive_grad_accum(const BatchShape& b, int dp) {
  const long long per_pass = b.micro_batch * dp;
  if (b.global_batch <= 0 || b.micro_batch <= 0 || dp <= 0) {
    return Status::invalid("partrain: global_batch and micro_batch must be positive; set them "
                           "in [training]");
  }
  if (b.global_batch % per_pass != 0) {
    long long lower = b.global_batch / per_pass * per_pass;
    std::string example = lower > 0 ? str(lower) + " or " + str(lower + per_pass)
                                    : str(per_pass);
    return Status::invalid("partrain: global_batch " + str(b.global_batch) +
                           " is not a multiple of micro_batch " + str(b.micro_batch) + " x dp" +
                           str(dp) + " = " + str(per_pass) +
                           ", so grad_accum is not whole; use a global_batch of " + example);
  }
  const long long m = b.global_batch / per_pass;
  if (m > (1 << 30)) {
    return Status::invalid("partrain: global_batch " + str(b.global_batch) + " gives " + str(m) +
                           " micro-batches per step; raise micro_batch");
  }
  return static_cast<int>(m);
}

std::vector<Status> validate_all(const ParallelSpec& spec, const ClusterFacts& cluster,
                                 const ModelShape& model, const BatchShape& batch) {
  std::vector<Status> out;
  check_degrees(spec, &out);
  if (!out.empty()) return out;  // the arithmetic below needs positive degrees
  Result<Layout> layout = Layout::create(cluster.world, spec);
  if (!layout.is_ok()) out.push_back(layout.status());
  check_nvlink(spec, cluster, &out);
  check_model(spec, model, &out);
  if (layout.is_ok()) {
    std::optional<long long> m = check_batch(spec, batch, layout->dp(), &out);
    if (m) check_schedule(spec, *m, batch, layout->dp(), &out);
  } else if (spec.mb) {
    check_schedule(spec, *spec.mb, BatchShape{}, 0, &out);
  }
  return out;
}

Status validate(const ParallelSpec& spec, const ClusterFacts& cluster, const ModelShape& model,
                const BatchShape& batch) {
  std::vector<Status> all = validate_all(spec, cluster, model, batch);
  return all.empty() ? Status::ok() : all.front();
}

}  // namespace partrain
