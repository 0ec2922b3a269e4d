// CurveZMQ on a ZeroMQ channel: key files, the loopback rule, and the guard's verdicts on real
// sockets: the authorized client gets through; an unknown key, a plaintext client and a client
// that names the wrong server key get nothing through, and each is counted on the right side.
#include "channels/channel_guard.hpp"
#include "channels/curve_keys.hpp"

#include <chrono>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>
#include <zmq.hpp>

using namespace kiln;
namespace fs = std::filesystem;

namespace {

struct key_dir {
  fs::path dir = fs::temp_directory_path() / ("kiln_curve_test." + std::to_string(getpid()));
  key_dir() {
    fs::remove_all(dir);
    for (const char* n : {"server", "client", "stranger"})
      REQUIRE(write_curve_keypair(dir.string(), n, *generate_curve_keypair()).has_value());
    fs::create_directories(dir / "authorized");
    fs::copy_file(dir / "client.pub", dir / "authorized" / "client.pub");
  }
  ~key_dir() { fs::remove_all(dir); }
  std::string operator()(const std::string& f) const { return (dir / f).string(); }
};

curve_config server_cfg(const key_dir& k) {
  curve_config c;
  c.secret_key = k("server.key");
  c.authorized = k("authorized");
  return c;
}

curve_config client_cfg(const key_dir& k, const std::string& who, const std::string& server) {
  curve_config c;
  c.secret_key = k(who + ".key");
  c.server_key = k(server + ".pub");
  return c;
}

// Waits up to `s` seconds for a condition the guard thread makes true.
template <class F>
bool eventually(F f, double s = 5) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return f();
}

// A bound PULL with its guard; clients push one message each.
struct pull_server {
  zmq::context_t ctx{1};
  std::unique_ptr<channel_guard> guard;
  std::unique_ptr<zmq::socket_t> pull;
  std::string endpoint;
  explicit pull_server(const curve_config& c) {
    auto g = channel_guard::create(ctx, c, "test server");
    REQUIRE_MESSAGE(g.has_value(), g.message());
    guard = std::move(*g);
    pull = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pull);
    pull->set(zmq::sockopt::linger, 0);
    REQUIRE(guard->secure(*pull, "tcp://127.0.0.1:*", true).has_value());
    pull->bind("tcp://127.0.0.1:*");
    endpoint = pull->get(zmq::sockopt::last_endpoint);
  }
  ~pull_server() {
    pull.reset();
    guard.reset();
  }
  std::optional<std::string> receive(int ms) {
    zmq::pollitem_t it{pull->handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&it, 1, std::chrono::milliseconds(ms)) <= 0) return std::nullopt;
    zmq::message_t m;
    if (!pull->recv(m)) return std::nullopt;
    return m.to_string();
  }
};

struct push_client {
  zmq::context_t ctx{1};
  std::unique_ptr<channel_guard> guard;
  std::unique_ptr<zmq::socket_t> push;
  push_client(const curve_config& c, const std::string& endpoint, const std::string& text) {
    auto g = channel_guard::create(ctx, c, "test client");
    REQUIRE_MESSAGE(g.has_value(), g.message());
    guard = std::move(*g);
    push = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::push);
    push->set(zmq::sockopt::linger, 0);
    REQUIRE(guard->secure(*push, endpoint, false).has_value());
    push->connect(endpoint);
    push->send(zmq::buffer(text), zmq::send_flags::dontwait);
  }
  ~push_client() {
    push.reset();
    guard.reset();
  }
};

} // namespace

