#include "serve/service.hpp"

#include <cmath>
#include <memory>
#include <set>
#include <sstream>

namespace kiln {

using json = nlohmann::json;

namespace {

http_response json_response(int status, const json& body) {
  return http_response{status, body.dump(-1, ' ', false, utf8_replace), "application/json", {}};
}

// KernelGYM answers a request it cannot validate with 400 and this shape.
http_response invalid(const std::string& why) {
  auto r = json_response(400, json{{"error", "RequestValidationError"},
                                   {"message", why},
                                   {"error_code", "VALIDATION_ERROR"},
                                   {"task_id", nullptr},
                                   {"timestamp", iso_time_now()}});
  r.headers.push_back({"X-Error-Code", "VALIDATION_ERROR"});
  return r;
}

http_response detail(int status, const std::string& text) {
  return json_response(status, json{{"detail", text}});
}

std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }

// The value of `key` in the target's query ("" when absent); ids need no percent-decoding.
std::string query_value(const std::string& target, const std::string& key) {
  auto q = target.find('?');
  if (q == std::string::npos) return "";
  std::string query = target.substr(q + 1);
  for (size_t at = 0; at <= query.size();) {
    size_t end = query.find('&', at);
    if (end == std::string::npos) end = query.size();
    auto pair = query.substr(at, end - at);
    if (pair.rfind(key + "=", 0) == 0) return pair.substr(key.size() + 1);
    at = end + 1;
  }
  return "";
}

// Capped by what the caller's token allows.
std::string allowed_priority(const std::string& asked, const token_entry& who) {
  static const char* names[] = {"low", "normal", "high"};
  return names[std::min(priority_rank(asked), who.priority)];
}

} // namespace

service::service(job_board& board, episodes& eps, const token_table* tokens, int capacity,
                 service_info info)
    : board_(board), episodes_(eps), tokens_(tokens), capacity_(capacity), info_(std::move(info)) {}

void service::count(const std::string& endpoint, int code) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, code}];
}

void service::observe_latency(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (s <= buckets_[i]) ++latency_counts_[i];
  ++latency_n_;
  latency_sum_ += s;
}

// Without tokens the server is open to whatever reaches loopback, browsers included: a web
// page may post to it, or rebind a name of its own to 127.0.0.1. Browsers cannot send
// application/json across origins without a preflight (never answered here), and a rebound name
// arrives in the Host header.
std::optional<http_response> service::browser_guard(const http_request& req) const {
  if (tokens_) return std::nullopt;
  std::string host = req.host.substr(
      0, req.host.rfind(':') == std::string::npos || req.host.back() == ']' ? req.host.size()
                                                                            : req.host.rfind(':'));
  if (host != "127.0.0.1" && host != "localhost" && host != "[::1]")
    return detail(403, "without --tokens only loopback host names are served (Host: " +
                           req.host.substr(0, 100) + ")");
  return std::nullopt;
}

