#include "sandbox/job_cgroup.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace kiln {

namespace {

bool write_text(const std::string& path, const char* text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text, std::strlen(text)) == static_cast<ssize_t>(std::strlen(text));
  close(fd);
  return ok;
}

std::vector<pid_t> procs_of(const std::string& dir) {
  std::vector<pid_t> out;
  std::ifstream in(dir + "/cgroup.procs");
  for (pid_t p; in >> p;) out.push_back(p);
  return out;
}

// Children first: a folder with sub-folders cannot be removed.
void kill_and_remove(const std::string& dir, int& found) {
  if (DIR* d = opendir(dir.c_str())) {
    std::vector<std::string> subs;
    while (dirent* e = readdir(d))
      if (e->d_type == DT_DIR && e->d_name[0] != '.') subs.push_back(dir + "/" + e->d_name);
    closedir(d);
    for (const auto& s : subs) kill_and_remove(s, found);
  }
  auto procs = procs_of(dir);
  found += static_cast<int>(procs.size());
  if (!procs.empty() && !write_text(dir + "/cgroup.kill", "1"))
    for (pid_t p : procs) ::kill(p, SIGKILL); // kernels before 5.14 have no cgroup.kill
  for (int i = 0; i < 500 && !procs_of(dir).empty(); ++i) usleep(1000);
  rmdir(dir.c_str());
}

} // namespace

const std::string& cgroup2_root() {
  static const std::string root = [] {
    std::ifstream in("/proc/self/mountinfo");
    for (std::string line; std::getline(in, line);) {
      // "... <mount point> <options> - cgroup2 cgroup2 rw"
      auto dash = line.find(" - cgroup2 ");
      if (dash == std::string::npos) continue;
      std::istringstream f(line.substr(0, dash));
      std::string id, parent, dev, root_in, mount;
      f >> id >> parent >> dev >> root_in >> mount;
      if (access(mount.c_str(), W_OK) != 0) continue;
      std::string probe = mount + "/kiln-probe-" + std::to_string(getpid());
      if (mkdir(probe.c_str(), 0755) != 0) continue;
      rmdir(probe.c_str());
      return mount;
    }
    return std::string();
  }();
  return root;
}

expected<job_cgroup> job_cgroup::create(const std::string& parent, const std::string& prefix) {
  static std::atomic<uint64_t> counter{0};
  job_cgroup g;
  std::string dir =
      parent + "/" + prefix + std::to_string(getpid()) + "-" + std::to_string(counter++);
  if (mkdir(dir.c_str(), 0755) != 0) return error{"cgroup " + dir + ": " + std::strerror(errno)};
  g.procs_fd_ = open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (g.procs_fd_ < 0) {
    int e = errno;
    rmdir(dir.c_str());
    return error{"cgroup " + dir + "/cgroup.procs: " + std::strerror(e)};
  }
  g.path_ = dir;
  return g;
}

job_cgroup::~job_cgroup() { kill_all(); }

job_cgroup::job_cgroup(job_cgroup&& o) noexcept
    : path_(std::move(o.path_)), procs_fd_(o.procs_fd_) {
  o.path_.clear();
  o.procs_fd_ = -1;
}

job_cgroup& job_cgroup::operator=(job_cgroup&& o) noexcept {
  if (this != &o) {
    kill_all();
    path_ = std::move(o.path_);
    procs_fd_ = o.procs_fd_;
    o.path_.clear();
    o.procs_fd_ = -1;
  }
  return *this;
}

void job_cgroup::delegate(uid_t uid) {
  if (path_.empty()) return;
  for (const char* f :
       {"", "/cgroup.procs", "/cgroup.threads", "/cgroup.subtree_control", "/cgroup.kill"})
    // Best effort: a file left root's fails the executor's own write to it, with that error.
    if (chown((path_ + f).c_str(), uid, uid) != 0) continue;
}

int job_cgroup::count() const {
  return path_.empty() ? 0 : static_cast<int>(procs_of(path_).size());
}

int job_cgroup::kill_all() {
  if (procs_fd_ >= 0) {
    close(procs_fd_);
    procs_fd_ = -1;
  }
  if (path_.empty()) return 0;
  int found = 0;
  kill_and_remove(path_, found);
  path_.clear();
  return found;
}

} // namespace kiln
