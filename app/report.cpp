// The page is plain HTML with inline SVG: it opens anywhere (a laptop, a CI artifact, headless
// Chromium) and survives being mailed around, which a page loading a charting library does not.
#include "app/report.hpp"

#include "app/report_charts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace kiln {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

expected<json> read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return error{p.string() + ": cannot read"};
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) return error{p.string() + ": not valid JSON"};
  return j;
}

// Every numeric field of every line becomes a point of its series; lines that are not JSON
// objects are counted in the warnings.
void read_metrics(const fs::path& p, report_source& src) {
  std::ifstream in(p);
  std::map<std::string, metric_series> by_key;
  std::string line;
  int64_t n = 0, bad = 0;
  // Learner rows count steps, rollout rows time; a version or episode count is a fallback.
  // Episodes before time: a rollout row has both, and learning reads against episodes.
  static const char* x_keys[] = {"step", "update", "episodes", "t", "elapsed_s", "version"};
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (!j.is_object()) {
      ++bad;
      continue;
    }
    std::string x_key = "line";
    double x = static_cast<double>(n);
    for (const char* k : x_keys)
      if (j.contains(k) && j[k].is_number()) {
        x_key = k;
        x = j[k].get<double>();
        break;
      }
    auto add = [&](const std::string& key, const json& v) {
      if (!v.is_number() || key == x_key) return;
      double y = v.get<double>();
      if (!std::isfinite(y)) return;
      auto& s = by_key[key];
      s.file = p.filename().string();
      s.key = key;
      s.x_key = x_key;
      s.points.emplace_back(x, y);
    };
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it->is_object())
        for (auto jt = it->begin(); jt != it->end(); ++jt) add(it.key() + "." + jt.key(), *jt);
      else
        add(it.key(), *it);
    }
  }
  if (bad > 0)
    src.warnings.push_back(p.filename().string() + ": " + std::to_string(bad) + " of " +
                           std::to_string(n) + " lines are not JSON objects (skipped)");
  // What people look for first: reward, pass rate, throughput, staleness; then the rest.
  auto rank = [](const std::string& k) {
    for (const char* w : {"reward", "pass", "_per_s", "lag", "stale", "loss"})
      if (k.find(w) != std::string::npos) return 0;
    return 1;
  };
  std::vector<metric_series> found;
  for (auto& [k, s] : by_key)
    if (s.points.size() >= 2) found.push_back(std::move(s));
  std::stable_sort(found.begin(), found.end(),
                   [&](const auto& a, const auto& b) { return rank(a.key) < rank(b.key); });
  for (auto& s : found) src.series.push_back(std::move(s));
}

bool is_constant(const metric_series& s) {
  for (const auto& pt : s.points)
    if (pt.second != s.points.front().second) return false;
  return true;
}

json as_eval_array(const json& j) {
  if (j.is_array()) return j;
  if (j.is_object() && j.contains("policy")) return json::array({j});
  return json::array();
}

// A metric as the tables show it: "n/a" stays "n/a"; shares as percentages; ratios with an x.
std::string cell(const json& o, const char* key) {
  if (!o.is_object() || !o.contains(key)) return "-";
  const json& v = o[key];
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_number()) return "-";
  double d = v.get<double>();
  std::string k = key;
  if (k.rfind("geomean", 0) == 0) return num(d) + "x";
  if (k == "tasks") return std::to_string(static_cast<int64_t>(d));
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * d);
  return b;
}

const char* kColumns[] = {"tasks",          "pass_rate",     "fast_1_eager",
                          "fast_1_compile", "geomean_eager", "geomean_compile"};

std::string eval_table(const json& e) {
  std::ostringstream o;
  o << "<table><tr><th>level</th>";
  for (const char* c : kColumns) o << "<th>" << c << "</th>";
  o << "</tr>";
  auto row = [&](const std::string& name, const json& v) {
    o << "<tr><td>" << esc(name) << "</td>";
    for (const char* c : kColumns) o << "<td>" << esc(cell(v, c)) << "</td>";
    o << "</tr>";
  };
  row("all", e.value("overall", json::object()));
  const json levels = e.value("levels", json::object()); // items() must not outlive it
  for (const auto& [lvl, v] : levels.items()) row(lvl, v);
  o << "</table>";
  return o.str();
}

