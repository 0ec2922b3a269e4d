#include "serve/problem_import.hpp"

#include "data/task_check.hpp"
#include "data/task_hash.hpp"
#include "data/task_parse.hpp"

#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>

extern char** environ;

namespace kiln {

namespace fs = std::filesystem;

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The importer's reason for a problem it did not write, from its report.
std::string refusal_from_report(const fs::path& report) {
  std::ifstream in(report);
  if (!in) return "the importer wrote no report";
  auto doc = nlohmann::json::parse(in, nullptr, false);
  if (doc.is_discarded() || !doc.contains("problems") || doc["problems"].empty())
    return "the importer's report is unreadable";
  const auto& p = doc["problems"][0];
  std::string why = p.value("status", std::string("rejected"));
  std::string sep = ": ";
  for (const auto& b : p.value("blockers", nlohmann::json::array())) {
    why += sep + b.value("what", std::string()) +
           (b.contains("detail") && b["detail"].is_string()
                ? " (" + b["detail"].get<std::string>() + ")"
                : std::string());
    sep = "; ";
  }
  return why;
}

} // namespace

expected<task> problem_importer::get(const std::string& source) {
  if (!opts_.enabled)
    return error{"a KernelBench problem source is not imported by this server (it would run as "
                 "the server's user, outside the sandbox); name a served task, or start the "
                 "server with --import-references if every caller is trusted"};
  // The length in the key too: a 64-bit hash is no proof, so a hit is also compared byte for
  // byte with the problem file kept beside the task (import()).
  std::string hash = hash_hex(fnv1a(source) ^ (uint64_t{source.size()} << 40));
  std::unique_lock<std::mutex> lock(mu_);
  auto& entry = by_hash_[hash];
  if (entry) {
    auto mine = entry; // the slot outlives its map entry (a failure drops that)
    if (mine->source != source)
      return error{"another problem source has the same hash (" + hash +
                   "); this one is not imported"};
    cv_.wait(lock, [&] { return mine->done; });
    return *mine->result;
  }
  auto mine = entry = std::make_shared<slot>();
  mine->source = source;
  lock.unlock();
  std::shared_ptr<expected<task>> r;
  try {
    r = std::make_shared<expected<task>>(import(source, hash));
  } catch (const std::exception& e) {
    r = std::make_shared<expected<task>>(error{std::string("the import failed: ") + e.what()});
  }
  lock.lock();
  mine->result = r;
  mine->done = true;
  if (!*r) by_hash_.erase(hash); // a failure is tried again by the next request
  cv_.notify_all();
  return *r;
}

expected<task> problem_importer::import(const std::string& source, const std::string& hash) {
  // The file name becomes the task's name (kb_l1_p<hash>): one name per distinct source.
  fs::path dir = fs::path(opts_.state_dir) / "problems" / hash;
  fs::path out = dir / "tasks", report = dir / "import.json", log = dir / "import.log";
  std::error_code ec;
  auto find_task = [&]() -> std::optional<fs::path> {
    for (auto& e : fs::recursive_directory_iterator(out, ec))
      if (e.path().extension() == ".toml") return e.path();
    return std::nullopt;
  };
  fs::path problem = dir / ("p" + hash + ".py");
  if (fs::exists(problem, ec)) {
    std::ifstream in(problem, std::ios::binary);
    std::ostringstream kept;
    kept << in.rdbuf();
    if (kept.str() != source)
      return error{"another problem source has the same hash (" + hash +
                   "); this one is not imported"};
  }
  if (!fs::exists(report, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return error{"cannot create " + dir.string() + ": " + ec.message()};
    std::ofstream(problem, std::ios::binary) << source;
    std::vector<std::string> args = {"/proc/self/exe", "tasks",
                                     "import",         problem.string(),
                                     "--level",        "1",
                                     "--jobs",         "1",
                                     "--out",          out.string(),
                                     "--report",       report.string(),
                                     "--scale-batch",  std::to_string(opts_.scale_batch),
                                     "--timeout",      std::to_string(opts_.timeout_s)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    // Asio's sockets are not close-on-exec: the importer must not hold the listening port.
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    pid_t pid = 0;
    int e = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0) return error{"cannot start the importer: " + std::string(std::strerror(e))};
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!fs::exists(report, ec)) {
      std::ifstream in(log);
      std::ostringstream text;
      text << in.rdbuf();
      auto t = text.str();
      if (t.size() > 600) t = "..." + t.substr(t.size() - 600);
      fs::remove_all(dir, ec); // a failed run is retried by the next request
      return error{"the importer failed (exit " + std::to_string(WEXITSTATUS(st)) + "): " + t};
    }
  }
  auto path = find_task();
  if (!path) return error{"KernelBench problem not imported: " + refusal_from_report(report)};
  auto t = read_task_file(path->string());
  if (!t) return error{"imported task unreadable: " + t.message()};
  if (auto st = check_task(*t); !st) return error{"imported task refused: " + st.message()};
  return *t;
}

} // namespace kiln
