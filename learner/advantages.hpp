// Group-relative advantages (GRPO / RLOO style): one number per trajectory, its episode reward
// against the other episodes of its task group in the same batch, so easy and hard tasks weigh
// alike and no critic is needed.
//   batch (reward, group, task) --group_advantages--> one advantage per trajectory
#pragma once

#include "learner/samples.hpp"

#include <map>
#include <string>
#include <vector>

namespace kiln {

// Trajectories sharing a group with others in the batch get (R - mean) / (std + 1e-6) over that
// group (0 when every reward in it is equal). One alone in the batch gets R minus its task's
// running mean reward (0 for a task not seen yet). task_mean is then moved towards each
// trajectory's reward by `rate`.
std::vector<float> group_advantages(const std::vector<const sample*>& batch,
                                    std::map<std::string, double>& task_mean, double rate = 0.1);

} // namespace kiln
