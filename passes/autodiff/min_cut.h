#pragma once
/// A minimum s-t cut of a small directed graph (Dinic's max-flow): the partitioner of compiled
/// training cuts its forward values this way (training_graphs.h).

#include <cstdint>
#include <limits>
#include <vector>

namespace kiln::passes::autodiff {

class FlowNetwork {
public:
  static constexpr int64_t kInfinite = std::numeric_limits<int64_t>::max() / 4;

  explicit FlowNetwork(int nodes) : adjacent_(nodes) {}

  void addEdge(int from, int to, int64_t capacity);
  /// The maximum flow from `source` to `sink` (the minimum cut's capacity).
  int64_t maxFlow(int source, int sink);
  /// After maxFlow: the nodes reachable from `source` in the residual graph (the source side of
  /// the minimum cut closest to the source).
  std::vector<bool> sourceSide(int source) const;

private:
  struct Edge {
    int to;
    int64_t capacity;
  };
  bool levels(int source, int sink);
  int64_t push(int node, int sink, int64_t limit);

  std::vector<Edge> edges_; ///< edge 2k and its reverse 2k + 1
  std::vector<std::vector<int>> adjacent_;
  std::vector<int> level_, next_;
};

} // namespace kiln::passes::autodiff