const char* kStyle =
    R"(body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
h3{font-size:15px;margin:18px 0 6px}table{border-collapse:collapse;margin:6px 0 12px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:10px}
.chart{border:1px solid #eee;background:#fff}.frame{fill:none;stroke:#bbb}
.line{fill:none;stroke:#1f6feb;stroke-width:1.6}.ct{font-size:12px;font-weight:600}
.ax,.ay{font-size:10px;fill:#666}.ay{text-anchor:end}.fast{fill:#2da44e}.slow{fill:#d4a72c}
.one{stroke:#555;stroke-dasharray:3 3}.note{color:#777}.warn{color:#b35900}
.b-untrained{fill:#b7bec7}.b-trained{fill:#1f6feb}.b-expert{fill:#8250df}
.bv{font-size:12px;font-weight:600;text-anchor:middle}.bl{font-size:11px;fill:#444;text-anchor:middle}
.headline{font-size:15px;margin:4px 0}.key .chart{border-color:#c8d7f0})";

// An eval entry's policy, with the set it ran on when a run's after-training evaluation made it.
std::string policy_label(const json& e) {
  std::string p = e.value("policy", std::string("?")), set = e.value("suite", std::string());
  return set == "train" || set == "held_out" ? p + " (" + set + ")" : p;
}

// summary.json's "learned" (kiln run, eval.after_training) as rows: set, policy, pass, geomean
// vs eager, paired speed vs the expert and on how many tasks.
std::vector<std::vector<std::string>> learned_rows(const json& summary) {
  std::vector<std::vector<std::string>> rows;
  if (!summary.is_object() || !summary.contains("learned")) return rows;
  for (const auto& [set, v] : summary["learned"].items())
    for (const char* p : {"untrained", "trained", "expert"}) {
      if (!v.contains(p)) continue;
      const json& r = v[p];
      rows.push_back({set, p, num(100 * r.value("pass_rate", 0.0)) + "%",
                      num(r.value("geomean_eager", 0.0)) + "x",
                      num(r.value("speed_vs_expert", 0.0)) + "x",
                      std::to_string(r.value("paired_tasks", 0))});
    }
  return rows;
}

const std::vector<std::string> kLearnedColumns = {
    "set", "policy", "pass", "geomean vs eager", "speed vs expert", "paired tasks"};

// Several runs' "learned" side by side (seeds of one experiment): per run the trained policy's
// paired speed over the expert and both pass rates, per set, then the worst run: "stable over
// seeds" is read off that last row.
const std::vector<std::string> kRunsColumns = {
    "run", "train: trained / expert", "held-out: trained / expert", "train pass (trained / expert)",
    "held-out pass (trained / expert)"};

std::vector<std::vector<std::string>> learned_by_run_rows(const std::vector<report_source>& runs) {
  struct figures { // one set of one run; the worst row keeps the lowest of each, the best expert
    double ratio = 1e300, pass = 1e300, expert_pass = 0;
  };
  auto read = [](const json& learned, const char* set) {
    const json v = learned.value(set, json::object());
    const json trained = v.value("trained", json::object());
    figures f;
    f.ratio = v.value("trained_over_expert", trained.value("speed_vs_expert", 0.0));
    f.pass = trained.value("pass_rate", 0.0);
    f.expert_pass = v.value("expert", json::object()).value("pass_rate", 0.0);
    return f;
  };
  auto pass_cell = [](const figures& f) {
    return num(100 * f.pass) + "% / " + num(100 * f.expert_pass) + "%";
  };
  std::vector<std::vector<std::string>> rows;
  figures worst_train, worst_held;
  for (const auto& s : runs) {
    if (!s.summary.is_object() || !s.summary.contains("learned")) continue;
    const json& l = s.summary["learned"];
    const figures train = read(l, "train"), held = read(l, "held_out");
    auto ratio_cell = [&](const char* set, const figures& f) {
      return l.value(set, json::object()).contains("trained") ? num(f.ratio) + "x" : "n/a";
    };
    rows.push_back({s.label, ratio_cell("train", train), ratio_cell("held_out", held),
                    pass_cell(train), pass_cell(held)});
    for (auto [w, f] : {std::pair<figures*, figures>{&worst_train, train}, {&worst_held, held}}) {
      w->ratio = std::min(w->ratio, f.ratio);
      w->pass = std::min(w->pass, f.pass);
      w->expert_pass = std::max(w->expert_pass, f.expert_pass);
    }
  }
  if (rows.size() < 2) return {};
  rows.push_back({"worst of " + std::to_string(rows.size()), num(worst_train.ratio) + "x",
                  num(worst_held.ratio) + "x", pass_cell(worst_train), pass_cell(worst_held)});
  return rows;
}

// The rollout's "by_turn" (multi-turn runs only): does a revision beat the turn before it?
std::vector<std::vector<std::string>> turn_rows(const json& summary) {
  std::vector<std::vector<std::string>> rows;
  if (!summary.is_object() || !summary.contains("rollout")) return rows;
  const json turns = summary["rollout"].value("by_turn", json::array());
  if (!turns.is_array() || turns.size() < 2) return rows;
  for (const auto& t : turns) {
    bool later = t.contains("mean_gain");
    rows.push_back({std::to_string(t.value("turn", 0)), std::to_string(t.value("episodes", 0)),
                    num(100 * t.value("pass", 0.0)) + "%", num(t.value("mean_reward", 0.0)),
                    later ? num(100 * t.value("better", 0.0)) + "%" : "-",
                    later ? num(100 * t.value("worse", 0.0)) + "%" : "-",
                    later ? num(t.value("mean_gain", 0.0)) : "-"});
  }
  return rows;
}

const std::vector<std::string> kTurnColumns = {
    "turn", "episodes", "pass", "mean reward", "better than the turn before", "worse", "mean gain"};

void html_table(std::ostringstream& o, const std::string& title,
                const std::vector<std::string>& columns,
                const std::vector<std::vector<std::string>>& rows, const std::string& note) {
  o << "<h2>" << esc(title) << "</h2><table><tr>";
  for (const auto& c : columns) o << "<th>" << esc(c) << "</th>";
  o << "</tr>";
  for (const auto& r : rows) {
    o << "<tr>";
    for (const auto& c : r) o << "<td>" << esc(c) << "</td>";
    o << "</tr>";
  }
  o << "</table><p class=\"note\">" << esc(note) << "</p>";
}

void markdown_table(std::ostringstream& o, const std::string& title,
                    const std::vector<std::string>& columns,
                    const std::vector<std::vector<std::string>>& rows) {
  o << "\n" << title << "\n\n|";
  for (const auto& c : columns) o << " " << c << " |";
  o << "\n|";
  for (std::size_t i = 0; i < columns.size(); ++i) o << " --- |";
  o << "\n";
  for (const auto& r : rows) {
    o << "|";
    for (const auto& c : r) o << " " << c << " |";
    o << "\n";
  }
}

} // namespace

expected<report_source> load_report_source(const std::string& path) {
  report_source src;
  fs::path p(path);
  std::error_code ec;
  src.label = p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "summary.json")) {
      auto s = read_json(p / "summary.json");
      if (s)
        src.summary = *s;
      else
        src.warnings.push_back(s.message());
    }
    src.evals = json::array();
    if (fs::exists(p / "eval.json")) {
      auto e = read_json(p / "eval.json");
      if (e)
        src.evals = as_eval_array(*e);
      else
        src.warnings.push_back(e.message());
    }
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(p, ec))
      if (entry.path().extension() == ".jsonl" && entry.path().filename() != "tasks.jsonl")
        files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) read_metrics(f, src);
    if (src.summary.is_null() && src.evals.empty() && src.series.empty())
      return error{path + ": no summary.json, eval.json or metrics *.jsonl here"};
    return src;
  }
  if (!fs::exists(p, ec)) return error{path + ": no such file or directory"};
  if (p.extension() == ".jsonl") {
    read_metrics(p, src);
    if (src.series.empty()) return error{path + ": no numeric series in this JSON Lines file"};
    return src;
  }
  auto j = read_json(p);
  if (!j) return j.err();
  src.evals = as_eval_array(*j);
  if (src.evals.empty()) return error{path + ": not a kiln eval result (no \"policy\" entries)"};
  return src;
}

std::string render_html(const std::vector<report_source>& sources) {
  std::ostringstream o;
  o << "<!doctype html><html><head><meta charset=\"utf-8\"><title>Kiln report</title><style>"
    << kStyle << "</style></head><body><h1>Kiln report</h1>";
  // A run's result first, as a picture: what training bought, then how it got there.
  for (const auto& s : sources) {
    if (!s.summary.is_object() || !s.summary.contains("learned")) continue;
    const json learned = s.summary["learned"];
    o << "<h2>What was learned: " << esc(s.label) << "</h2>";
    for (const char* set : {"train", "held_out"}) {
      const json row = learned.value(set, json::object());
      if (!row.contains("trained_over_untrained")) continue;
      bool held = std::string(set) == "held_out";
      o << "<p class=\"headline\"><b>" << (held ? "held-out" : set)
        << "</b>: the trained model's kernels run <b>"
        << num(row.value("trained_over_untrained", 1.0)) << "x</b> as fast as the "
        << "untrained model's and " << num(row.value("trained_over_expert", 0.0))
        << "x the expert's (paired over " << row.value("trained_over_untrained_tasks", 0)
        << " tasks)" << (held ? ", on tasks no reward ever covered" : "") << ".</p>";
    }
    o << "<div class=\"charts\">" << learned_chart(learned);
    std::string steady;
    for (auto [key, title] :
         {std::pair<const char*, const char*>{"window_reward", "reward (window mean)"},
          {"window_pass_rate", "pass rate (window)"},
          {"window_task_gain", "reward over the task's first group"}})
      for (const auto& m : s.series) {
        if (m.file != "rollout.jsonl" || m.key != key || m.points.size() < 2) continue;
        if (is_constant(m))
          steady += std::string(steady.empty() ? "" : ", ") + title + " " +
                    num(m.points.front().second) + " throughout";
        else
          o << line_chart(m, title);
      }
    o << "</div>";
    if (!steady.empty()) o << "<p class=\"note\">rollout: " << esc(steady) << "</p>";
  }
  // Side by side: the question people open a report with is "which checkpoint is better".
  bool any_eval = false;
  for (const auto& s : sources) any_eval |= !s.evals.empty();
  if (any_eval) {
    o << "<h2>Policies side by side</h2><table><tr><th>source</th><th>policy</th><th>backend</th>";
    for (const char* c : kColumns) o << "<th>" << c << "</th>";
    o << "</tr>";
    for (const auto& s : sources)
      for (const auto& e : s.evals) {
        o << "<tr><td>" << esc(s.label) << "</td><td>" << esc(policy_label(e)) << "</td><td>"
          << esc(e.value("backend", std::string("?"))) << "</td>";
        const json overall = e.value("overall", json::object());
        for (const char* c : kColumns) o << "<td>" << esc(cell(overall, c)) << "</td>";
        o << "</tr>";
      }
    o << "</table>";
  }
  // What training changed: the untrained model, the trained one and the expert on the same tasks.
  if (auto rows = learned_by_run_rows(sources); !rows.empty())
    html_table(o, "What was learned, run by run", kRunsColumns, rows,
               "paired geomean of the expert's kernel time over the trained policy's; the last "
               "row takes each column's worst run (and the best expert pass beside it)");
  for (const auto& s : sources) {
    if (auto rows = learned_rows(s.summary); !rows.empty())
      html_table(o, "What was learned: " + s.label, kLearnedColumns, rows,
                 "greedy programs through the pool; speed vs expert: geomean of the expert's "
                 "kernel time over the policy's, on the tasks both solved");
    if (auto rows = turn_rows(s.summary); !rows.empty())
      html_table(o, "Revisions: " + s.label, kTurnColumns, rows,
                 "each turn's reward against the same episode's turn before it (sampled "
                 "rollout episodes)");
  }
  // Training runs: what each run's rollouts earned (summary.json of `kiln run`).
  bool any_rollout = false;
  for (const auto& s : sources)
    any_rollout |= s.summary.is_object() && s.summary.contains("rollout");
  if (any_rollout) {
    o << "<h2>Training runs</h2><table><tr><th>run</th><th>episodes</th><th>pass</th>"
         "<th>mean reward</th><th>learner version</th><th>seconds</th></tr>";
    for (const auto& s : sources) {
      if (!s.summary.is_object() || !s.summary.contains("rollout")) continue;
      const json r = s.summary["rollout"];
      double turns = r.value("turns", 0.0), correct = r.value("correct_turns", 0.0);
      o << "<tr><td>" << esc(s.label) << "</td><td>" << num(r.value("episodes", 0.0), 6)
        << "</td><td>" << (turns > 0 ? num(100 * correct / turns) + "%" : std::string("-"))
        << "</td><td>" << num(r.value("mean_reward", 0.0)) << "</td><td>"
        << (r.contains("learner_version") ? r["learner_version"].dump() : std::string("-"))
        << "</td><td>" << num(r.value("seconds", 0.0)) << "</td></tr>";
    }
    o << "</table>";
  }
  for (const auto& s : sources) {
    o << "<h2>" << esc(s.label) << "</h2>";
    if (s.summary.is_object()) {
      o << "<p class=\"note\">";
      for (const char* k : {"name", "backend", "tasks", "threads", "config"})
        if (s.summary.contains(k))
          o << esc(k) << ": "
            << esc(s.summary[k].is_string() ? s.summary[k].get<std::string>() : s.summary[k].dump())
            << " &nbsp; ";
      o << "</p>";
    }
    for (const auto& w : s.warnings) o << "<p class=\"warn\">" << esc(w) << "</p>";
    if (!s.series.empty()) {
      o << "<h3>All metrics</h3>";
      std::string file, constants;
      auto close_file = [&] {
        if (file.empty()) return;
        o << "</div>";
        if (!constants.empty()) o << "<p class=\"note\">constant: " << constants << "</p>";
        constants.clear();
      };
      for (const auto& m : s.series) {
        if (m.file != file) {
          close_file();
          file = m.file;
          o << "<p class=\"note\">" << esc(file) << "</p><div class=\"charts\">";
        }
        if (is_constant(m))
          constants +=
              (constants.empty() ? "" : ", ") + esc(m.key) + " = " + num(m.points.front().second);
        else
          o << line_chart(m);
      }
      close_file();
    }
    for (const auto& e : s.evals) {
      o << "<h3>Evaluation: " << esc(e.value("policy", std::string("?"))) << " on "
        << esc(e.value("backend", std::string("?"))) << "</h3>";
      o << eval_table(e) << "<div class=\"charts\">" << speedup_histogram(e, false)
        << speedup_histogram(e, true) << "</div>";
    }
  }
  o << "</body></html>\n";
  return o.str();
}

std::string render_markdown(const std::vector<report_source>& sources) {
  std::ostringstream o;
  o << "| source | policy | backend | level |";
  for (const char* c : kColumns) o << " " << c << " |";
  o << "\n| --- | --- | --- | --- |";
  for (std::size_t i = 0; i < std::size(kColumns); ++i) o << " --- |";
  o << "\n";
  for (const auto& s : sources)
    for (const auto& e : s.evals) {
      auto row = [&](const std::string& level, const json& v) {
        o << "| " << s.label << " | " << policy_label(e) << " | "
          << e.value("backend", std::string("?")) << " | " << level << " |";
        for (const char* c : kColumns) o << " " << cell(v, c) << " |";
        o << "\n";
      };
      row("all", e.value("overall", json::object()));
      const json levels = e.value("levels", json::object());
      for (const auto& [lvl, v] : levels.items()) row(lvl, v);
    }
  if (auto rows = learned_by_run_rows(sources); !rows.empty())
    markdown_table(o, "what was learned, run by run", kRunsColumns, rows);
  for (const auto& s : sources) {
    if (auto rows = learned_rows(s.summary); !rows.empty())
      markdown_table(o, "what was learned (" + s.label + ")", kLearnedColumns, rows);
    if (auto rows = turn_rows(s.summary); !rows.empty())
      markdown_table(o, "revisions (" + s.label + ")", kTurnColumns, rows);
  }
  for (const auto& s : sources)
    for (const auto& m : s.series)
      if (m.key == "reward" || m.key == "pass_rate" || m.key == "mean_reward")
        o << "\n"
          << s.label << " " << m.file << " " << m.key << ": " << num(m.points.front().second)
          << " -> " << num(m.points.back().second) << " over " << m.points.size() << " points";
  o << "\n";
  return o.str();
}

} // namespace kiln
