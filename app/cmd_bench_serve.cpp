// kiln bench serve: what `kiln serve` itself costs per request. The service runs in this process
// as `kiln serve` builds it (HTTP front, journal, job board, evaluator) over the null pool (every
// job correct at once), so each figure is Kiln's own: requests/s and latency at 1, 100 and 1,000
// concurrent keep-alive clients, and the memory a queued job holds.
//   clients (one Asio thread) --POST /evaluate--> service --board--> evaluator --> null pool
#include "actors/actor_system_setup.hpp"
#include "actors/messages.hpp"
#include "app/bench_probes.hpp"
#include "app/commands.hpp"
#include "data/task_set.hpp"
#include "pool/device_pool.hpp"
#include "serve/episodes.hpp"
#include "serve/evaluator.hpp"
#include "serve/http_server.hpp"
#include "serve/job_board.hpp"
#include "serve/journal.hpp"
#include "serve/problem_import.hpp"
#include "serve/service.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <malloc.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <thread>

namespace kiln {

namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

// Holds the board's workers before the evaluator while closed: jobs then stay queued.
class gate {
public:
  void set_open(bool open) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = open;
    }
    cv_.notify_all();
  }
  void pass() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
};

struct level_result {
  std::string endpoint;
  int clients = 0;
  double rate = 0; // offered requests/s (paced); 0: closed loop
  int64_t requests = 0, errors = 0;
  double seconds = 0;
  double service_cpu_s = 0; // CPU of every thread but the clients'
  std::vector<double> latency_ms;
  std::string first_error;
};

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// `clients` keep-alive connections on one Asio thread for `seconds`. Closed loop (rate 0): each
// sends its next request when the last is answered. Paced (`rate` requests/s in all): request n
// of a client is due at a fixed time, sent then (or at once when the answer came late), and its
// latency counts from when it was due, so a stall is not hidden by the requests it delayed.
// make_body(client, n) is request n of a client: "" a GET, nullopt the client's end.
using body_fn = std::function<std::optional<std::string>(int, int64_t)>;
class load {
public:
  load(uint16_t port, std::string target, body_fn make_body)
      : port_(port), target_(std::move(target)), make_body_(std::move(make_body)) {}

  level_result run(int clients, double seconds, const std::string& label, double rate = 0) {
    level_result out;
    out.endpoint = label;
    out.clients = clients;
    out.rate = rate;
    // Each client every clients/rate seconds, the clients spread over that interval.
    interval_ = rate > 0 ? std::chrono::duration_cast<clock_type::duration>(
                               std::chrono::duration<double>(clients / rate))
                         : clock_type::duration::zero();
    asio::io_context io;
    std::vector<std::shared_ptr<conn>> conns;
    tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), port_);
    for (int i = 0; i < clients; ++i) {
      auto c = std::make_shared<conn>(io, i);
      boost::system::error_code ec;
      c->socket.connect(ep, ec);
      if (ec) {
        out.first_error = "connect: " + ec.message();
        ++out.errors;
        continue;
      }
      c->socket.set_option(tcp::no_delay(true));
      conns.push_back(c);
    }
    deadline_ = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                        std::chrono::duration<double>(seconds));
    result_ = &out;
    auto t0 = clock_type::now();
    double cpu0 = cpu_seconds(), mine0 = thread_cpu_seconds();
    for (auto& c : conns) {
      c->due = t0 + interval_ * c->index / std::max(1, clients);
      pace(c);
    }
    io.run();
    out.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    // The process's CPU less this (the clients') thread's: what the service spent.
    out.service_cpu_s = (cpu_seconds() - cpu0) - (thread_cpu_seconds() - mine0);
    return out;
  }

