#include "llm/llm_policy_server.hpp"

#include "actors/messages.hpp"
#include "llm/chat_api.hpp"
#include "llm/http_client.hpp"
#include "llm/prompt.hpp"
#include "skills/source_program.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

namespace kiln {

namespace {

using llm_answer_atom = caf::atom_constant<caf::atom("llm_ans")>;

struct conversation {
  std::vector<chat_message> messages;
  bool waiting = false;
  caf::typed_response_promise<gen_reply> promise;
  std::chrono::steady_clock::time_point asked;
};

struct llm_state {
  llm_policy_config cfg;
  chat_options chat;
  std::string system_prompt;
  std::unique_ptr<http_client> client; // destroyed first: its thread stops before the rest
  std::map<uint64_t, conversation> seqs;
  int64_t answers = 0, malformed = 0, no_block = 0;
  static inline const char* name = "kiln.llm_policy_server";
  ~llm_state() { client.reset(); }
};
using llm_actor = caf::stateful_actor<llm_state>;

void on_answer(llm_actor* self, const llm_answer& a) {
  auto& st = self->state;
  auto it = st.seqs.find(a.seq_id);
  if (it == st.seqs.end() || !it->second.waiting) return; // released meanwhile
  auto& c = it->second;
  c.waiting = false;
  auto fail = [&](const std::string& why) {
    c.promise.deliver(caf::make_error(caf::sec::runtime_error, "llm endpoint: " + why));
  };
  if (!a.error.empty()) {
    std::string body = a.body.substr(0, 300);
    return fail(a.error + (body.empty() ? "" : ": " + body));
  }
  auto parsed = parse_chat_answer(a.body);
  if (!parsed) {
    st.malformed++;
    return fail(parsed.message());
  }
  st.answers++;
  gen_reply rep;
  rep.text_policy = true;
  rep.complete = true;
  rep.policy_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c.asked).count();
  rep.text = parsed->content;
  rep.prompt_tokens = parsed->prompt_tokens;
  rep.completion_tokens = parsed->completion_tokens;
  auto code = last_code_block(parsed->content);
  if (code) {
    rep.submission = make_source_program(st.cfg.backend, *code);
  } else {
    st.no_block++;
    rep.failure = code.message() +
                  (parsed->finish_reason == "length" ? " (the answer was cut at max_tokens)" : "");
  }
  c.messages.push_back({"assistant", parsed->content});
  c.promise.deliver(std::move(rep));
}

caf::behavior llm_server(llm_actor* self, llm_policy_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.chat.model = st.cfg.model;
  st.chat.max_tokens = st.cfg.max_tokens;
  st.chat.temperature = st.cfg.temperature;
  st.system_prompt = llm_system_prompt(st.cfg.backend);
  http_client_options ho;
  ho.endpoints = st.cfg.endpoints;
  ho.max_in_flight = st.cfg.max_in_flight;
  ho.timeout_s = st.cfg.timeout_s;
  ho.max_attempts = st.cfg.max_attempts;
  ho.backoff_s = st.cfg.backoff_s;
  ho.bearer_token = st.cfg.bearer_token;
  st.client = std::make_unique<http_client>(std::move(ho));
  auto addr = self->address();
  return {
      [=](generate_atom, gen_request& r) -> caf::result<gen_reply> {
        auto& st = self->state;
        if (!r.task)
          return caf::make_error(caf::sec::invalid_argument, "llm: request without task");
        auto& c = st.seqs[r.seq_id];
        if (c.waiting)
          return caf::make_error(caf::sec::invalid_argument, "llm: the sequence is already asking");
        if (c.messages.empty()) {
          c.messages.push_back({"system", st.system_prompt});
          c.messages.push_back({"user", llm_task_prompt(r.task->spec, st.cfg.backend,
                                                        r.task->eager_ms, r.task->compile_ms)});
        } else {
          c.messages.push_back({"user", r.observation.empty()
                                            ? "Answer with the whole program again."
                                            : r.observation});
        }
        c.waiting = true;
        c.asked = std::chrono::steady_clock::now();
        c.promise = self->make_response_promise<gen_reply>();
        uint64_t seq = r.seq_id;
        st.client->post("/v1/chat/completions", chat_request_json(st.chat, c.messages),
                        [addr, seq](http_response h) {
                          auto me = caf::actor_cast<caf::actor>(addr);
                          if (!me) return;
                          llm_answer a;
                          a.seq_id = seq;
                          a.status = h.status;
                          a.body = std::move(h.body);
                          a.error = std::move(h.error);
                          a.attempts = h.attempts;
                          a.ms = h.ms;
                          caf::anon_send(me, llm_answer_atom::value, std::move(a));
                        });
        return c.promise;
      },
      [=](llm_answer_atom, const llm_answer& a) { on_answer(self, a); },
      [=](release_atom, uint64_t seq) { self->state.seqs.erase(seq); },
      [=](version_atom) -> int64_t { return 0; },
      // The served weights change outside Kiln: version 0 until a trainer announces one.
      [=](subscribe_atom, const caf::actor& a) { self->send(a, version_atom::value, int64_t{0}); },
      [=](server_stats_atom) -> std::string {
        auto& st = self->state;
        auto s = st.client->stats();
        nlohmann::json j{{"requests", s.requests},       {"completed", s.completed},
                         {"failed", s.failed},           {"retries", s.retries},
                         {"in_flight", s.in_flight},     {"queued", s.queued},
                         {"answers", st.answers},        {"malformed", st.malformed},
                         {"no_code_block", st.no_block}, {"conversations", st.seqs.size()}};
        return j.dump();
      },
  };
}

} // namespace

caf::actor spawn_llm_policy_server(caf::actor_system& sys, llm_policy_config cfg) {
  return sys.spawn(llm_server, std::move(cfg));
}

} // namespace kiln
