// Tasks shared by the rollout tests: the cpu suites, loaded and checked once.
#pragma once

#include "data/task_set.hpp"

namespace kiln::test {

inline const std::vector<task>& suite_tasks() {
  static const task_set s = load_tasks({KILN_SOURCE_DIR "/data/suites/level1/cpu",
                                        KILN_SOURCE_DIR "/data/suites/level2/cpu",
                                        KILN_SOURCE_DIR "/data/suites/level3/cpu"});
  return s.tasks;
}

inline const task& task_named(const std::string& name) {
  for (const auto& t : suite_tasks())
    if (t.name == name) return t;
  return suite_tasks().front();
}

} // namespace kiln::test