private:
  struct conn {
    conn(asio::io_context& io, int i) : socket(io), timer(io), index(i) {}
    tcp::socket socket;
    asio::steady_timer timer;
    int index;
    int64_t sent = 0;
    boost::beast::flat_buffer buffer;
    http::request<http::string_body> req;
    http::response<http::string_body> res;
    clock_type::time_point started, due;
  };

  // Closed loop: now. Paced: when the request is due.
  void pace(const std::shared_ptr<conn>& c) {
    if (interval_ == clock_type::duration::zero() || c->due <= clock_type::now()) return send(c);
    c->timer.expires_at(c->due);
    c->timer.async_wait([this, c](boost::system::error_code ec) {
      if (!ec) send(c);
    });
  }

  void send(const std::shared_ptr<conn>& c) {
    auto next = make_body_(c->index, c->sent++);
    if (!next || clock_type::now() >= deadline_) {
      boost::system::error_code ignored;
      c->socket.shutdown(tcp::socket::shutdown_both, ignored);
      return;
    }
    std::string body = std::move(*next);
    c->req = {};
    c->req.method(body.empty() ? http::verb::get : http::verb::post);
    c->req.target(target_);
    c->req.version(11);
    c->req.set(http::field::host, "127.0.0.1:" + std::to_string(port_));
    c->req.keep_alive(true);
    if (!body.empty()) {
      c->req.set(http::field::content_type, "application/json");
      c->req.body() = std::move(body);
    }
    c->req.prepare_payload();
    c->res = {};
    c->started = interval_ == clock_type::duration::zero() ? clock_type::now() : c->due;
    c->due += interval_;
    http::async_write(c->socket, c->req, [this, c](boost::system::error_code ec, size_t) {
      if (ec) return fail(c, "write: " + ec.message());
      http::async_read(
          c->socket, c->buffer, c->res, [this, c](boost::system::error_code ec, size_t) {
            if (ec) return fail(c, "read: " + ec.message());
            double ms =
                std::chrono::duration<double, std::milli>(clock_type::now() - c->started).count();
            ++result_->requests;
            result_->latency_ms.push_back(ms);
            if (c->res.result_int() / 100 != 2) { // 202: accepted without waiting
              ++result_->errors;
              if (result_->first_error.empty())
                result_->first_error =
                    std::to_string(c->res.result_int()) + " " + c->res.body().substr(0, 200);
            }
            pace(c);
          });
    });
  }

  void fail(const std::shared_ptr<conn>& c, const std::string& what) {
    ++result_->errors;
    if (result_->first_error.empty()) result_->first_error = what;
    boost::system::error_code ignored;
    c->socket.close(ignored);
  }

  uint16_t port_;
  std::string target_;
  body_fn make_body_;
  clock_type::duration interval_{};
  clock_type::time_point deadline_;
  level_result* result_ = nullptr;
};

// A free-form cpu submission the size of a real one (the relu of tests/serve).
std::string relu_submission() {
  return "//! kiln-source cpu\n#include \"kiln_abi.h\"\n#include <stdint.h>\n"
         "struct relu_args { const float* x; float* y; };\n"
         "static void relu_range(void* p, int64_t lo, int64_t hi) {\n"
         "  const relu_args* a = static_cast<const relu_args*>(p);\n"
         "  for (int64_t i = lo; i < hi; ++i) a->y[i] = a->x[i] > 0.0f ? a->x[i] : 0.0f;\n}\n"
         "extern \"C\" int kiln_run(const kiln_host* host, const void* const* inputs,\n"
         "                        const void* const*, void* const* outputs) {\n"
         "  relu_args a{static_cast<const float*>(inputs[0]), static_cast<float*>(outputs[0])};\n"
         "  host->parallel_for(host, int64_t{80} * 16384, 1 << 16, relu_range, &a);\n"
         "  return 0;\n}\n";
}

// Bytes malloc has handed out and not taken back (every arena).
int64_t heap_bytes() {
  auto m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

nlohmann::json level_json(level_result& r) {
  double rps = r.seconds > 0 ? static_cast<double>(r.requests) / r.seconds : 0;
  nlohmann::json j = {
      {"endpoint", r.endpoint},
      {"clients", r.clients},
      {"offered_per_s", r.rate > 0 ? nlohmann::json(r.rate) : nlohmann::json()},
      {"requests", r.requests},
      {"errors", r.errors},
      {"seconds", r.seconds},
      {"requests_per_s", rps},
      {"service_cpu_us_per_request",
       r.requests > 0 ? 1e6 * r.service_cpu_s / static_cast<double>(r.requests) : 0.0},
      {"p50_ms", percentile(r.latency_ms, 0.50)},
      {"p90_ms", percentile(r.latency_ms, 0.90)},
      {"p99_ms", percentile(r.latency_ms, 0.99)},
      {"max_ms", percentile(r.latency_ms, 1.0)}};
  if (!r.first_error.empty()) j["first_error"] = r.first_error;
  return j;
}

} // namespace

