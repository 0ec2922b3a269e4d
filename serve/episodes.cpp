#include "serve/episodes.hpp"

#ifdef KILN_HAVE_LLM
#include "llm/chat_api.hpp"
#include "llm/prompt.hpp"
#endif

#include <cctype>
#include <cmath>
#include <cstdio>
#include <random>

namespace kiln {

using json = nlohmann::json;

namespace {

http_response answer(int status, const json& body) {
  return http_response{status, body.dump(-1, ' ', false, utf8_replace), "application/json", {}};
}

http_response problem(int status, const std::string& detail) {
  return answer(status, json{{"detail", detail}});
}

std::string new_episode_id() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  char b[24];
  std::snprintf(b, sizeof b, "ep-%016llx", static_cast<unsigned long long>(rng()));
  return b;
}

bool usable_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      return false;
  return true;
}

} // namespace

episodes::episodes(episode_options opts, job_board& board, evaluator& eval, backend_kind backend)
    : opts_(opts), board_(board), eval_(eval), backend_(backend) {
  for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { side_work(); });
}

void episodes::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    side_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

episodes::~episodes() { stop(); }

void episodes::side_work() {
  for (;;) {
    std::function<void()> f;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !side_.empty(); });
      if (stopping_) return;
      f = std::move(side_.front());
      side_.pop_front();
    }
    f();
  }
}

void episodes::expire_locked(double now) {
  for (auto it = sessions_.begin(); it != sessions_.end();)
    if (!it->second.stepping && now - it->second.last_active > opts_.ttl_s)
      it = sessions_.erase(it);
    else
      ++it;
}

int episodes::open_sessions() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(sessions_.size());
}

void episodes::reset(const std::string& body_text, const token_entry& who, respond_fn respond) {
  auto body = body_text.empty() ? json::object() : json::parse(body_text, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return respond(problem(422, "the body must be a JSON object"));
  auto str = [&](const char* k, const std::string& dflt) {
    return body.contains(k) && body[k].is_string() ? body[k].get<std::string>() : dflt;
  };
  session s;
  s.owner = who.name;
  s.reference_code = str("reference_code", "");
  if (s.reference_code.find_first_not_of(" \t\r\n") == std::string::npos ||
      s.reference_code.size() > 100000)
    return respond(problem(422, "'reference_code' (a served task's name or a KernelBench problem "
                                "source, under 100,000 characters) is required"));
  s.backend = str("backend", backend_ == backend_kind::cpu ? "cpu" : "cuda");
  s.max_turns = opts_.max_turns;
  if (body.contains("max_turns")) {
    if (!body["max_turns"].is_number_integer() || body["max_turns"].get<int64_t>() < 1 ||
        body["max_turns"].get<int64_t>() > 64)
      return respond(problem(422, "'max_turns' must be an integer in [1, 64]"));
    s.max_turns = body["max_turns"].get<int>();
  }
  std::string id = str("episode_id", "");
  if (!id.empty() && !usable_id(id))
    return respond(problem(422, "'episode_id' must be 1-64 letters, digits, '-', '_' or '.'"));
  if (id.empty()) id = new_episode_id();
  {
    std::lock_guard<std::mutex> lock(mu_);
    expire_locked(epoch_seconds());
    if (sessions_.count(id)) return respond(problem(409, "episode " + id + " is already open"));
    // Resets still resolving their reference count too: a burst of them cannot pass the limit.
    if (static_cast<int>(sessions_.size()) + resolving_locked() >= opts_.max_sessions) {
      auto r = problem(429, "open sessions are at the limit (" +
                                std::to_string(opts_.max_sessions) + ")");
      r.headers.push_back({"Retry-After", "30"});
      return respond(std::move(r));
    }
    auto pending = resolving_.find(who.name);
    int mine = pending == resolving_.end() ? 0 : pending->second;
    for (const auto& [sid, open] : sessions_) mine += open.owner == who.name;
    if (mine >= who.max_sessions) {
      auto r = problem(429, "this token's open sessions are at its limit (max_sessions=" +
                                std::to_string(who.max_sessions) + ")");
      r.headers.push_back({"Retry-After", "30"});
      return respond(std::move(r));
    }
    // Resolving the reference may import a problem (seconds): off the io thread.
    ++resolving_[who.name];
    side_.push_back([this, s, id, respond]() mutable {
      auto t = eval_.resolve_reference(s.reference_code);
      if (!t) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          resolved_locked(s.owner);
        }
        return respond(problem(422, "reference_code: " + t.message()));
      }
      s.task = t->name;
      bool kernelbench = !t->kernelbench_json.empty();
      s.answer_format = kernelbench ? "kernelbench" : "kiln";
      json obs{{"episode_id", id},
               {"task", t->name},
               {"turn", 0},
               {"max_turns", s.max_turns},
               {"answer_format", s.answer_format}};
#ifdef KILN_HAVE_LLM
      auto format = kernelbench ? llm_answer_format::kernelbench : llm_answer_format::kiln;
      obs["system_prompt"] = llm_system_prompt(backend_, format);
      obs["prompt"] = llm_task_prompt(*t, backend_, format, std::nullopt, std::nullopt);
#else
      obs["prompt"] = nullptr; // this build has no LLM prompts (libcurl was not found)
#endif
      s.last_active = epoch_seconds();
      {
        std::lock_guard<std::mutex> lock(mu_);
        resolved_locked(s.owner);
        if (!sessions_.emplace(id, s).second)
          return respond(problem(409, "episode " + id + " is already open"));
      }
      respond(answer(200, json{{"observation", obs}, {"reward", nullptr}, {"done", false}}));
    });
  }
  cv_.notify_one();
}

