// Admission: the AReaL staleness bound step by step (pure logic, deterministic).
#include "rollout/admission.hpp"

#include <doctest/doctest.h>

using namespace kiln;

namespace {
int64_t admit_all(admission_control& a) {
  int64_t n = 0;
  for (auto c = a.capacity(); c > 0; c = a.capacity()) a.admit(), ++n;
  return n;
}
} // namespace

TEST_CASE("admission: eta = 0 is synchronous, one batch per version") {
  admission_config c;
  c.max_concurrent = 100;
  c.eta = 0;
  c.batch = 4;
  admission_control a(c);
  CHECK(admit_all(a) == 4); // (0 + 0 + 1) * 4 - 0
  for (int i = 0; i < 4; ++i) a.finished(true);
  CHECK(a.capacity() == 0); // 4 accepted at version 0: wait for the learner
  a.set_version(1);
  CHECK(admit_all(a) == 4); // (0 + 1 + 1) * 4 - (4 + 0)
  a.finished(true);
  CHECK(a.capacity() == 0); // running 3 + accepted 5 = 8
  a.finished(false);        // not handed on: its slot frees, nothing accepted
  CHECK(a.capacity() == 1);
  a.set_version(0); // versions never go back
  CHECK(a.version() == 1);
}

TEST_CASE("admission: eta lets episodes run ahead by eta versions") {
  admission_config c;
  c.max_concurrent = 100;
  c.eta = 2;
  c.batch = 8;
  admission_control a(c);
  CHECK(admit_all(a) == 24); // (2 + 0 + 1) * 8
  for (int i = 0; i < 24; ++i) a.finished(true);
  CHECK(a.capacity() == 0);
  a.set_version(3);
  CHECK(admit_all(a) == 24);
}

TEST_CASE("admission: max_concurrent and total cap it, eta < 0 turns the bound off") {
  admission_config c;
  c.max_concurrent = 10;
  c.eta = -1;
  c.total = 25;
  admission_control a(c);
  CHECK(admit_all(a) == 10);
  for (int i = 0; i < 10; ++i) a.finished(false);
  CHECK(admit_all(a) == 10);
  for (int i = 0; i < 10; ++i) a.finished(true);
  CHECK(admit_all(a) == 5); // total reached
  CHECK_FALSE(a.all_done());
  for (int i = 0; i < 5; ++i) a.finished(true);
  CHECK(a.all_done());
  CHECK(a.accepted() == 15);
}

TEST_CASE("admission: trajectories the learner discarded free their places under the bound") {
  admission_config c;
  c.max_concurrent = 100;
  c.eta = 1;
  c.batch = 4;
  admission_control a(c);
  CHECK(admit_all(a) == 8); // (1 + 0 + 1) * 4
  for (int i = 0; i < 8; ++i) a.finished(true);
  CHECK(a.capacity() == 0);
  // The learner's version moved on (sft, value updates) and 6 of the 8 became too stale to train
  // on: without this the rollout would wait forever for a version that needs them.
  a.set_discarded(6);
  CHECK(a.capacity() == 6);
  a.set_discarded(2); // a running total never goes back
  CHECK(a.discarded() == 6);
}
