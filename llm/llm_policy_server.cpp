#include "llm/llm_policy_server.hpp"

#include "actors/messages.hpp"
#include "channels/channel_guard.hpp"
#include "data/utf8.hpp"
#include "learner/weights.hpp"
#include "llm/chat_api.hpp"
#include "llm/http_client.hpp"
#include "llm/prompt.hpp"
#include "llm/token_api.hpp"
#include "submission/submission_kind.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <chrono>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

namespace kiln {

namespace {

using llm_answer_atom = caf::atom_constant<caf::atom("llm_ans")>;
using version_poll_atom = caf::atom_constant<caf::atom("ver_poll")>;

// The requests of one turn. chat: one chat completion. vllm / sglang: the first turn tokenizes
// the prompt, a later turn tokenizes the conversation through the answer and with the outcome
// (context_extension), then the completion runs on the exact context of token ids.
enum stage : int32_t { chat_stage, tokenize_prompt, tokenize_through, tokenize_next, complete };

// The system message is the same for every conversation: serialized once, in the state.
struct conversation {
  std::vector<chat_message> turns; // after the system message: task, answer, outcome, ...
  std::string turns_json;          // the same as JSON array elements, each serialized once
  std::vector<size_t> turns_json_end;
  size_t asked_from = 0;        // this turn's new messages start here (in turns)
  std::vector<int32_t> context; // token apis: the context so far, the model's ids as generated
  std::vector<int32_t> through; // the template's rendering through the last answer
  std::vector<int32_t> prefix;  // this turn's context tokens before the answer
  int64_t version = 0;          // the served version when the turn was asked
  bool answer_stopped = false;  // the last answer ended on a stop token, not at max_tokens
  bool waiting = false;
  caf::typed_response_promise<gen_reply> promise;
  std::chrono::steady_clock::time_point asked;
};

// The version announcements' SUB, its guard and context, closed in that order.
struct version_channel {
  std::unique_ptr<zmq::context_t> ctx;
  std::unique_ptr<channel_guard> guard;
  std::unique_ptr<zmq::socket_t> sub;
  ~version_channel() {
    sub.reset();
    guard.reset();
    ctx.reset();
  }
};

struct llm_state {
  llm_policy_config cfg;
  chat_options chat;
  bool token_ids = false; // vllm / sglang
  std::string system_prompt, system_json;
  std::unique_ptr<http_client> client; // destroyed first: its thread stops before the rest
  std::map<uint64_t, conversation> seqs;
  int64_t answers = 0, malformed = 0, no_block = 0, tokenizations = 0;
  int64_t version = 0, announcements = 0, bad_announcements = 0;
  std::vector<caf::actor> subscribers;
  std::shared_ptr<version_channel> versions;
  zmq::socket_t* sub = nullptr; // the trainer's version announcements (versions->sub)
  static inline const char* name = "kiln.llm_policy_server";
  ~llm_state() {
    client.reset();
    versions.reset();
  }
};
using llm_actor = caf::stateful_actor<llm_state>;

void post(llm_actor* self, uint64_t seq, stage s, std::string path, std::string body) {
  auto addr = self->address();
  self->state.client->post(std::move(path), std::move(body), [addr, seq, s](http_response h) {
    auto me = caf::actor_cast<caf::actor>(addr);
    if (!me) return;
    llm_answer a;
    a.seq_id = seq;
    a.stage = s;
    a.status = h.status;
    a.body = std::move(h.body);
    a.error = std::move(h.error);
    a.attempts = h.attempts;
    a.ms = h.ms;
    caf::anon_send(me, llm_answer_atom::value, std::move(a));
  }, std::to_string(seq)); // the episode's id, as its trajectory's
}

void post_completion(llm_actor* self, uint64_t seq, conversation& c) {
  auto& st = self->state;
  if (st.cfg.api == "sglang")
    post(self, seq, complete, "/generate", generate_request_json(st.chat, c.context));
  else
    post(self, seq, complete, "/v1/completions", completion_request_json(st.chat, c.context));
}

void add_turn(conversation& c, chat_message m) {
  if (!c.turns_json.empty()) c.turns_json += ',';
  c.turns_json += message_json(m);
  c.turns_json_end.push_back(c.turns_json.size());
  c.turns.push_back(std::move(m));
}

// The conversation's first `n` turn messages after the system message, as a JSON array.
std::string messages_array(const llm_state& st, const conversation& c, size_t n) {
  std::string out = "[" + st.system_json;
  if (n > 0) out.append(",").append(c.turns_json, 0, c.turns_json_end[n - 1]);
  return out + "]";
}

void post_tokenize(llm_actor* self, uint64_t seq, stage s, const conversation& c, size_t n,
                   bool generation_prompt) {
  auto& st = self->state;
  ++st.tokenizations;
  post(self, seq, s, "/tokenize",
       tokenize_request_json(st.chat.model, messages_array(st, c, n), generation_prompt));
}

// The turn's answer, from either wire format, as the episode takes it.
void deliver(llm_actor* self, conversation& c, std::string text, const std::string& finish,
             const token_answer* tokens) {
  auto& st = self->state;
  st.answers++;
  c.waiting = false;
  gen_reply rep;
  rep.text_policy = true;
  rep.complete = true;
  rep.policy_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c.asked).count();
  if (c.asked_from == 0) rep.asked.push_back({"system", st.system_prompt});
  for (size_t i = c.asked_from; i < c.turns.size(); ++i)
    rep.asked.push_back({c.turns[i].role, c.turns[i].content});
  rep.version = c.version;
  rep.model = st.cfg.model;
  rep.api = st.cfg.api;
  if (tokens) {
    std::vector<int32_t> versions(tokens->ids.size(), static_cast<int32_t>(c.version));
    rep.pack(tokens->ids, tokens->logprobs, versions);
    rep.prefix = std::move(c.prefix);
    rep.prompt_tokens = tokens->prompt_tokens;
    rep.completion_tokens = tokens->completion_tokens;
    c.context.insert(c.context.end(), tokens->ids.begin(), tokens->ids.end());
    c.answer_stopped = finish == "stop";
  }
  c.prefix.clear();
  bool kernelbench = st.cfg.answer_format == llm_answer_format::kernelbench;
  rep.answer_format = to_string(st.cfg.answer_format);
  auto code = last_code_block(text, kernelbench ? "python" : nullptr);
  if (code) {
    const auto& kind =
        kernelbench ? info(submission_kind::kernelbench) : default_source_kind(st.cfg.backend);
    rep.submission = as_submission(kind, *code);
  } else {
    st.no_block++;
    rep.failure =
        code.message() + (finish == "length" ? " (the answer was cut at max_tokens)" : "");
  }
  add_turn(c, {"assistant", text});
  rep.text = std::move(text);
  c.promise.deliver(std::move(rep));
}

void on_answer(llm_actor* self, const llm_answer& a) {
  auto& st = self->state;
  auto it = st.seqs.find(a.seq_id);
  if (it == st.seqs.end() || !it->second.waiting) return; // released meanwhile
  auto& c = it->second;
  auto fail = [&](const std::string& why) {
    c.waiting = false;
    c.prefix.clear();
    c.promise.deliver(caf::make_error(caf::sec::runtime_error, "llm endpoint: " + why));
  };
  if (!a.error.empty()) {
    std::string body = utf8_head(utf8_valid(a.body.substr(0, 300)), 300);
    return fail(a.error + (body.empty() ? "" : ": " + body));
  }
  auto tokenized = [&](const char* what) -> std::optional<std::vector<int32_t>> {
    auto ids = parse_tokenize_answer(a.body);
    if (!ids) {
      st.malformed++;
      fail(std::string("/tokenize (") + what + "): " + ids.message());
      return std::nullopt;
    }
    return std::move(*ids);
  };
  switch (static_cast<stage>(a.stage)) {
  case chat_stage: {
    auto parsed = parse_chat_answer(a.body);
    if (!parsed) {
      st.malformed++;
      return fail(parsed.message());
    }
    c.prefix.clear();
    return deliver(self, c, std::move(parsed->content), parsed->finish_reason, nullptr);
  }
  case tokenize_prompt: {
    auto ids = tokenized("the prompt");
    if (!ids) return;
    c.prefix = *ids;
    c.context = std::move(*ids);
    return post_completion(self, a.seq_id, c);
  }
  case tokenize_through: {
    auto ids = tokenized("the conversation through the answer");
    if (!ids) return;
    c.through = std::move(*ids);
    return post_tokenize(self, a.seq_id, tokenize_next, c, c.turns.size(), true);
  }
  case tokenize_next: {
    auto ids = tokenized("the conversation with the outcome");
    if (!ids) return;
    auto ext = context_extension(c.context, c.through, *ids, c.answer_stopped);
    c.through.clear();
    if (!ext) return fail(ext.message());
    c.prefix = *ext;
    c.context.insert(c.context.end(), ext->begin(), ext->end());
    return post_completion(self, a.seq_id, c);
  }
  case complete: {
    auto parsed =
        st.cfg.api == "sglang" ? parse_generate_answer(a.body) : parse_completion_answer(a.body);
    if (!parsed) {
      st.malformed++;
      return fail(parsed.message());
    }
    std::string text = parsed->text;
    std::string finish = parsed->finish_reason;
    return deliver(self, c, std::move(text), finish, &*parsed);
  }
  }
  fail("an answer to an unknown request stage " + std::to_string(a.stage));
}

// The newest announcement on the version channel (non-blocking; the socket conflates).
void poll_versions(llm_actor* self) {
  auto& st = self->state;
  zmq::message_t msg;
  bool changed = false;
  try {
    while (st.sub->recv(msg, zmq::recv_flags::dontwait)) {
      auto w = decode_weight_message(static_cast<const char*>(msg.data()), msg.size());
      // Versions ride in int32 token arrays (trajectory `versions`): larger ones would wrap.
      if (!w || w->version < 0 || w->version > std::numeric_limits<int32_t>::max()) {
        if (st.bad_announcements++ == 0)
          spdlog::warn("llm: a version announcement of {} bytes is not a weights-channel frame "
                       "(\"KLNW\", int64 version in [0, 2^31)): ignored, counted",
                       msg.size());
        continue;
      }
      ++st.announcements;
      if (w->version > st.version) st.version = w->version, changed = true;
    }
  } catch (const zmq::error_t& e) {
    spdlog::warn("llm: version channel: {}", e.what());
  }
  if (changed)
    for (auto& s : st.subscribers) self->send(s, version_atom::value, st.version);
}

caf::behavior llm_server(llm_actor* self, llm_policy_config cfg,
                         std::shared_ptr<version_channel> versions) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.token_ids = st.cfg.api != "chat";
  st.chat.model = st.cfg.model;
  st.chat.max_tokens = st.cfg.max_tokens;
  st.chat.temperature = st.cfg.temperature;
  st.system_prompt = llm_system_prompt(st.cfg.backend, st.cfg.answer_format);
  st.system_json = message_json({"system", st.system_prompt});
  st.versions = std::move(versions);
  st.sub = st.versions ? st.versions->sub.get() : nullptr;
  http_client_options ho;
  ho.endpoints = st.cfg.endpoints;
  ho.max_in_flight = st.cfg.max_in_flight;
  ho.timeout_s = st.cfg.timeout_s;
  ho.max_attempts = st.cfg.max_attempts;
  ho.backoff_s = st.cfg.backoff_s;
  ho.bearer_token = st.cfg.bearer_token;
  st.client = std::make_unique<http_client>(std::move(ho));
  if (st.sub) self->send(self, version_poll_atom::value);
  return {
      [=](generate_atom, gen_request& r) -> caf::result<gen_reply> {
        auto& st = self->state;
        if (!r.task)
          return caf::make_error(caf::sec::invalid_argument, "llm: request without task");
        auto& c = st.seqs[r.seq_id];
        if (c.waiting)
          return caf::make_error(caf::sec::invalid_argument, "llm: the sequence is already asking");
        bool first = c.turns.empty();
        c.asked_from = c.turns.size();
        if (first)
          add_turn(c, {"user", llm_task_prompt(r.task->spec, st.cfg.backend, st.cfg.answer_format,
                                               r.task->eager_ms, r.task->compile_ms)});
        else
          add_turn(c, {"user", r.observation.empty() ? "Answer with the whole program again."
                                                     : r.observation});
        c.waiting = true;
        c.asked = std::chrono::steady_clock::now();
        c.version = st.version;
        c.promise = self->make_response_promise<gen_reply>();
        if (!st.token_ids)
          post(self, r.seq_id, chat_stage, "/v1/chat/completions",
               chat_request_json(st.chat, messages_array(st, c, c.turns.size())));
        else if (first)
          post_tokenize(self, r.seq_id, tokenize_prompt, c, c.turns.size(), true);
        else // the conversation through the answer: the messages before this turn's
          post_tokenize(self, r.seq_id, tokenize_through, c, c.turns.size() - 1, false);
        return c.promise;
      },
      [=](llm_answer_atom, const llm_answer& a) { on_answer(self, a); },
      [=](release_atom, uint64_t seq) { self->state.seqs.erase(seq); },
      [=](version_atom) -> int64_t { return self->state.version; },
      [=](subscribe_atom, const caf::actor& a) {
        self->state.subscribers.push_back(a);
        self->send(a, version_atom::value, self->state.version);
      },
      [=](version_poll_atom) {
        poll_versions(self);
        self->delayed_send(self, std::chrono::milliseconds(20), version_poll_atom::value);
      },
      [=](server_stats_atom) -> std::string {
        auto& st = self->state;
        auto s = st.client->stats();
        nlohmann::json j{{"requests", s.requests},
                         {"completed", s.completed},
                         {"failed", s.failed},
                         {"retries", s.retries},
                         {"in_flight", s.in_flight},
                         {"queued", s.queued},
                         {"answers", st.answers},
                         {"malformed", st.malformed},
                         {"no_code_block", st.no_block},
                         {"tokenizations", st.tokenizations},
                         {"version", st.version},
                         {"announcements", st.announcements},
                         {"bad_announcements", st.bad_announcements},
                         {"conversations", st.seqs.size()}};
        return j.dump();
      },
  };
}

} // namespace