void service::route(http_request req, respond_fn respond) {
  std::string path = path_of(req.target);
  static const std::set<std::string> known = {"/",        "/health", "/evaluate", "/evaluate/batch",
                                              "/metrics", "/reset",  "/step",     "/state",
                                              "/schema"};
  // Metrics labels from a closed set: a label per unknown path would grow without bound.
  std::string endpoint = path.rfind("/status/", 0) == 0    ? "/status"
                         : path.rfind("/results/", 0) == 0 ? "/results"
                         : known.count(path)               ? path
                                                           : "other";
  respond_fn counted = [this, endpoint, respond](http_response r) {
    count(endpoint, r.status);
    respond(std::move(r));
  };
  if (auto refused = browser_guard(req)) return counted(std::move(*refused));
  if (path == "/health" && req.method == "GET") return counted(health());
  if (req.method == "POST" && req.content_type.rfind("application/json", 0) != 0)
    return counted(detail(415, "POST bodies must be sent as Content-Type: application/json"));
  token_entry who{"", "", 2, capacity_};
  if (tokens_) {
    auto t = tokens_->find(req.authorization);
    if (!t) {
      auto r = detail(401, "a valid 'Authorization: Bearer <token>' header is required");
      r.headers.push_back({"WWW-Authenticate", "Bearer"});
      return counted(std::move(r));
    }
    who = *t;
  }
  bool get = req.method == "GET", post = req.method == "POST";
  if (path == "/" && get)
    return counted(json_response(
        200, json{{"name", "kiln"},
                  {"description", "Kiln's honest kernel evaluation pool (KernelGYM's API)"},
                  {"backend", info_.backend},
                  {"timestamp", iso_time_now()}}));
  if (path == "/evaluate" && post) return evaluate(req, who, counted);
  if (path == "/evaluate/batch" && post) return evaluate_batch(req, who, counted);
  if (endpoint == "/status" && get) return counted(status_of(who, path.substr(8)));
  if (endpoint == "/results" && get) return counted(result_of(who, path.substr(9)));
  if (path == "/metrics" && get) return counted(metrics());
  if (path == "/reset" && post) return episodes_.reset(req.body, who, counted);
  if (path == "/step" && post) return episodes_.step(req.body, who, counted);
  if (path == "/state" && get)
    return counted(episodes_.state(query_value(req.target, "episode_id"), who));
  if (path == "/schema" && get) return counted(episodes::schema());
  if (known.count(path)) return counted(detail(405, "Method Not Allowed"));
  if (endpoint == "/status" || endpoint == "/results")
    return counted(detail(405, "Method Not Allowed"));
  counted(detail(404, "Not Found"));
}

void service::evaluate(const http_request& req, const token_entry& who, respond_fn respond) {
  auto body = json::parse(req.body, nullptr, false);
  if (body.is_discarded()) return respond(invalid("the body is not JSON"));
  auto r = parse_evaluation_request(body);
  if (!r) return respond(invalid(r.message()));
  r->priority = allowed_priority(r->priority, who);
  bool wait = r->wait;
  auto t0 = std::chrono::steady_clock::now();
  job_board::done_fn done;
  if (wait)
    done = [this, respond, t0](const evaluation_result& res) {
      observe_latency(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      respond(json_response(200, to_json(res)));
    };
  // Acknowledged (202) or refused (503) once the journal has it, not before.
  job_board::journaled_fn journaled = [respond, wait, id = r->task_id](const status& st) {
    if (!st) return respond(detail(503, "the journal refused the job: " + st.message()));
    if (!wait) respond(json_response(202, json{{"task_id", id}, {"status", "pending"}}));
  };
  auto t = board_.submit(*r, who.name, who.max_pending, done, journaled);
  switch (t.what) {
  case job_board::admission::accepted: return;
  case job_board::admission::running:
    if (!wait) respond(json_response(202, json{{"task_id", r->task_id}, {"status", "pending"}}));
    return;
  case job_board::admission::finished:
    if (!wait) respond(json_response(200, to_json(*t.result)));
    return;
  case job_board::admission::full:
  case job_board::admission::over_quota: {
    bool full = t.what == job_board::admission::full;
    auto res = json_response(
        429, json{{"detail", full ? "the queue is full (" + std::to_string(capacity_) +
                                        " evaluations accepted and unfinished)"
                                  : "this token has " + std::to_string(who.max_pending) +
                                        " evaluations unfinished, its limit"},
                  {"error_code", "RESOURCE_ERROR"}});
    res.headers.push_back(
        {"Retry-After", std::to_string(static_cast<int>(std::ceil(board_.retry_after_s())))});
    return respond(std::move(res));
  }
  }
}

void service::evaluate_batch(const http_request& req, const token_entry& who, respond_fn respond) {
  auto body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return respond(invalid("the body is not a JSON object"));
  if (!body.contains("tasks") || !body["tasks"].is_array() || body["tasks"].empty() ||
      body["tasks"].size() > 100)
    return respond(invalid("'tasks' must be a list of 1 to 100 evaluation requests"));
  std::string batch_id = body.value("batch_id", std::string());
  std::vector<evaluation_request> reqs;
  for (size_t i = 0; i < body["tasks"].size(); ++i) {
    auto r = parse_evaluation_request(body["tasks"][i]);
    if (!r) return respond(invalid("tasks[" + std::to_string(i) + "]: " + r.message()));
    r->priority = allowed_priority(r->priority, who);
    reqs.push_back(*r);
  }
  // Every accepted evaluation runs side by side; the answer goes when the last is done.
  struct gather {
    std::mutex mu;
    std::vector<json> results;
    size_t left = 0;
    std::string batch_id, submitted_at;
    respond_fn respond;
  };
  auto g = std::make_shared<gather>();
  g->results.resize(reqs.size());
  g->left = reqs.size();
  g->batch_id = batch_id;
  g->submitted_at = iso_time_now();
  g->respond = respond;
  auto settle = [g](size_t i, json result) {
    std::unique_lock<std::mutex> lock(g->mu);
    g->results[i] = std::move(result);
    if (--g->left != 0) return;
    int completed = 0, failed = 0;
    for (const auto& x : g->results) ++(x.value("status", "") == "completed" ? completed : failed);
    json out{{"batch_id", g->batch_id},         {"total_tasks", g->results.size()},
             {"completed_tasks", completed},    {"failed_tasks", failed},
             {"results", g->results},           {"batch_status", "completed"},
             {"submitted_at", g->submitted_at}, {"completed_at", iso_time_now()}};
    lock.unlock();
    g->respond(json_response(200, out));
  };
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].wait = true;
    auto t = board_.submit(reqs[i], who.name, who.max_pending,
                           [settle, i](const evaluation_result& r) { settle(i, to_json(r)); });
    // A job the journal refuses is settled by its on_done, with the journal's error.
    if (t.what == job_board::admission::full || t.what == job_board::admission::over_quota) {
      evaluation_result r;
      r.task_id = reqs[i].task_id;
      r.status = "failed";
      r.error_code = "RESOURCE_ERROR";
      r.error_message = "not accepted: the queue or this token's limit is full; retry after " +
                        std::to_string(static_cast<int>(board_.retry_after_s())) + " s";
      settle(i, to_json(r));
    }
  }
}