TEST_CASE("key files: written private, read back, the public half derived, bad files named") {
  key_dir k;
  auto sec = read_secret_key(k("client.key"));
  REQUIRE_MESSAGE(sec.has_value(), sec.message());
  auto pub = read_public_key(k("client.pub"));
  REQUIRE(pub.has_value());
  CHECK(sec->public_key == *pub);
  CHECK((fs::status(k("client.key")).permissions() & fs::perms::group_all) == fs::perms::none);
  CHECK((fs::status(k("client.key")).permissions() & fs::perms::others_all) == fs::perms::none);
  CHECK_FALSE(write_curve_keypair(k.dir.string(), "client", *sec).has_value()); // no overwrite

  std::ofstream(k("short.pub")) << "abc\n";
  auto bad = read_public_key(k("short.pub"));
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.message().find("short.pub") != std::string::npos);
  CHECK(bad.message().find("40") != std::string::npos);
  std::ofstream(k("alphabet.pub")) << std::string(40, '"') << "\n";
  CHECK(read_public_key(k("alphabet.pub")).message().find("Z85") != std::string::npos);
  CHECK(read_public_key(k("missing.pub")).message().find("no such key file") != std::string::npos);

  auto keys = read_authorized_keys(k("authorized"));
  REQUIRE(keys.has_value());
  CHECK(keys->size() == 1);
  fs::create_directories(k.dir / "empty");
  CHECK(read_authorized_keys(k("empty")).message().find("no *.pub") != std::string::npos);
}

TEST_CASE("loopback endpoints, and plaintext refused off loopback unless allowed") {
  CHECK(is_loopback_endpoint("tcp://127.0.0.1:5557"));
  CHECK(is_loopback_endpoint("tcp://127.3.2.1:1"));
  CHECK(is_loopback_endpoint("tcp://localhost:5557"));
  CHECK(is_loopback_endpoint("tcp://[::1]:5557"));
  CHECK(is_loopback_endpoint("ipc:///tmp/x"));
  CHECK(is_loopback_endpoint("inproc://x"));
  CHECK(is_loopback_endpoint("tcp://10.0.0.1;127.0.0.1:5557")); // source;destination
  CHECK_FALSE(is_loopback_endpoint("tcp://*:5557"));
  CHECK_FALSE(is_loopback_endpoint("tcp://0.0.0.0:5557"));
  CHECK_FALSE(is_loopback_endpoint("tcp://10.77.0.1:5557"));
  CHECK_FALSE(is_loopback_endpoint("tcp://eth0:5557"));
  CHECK_FALSE(is_loopback_endpoint("tcp://128.0.0.1:5557"));
  CHECK_FALSE(is_loopback_endpoint("tcp://127.0.0.1;10.0.0.1:5557"));

  zmq::context_t ctx{1};
  zmq::socket_t s(ctx, zmq::socket_type::push);
  s.set(zmq::sockopt::linger, 0);
  auto plain = channel_guard::create(ctx, curve_config{}, "t");
  REQUIRE(plain.has_value());
  CHECK((*plain)->secure(s, "tcp://127.0.0.1:5557", true).has_value());
  auto off = (*plain)->secure(s, "tcp://*:5557", true);
  REQUIRE_FALSE(off.has_value());
  CHECK(off.message().find("plaintext") != std::string::npos);
  curve_config allowed;
  allowed.allow_plaintext = true;
  auto g = channel_guard::create(ctx, allowed, "t");
  CHECK((*g)->secure(s, "tcp://*:5557", true).has_value());
  plain->reset();
  g->reset();
}

TEST_CASE("a keyed process needs the key its role asks for, named in the error") {
  key_dir k;
  zmq::context_t ctx{1};
  zmq::socket_t s(ctx, zmq::socket_type::push);
  s.set(zmq::sockopt::linger, 0);
  curve_config only_secret;
  only_secret.secret_key = k("server.key");
  auto g = channel_guard::create(ctx, only_secret, "t");
  REQUIRE(g.has_value());
  CHECK((*g)->secure(s, "tcp://127.0.0.1:5557", true).message().find("curve.authorized") !=
        std::string::npos);
  CHECK((*g)->secure(s, "tcp://127.0.0.1:5557", false).message().find("curve.server_key") !=
        std::string::npos);
  g->reset();
  curve_config no_secret;
  no_secret.server_key = k("server.pub");
  CHECK(channel_guard::create(ctx, no_secret, "t").message().find("curve.secret_key") !=
        std::string::npos);
  curve_config bad_file = only_secret;
  bad_file.secret_key = k("nothing.key");
  CHECK(channel_guard::create(ctx, bad_file, "t").message().find("nothing.key") !=
        std::string::npos);
}

