#include "learner/advantages.hpp"

#include <cmath>

namespace kiln {

std::vector<float> group_advantages(const std::vector<const sample*>& batch,
                                    std::map<std::string, double>& task_mean, double rate) {
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t i = 0; i < batch.size(); ++i)
    if (!batch[i]->group.empty()) groups[batch[i]->group].push_back(i);
  std::vector<float> adv(batch.size(), 0.0f);
  std::vector<bool> done(batch.size(), false);
  for (const auto& [g, members] : groups) {
    if (members.size() < 2) continue;
    double mean = 0, var = 0;
    for (auto i : members) mean += batch[i]->reward;
    mean /= static_cast<double>(members.size());
    for (auto i : members) var += (batch[i]->reward - mean) * (batch[i]->reward - mean);
    double sd = std::sqrt(var / static_cast<double>(members.size()));
    for (auto i : members) {
      adv[i] = sd > 1e-9 ? static_cast<float>((batch[i]->reward - mean) / (sd + 1e-6)) : 0.0f;
      done[i] = true;
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (done[i]) continue;
    auto it = task_mean.find(batch[i]->task);
    adv[i] = it == task_mean.end() ? 0.0f : static_cast<float>(batch[i]->reward - it->second);
  }
  for (const auto* s : batch) {
    auto [it, fresh] = task_mean.emplace(s->task, s->reward);
    if (!fresh) it->second += rate * (s->reward - it->second);
  }
  return adv;
}

} // namespace kiln