http_response service::status_of(const token_entry& who, const std::string& id) {
  auto r = board_.find(who.name, id);
  if (!r) return detail(404, "Task " + id + " not found");
  int pos = r->status == "pending" ? board_.queue_position(who.name, id) : -1;
  return json_response(200, json{{"task_id", id},
                                 {"status", r->status},
                                 {"progress", nullptr},
                                 {"estimated_completion", nullptr},
                                 {"queue_position", pos >= 0 ? json(pos) : json(nullptr)},
                                 {"assigned_device", nullptr}});
}

http_response service::result_of(const token_entry& who, const std::string& id) {
  auto r = board_.find(who.name, id);
  if (!r) return detail(404, "Task " + id + " not found");
  if (r->status == "pending" || r->status == "processing")
    return detail(404, "Task " + id + " has no result yet (" + r->status + ")");
  return json_response(200, to_json(*r));
}

http_response service::health() {
  auto c = board_.counts();
  double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return json_response(200, json{{"status", "healthy"},
                                 {"timestamp", iso_time_now()},
                                 {"backend", info_.backend},
                                 {"queue_status",
                                  {{"pending", c.pending},
                                   {"processing", c.processing},
                                   {"completed", c.completed + c.failed}}},
                                 {"active_tasks", c.processing},
                                 {"total_processed", c.completed + c.failed},
                                 {"uptime", up}});
}

