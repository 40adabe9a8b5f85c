#pragma once
/// KILN_PROFILE=kernels: the wall time of every node of every compiled CPU program run in the
/// process, summed per node and printed to stderr at exit, heaviest first (the tool that finds
/// which kernel of a compiled step to make faster). Off, it costs one branch per node.

#include "ir/loop/program.h"

#include <chrono>
#include <cstdint>

namespace kiln::codegen::cpu {

class KernelProfile {
public:
  /// The process profile when KILN_PROFILE names `kernels`, else nullptr (read once).
  static KernelProfile *active();
  /// Adds one run of node `index` of `program` (identified by its address) taking `nanos`.
  void add(const ir::loop::LoopProgram &program, size_t index, int64_t nanos);
  ~KernelProfile();

private:
  KernelProfile() = default;
  struct Entry;
  struct Table;
  Table *table_ = nullptr;
};

/// Times one node run when a profile is active.
class ScopedNodeTimer {
public:
  ScopedNodeTimer(KernelProfile *profile, const ir::loop::LoopProgram &program, size_t index)
      : profile_(profile), program_(program), index_(index) {
    if (profile_)
      start_ = std::chrono::steady_clock::now();
  }
  ~ScopedNodeTimer() {
    if (profile_)
      profile_->add(program_, index_,
                    std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start_)
                        .count());
  }

private:
  KernelProfile *profile_;
  const ir::loop::LoopProgram &program_;
  size_t index_;
  std::chrono::steady_clock::time_point start_;
};

} // namespace kiln::codegen::cpu