void episodes::step(const std::string& body_text, const token_entry& who, respond_fn respond) {
  auto body = json::parse(body_text, nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("action") ||
      !body["action"].is_object())
    return respond(problem(422, "the body must be {\"episode_id\": ..., \"action\": {...}}"));
  std::string id = body.contains("episode_id") && body["episode_id"].is_string()
                       ? body["episode_id"].get<std::string>()
                       : "";
  const auto& action = body["action"];
  std::string code;
  if (action.contains("kernel_code") && action["kernel_code"].is_string()) {
    code = action["kernel_code"].get<std::string>();
  } else if (action.contains("answer") && action["answer"].is_string()) {
#ifdef KILN_HAVE_LLM
    auto block = last_code_block(action["answer"].get<std::string>());
    if (!block) return respond(problem(422, "action.answer: " + block.message()));
    code = *block;
#else
    return respond(problem(422, "this build takes action.kernel_code only (no libcurl: no answer "
                                "parsing)"));
#endif
  } else {
    return respond(problem(422, "the action needs 'kernel_code' (the source) or 'answer' (an "
                                "LLM's answer; its last fenced block is taken)"));
  }
  evaluation_request r;
  int turn = 0, max_turns = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    expire_locked(epoch_seconds());
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second.owner != who.name)
      return respond(problem(404, "no open episode '" + id + "' (expired, or never reset)"));
    auto& s = it->second;
    if (s.stepping) return respond(problem(409, "episode " + id + " has a step in flight"));
    if (s.turns >= s.max_turns)
      return respond(problem(409, "episode " + id + " is done (" + std::to_string(s.max_turns) +
                                      " turns); reset for another"));
    s.stepping = true;
    turn = ++s.turns;
    max_turns = s.max_turns;
    r.task_id = id + "-t" + std::to_string(turn);
    r.reference_code = s.reference_code;
    r.backend = s.backend;
    r.kernel_code = code;
    r.force_refresh = true;
    r.priority = who.priority == 2 ? "high" : who.priority == 0 ? "low" : "normal";
  }
  auto done_fn = [this, id, turn, max_turns, respond](const evaluation_result& res) {
    const auto& k = res.metadata.contains("kiln") ? res.metadata["kiln"] : json::object();
    double reward = k.value("reward", -1.0);
    std::string feedback = k.value("feedback", res.error_message);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = sessions_.find(id); it != sessions_.end()) {
        it->second.stepping = false;
        it->second.rewards.push_back(reward);
        it->second.last_active = epoch_seconds();
      }
    }
    json obs{{"episode_id", id},
             {"turn", turn},
             {"max_turns", max_turns},
             {"feedback", feedback},
             {"correct", res.correctness.value_or(false)},
             {"speedup", res.speedup ? json(*res.speedup) : json(nullptr)},
             {"error_code", res.error_code.empty() ? json(nullptr) : json(res.error_code)},
             {"evaluation", to_json(res)}};
    respond(
        answer(200, json{{"observation", obs}, {"reward", reward}, {"done", turn >= max_turns}}));
  };
  // Not taken (a full queue, or the journal refused it): the turn is not spent.
  auto give_back = [this, id](http_response busy, respond_fn& respond) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = sessions_.find(id); it != sessions_.end()) {
        it->second.stepping = false;
        --it->second.turns;
      }
    }
    busy.headers.push_back(
        {"Retry-After", std::to_string(static_cast<int>(std::ceil(board_.retry_after_s())))});
    respond(std::move(busy));
  };
  auto journaled = [give_back, respond](const status& st) mutable {
    if (!st) give_back(problem(503, "the journal refused the step: " + st.message()), respond);
  };
  auto t = board_.submit(r, who.name, who.max_pending, done_fn, journaled);
  if (t.what == job_board::admission::accepted || t.what == job_board::admission::running) return;
  if (t.what == job_board::admission::finished) return; // force_refresh: does not happen
  give_back(problem(429, "the queue or this token's limit is full"), respond);
}

