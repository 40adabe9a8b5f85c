// The scheduling driver: fuse, order loops, group into kernels, settle them, plan memory.

#include "passes/schedule/schedule.h"

#include "passes/schedule/rebuild.h"
#include "passes/schedule/schedule_impl.h"

#include <optional>

namespace kiln::passes::schedule {

bool onePointPerShared(const ir::loop::LoopNode &node, size_t shared) {
  for (size_t d = shared; d < node.ranges.size(); ++d)
    if (!(node.ranges[d] == SymInt(1)))
      return false;
  return true;
}

ir::loop::LoopNode asScheduled(const LoopProgram &program, const ir::loop::LoopNode &node,
                               const LoopOrder &order) {
  ir::loop::LoopNode scheduled = node;
  if (order.mergedIntoLane == 0)
    return scheduled;
  bool reduce = order.lane == LaneKind::Reduce;
  std::vector<SymInt> &ranges = reduce ? scheduled.reductionRanges : scheduled.ranges;
  auto var = [&](size_t d) { return detail::laneLoopName(order, d); };
  size_t lane = ranges.size() - 1;
  // The innermost merged loop of extent other than 1 walks memory at the lane's pace: when loops
  // of extent 1 are inside it, the lane variable takes its place in the body.
  std::optional<size_t> pace;
  for (size_t d = lane + 1; d-- > lane - order.mergedIntoLane && !pace;)
    if (!(ranges[d] == SymInt(1)))
      pace = d;
  for (size_t d = lane - order.mergedIntoLane; d < lane; ++d) {
    ranges[lane] = ranges[lane] * ranges[d];
    ranges[d] = SymInt(1);
  }
  if (pace && *pace != lane)
    scheduled.body = substituteVars(
        program, node, {{var(*pace), SymInt::symbol(var(lane))}, {var(lane), SymInt(0)}},
        scheduled.varRanges());
  return scheduled;
}

std::vector<size_t> launchStarts(std::span<const Kernel> kernels) {
  std::vector<size_t> starts(kernels.size());
  for (size_t k = 0; k < kernels.size(); ++k)
    starts[k] = k > 0 && kernels[k].withPrevious ? starts[k - 1] : k;
  return starts;
}

Schedule schedule(const LoopProgram &lowered, const ScheduleOptions &options) {
  // Dead nodes first (a lowering that composed a node into its reader leaves it unread), so that
  // their loads do not count as readers when choosing what to inline.
  std::vector<bool> none(lowered.buffers().size(), false);
  std::vector<size_t> live = liveNodes(lowered, none);
  std::optional<LoopProgram> pruned;
  if (live.size() < lowered.nodes().size())
    pruned = rebuild(lowered, {none, std::move(live)});
  const LoopProgram &program = pruned ? *pruned : lowered;
  std::vector<bool> inlined = options.fuse && options.inlineProducers
                                  ? detail::chooseInlined(program)
                                  : std::vector<bool>(program.buffers().size(), false);
  LoopProgram fused = rebuild(program, {inlined, liveNodes(program, inlined)});
  std::vector<LoopOrder> loops = detail::chooseLoopOrders(fused);
  std::vector<Kernel> kernels = detail::groupKernels(fused, loops, options.fuse);
  if (options.fuse && options.horizontal)
    detail::orderForLaunches(fused, kernels);
  // Kernels may have gathered nodes out of program order: emit them kernel by kernel.
  RebuildPlan order{std::vector<bool>(fused.buffers().size(), false), {}};
  for (Kernel &k : kernels)
    for (size_t &n : k.nodes) {
      order.order.push_back(n);
      n = order.order.size() - 1;
    }
  Schedule s{rebuild(fused, order), std::move(kernels), {}, {}, {}};
  for (size_t n : order.order)
    s.loops.push_back(std::move(loops[n]));
  detail::settleKernels(s.program, s.kernels, s.loops);
  if (options.fuse && options.horizontal)
    detail::groupLaunches(s.program, s.kernels);
  detail::planMemory(s.program, s.kernels, s.buffers, s.slots);
  return s;
}

} // namespace kiln::passes::schedule
