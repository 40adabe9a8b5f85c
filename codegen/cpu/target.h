#pragma once
/// The machine generated CPU code is compiled for.
///
/// A TargetDesc is plain strings so that it can be hashed into cache keys and logged; the LLVM
/// objects built from it (TargetMachine, the JIT's target builder) live in target.cc and jit.cc.
/// The host target is the `-march=native` equivalent: the process triple, the host CPU name and
/// every feature LLVM detects on it (AVX2, AVX-512, ... when present).

#include <memory>
#include <string>

namespace llvm {
class TargetMachine;
} // namespace llvm

namespace kiln::codegen::cpu {

/// Triple, CPU name and a sorted, comma-separated feature list ("+avx2,+fma,-avx512f,...").
struct TargetDesc {
  std::string triple;
  std::string cpu;
  std::string features;

  /// One line for logs and cache keys: "triple cpu features".
  std::string str() const;
};

/// The host, detected once per process (llvm::sys::getHostCPUName / getHostCPUFeatures).
const TargetDesc &hostTarget();

/// Registers LLVM's native target, asm printer and parser; idempotent and thread-safe.
void initializeNativeTarget();

/// A TargetMachine for `target` at codegen opt level 0..3, configured as the JIT links: PIC,
/// small code model. Each compile builds its own (TargetMachines are not shared across threads).
/// Throws kiln::Error when LLVM does not know the target.
std::unique_ptr<llvm::TargetMachine> createTargetMachine(const TargetDesc &target, int optLevel);

} // namespace kiln::codegen::cpu
