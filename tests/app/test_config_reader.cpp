#include "app/config_reader.hpp"
#include "app/run_config.hpp"

#include <doctest/doctest.h>
#include <filesystem>

using namespace kiln;

namespace {

config_reader parse(const std::string& text) {
  auto r = config_reader::parse(text, "exp.toml", "/base");
  REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.message()));
  return std::move(*r);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("typed reads with defaults") {
  auto r =
      parse("[run]\nseed = 7\nname = \"x\"\nratio = 0.5\nflag = true\nlist = [\"a\", \"b\"]\n");
  CHECK(r.integer("run.seed", 1) == 7);
  CHECK(r.integer("run.absent", 3) == 3);
  CHECK(r.string("run.name", "") == "x");
  CHECK(r.real("run.ratio", 0) == 0.5);
  CHECK(r.boolean("run.flag", false));
  CHECK(r.strings("run.list", {}) == std::vector<std::string>{"a", "b"});
  CHECK(r.finish().has_value());
}

TEST_CASE("errors name file, line, key and what was expected") {
  auto r = parse("[run]\nname = \"q\"\nseed = \"seven\"\nthreads = 9999\n");
  r.string("run.name", "");
  CHECK(r.integer("run.seed", 1) == 1);
  r.integer("run.threads", 0, 0, 64);
  auto st = r.finish();
  REQUIRE_FALSE(st.has_value());
  CHECK(contains(st.message(), "exp.toml:3: key 'run.seed': expected an integer, got a string"));
  CHECK(contains(st.message(),
                 "exp.toml:4: key 'run.threads': expected an integer in [0, 64], got 9999"));
}

TEST_CASE("unknown keys are reported, so typos do not pass silently") {
  auto r = parse("[run]\nsede = 3\n");
  r.integer("run.seed", 1);
  auto st = r.finish();
  REQUIRE_FALSE(st.has_value());
  CHECK(contains(st.message(), "exp.toml:2: key 'run.sede': unknown key"));
}

TEST_CASE("syntax errors carry line and column") {
  auto r = config_reader::parse("[run]\nseed = = 1\n", "exp.toml", "/");
  REQUIRE_FALSE(r.has_value());
  CHECK(contains(r.message(), "exp.toml:2:"));
}

TEST_CASE("relative paths resolve against the config's directory") {
  auto r = parse("[tasks]\nsuites = [\"../data/a\", \"/abs/b\"]\n");
  auto ps = r.paths("tasks.suites", {});
  CHECK(ps == std::vector<std::string>{"/data/a", "/abs/b"});
}

TEST_CASE("a relative path given by --set resolves against the working directory") {
  auto r = parse("[tasks]\nsuites = [\"../data/a\"]\n[pool]\ncache_dir = \"cache\"\n");
  REQUIRE(r.set("curve.secret_key=\"keys/me.key\""));
  REQUIRE(r.set("tasks.suites=[\"mine\", \"/abs/b\"]"));
  const std::string cwd = std::filesystem::current_path().string();
  CHECK(r.path("curve.secret_key", "") == cwd + "/keys/me.key");
  CHECK(r.paths("tasks.suites", {}) == std::vector<std::string>{cwd + "/mine", "/abs/b"});
  CHECK(r.path("pool.cache_dir", "") == "/base/cache"); // from the file: the file's folder
}

TEST_CASE("--set overrides keys, creating tables as needed") {
  auto r = parse("[run]\nseed = 1\n");
  REQUIRE(r.set("run.seed=5"));
  REQUIRE(r.set("run.backend=cuda"));
  REQUIRE(r.set("system.threads=2"));
  CHECK(r.integer("run.seed", 0) == 5);
  CHECK(r.string("run.backend", "") == "cuda");
  CHECK(r.integer("system.threads", 0) == 2);
  CHECK_FALSE(r.set("novalue").has_value());
}

TEST_CASE("the embedded quickstart config is valid") {
  auto r = open_config("");
  REQUIRE(r);
  auto cfg = read_run_config(*r);
  REQUIRE_MESSAGE(cfg.has_value(), (cfg ? "" : cfg.message()));
  CHECK(cfg->backend == "cpu");
  // Small tasks only (milliseconds a program), and only those it trains and holds out on.
  REQUIRE(cfg->suites.size() == 1);
  CHECK(cfg->suites[0].find("level2/small") != std::string::npos);
  CHECK(cfg->max_tasks > 0);
}

TEST_CASE("every config shipped in configs/ loads without an error or an unknown key") {
  for (const char* name : {"quickstart", "learn_speed", "learn_speed_cuda", "cuda", "llm"}) {
    CAPTURE(name);
    auto cfg = load_run_config(std::string(KILN_SOURCE_DIR) + "/configs/" + name + ".toml", {});
    CHECK_MESSAGE(cfg.has_value(), (cfg ? "" : cfg.message()));
  }
  auto ls = load_run_config(std::string(KILN_SOURCE_DIR) + "/configs/learn_speed.toml", {});
  REQUIRE(ls);
  CHECK(ls->shuffle_seed != 0); // a held-out set that mixes the families the training set has
  CHECK(ls->rollout_verify_checks == 5); // as strict as the final eval
}

TEST_CASE("a run config rejects a bad backend") {
  auto r = parse("[run]\nbackend = \"tpu\"\n[tasks]\nsuites = [\"x\"]\n");
  auto cfg = read_run_config(r);
  REQUIRE_FALSE(cfg.has_value());
  CHECK(contains(cfg.message(), "key 'run.backend': expected one of cpu, cuda, got 'tpu'"));
}

TEST_CASE("[curve]: key paths resolve against the config, and plaintext off loopback is refused") {
  const std::string tasks = "[tasks]\nsuites = [\"s\"]\n";
  auto r = parse(tasks + "[curve]\nsecret_key = \"keys/a.key\"\nserver_key = \"keys/b.pub\"\n"
                         "[rollout]\nsink = \"tcp://10.0.0.2:5557\"\n");
  auto cfg = read_run_config(r);
  REQUIRE_MESSAGE(cfg.has_value(), cfg.message());
  CHECK(cfg->curve.secret_key == "/base/keys/a.key");
  CHECK(cfg->curve.server_key == "/base/keys/b.pub");
  CHECK(cfg->learner.curve.secret_key == cfg->curve.secret_key); // `kiln learner` binds with it
  CHECK(cfg->llm.curve.server_key == cfg->curve.server_key);     // the version SUB connects

  auto plain = parse(tasks + "[rollout]\nsink = \"tcp://10.0.0.2:5557\"\n");
  auto bad = read_run_config(plain);
  REQUIRE_FALSE(bad.has_value());
  CHECK(contains(bad.message(), "key 'rollout.sink'"));
  CHECK(contains(bad.message(), "plaintext off this host"));
  auto wildcard = parse(tasks + "[learner]\npull_endpoint = \"tcp://*:5557\"\n");
  CHECK(contains(read_run_config(wildcard).message(), "key 'learner.pull_endpoint'"));
  auto loopback = parse(tasks + "[rollout]\nsink = \"tcp://127.0.0.1:5557\"\n");
  CHECK(read_run_config(loopback).has_value());
  auto allowed = parse(tasks + "[curve]\nallow_plaintext = true\n[rollout]\n"
                               "sink = \"tcp://10.0.0.2:5557\"\n");
  CHECK(read_run_config(allowed).has_value());
  auto no_secret = parse(tasks + "[curve]\nauthorized = \"keys\"\n");
  CHECK(contains(read_run_config(no_secret).message(), "curve.secret_key"));
}
