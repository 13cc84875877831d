// Scaling tables and the SVG plot (see scaling.h).
#include "planner/scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace partrain::planner {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool same(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

// A plot area: data ranges mapped onto a box of the picture, each axis linear or log2.
struct Panel {
  double x0, y0, w, h;           // the box, in pixels
  double xmin, xmax, ymin, ymax;  // the data range
  bool xlog = false, ylog = false;
  static double frac(double v, double lo, double hi, bool log) {
    if (log) v = std::log2(v), lo = std::log2(lo), hi = std::log2(hi);
    return hi > lo ? (v - lo) / (hi - lo) : 0.5;
  }
  double px(double x) const { return x0 + frac(x, xmin, xmax, xlog) * w; }
  double py(double y) const { return y0 + h - frac(y, ymin, ymax, ylog) * h; }
};

// "%g" without float noise: 0.1 + 0.2 -> "0.3".
std::string tick_label(double v) { return fmt("%.6g", std::fabs(v) < 1e-12 ? 0.0 : v); }

std::string axes(const Panel& p, const std::string& title, const std::string& xlabel, const std::string& ylabel,
                 const std::vector<double>& xticks, const std::vector<double>& yticks) {
  std::string s = "<rect x=\"" + fmt("%.1f", p.x0) + "\" y=\"" + fmt("%.1f", p.y0) + "\" width=\"" +
                  fmt("%.1f", p.w) + "\" height=\"" + fmt("%.1f", p.h) +
                  "\" fill=\"none\" stroke=\"#444\"/>\n";
  s += "<text x=\"" + fmt("%.1f", p.x0 + p.w / 2) + "\" y=\"" + fmt("%.1f", p.y0 - 10) +
       "\" text-anchor=\"middle\" font-weight=\"bold\">" + escape(title) + "</text>\n";
  s += "<text x=\"" + fmt("%.1f", p.x0 + p.w / 2) + "\" y=\"" + fmt("%.1f", p.y0 + p.h + 36) +
       "\" text-anchor=\"middle\">" + escape(xlabel) + "</text>\n";
  s += "<text x=\"" + fmt("%.1f", p.x0 - 44) + "\" y=\"" + fmt("%.1f", p.y0 + p.h / 2) +
       "\" text-anchor=\"middle\" transform=\"rotate(-90 " + fmt("%.1f", p.x0 - 44) + " " +
       fmt("%.1f", p.y0 + p.h / 2) + ")\">" + escape(ylabel) + "</text>\n";
  for (double x : xticks) {
    s += "<line x1=\"" + fmt("%.1f", p.px(x)) + "\" x2=\"" + fmt("%.1f", p.px(x)) + "\" y1=\"" +
         fmt("%.1f", p.y0 + p.h) + "\" y2=\"" + fmt("%.1f", p.y0 + p.h + 4) + "\" stroke=\"#444\"/>\n";
    s += "<text class=\"xtick\" x=\"" + fmt("%.1f", p.px(x)) + "\" y=\"" + fmt("%.1f", p.y0 + p.h + 16) +
         "\" text-anchor=\"middle\" font-size=\"11\">" + tick_label(x) + "</text>\n";
  }
  for (double y : yticks) {
    s += "<line x1=\"" + fmt("%.1f", p.x0 - 4) + "\" x2=\"" + fmt("%.1f", p.x0) + "\" y1=\"" + fmt("%.1f", p.py(y)) +
         "\" y2=\"" + fmt("%.1f", p.py(y)) + "\" stroke=\"#444\"/>\n";
    s += "<text class=\"ytick\" x=\"" + fmt("%.1f", p.x0 - 6) + "\" y=\"" + fmt("%.1f", p.py(y) + 4) +
         "\" text-anchor=\"end\" font-size=\"11\">" + tick_label(y) + "</text>\n";
  }
  return s;
}

// Ticks of a log2 axis over [lo, hi]: the powers of two inside it, or round linear ticks
// when fewer than two powers fall inside (a speedup of 1 to 1.7).
std::vector<double> log2_ticks(double lo, double hi) {
  std::vector<double> out;
  for (double v = std::exp2(std::ceil(std::log2(lo) - 1e-9)); v <= hi * (1 + 1e-9); v *= 2) out.push_back(v);
  return out.size() >= 2 ? out : nice_ticks(lo, hi, 4, false);
}