int cmd_bench_serve(const common_args& common, const bench_args& args) {
  raise_fd_limit();
  auto set =
      load_tasks(args.suites.empty() ? std::vector<std::string>{"data/suites/level1/cpu/relu.toml"}
                                     : args.suites);
  for (const auto& e : set.errors) spdlog::error("{}", e.message);
  if (set.tasks.empty()) {
    spdlog::error("bench serve: no tasks (--suite)");
    return 2;
  }
  const std::string task_name = set.tasks.front().name;
  auto state =
      std::filesystem::temp_directory_path() / ("kiln-bench-serve-" + std::to_string(::getpid()));
  std::filesystem::remove_all(state);
  std::filesystem::create_directories(state);
  auto jr = journal::open((state / "journal.sqlite").string());
  if (!jr) {
    spdlog::error("bench serve: {}", jr.message());
    return 2;
  }
  const int queue_clients = 100; // the connections that fill the queue
  int max_clients = 1;
  for (int c : args.clients) max_clients = std::max(max_clients, c);

  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg, {common.threads, "sharing", false, common.peer_heartbeat_ms,
                                   common.peer_timeout_ms});
  register_rollout_messages(sys_cfg);
  caf::actor_system sys{sys_cfg};
  pool_handle pool(sys, sys.spawn(null_node_pool, 1), backend_kind::cpu);
  std::unique_ptr<http_server> server; // after the board: the board's waiters answer through it
  problem_importer problems({false, state.string(), 1.0, 60});
  evaluator eval(pool, set.tasks, problems, nullptr);
  gate held;
  job_board_options bo;
  bo.capacity = std::max(args.queued, 2 * max_clients) + 64;
  bo.workers = 2 * (1 + args.compile_workers); // as kiln serve sizes it for one device
  job_board board(bo, **jr, [&](const evaluation_request& r) {
    held.pass();
    return eval.run(r);
  });
  episodes eps({}, board, eval, backend_kind::cpu);
  service svc(board, eps, nullptr, bo.capacity, {"cpu", [&] { return pool.stats(); }});
  http_options ho;
  ho.port = 0;
  ho.max_connections = std::max(max_clients, queue_clients) + 64;
  auto started = http_server::start(
      ho, [&](http_request r, respond_fn done) { svc.route(std::move(r), done); },
      svc.websocket_routes());
  if (!started) {
    spdlog::error("bench serve: {}", started.message());
    return 2;
  }
  server = std::move(*started);
  const uint16_t port = server->port();
  const std::string kernel = relu_submission();
  // Ids are new in every level: an id seen before would be answered from the journal's stored
  // result, not evaluated.
  int level_no = 0;
  auto evaluate_body = [&](bool wait) {
    std::string prefix = "l" + std::to_string(level_no++) + "-c";
    return [&, wait, prefix](int client, int64_t n) -> std::optional<std::string> {
      nlohmann::json b = {{"task_id", prefix + std::to_string(client) + "-" + std::to_string(n) +
                                          (wait ? "" : "-q")},
                          {"reference_code", task_name},
                          {"kernel_code", kernel},
                          {"backend", "cpu"},
                          {"wait", wait}};
      return b.dump();
    };
  };
  if (!args.json)
    std::printf("kiln bench serve: in-process service on 127.0.0.1:%u, null pool, %d board "
                "workers, task %s, submissions of %zu bytes, %.1f s per level\n",
                static_cast<unsigned>(port), bo.workers, task_name.c_str(), kernel.size(),
                args.duration_s);

  nlohmann::json levels = nlohmann::json::array();
  auto report = [&](level_result r) {
    auto j = level_json(r);
    if (!args.json) {
      std::string mode =
          r.rate > 0 ? "paced " + std::to_string(static_cast<int>(r.rate)) + "/s" : "closed loop";
      std::printf("  %-9s %5d clients %-14s %7.0f req/s  p50 %7.3f  p90 %7.3f  p99 %7.3f  "
                  "max %8.3f ms  service CPU %5.0f us/req  errors %lld%s%s\n",
                  r.endpoint.c_str(), r.clients, mode.c_str(), j["requests_per_s"].get<double>(),
                  j["p50_ms"].get<double>(), j["p90_ms"].get<double>(), j["p99_ms"].get<double>(),
                  j["max_ms"].get<double>(), j["service_cpu_us_per_request"].get<double>(),
                  static_cast<long long>(r.errors),
                  r.first_error.empty() ? "" : "  first: ", r.first_error.c_str());
      std::fflush(stdout);
    }
    levels.push_back(j);
  };
  // Warm: the eager baseline is measured once per task, the allocator and journal settle.
  load(port, "/evaluate", evaluate_body(true)).run(4, 0.5, "warm-up");

  // Memory per queued job, first (before the load levels leave freed memory to reuse): the
  // workers held at the gate, `queued` jobs accepted (wait: false) and kept.
  nlohmann::json queued = nullptr;
  if (args.queued > 0) {
    held.set_open(false);
    int64_t rss0 = rss_bytes(), heap0 = heap_bytes();
    int per = (args.queued + queue_clients - 1) / queue_clients;
    int sent = 0;
    auto until = [&](int client, int64_t n) -> std::optional<std::string> {
      if (n >= per || sent >= args.queued) return std::nullopt;
      ++sent;
      return evaluate_body(false)(client, n);
    };
    auto r = load(port, "/evaluate", until)
                 .run(queue_clients, std::max(5.0, args.queued / 1000.0), "queue");
    auto c = board.counts();
    int64_t rss1 = rss_bytes(), heap1 = heap_bytes();
    int held_jobs = c.pending + c.processing;
    auto per_job = [&](int64_t a, int64_t b) {
      return held_jobs > 0 ? static_cast<double>(b - a) / held_jobs : 0.0;
    };
    queued = {{"jobs", held_jobs},
              {"heap_bytes_per_job", per_job(heap0, heap1)},
              {"rss_bytes_per_job", per_job(rss0, rss1)},
              {"submission_bytes", kernel.size()},
              {"errors", r.errors}};
    if (!args.json)
      std::printf("  queued    %d jobs held (%d at the gate): %.0f bytes of heap per queued job "
                  "(RSS %.0f), for a %zu-byte submission\n",
                  held_jobs, c.processing, per_job(heap0, heap1), per_job(rss0, rss1),
                  kernel.size());
    held.set_open(true);
    for (int i = 0; i < 1200; ++i) { // drained, so the levels below start from an empty queue
      auto k = board.counts();
      if (k.pending == 0 && k.processing == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  auto get = [](int, int64_t) -> std::optional<std::string> { return std::string(); };
  for (int c : args.clients) report(load(port, "/health", get).run(c, args.duration_s, "/health"));
  for (int c : args.clients)
    report(load(port, "/evaluate", evaluate_body(true)).run(c, args.duration_s, "/evaluate"));
  // Added latency below saturation: the same clients, offered `rate` requests/s in all.
  if (args.rate > 0)
    for (int c : args.clients)
      report(load(port, "/evaluate", evaluate_body(true))
                 .run(c, args.duration_s, "/evaluate", args.rate));
  server->stop();
  eps.stop();
  board.stop();
  // Group commit: how many writes (an accepted job's add, its result) shared a transaction.
  auto jc = (*jr)->counts();
  if (!args.json)
    std::printf("  journal: %lld writes in %lld commits (%.1f per commit)\n",
                static_cast<long long>(jc.writes), static_cast<long long>(jc.commits),
                static_cast<double>(jc.writes) /
                    static_cast<double>(std::max<int64_t>(1, jc.commits)));
  caf::anon_send_exit(pool.actor(), caf::exit_reason::user_shutdown);
  std::error_code ec;
  std::filesystem::remove_all(state, ec);
  if (args.json)
    std::printf("%s\n",
                nlohmann::json{{"bench", "serve"},
                               {"pool", "null"},
                               {"board_workers", bo.workers},
                               {"threads", common.threads},
                               {"duration_s", args.duration_s},
                               {"rate", args.rate},
                               {"levels", levels},
                               {"queued", queued},
                               {"journal", {{"writes", jc.writes}, {"commits", jc.commits}}}}
                    .dump(1)
                    .c_str());
  return 0;
}

} // namespace kiln