expected<caf::actor> spawn_llm_policy_server(caf::actor_system& sys, llm_policy_config cfg) {
  if (cfg.api != "chat" && cfg.api != "vllm" && cfg.api != "sglang")
    return error{"llm api '" + cfg.api + "': expected chat, vllm or sglang"};
  if (cfg.endpoints.empty()) return error{"llm: no endpoint"};
  std::shared_ptr<version_channel> versions;
  if (!cfg.version_endpoint.empty()) {
    versions = std::make_shared<version_channel>();
    versions->ctx = std::make_unique<zmq::context_t>(1);
    auto g = channel_guard::create(*versions->ctx, cfg.curve, "llm version SUB");
    if (!g) return error{"llm version_endpoint: " + g.message()};
    versions->guard = std::move(*g);
    try {
      versions->sub = std::make_unique<zmq::socket_t>(*versions->ctx, zmq::socket_type::sub);
      auto& sub = *versions->sub;
      sub.set(zmq::sockopt::conflate, 1); // only the newest announcement matters
      sub.set(zmq::sockopt::linger, 0);
      sub.set(zmq::sockopt::subscribe, "");
      if (auto st = versions->guard->secure(sub, cfg.version_endpoint, false); !st)
        return error{"llm version_endpoint: " + st.message()};
      sub.connect(cfg.version_endpoint);
    } catch (const zmq::error_t& e) {
      return error{"llm version_endpoint '" + cfg.version_endpoint + "': " + e.what()};
    }
  }
  return sys.spawn(llm_server, std::move(cfg), std::move(versions));
}

} // namespace kiln