std::string polyline(const Panel& p, const std::vector<double>& xs, const std::vector<double>& ys,
                     const std::string& color, const std::string& extra = "") {
  std::string pts;
  for (size_t i = 0; i < xs.size(); ++i) {
    pts += (i ? " " : "") + fmt("%.1f", p.px(xs[i])) + "," + fmt("%.1f", p.py(ys[i]));
  }
  return "<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2\" " + extra +
         "points=\"" + pts + "\"/>\n";
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target, bool whole) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;  // of 1, 2, 5 and 10 x mag, the nearest to raw (by ratio)
  for (double m : {2.0, 5.0, 10.0}) {
    if (std::fabs(std::log(m * mag / raw)) < std::fabs(std::log(step / raw))) step = m * mag;
  }
  if (whole) step = std::max(1.0, std::round(step));
  std::vector<double> out;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi * (1 + 1e-12) + 1e-12; k += 1) {
    out.push_back(k * step);
  }
  return out;
}

const char* scaling_kind_name(ScalingKind k) {
  return k == ScalingKind::kStrong ? "strong" : k == ScalingKind::kWeak ? "weak" : "mixed";
}

Result<ScalingReport> scaling_report(const std::vector<RunSeries>& runs) {
  if (runs.empty()) return Status::invalid("partrain: report needs at least one run folder");
  ScalingReport r;
  for (const RunSeries& s : runs) {
    if (s.step_ms.empty()) {
      return Status::invalid("partrain: " + s.name + ": no steps in metrics.jsonl; let the run "
                             "finish at least one step");
    }
    if (s.ranks < 1 || s.tokens_per_step <= 0) {
      return Status::invalid("partrain: " + s.name + ": metrics.jsonl lacks a rank count or a "
                             "token count per step");
    }
    ScalingRow row;
    row.name = s.name;
    row.ranks = s.ranks;
    row.tokens_per_step = s.tokens_per_step;
    std::vector<double> timed(s.step_ms.size() > 1 ? s.step_ms.begin() + 1 : s.step_ms.begin(),
                              s.step_ms.end());
    row.step_ms = median(timed);
    if (!(row.step_ms > 0)) {
      return Status::invalid("partrain: " + s.name + ": step times are not positive");
    }
    row.tokens_per_s = row.tokens_per_step / (row.step_ms / 1e3);
    row.final_loss = s.loss.empty() ? 0 : s.loss.back();
    row.final_val_loss = s.val_loss;
    r.rows.push_back(row);
  }
  std::stable_sort(r.rows.begin(), r.rows.end(),
                   [](const ScalingRow& a, const ScalingRow& b) { return a.ranks < b.ranks; });
  const ScalingRow base = r.rows.front();
  bool strong = true, weak = true;
  for (const ScalingRow& row : r.rows) {
    strong = strong && same(row.tokens_per_step, base.tokens_per_step);
    weak = weak && same(row.tokens_per_step / row.ranks, base.tokens_per_step / base.ranks);
  }
  // With one rank count only, both hold: call it strong (nothing scales).
  r.kind = strong ? ScalingKind::kStrong : weak ? ScalingKind::kWeak : ScalingKind::kMixed;
  for (ScalingRow& row : r.rows) {
    row.speedup = row.tokens_per_s / base.tokens_per_s;
    row.efficiency = row.speedup / (static_cast<double>(row.ranks) / base.ranks);
  }
  return r;
}