http_response service::metrics() {
  auto c = board_.counts();
  std::ostringstream m;
  m << "# HELP kiln_serve_queue_depth Evaluations accepted and not yet started.\n"
    << "# TYPE kiln_serve_queue_depth gauge\nkiln_serve_queue_depth " << c.pending << "\n"
    << "# HELP kiln_serve_processing Evaluations running now.\n"
    << "# TYPE kiln_serve_processing gauge\nkiln_serve_processing " << c.processing << "\n"
    << "# HELP kiln_serve_evaluations_total Finished evaluations by status.\n"
    << "# TYPE kiln_serve_evaluations_total counter\n"
    << "kiln_serve_evaluations_total{status=\"completed\"} " << c.completed << "\n"
    << "kiln_serve_evaluations_total{status=\"failed\"} " << c.failed << "\n"
    << "# HELP kiln_serve_refused_total Evaluations refused with 429.\n"
    << "# TYPE kiln_serve_refused_total counter\n"
    << "kiln_serve_refused_total{reason=\"queue_full\"} " << c.refused_full << "\n"
    << "kiln_serve_refused_total{reason=\"token_limit\"} " << c.refused_quota << "\n"
    << "# HELP kiln_serve_open_sessions OpenEnv episodes open.\n"
    << "# TYPE kiln_serve_open_sessions gauge\nkiln_serve_open_sessions "
    << episodes_.open_sessions() << "\n";
  {
    std::lock_guard<std::mutex> lock(mu_);
    m << "# HELP kiln_serve_requests_total HTTP requests by endpoint and status code.\n"
      << "# TYPE kiln_serve_requests_total counter\n";
    for (const auto& [k, n] : requests_)
      m << "kiln_serve_requests_total{endpoint=\"" << k.first << "\",code=\"" << k.second << "\"} "
        << n << "\n";
    m << "# HELP kiln_serve_evaluation_seconds Time from request to answer of /evaluate.\n"
      << "# TYPE kiln_serve_evaluation_seconds histogram\n";
    for (size_t i = 0; i < buckets_.size(); ++i)
      m << "kiln_serve_evaluation_seconds_bucket{le=\"" << buckets_[i] << "\"} "
        << latency_counts_[i] << "\n";
    m << "kiln_serve_evaluation_seconds_bucket{le=\"+Inf\"} " << latency_n_ << "\n"
      << "kiln_serve_evaluation_seconds_sum " << latency_sum_ << "\n"
      << "kiln_serve_evaluation_seconds_count " << latency_n_ << "\n";
  }
  if (info_.pool_stats) {
    auto s = json::parse(info_.pool_stats(), nullptr, false);
    if (!s.is_discarded() && s.contains("devices") && s["devices"].is_array()) {
      m << "# HELP kiln_serve_device_busy_share Share of time each device ran jobs.\n"
        << "# TYPE kiln_serve_device_busy_share gauge\n";
      for (size_t i = 0; i < s["devices"].size(); ++i)
        if (s["devices"][i].contains("busy_share") && s["devices"][i]["busy_share"].is_number())
          m << "kiln_serve_device_busy_share{device=\"" << i << "\"} "
            << s["devices"][i]["busy_share"].get<double>() << "\n";
    }
  }
  return http_response{200, m.str(), "text/plain; version=0.0.4", {}};
}

} // namespace kiln

