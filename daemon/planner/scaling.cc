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

// A plot area: data ranges mapped onto a box of the picture.
struct Panel {
  double x0, y0, w, h;           // the box, in pixels
  double xmin, xmax, ymin, ymax;  // the data range
  double px(double x) const { return x0 + (xmax > xmin ? (x - xmin) / (xmax - xmin) : 0.5) * w; }
  double py(double y) const { return y0 + h - (ymax > ymin ? (y - ymin) / (ymax - ymin) : 0.5) * h; }
};

std::string axes(const Panel& p, const std::string& title, const std::string& xlabel,
                 const std::string& ylabel) {
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
  for (int i = 0; i <= 4; ++i) {  // tick labels at the ends and three between
    const double fx = p.xmin + (p.xmax - p.xmin) * i / 4, fy = p.ymin + (p.ymax - p.ymin) * i / 4;
    s += "<text x=\"" + fmt("%.1f", p.px(fx)) + "\" y=\"" + fmt("%.1f", p.y0 + p.h + 16) +
         "\" text-anchor=\"middle\" font-size=\"11\">" + fmt("%.3g", fx) + "</text>\n";
    s += "<text x=\"" + fmt("%.1f", p.x0 - 6) + "\" y=\"" + fmt("%.1f", p.py(fy) + 4) +
         "\" text-anchor=\"end\" font-size=\"11\">" + fmt("%.3g", fy) + "</text>\n";
  }
  return s;
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
  // Left: speedup against ranks, with the ideal (linear) line.
  const ScalingRow& base = report.rows.front();
  double max_ranks = base.ranks, max_speedup = 1;
  for (const ScalingRow& row : report.rows) {
    max_ranks = std::max<double>(max_ranks, row.ranks);
    max_speedup = std::max({max_speedup, row.speedup, static_cast<double>(row.ranks) / base.ranks});
  }
  const Panel sp{70, 40, 340, 320, static_cast<double>(base.ranks), max_ranks, 0, max_speedup};
  s += axes(sp, std::string(scaling_kind_name(report.kind)) + " scaling: speedup", "ranks",
            "speedup over " + std::to_string(base.ranks) + " rank(s)");
  s += polyline(sp, {static_cast<double>(base.ranks), max_ranks}, {1, max_ranks / base.ranks},
                "#999", "stroke-dasharray=\"6,4\" ");
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
  // Right: every run's loss per step.
  double smax = 1, lmin = 1e300, lmax = -1e300;
  for (const RunSeries& r : runs) {
    for (size_t i = 0; i < r.loss.size(); ++i) {
      smax = std::max<double>(smax, static_cast<double>(r.steps[i]));
      lmin = std::min(lmin, r.loss[i]);
      lmax = std::max(lmax, r.loss[i]);
    }
  }
  if (lmin > lmax) lmin = 0, lmax = 1;
  const Panel lp{560, 40, 340, 320, 1, smax, lmin, lmax};
  s += axes(lp, "loss curves", "step", "loss");
  for (size_t k = 0; k < runs.size(); ++k) {
    const RunSeries& r = runs[k];
    std::vector<double> steps(r.steps.begin(), r.steps.end());
    const std::string color = kColors[k % std::size(kColors)];
    s += polyline(lp, steps, r.loss, color, k ? "stroke-dasharray=\"" + std::to_string(2 + 2 * k) + ",3\" " : "");
    s += "<text x=\"" + fmt("%.1f", lp.x0 + lp.w - 6) + "\" y=\"" + fmt("%.1f", lp.y0 + 18 + 16.0 * k) +
         "\" text-anchor=\"end\" fill=\"" + color + "\">" + escape(r.name) + " (" +
         std::to_string(r.ranks) + " rank" + (r.ranks > 1 ? "s" : "") + ")</text>\n";
  }
  return s + "</svg>\n";
}

}  // namespace partrain::planner
