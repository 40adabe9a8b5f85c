#include "passes/autodiff/min_cut.h"

#include <algorithm>
#include <queue>

namespace kiln::passes::autodiff {

void FlowNetwork::addEdge(int from, int to, int64_t capacity) {
  adjacent_[from].push_back(static_cast<int>(edges_.size()));
  edges_.push_back({to, capacity});
  adjacent_[to].push_back(static_cast<int>(edges_.size()));
  edges_.push_back({from, 0});
}

bool FlowNetwork::levels(int source, int sink) {
  level_.assign(adjacent_.size(), -1);
  std::queue<int> queue;
  level_[source] = 0;
  queue.push(source);
  while (!queue.empty()) {
    int u = queue.front();
    queue.pop();
    for (int e : adjacent_[u])
      if (edges_[e].capacity > 0 && level_[edges_[e].to] < 0) {
        level_[edges_[e].to] = level_[u] + 1;
        queue.push(edges_[e].to);
      }
  }
  return level_[sink] >= 0;
}

int64_t FlowNetwork::push(int node, int sink, int64_t limit) {
  if (node == sink)
    return limit;
  for (int &i = next_[node]; i < static_cast<int>(adjacent_[node].size()); ++i) {
    Edge &e = edges_[adjacent_[node][i]];
    if (e.capacity <= 0 || level_[e.to] != level_[node] + 1)
      continue;
    int64_t pushed = push(e.to, sink, std::min(limit, e.capacity));
    if (pushed > 0) {
      e.capacity -= pushed;
      edges_[adjacent_[node][i] ^ 1].capacity += pushed;
      return pushed;
    }
  }
  return 0;
}

int64_t FlowNetwork::maxFlow(int source, int sink) {
  int64_t flow = 0;
  while (levels(source, sink)) {
    next_.assign(adjacent_.size(), 0);
    while (int64_t pushed = push(source, sink, kInfinite))
      flow += pushed;
  }
  return flow;
}

std::vector<bool> FlowNetwork::sourceSide(int source) const {
  std::vector<bool> seen(adjacent_.size(), false);
  std::vector<int> stack{source};
  seen[source] = true;
  while (!stack.empty()) {
    int u = stack.back();
    stack.pop_back();
    for (int e : adjacent_[u])
      if (edges_[e].capacity > 0 && !seen[edges_[e].to]) {
        seen[edges_[e].to] = true;
        stack.push_back(edges_[e].to);
      }
  }
  return seen;
}

} // namespace kiln::passes::autodiff
