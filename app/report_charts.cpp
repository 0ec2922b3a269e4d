// The report's charts: plain SVG text, sized in fixed pixels so a screenshot reads the same
// everywhere.
#include "app/report_charts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace kiln {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) switch (c) {
    case '<': o += "&lt;"; break;
    case '>': o += "&gt;"; break;
    case '&': o += "&amp;"; break;
    case '"': o += "&quot;"; break;
    default: o += c;
    }
  return o;
}

std::string num(double v, int digits) {
  if (std::fabs(v) < 1e-9) v = 0; // a sum's rounding residue reads as 0, not -7.1e-15
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", digits, v);
  return b;
}

std::string line_chart(const metric_series& s, const std::string& title) {
  const double w = 420, h = 170, l = 58, r = 10, t = 22, b = 26;
  double x0 = s.points.front().first, x1 = x0, y0 = s.points.front().second, y1 = y0;
  for (auto [x, y] : s.points) {
    x0 = std::min(x0, x), x1 = std::max(x1, x);
    y0 = std::min(y0, y), y1 = std::max(y1, y);
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  std::ostringstream o;
  o << "<svg class=\"chart\" viewBox=\"0 0 " << w << " " << h << "\" width=\"" << w
    << "\" height=\"" << h << "\">";
  o << "<text x=\"" << l << "\" y=\"14\" class=\"ct\">" << esc(title.empty() ? s.key : title)
    << "</text>";
  o << "<rect x=\"" << l << "\" y=\"" << t << "\" width=\"" << w - l - r << "\" height=\""
    << h - t - b << "\" class=\"frame\"/>";
  o << "<text x=\"" << l - 4 << "\" y=\"" << t + 8 << "\" class=\"ay\">" << num(y1)
    << "</text><text x=\"" << l - 4 << "\" y=\"" << h - b << "\" class=\"ay\">" << num(y0)
    << "</text>";
  o << "<text x=\"" << l << "\" y=\"" << h - 8 << "\" class=\"ax\">" << num(x0)
    << "</text><text x=\"" << w - r << "\" y=\"" << h - 8 << "\" class=\"ax\" text-anchor=\"end\">"
    << esc(s.x_key) << " " << num(x1) << "</text>";
  o << "<polyline class=\"line\" points=\"";
  for (auto [x, y] : s.points)
    o << num(l + (x - x0) / (x1 - x0) * (w - l - r), 6) << ","
      << num(h - b - (y - y0) / (y1 - y0) * (h - t - b), 6) << " ";
  o << "\"/></svg>";
  return o.str();
}

std::string speedup_histogram(const nlohmann::json& eval, bool vs_compile) {
  using json = nlohmann::json;
  std::vector<int> bins(20, 0);
  int count = 0;
  const json tasks = eval.value("tasks", json::array());
  for (const auto& r : tasks) {
    if (!r.value("correct", false)) continue;
    double sp = r.value("speedup_eager", 0.0);
    if (vs_compile) {
      const double kernel = r.value("kernel_ms", 0.0);
      sp = r.contains("compiled_ms") && r["compiled_ms"].is_number() && kernel > 0
               ? r["compiled_ms"].get<double>() / kernel
               : 0.0;
    }
    if (sp <= 0) continue;
    int bin = static_cast<int>(std::floor((std::log2(sp) + 5) * 2));
    ++bins[std::clamp(bin, 0, 19)];
    ++count;
  }
  if (count == 0) return vs_compile ? std::string() : "<p class=\"note\">no correct tasks</p>";
  int top = *std::max_element(bins.begin(), bins.end());
  const double w = 420, h = 150, l = 10, b = 24, t = 20;
  double bw = (w - 2 * l) / 20;
  std::ostringstream o;
  o << "<svg class=\"chart\" viewBox=\"0 0 " << w << " " << h << "\" width=\"" << w
    << "\" height=\"" << h << "\"><text x=\"" << l << "\" y=\"14\" class=\"ct\">"
    << esc(eval.value("policy", std::string("?"))) << ": speedup vs "
    << (vs_compile ? "torch.compile" : "eager") << ", " << count << " correct tasks</text>";
  for (int i = 0; i < 20; ++i) {
    double bh = (h - t - b) * bins[i] / top;
    bool faster = i >= 10;
    o << "<rect x=\"" << num(l + i * bw + 1, 6) << "\" y=\"" << num(h - b - bh, 6) << "\" width=\""
      << num(bw - 2, 6) << "\" height=\"" << num(bh, 6) << "\" class=\""
      << (faster ? "fast" : "slow") << "\"><title>" << bins[i] << "</title></rect>";
  }
  o << "<line x1=\"" << l + 10 * bw << "\" x2=\"" << l + 10 * bw << "\" y1=\"" << t << "\" y2=\""
    << h - b << "\" class=\"one\"/>";
  o << "<text x=\"" << l << "\" y=\"" << h - 8 << "\" class=\"ax\">1/32x</text><text x=\""
    << l + 10 * bw << "\" y=\"" << h - 8
    << "\" class=\"ax\" text-anchor=\"middle\">1x</text><text x=\"" << w - l << "\" y=\"" << h - 8
    << "\" class=\"ax\" text-anchor=\"end\">32x</text></svg>";
  return o.str();
}

std::string learned_chart(const nlohmann::json& learned) {
  using json = nlohmann::json;
  if (!learned.is_object() || !(learned.contains("train") || learned.contains("held_out")))
    return {};
  static const char* policies[] = {"untrained", "trained", "expert"};
  static const char* classes[] = {"b-untrained", "b-trained", "b-expert"};
  double top = 1;
  int sets = 0;
  std::vector<std::pair<std::string, json>> shown; // training tasks first
  for (const char* set : {"train", "held_out"})
    if (learned.contains(set)) shown.emplace_back(set, learned[set]);
  for (const auto& [set, row] : shown) {
    ++sets;
    for (const char* p : policies)
      top = std::max(top, row.value(p, json::object()).value("speed_vs_expert", 0.0));
  }
  top *= 1.15;
  const double bar = 56, gap = 16, group = 3 * bar + 2 * gap + 40, h = 250, t = 34, b = 48, l = 46;
  const double w = l + group * sets + 10;
  std::ostringstream o;
  o << "<svg class=\"chart\" viewBox=\"0 0 " << w << " " << h << "\" width=\"" << w
    << "\" height=\"" << h << "\"><text x=\"" << l << "\" y=\"16\" class=\"ct\">kernel speed vs "
    << "the expert's (paired geomean; higher is faster)</text>";
  auto y_of = [&](double v) { return h - b - v / top * (h - t - b); };
  o << "<line x1=\"" << l << "\" x2=\"" << w - 10 << "\" y1=\"" << num(y_of(1), 6) << "\" y2=\""
    << num(y_of(1), 6) << "\" class=\"one\"/><text x=\"" << l - 4 << "\" y=\""
    << num(y_of(1) + 3, 6) << "\" class=\"ay\">1x</text>";
  int g = 0;
  for (const auto& [set, row] : shown) {
    double x = l + g * group + 12;
    for (int i = 0; i < 3; ++i) {
      const json r = row.value(policies[i], json::object());
      double v = r.value("speed_vs_expert", 0.0);
      double y = y_of(v);
      o << "<rect x=\"" << num(x + i * (bar + gap), 6) << "\" y=\"" << num(y, 6) << "\" width=\""
        << bar << "\" height=\"" << num(h - b - y, 6) << "\" class=\"" << classes[i] << "\"/>";
      o << "<text x=\"" << num(x + i * (bar + gap) + bar / 2, 6) << "\" y=\"" << num(y - 4, 6)
        << "\" class=\"bv\">" << num(v) << "x</text>";
      o << "<text x=\"" << num(x + i * (bar + gap) + bar / 2, 6) << "\" y=\"" << h - b + 13
        << "\" class=\"bl\">" << policies[i] << "</text>";
      o << "<text x=\"" << num(x + i * (bar + gap) + bar / 2, 6) << "\" y=\"" << h - b + 25
        << "\" class=\"bl\">pass " << num(100 * r.value("pass_rate", 0.0)) << "%</text>";
    }
    o << "<text x=\"" << num(x + 1.5 * bar + gap, 6) << "\" y=\"" << h - 6
      << "\" class=\"ct\" text-anchor=\"middle\">"
      << esc(set == "held_out" ? "held-out tasks" : set + " tasks") << " (" << row.value("tasks", 0)
      << ")</text>";
    ++g;
  }
  o << "</svg>";
  return o.str();
}

} // namespace kiln
