#include "pipeline/render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace partrain::pipeline {
namespace {

bool multiple_of(double x, double unit) {
  const double q = x / unit;
  return std::fabs(q - std::round(q)) < 1e-6;
}

std::string fmt_double(const char* format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

// A palette per compute kind; later chunks are drawn lighter.
const char* fill_for(Kind k, int chunk) {
  static const char* kF[] = {"#4c78a8", "#9ecae9", "#c6dbef", "#deebf7"};
  static const char* kB[] = {"#e45756", "#ff9d98", "#fcbba1", "#fee0d2"};
  static const char* kBi[] = {"#f58518", "#ffbf79", "#fdd0a2", "#feedde"};
  static const char* kW[] = {"#54a24b", "#88d27a", "#c7e9c0", "#e5f5e0"};
  const int i = std::min(chunk, 3);
  switch (k) {
    case Kind::kForward: return kF[i];
    case Kind::kBackward: return kB[i];
    case Kind::kBackwardInput: return kBi[i];
    default: return kW[i];
  }
}

}  // namespace

double column_unit(const Timeline& t) {
  double shortest = 0;
  std::vector<double> points;
  for (const std::vector<Span>& row : t.ranks) {
    for (const Span& sp : row) {
      if (sp.end > sp.start) {
        points.push_back(sp.start);
        points.push_back(sp.end);
        const double d = sp.end - sp.start;
        shortest = shortest == 0 ? d : std::min(shortest, d);
      }
    }
  }
  if (shortest == 0) return 1.0;
  auto divides_all = [&](double unit) {
    return std::all_of(points.begin(), points.end(), [&](double x) { return multiple_of(x, unit); });
  };
  for (int n = static_cast<int>(std::floor(shortest)); n >= 1; --n) {
    if (divides_all(n)) return n;
  }
  for (int d = 2; d <= 64; ++d) {
    if (divides_all(1.0 / d)) return 1.0 / d;
  }
  return shortest;
}

std::string render_ascii(const Schedule& s, const Timeline& t) {
  const double unit = column_unit(t);
  const int v = s.shape.v;
  size_t width = 2;
  for (const std::vector<Action>& row : s.ranks) {
    for (const Action& a : row) {
      if (is_compute(a.kind)) width = std::max(width, short_label(a, v).size() + 1);
    }
  }
  const int columns = static_cast<int>(std::lround(t.makespan / unit));
  const std::vector<InFlight> peak = peak_in_flight(s);
  std::string out;
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    std::string row(static_cast<size_t>(columns) * width, '.');
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      const Span& sp = t.ranks[r][i];
      if (!is_compute(a.kind)) continue;
      const size_t from = static_cast<size_t>(std::lround(sp.start / unit)) * width;
      const size_t to = static_cast<size_t>(std::lround(sp.end / unit)) * width;
      if (to <= from || to > row.size()) continue;
      std::string cell = short_label(a, v);
      cell.resize(to - from - 1, ' ');
      cell += '|';
      row.replace(from, to - from, cell);
    }
    out += "rank " + std::to_string(r) + (r < 10 ? "  |" : " |") + row + "  idle " +
           fmt_double("%.1f%%", 100.0 * t.rank_bubble(static_cast<int>(r))) + ", peak in flight " +
           std::to_string(peak[r].activations) + "\n";
  }
  out += "one column = " + fmt_double("%g", unit) + " time unit" + (unit == 1.0 ? "" : "s") +
         "; F forward, B backward, b backward-input, W weight gradient" +
         (v > 1 ? ", .c chunk c" : "") + ", . idle\n";
  out += "makespan " + fmt_double("%g", t.makespan) + ", bubble fraction " +
         fmt_double("%.4f", t.bubble) + " (" + fmt_double("%.1f%%", 100.0 * t.bubble) + ")\n";
  return out;
}

std::string render_svg(const Schedule& s, const Timeline& t) {
  const double px = 36.0 / std::max(column_unit(t), 1e-9) ;  // pixels per time unit
  const double scale = std::min(px, 4000.0 / std::max(t.makespan, 1e-9));
  const double row_h = 28, left = 64, top = 36;
  const double width = left + t.makespan * scale + 16;
  const double height = top + row_h * static_cast<double>(s.ranks.size()) + 24;
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    fmt_double("%.0f", width) + "\" height=\"" + fmt_double("%.0f", height) +
                    "\" font-family=\"monospace\" font-size=\"11\">\n";
  out += "<title>" + s.name + " pp=" + std::to_string(s.shape.pp) + " m=" +
         std::to_string(s.shape.m) + " v=" + std::to_string(s.shape.v) + "</title>\n";
  out += "<text x=\"4\" y=\"16\">" + s.name + ": pp=" + std::to_string(s.shape.pp) + " m=" +
         std::to_string(s.shape.m) + " v=" + std::to_string(s.shape.v) + ", bubble fraction " +
         fmt_double("%.4f", t.bubble) + "</text>\n";
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const double y = top + row_h * static_cast<double>(r);
    out += "<text x=\"4\" y=\"" + fmt_double("%.1f", y + 17) + "\">rank " + std::to_string(r) +
           "</text>\n";
    out += "<rect x=\"" + fmt_double("%.1f", left) + "\" y=\"" + fmt_double("%.1f", y) +
           "\" width=\"" + fmt_double("%.1f", t.makespan * scale) + "\" height=\"" +
           fmt_double("%.1f", row_h - 4) + "\" fill=\"#f2f2f2\"/>\n";
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      if (!is_compute(a.kind)) continue;
      const Span& sp = t.ranks[r][i];
      const double x = left + sp.start * scale;
      const double w = (sp.end - sp.start) * scale;
      out += "<rect x=\"" + fmt_double("%.1f", x) + "\" y=\"" + fmt_double("%.1f", y) +
             "\" width=\"" + fmt_double("%.1f", w) + "\" height=\"" +
             fmt_double("%.1f", row_h - 4) + "\" fill=\"" + fill_for(a.kind, a.chunk) +
             "\" stroke=\"#ffffff\"><title>" + describe(a) + " " + fmt_double("%g", sp.start) +
             "-" + fmt_double("%g", sp.end) + "</title></rect>\n";
      out += "<text x=\"" + fmt_double("%.1f", x + 3) + "\" y=\"" + fmt_double("%.1f", y + 17) +
             "\">" + short_label(a, s.shape.v) + "</text>\n";
    }
  }
  out += "</svg>\n";
  return out;
}

}  // namespace partrain::pipeline