http_response episodes::state(const std::string& id, const token_entry& who) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.owner != who.name)
    return problem(404, "no open episode '" + id + "'");
  const auto& s = it->second;
  double best = -1;
  for (double r : s.rewards) best = std::max(best, r);
  return answer(200, json{{"episode_id", id},
                          {"step_count", s.turns},
                          {"max_turns", s.max_turns},
                          {"task", s.task},
                          {"rewards", s.rewards},
                          {"best_reward", s.rewards.empty() ? json(nullptr) : json(best)},
                          {"done", s.turns >= s.max_turns && !s.stepping}});
}

int episodes::resolving_locked() const {
  int n = 0;
  for (const auto& [owner, k] : resolving_) n += k;
  return n;
}

void episodes::resolved_locked(const std::string& owner) {
  if (auto it = resolving_.find(owner); it != resolving_.end() && --it->second == 0)
    resolving_.erase(it);
}

void episodes::close(const std::string& id, const token_entry& who) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  // A step in flight keeps it until its answer; the idle expiry then takes it.
  if (it != sessions_.end() && it->second.owner == who.name && !it->second.stepping)
    sessions_.erase(it);
}

http_response episodes::schema() {
  json action{{"type", "object"},
              {"title", "KilnAction"},
              {"properties",
               {{"kernel_code", {{"type", "string"}, {"description", "the submission's source"}}},
                {"answer",
                 {{"type", "string"},
                  {"description", "an LLM's answer; its last fenced code block is the source"}}}}}};
  json observation{
      {"type", "object"},
      {"title", "KilnObservation"},
      {"properties",
       {{"episode_id", {{"type", "string"}}},
        {"prompt", {{"type", "string"}, {"description", "reset: the task as an LLM is asked"}}},
        {"system_prompt", {{"type", "string"}}},
        {"feedback",
         {{"type", "string"}, {"description", "step: the outcome as Kiln feeds it back"}}},
        {"turn", {{"type", "integer"}}},
        {"max_turns", {{"type", "integer"}}},
        {"correct", {{"type", "boolean"}}},
        {"speedup", {{"type", {"number", "null"}}}},
        {"error_code", {{"type", {"string", "null"}}}},
        {"evaluation",
         {{"type", "object"}, {"description", "the /evaluate result of the step"}}}}}};
  json state{{"type", "object"},
             {"title", "KilnState"},
             {"properties",
              {{"episode_id", {{"type", "string"}}},
               {"step_count", {{"type", "integer"}, {"minimum", 0}}},
               {"max_turns", {{"type", "integer"}}},
               {"task", {{"type", "string"}}},
               {"rewards", {{"type", "array"}, {"items", {{"type", "number"}}}}},
               {"best_reward", {{"type", {"number", "null"}}}},
               {"done", {{"type", "boolean"}}}}}};
  return answer(200, json{{"action", action}, {"observation", observation}, {"state", state}});
}

} // namespace kiln