namespace kiln {

struct service::ws_state {
  std::mutex mu;
  std::string episode_id; // this connection's episode; "" before the first reset
  bool resetting = false; // a reset under way: one at a time, so none is orphaned
  token_entry who;
  std::shared_ptr<ws_channel> channel;
};

namespace {

// OpenEnv's error message, its code chosen by the HTTP status the same request would get.
std::string ws_error(const std::string& message, int status) {
  const char* code = status == 422                    ? "VALIDATION_ERROR"
                     : status == 429                  ? "CAPACITY_REACHED"
                     : status == 404 || status == 409 ? "SESSION_ERROR"
                                                      : "EXECUTION_ERROR";
  return json{{"type", "error"}, {"data", {{"message", message}, {"code", code}}}}.dump(
      -1, ' ', false, utf8_replace);
}

std::string ws_detail(const http_response& r) {
  auto body = json::parse(r.body, nullptr, false);
  return !body.is_discarded() && body.is_object() && body.contains("detail") &&
                 body["detail"].is_string()
             ? body["detail"].get<std::string>()
             : r.body;
}

} // namespace

ws_routes service::websocket_routes() {
  ws_routes r;
  r.check = [this](const http_request& req) -> std::optional<http_response> {
    if (path_of(req.target) != "/ws") return detail(404, "Not Found");
    if (auto refused = browser_guard(req)) return refused;
    if (tokens_ && !tokens_->find(req.authorization)) {
      auto refused = detail(401, "a valid 'Authorization: Bearer <token>' header is required");
      refused.headers.push_back({"WWW-Authenticate", "Bearer"});
      return refused;
    }
    count("/ws", 101);
    return std::nullopt;
  };
  r.open = [this](const http_request& req, std::shared_ptr<ws_channel> channel) {
    auto st = std::make_shared<ws_state>();
    st->who = token_entry{"", "", 2, capacity_};
    if (tokens_)
      if (auto t = tokens_->find(req.authorization)) st->who = *t;
    st->channel = std::move(channel); // a cycle through the handler, cut when the socket closes
    ws_handler h;
    h.on_message = [this, st](std::string text) { ws_message(st, text); };
    h.on_close = [this, st] {
      std::string id;
      {
        std::lock_guard<std::mutex> lock(st->mu);
        id = st->episode_id;
        st->channel.reset();
      }
      if (!id.empty()) episodes_.close(id, st->who);
    };
    return h;
  };
  return r;
}

void service::ws_message(const std::shared_ptr<ws_state>& st, const std::string& text) {
  auto send = [st](std::string out) {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->channel) st->channel->send(std::move(out));
  };
  auto m = json::parse(text, nullptr, false);
  if (m.is_discarded() || !m.is_object() || !m.contains("type") || !m["type"].is_string())
    return send(json{
        {"type", "error"},
        {"data",
         {{"message", "a message is {\"type\": ..., \"data\": {...}}"}, {"code", "INVALID_JSON"}}}}
                    .dump(-1, ' ', false, utf8_replace));
  std::string type = m["type"];
  json data = m.contains("data") && m["data"].is_object() ? m["data"] : json::object();
  std::string id;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    id = st->episode_id;
  }
  if (type == "reset") {
    {
      std::lock_guard<std::mutex> lock(st->mu);
      if (st->resetting) {
        st->channel->send(ws_error("a reset is already under way on this connection", 409));
        return;
      }
      st->resetting = true;
    }
    if (!id.empty()) episodes_.close(id, st->who); // one episode at a time per connection
    episodes_.reset(
        data.dump(-1, ' ', false, utf8_replace), st->who, [this, st, send](http_response r) {
          if (r.status != 200) {
            std::lock_guard<std::mutex> lock(st->mu);
            st->resetting = false;
            if (st->channel) st->channel->send(ws_error(ws_detail(r), r.status));
            return;
          }
          auto body = json::parse(r.body);
          std::string opened = body["observation"].value("episode_id", "");
          bool gone;
          {
            std::lock_guard<std::mutex> lock(st->mu);
            st->resetting = false;
            gone = !st->channel;
            if (!gone) st->episode_id = opened;
          }
          if (gone) return episodes_.close(opened, st->who); // the socket closed meanwhile
          send(json{{"type", "observation"}, {"data", body}}.dump(-1, ' ', false, utf8_replace));
        });
  } else if (type == "step") {
    if (id.empty()) return send(ws_error("no episode on this connection: reset first", 409));
    episodes_.step(json{{"episode_id", id}, {"action", data}}.dump(-1, ' ', false, utf8_replace),
                   st->who, [send](http_response r) {
                     if (r.status != 200) return send(ws_error(ws_detail(r), r.status));
                     send(json{{"type", "observation"}, {"data", json::parse(r.body)}}.dump(
                         -1, ' ', false, utf8_replace));
                   });
  } else if (type == "state") {
    auto r = episodes_.state(id, st->who);
    if (r.status != 200) return send(ws_error(ws_detail(r), r.status));
    send(json{{"type", "state"}, {"data", json::parse(r.body)}}.dump(-1, ' ', false, utf8_replace));
  } else if (type == "close") {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->channel) st->channel->close();
  } else {
    send(json{
        {"type", "error"},
        {"data", {{"message", "unknown message type '" + type + "'"}, {"code", "UNKNOWN_TYPE"}}}}
             .dump(-1, ' ', false, utf8_replace));
  }
}

} // namespace kiln