std::string scaling_svg(const ScalingReport& report, const std::vector<RunSeries>& runs) {
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                  "#8c564b", "#e377c2", "#17becf"};
  const double W = 960, H = 440;
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
                  "width=\"" + fmt("%.0f", W) + "\" height=\"" + fmt("%.0f", H) +
                  "\" font-family=\"sans-serif\" font-size=\"13\">\n"
                  "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  // Left: speedup against ranks, both log2 (the ideal is then the diagonal), ticked at the
  // runs' rank counts.
  const ScalingRow& base = report.rows.front();
  double max_ranks = base.ranks, min_speedup = 1, max_speedup = 1;
  std::vector<double> rank_ticks;
  for (const ScalingRow& row : report.rows) {
    max_ranks = std::max<double>(max_ranks, row.ranks);
    min_speedup = std::min(min_speedup, row.speedup);
    max_speedup = std::max({max_speedup, row.speedup, static_cast<double>(row.ranks) / base.ranks});
    if (rank_ticks.empty() || rank_ticks.back() != row.ranks) rank_ticks.push_back(row.ranks);
  }
  // One rank count: a range around it, so the axis is not empty.
  const double rlo = base.ranks, rhi = max_ranks > rlo ? max_ranks : 2 * rlo;
  if (max_speedup <= min_speedup) max_speedup = 2 * min_speedup;
  Panel sp{70, 40, 340, 320, rlo, rhi, min_speedup, max_speedup};
  sp.xlog = sp.ylog = true;
  s += axes(sp, std::string(scaling_kind_name(report.kind)) + " scaling: speedup", "ranks (log scale)",
            "speedup over " + std::to_string(base.ranks) + " rank(s)", rank_ticks, log2_ticks(min_speedup, max_speedup));
  s += polyline(sp, {rlo, rhi}, {1, rhi / rlo}, "#999", "stroke-dasharray=\"6,4\" ");
  std::vector<double> xs, ys;
  for (const ScalingRow& row : report.rows) {
    xs.push_back(row.ranks);
    ys.push_back(row.speedup);
  }
  s += polyline(sp, xs, ys, "#1f77b4");
  for (size_t i = 0; i < xs.size(); ++i) {
    s += "<circle cx=\"" + fmt("%.1f", sp.px(xs[i])) + "\" cy=\"" + fmt("%.1f", sp.py(ys[i])) +
         "\" r=\"4\" fill=\"#1f77b4\"/>\n";
  }
  s += "<text x=\"" + fmt("%.1f", sp.x0 + 8) + "\" y=\"" + fmt("%.1f", sp.y0 + 18) +
       "\" fill=\"#999\">dashed: ideal</text>\n";
  // Right: every run's loss per step, and its validation loss where it evaluated.
  double smax = 1, lmin = 1e300, lmax = -1e300;
  bool any_val = false;
  for (const RunSeries& r : runs) {
    for (size_t i = 0; i < r.loss.size(); ++i) {
      smax = std::max<double>(smax, static_cast<double>(r.steps[i]));
      lmin = std::min(lmin, r.loss[i]);
      lmax = std::max(lmax, r.loss[i]);
    }
    for (size_t i = 0; i < r.val_losses.size(); ++i) {
      smax = std::max<double>(smax, static_cast<double>(r.val_steps[i]));
      lmin = std::min(lmin, r.val_losses[i]);
      lmax = std::max(lmax, r.val_losses[i]);
      any_val = true;
    }
  }
  if (lmin > lmax) lmin = 0, lmax = 1;
  if (lmin == lmax) lmin -= 0.5, lmax += 0.5;
  // The loss axis runs between round values around the data.
  const std::vector<double> coarse = nice_ticks(lmin, lmax, 5, false);
  const double lstep = coarse.size() >= 2 ? coarse[1] - coarse[0] : (lmax - lmin);
  lmin = std::floor(lmin / lstep + 1e-9) * lstep;
  lmax = std::ceil(lmax / lstep - 1e-9) * lstep;
  const Panel lp{560, 40, 340, 320, 1, smax, lmin, lmax};
  s += axes(lp, any_val ? "loss curves (dots: validation)" : "loss curves", "step", "loss",
            nice_ticks(1, smax, 6, true), nice_ticks(lmin, lmax, 5, false));
  for (size_t k = 0; k < runs.size(); ++k) {
    const RunSeries& r = runs[k];
    std::vector<double> steps(r.steps.begin(), r.steps.end());
    const std::string color = kColors[k % std::size(kColors)];
    s += polyline(lp, steps, r.loss, color, k ? "stroke-dasharray=\"" + std::to_string(2 + 2 * k) + ",3\" " : "");
    if (!r.val_losses.empty()) {
      std::vector<double> vsteps(r.val_steps.begin(), r.val_steps.end());
      s += polyline(lp, vsteps, r.val_losses, color, "class=\"val\" stroke-dasharray=\"1,4\" ");
      for (size_t i = 0; i < vsteps.size(); ++i) {
        s += "<circle class=\"val\" cx=\"" + fmt("%.1f", lp.px(vsteps[i])) + "\" cy=\"" +
             fmt("%.1f", lp.py(r.val_losses[i])) + "\" r=\"3.5\" fill=\"white\" stroke=\"" + color + "\"/>\n";
      }
    }
    s += "<text x=\"" + fmt("%.1f", lp.x0 + lp.w - 6) + "\" y=\"" + fmt("%.1f", lp.y0 + 18 + 16.0 * k) +
         "\" text-anchor=\"end\" fill=\"" + color + "\">" + escape(r.name) + " (" +
         std::to_string(r.ranks) + " rank" + (r.ranks > 1 ? "s" : "") + ")</text>\n";
  }
  return s + "</svg>\n";
}

}  // namespace partrain::planner
