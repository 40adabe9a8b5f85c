# lit configuration for kiln's golden IR tests: .kir files run through kiln-opt and FileCheck.
#
#   bazel build //tools:kiln-opt && .venv/bin/lit tests/lit
#
# kiln-opt comes from bazel-bin (or $KILN_OPT); FileCheck and not from `llvm-config-19 --bindir`.
# lit runs this file with `config` and `lit_config` already defined.
# ruff: noqa: F821
import os
import subprocess
import tempfile

import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".kir"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
# lit writes Output/ directories under the exec root: keep them out of the source tree.
config.test_exec_root = os.path.join(tempfile.gettempdir(), f"kiln-lit-{os.getuid()}")

repo_root = os.path.dirname(os.path.dirname(config.test_source_root))
kiln_opt = os.environ.get("KILN_OPT") or os.path.join(repo_root, "bazel-bin", "tools", "kiln-opt")
if not os.access(kiln_opt, os.X_OK):
    lit_config.fatal(
        f"kiln-opt not found at {kiln_opt}; run `bazel build //tools:kiln-opt` or set KILN_OPT"
    )


def llvm_bindir():
    for tool in ("llvm-config-19", "llvm-config"):
        try:
            return subprocess.check_output([tool, "--bindir"], text=True).strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    lit_config.fatal("llvm-config-19 not found (FileCheck and not come from LLVM 19)")


bindir = llvm_bindir()
filecheck = os.path.join(bindir, "FileCheck")
if not os.access(filecheck, os.X_OK):
    lit_config.fatal(f"FileCheck not found in {bindir}")

# Substitutions are regular expressions: replace whole command words only, never part of a path.
config.substitutions.append((r"(?<![\w/.-])kiln-opt(?![\w.-])", kiln_opt))
config.substitutions.append((r"(?<![\w/.-])FileCheck(?![\w.-])", filecheck))
config.environment["PATH"] = os.pathsep.join([bindir, config.environment.get("PATH", "")])
