#include "data/task_set.hpp"

#include "data/task_parse.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

namespace kiln {

namespace fs = std::filesystem;

namespace {

void add_checked(task_set& out, expected<task> t, const check_limits& limits,
                 std::set<std::string>& names) {
  if (!t) {
    out.errors.push_back(t.err());
    return;
  }
  if (auto st = check_task(*t, limits); !st) {
    out.errors.push_back(st.err());
    return;
  }
  if (!names.insert(t->name).second) {
    out.errors.push_back(error{t->origin + ": task '" + t->name +
                               "': name: already used by another task in the same suite"});
    return;
  }
  out.tasks.push_back(std::move(*t));
}

task_set parse_jsonl_into(const std::string& text, const std::string& origin,
                          const check_limits& limits, std::set<std::string>& names) {
  task_set out;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string at = origin + ":" + std::to_string(lineno);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      out.errors.push_back(error{at + ": JSON syntax error at byte " + std::to_string(e.byte)});
      continue;
    }
    add_checked(out, task_from_json(j, at), limits, names);
  }
  return out;
}

void merge(task_set& into, task_set&& from) {
  for (auto& t : from.tasks) into.tasks.push_back(std::move(t));
  for (auto& e : from.errors) into.errors.push_back(std::move(e));
}

} // namespace

task_set parse_jsonl(const std::string& text, const std::string& origin,
                     const check_limits& limits) {
  std::set<std::string> names;
  return parse_jsonl_into(text, origin, limits, names);
}

task_set load_tasks(const std::vector<std::string>& paths, const check_limits& limits) {
  task_set out;
  std::map<std::string, std::set<std::string>> names_by_dir;
  auto load_file = [&](const fs::path& p) {
    auto ext = p.extension().string();
    if (ext == ".toml") {
      add_checked(out, read_task_file(p.string()), limits, names_by_dir[p.parent_path().string()]);
    } else if (ext == ".jsonl") {
      std::ifstream in(p, std::ios::binary);
      if (!in) {
        out.errors.push_back(error{p.string() + ": cannot open file"});
        return;
      }
      std::ostringstream ss;
      ss << in.rdbuf();
      merge(out, parse_jsonl_into(ss.str(), p.string(), limits, names_by_dir[p.string()]));
    } else {
      out.errors.push_back(error{p.string() + ": not a task file (expected .toml or .jsonl)"});
    }
  };
  for (const auto& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<fs::path> files;
      for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::end(it);
           it.increment(ec)) {
        auto ext = it->path().extension().string();
        if (it->is_regular_file() && (ext == ".toml" || ext == ".jsonl"))
          files.push_back(it->path());
      }
      if (ec) out.errors.push_back(error{path + ": cannot read directory: " + ec.message()});
      std::sort(files.begin(), files.end());
      for (const auto& f : files) load_file(f);
    } else if (fs::exists(path, ec)) {
      load_file(path);
    } else {
      out.errors.push_back(error{path + ": no such file or directory"});
    }
  }
  return out;
}

void shuffle_tasks(std::vector<task>& tasks, uint64_t seed) {
  if (seed == 0) return;
  std::sort(tasks.begin(), tasks.end(),
            [](const task& a, const task& b) { return a.name < b.name; });
  std::mt19937_64 rng(seed);
  for (std::size_t i = tasks.size(); i > 1; --i) // Fisher-Yates: std::shuffle differs by library
    std::swap(tasks[i - 1], tasks[static_cast<std::size_t>(rng() % i)]);
}

} // namespace kiln
