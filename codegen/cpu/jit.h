#pragma once
/// CpuJit: compiles kernel modules (MLIR) to host machine code and links them into the process.
///
/// addModule hashes the module text into a cache key (kernel_cache.h), takes the object from
/// the cache or compiles it (compile.h: MLIR lowering, LLVM O2/O3 for the host CPU, object
/// emission), and adds the object to an ORC LLJIT (JITLink; libm and libc resolve from the
/// process). lookup links on first use and returns the symbol's address. One CpuJit holds the
/// kernels of one compiled graph; its code lives as long as the CpuJit.
///
/// Thread safety: addModule and lookup may be called from several threads.

#include "codegen/cpu/compile.h"
#include "codegen/cpu/kernel_cache.h"
#include "codegen/cpu/launch.h"
#include "codegen/cpu/target.h"

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace llvm::orc {
class LLJIT;
} // namespace llvm::orc

namespace mlir {
class Operation;
} // namespace mlir

namespace kiln::codegen::cpu {

struct JitOptions {
  /// LLVM optimization level, 0..3 (O2/O3 for real kernels).
  int optLevel = 3;
  /// Keep the text of every stage (dumps()); such compiles bypass the cache, so the stages
  /// always exist.
  bool dumpStages = false;
  /// Where objects are cached; null: always compile.
  KernelCache *cache = nullptr;
  /// Default: hostTarget(). An override must still run on this host (e.g. fewer features).
  std::optional<TargetDesc> target;
  /// Part of the cache key (tests use it to simulate another kiln version).
  std::string version = std::string(kCodegenVersion);
};

class CpuJit {
public:
  explicit CpuJit(JitOptions options = {});
  ~CpuJit();
  CpuJit(const CpuJit &) = delete;
  CpuJit &operator=(const CpuJit &) = delete;

  /// Compiles MLIR text and adds its functions. Throws kiln::Error with MLIR's diagnostics.
  void addModule(std::string_view mlirText);
  /// Same for a `builtin.module` built in memory, in a context from createMlirContext()
  /// (lowering.h); it is lowered in place unless the cache answers.
  void addModule(mlir::Operation *module);

  /// The address of a function added earlier; throws kiln::Error when it is missing or fails
  /// to link (e.g. an unresolved external).
  void *lookup(std::string_view name);
  KernelFn lookupKernel(std::string_view name) { return reinterpret_cast<KernelFn>(lookup(name)); }

  /// The stages of the last addModule (when options.dumpStages).
  CompileDumps dumps() const;
  const TargetDesc &target() const { return target_; }
  const JitOptions &options() const { return options_; }

private:
  template <typename Module> void add(std::string_view text, Module &&module);
  void addObject(const std::string &object);

  JitOptions options_;
  TargetDesc target_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  mutable std::mutex mu_;
  CompileDumps dumps_;
  std::string sessionErrors_; ///< link errors ORC reported since the last failed lookup
};

} // namespace kiln::codegen::cpu