TEST_CASE("the authorized key gets through, an unknown key, plaintext and a wrong server key do "
          "not, and each is counted") {
  key_dir k;
  pull_server server(server_cfg(k));
  {
    push_client ok(client_cfg(k, "client", "server"), server.endpoint, "hello");
    auto got = server.receive(5000);
    REQUIRE(got.has_value());
    CHECK(*got == "hello");
  }
  CHECK(eventually([&] { return server.guard->counters().accepted == 1; }));

  { // a key the server does not list: ZAP refuses it; the client hears why
    push_client stranger(client_cfg(k, "stranger", "server"), server.endpoint, "let me in");
    CHECK_FALSE(server.receive(1000).has_value());
    CHECK(eventually([&] { return server.guard->counters().refused_key >= 1; }));
    CHECK(eventually([&] { return stranger.guard->counters().refused_by_server >= 1; }));
  }
  { // plaintext (allowed on loopback by the client's config) against a CURVE server
    push_client plain(curve_config{}, server.endpoint, "plain");
    CHECK_FALSE(server.receive(1000).has_value());
    CHECK(eventually([&] { return server.guard->counters().failed_handshakes >= 1; }));
    CHECK(eventually([&] { return plain.guard->counters().refused_by_server >= 1; }));
  }
  { // an authorized client that trusts another server's key: it cannot talk to this one
    push_client fooled(client_cfg(k, "client", "stranger"), server.endpoint, "fooled");
    CHECK_FALSE(server.receive(1000).has_value());
    CHECK(eventually([&] { return fooled.guard->counters().refused_by_server >= 1; }));
  }
  CHECK(server.guard->counters().accepted == 1);
  MESSAGE(server.guard->summary());
}

TEST_CASE("weights over PUB/SUB: the authorized subscriber receives, a stranger does not") {
  key_dir k;
  zmq::context_t ctx{1};
  auto g = channel_guard::create(ctx, server_cfg(k), "pub");
  REQUIRE(g.has_value());
  zmq::socket_t pub(ctx, zmq::socket_type::pub);
  pub.set(zmq::sockopt::linger, 0);
  REQUIRE((*g)->secure(pub, "tcp://127.0.0.1:*", true).has_value());
  pub.bind("tcp://127.0.0.1:*");
  std::string endpoint = pub.get(zmq::sockopt::last_endpoint);

  auto subscriber = [&](const std::string& who, zmq::context_t& c,
                        std::unique_ptr<channel_guard>& guard) {
    auto sg = channel_guard::create(c, client_cfg(k, who, "server"), who);
    REQUIRE(sg.has_value());
    guard = std::move(*sg);
    auto s = std::make_unique<zmq::socket_t>(c, zmq::socket_type::sub);
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::subscribe, "");
    REQUIRE(guard->secure(*s, endpoint, false).has_value());
    s->connect(endpoint);
    return s;
  };
  zmq::context_t c1{1}, c2{1};
  std::unique_ptr<channel_guard> g1, g2;
  auto friendly = subscriber("client", c1, g1);
  auto stranger = subscriber("stranger", c2, g2);
  bool got_friendly = false, got_stranger = false;
  for (int i = 0; i < 100 && !got_friendly; ++i) { // PUB drops until the SUB has joined
    pub.send(zmq::str_buffer("KLNW weights"), zmq::send_flags::dontwait);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    zmq::message_t m;
    if (friendly->recv(m, zmq::recv_flags::dontwait))
      got_friendly = m.to_string() == "KLNW weights";
    if (stranger->recv(m, zmq::recv_flags::dontwait)) got_stranger = true;
  }
  CHECK(got_friendly);
  CHECK_FALSE(got_stranger);
  CHECK(eventually([&] { return (*g)->counters().refused_key >= 1; }));
  friendly.reset();
  stranger.reset();
  g1.reset();
  g2.reset();
  pub.close();
  g->reset();
}
