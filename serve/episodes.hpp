// OpenEnv-shaped episodes for `kiln serve` (POST /reset, POST /step, GET /state, GET /schema):
// reset resolves the reference and answers the prompt Kiln's LLM policies are given; each step is
// one evaluation on the job board, answered with Kiln's feedback, the reward by its tiers and
// done. A session belongs to the token that opened it and expires when idle.
//   /reset --reference, prompt--> episode --/step: job_board.submit--> feedback, reward, done
#pragma once

#include "serve/evaluator.hpp"
#include "serve/http_server.hpp"
#include "serve/job_board.hpp"
#include "serve/tokens.hpp"
#include "skills/backend_kind.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace kiln {

struct episode_options {
  int max_turns = 4;       // a reset may ask for fewer or more (1-64)
  int max_sessions = 4096; // open sessions, all tokens together; past it /reset answers 429
  double ttl_s = 3600;     // idle seconds before a session is dropped
};

class episodes {
public:
  episodes(episode_options opts, job_board& board, evaluator& eval, backend_kind backend);
  ~episodes(); // stop()
  // Joins the threads that resolve references for /reset (one may be in an import); resets not
  // begun are dropped. Idempotent.
  void stop();
  episodes(const episodes&) = delete;
  episodes& operator=(const episodes&) = delete;

  void reset(const std::string& body, const token_entry& who, respond_fn respond);
  void step(const std::string& body, const token_entry& who, respond_fn respond);
  http_response state(const std::string& episode_id, const token_entry& who);
  void close(const std::string& episode_id, const token_entry& who); // a WebSocket's end
  static http_response schema();
  int open_sessions();

private:
  struct session {
    std::string owner, reference_code, backend, task, answer_format;
    int max_turns = 4, turns = 0;
    bool stepping = false;
    std::vector<double> rewards;
    double last_active = 0;
  };
  void expire_locked(double now);
  void side_work();

  episode_options opts_;
  job_board& board_;
  evaluator& eval_;
  backend_kind backend_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, session> sessions_;
  // Resets between admission and their session, by token name (under mu_).
  std::map<std::string, int> resolving_;
  int resolving_locked() const; // all tokens'
  void resolved_locked(const std::string& owner);
  std::deque<std::function<void()>> side_; // reference resolution (an import takes seconds)
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

} // namespace kiln
