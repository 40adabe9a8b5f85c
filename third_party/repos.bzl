"""Repository rules that wrap the system libraries kiln builds against.

Each rule finds a library on the host (Debian packages, the Python interpreter in use, the CUDA
toolkit or the nvidia-cuda-nvrtc wheel) and exposes it as a cc_library. Nothing is downloaded.
"""

def _which(rctx, names):
    for n in names:
        p = rctx.which(n)
        if p:
            return p
    return None

def _python_impl(rctx):
    python = rctx.os.environ.get("KILN_PYTHON") or str(_which(rctx, ["python3"]))
    res = rctx.execute([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"])
    if res.return_code != 0:
        fail("kiln: cannot query the Python interpreter %s: %s" % (python, res.stderr))
    rctx.symlink(res.stdout.strip(), "include")
    rctx.file("BUILD.bazel", """
cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
    visibility = ["//visibility:public"],
)
""")

_python_repo = repository_rule(implementation = _python_impl, environ = ["KILN_PYTHON", "PATH"], local = True)

def _llvm_impl(rctx):
    cfg = _which(rctx, ["llvm-config-19", "llvm-config"])
    if not cfg:
        fail("kiln: llvm-config-19 not found; run scripts/setup.sh")
    prefix = rctx.execute([cfg, "--prefix"]).stdout.strip()
    libdir = rctx.execute([cfg, "--libdir"]).stdout.strip()
    rctx.symlink(prefix + "/include", "include")
    rctx.symlink(libdir, "lib")
    rctx.file("BUILD.bazel", """
cc_library(
    name = "llvm_mlir",
    srcs = ["lib/libMLIR.so", "lib/libLLVM.so"],
    hdrs = glob(["include/mlir/**", "include/mlir-c/**", "include/llvm/**", "include/llvm-c/**"]),
    includes = ["include"],
    linkopts = ["-Wl,-rpath,{libdir}"],
    visibility = ["//visibility:public"],
)
""".format(libdir = libdir))

_llvm_repo = repository_rule(implementation = _llvm_impl, environ = ["PATH"], local = True)

def _catch2_impl(rctx):
    # Debian 12 ships Catch2 v2 (one header), Debian 13 ships v3 (libraries + split headers).
    v3 = rctx.path("/usr/include/catch2/catch_test_macros.hpp").exists
    if v3:
        shim = """#pragma once
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
using Catch::Approx;
// A test case that cannot run here (no GPU, no compiler) reports SKIPPED, not passed.
#define KILN_SKIP(...) SKIP(__VA_ARGS__)
"""
        build = """
cc_library(name = "catch2", hdrs = ["kiln_catch.h"], includes = ["."], linkopts = ["-lCatch2Main", "-lCatch2"],
           visibility = ["//visibility:public"])
"""
    else:
        shim = """#pragma once
#include <catch2/catch.hpp>
// Catch2 v2 has no skipped status: the case says why and passes without assertions.
#define KILN_SKIP(...) WARN(__VA_ARGS__)
"""
        rctx.file("main.cc", "#define CATCH_CONFIG_MAIN\n#include <catch2/catch.hpp>\n")
        build = """
cc_library(name = "catch2", hdrs = ["kiln_catch.h"], includes = ["."], srcs = ["main.cc"],
           visibility = ["//visibility:public"])
"""
    rctx.file("kiln_catch.h", shim)
    rctx.file("BUILD.bazel", build)

_catch2_repo = repository_rule(implementation = _catch2_impl, local = True)

def _nvrtc_impl(rctx):
    # Headers only: libcuda and libnvrtc are opened with dlopen at run time.
    candidates = ["/usr/local/cuda/include", "/usr/local/cuda-13.0/include"]
    python = rctx.os.environ.get("KILN_PYTHON") or _which(rctx, ["python3"])
    if python:
        res = rctx.execute([python, "-c", "import nvidia.cuda_nvrtc as m, os; print(os.path.join(list(m.__path__)[0], 'include'))"])
        if res.return_code == 0:
            candidates.append(res.stdout.strip())
        # The CUDA 13 wheels install into nvidia/cu13/ instead of nvidia/cuda_nvrtc/.
        res = rctx.execute([python, "-c", "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'cu13', 'include'))"])
        if res.return_code == 0:
            candidates.append(res.stdout.strip())
    found = None
    for c in candidates:
        if rctx.path(c + "/nvrtc.h").exists:
            found = c
            break
    if found:
        rctx.symlink(found, "include")
        rctx.file("BUILD.bazel", """
cc_library(name = "nvrtc_headers", hdrs = glob(["include/nvrtc.h", "include/cuda.h"], allow_empty = True),
           includes = ["include"], defines = ["KILN_HAVE_NVRTC_HEADERS=1"], visibility = ["//visibility:public"])
""")
    else:
        rctx.file("BUILD.bazel", """
cc_library(name = "nvrtc_headers", visibility = ["//visibility:public"])
""")

_nvrtc_repo = repository_rule(implementation = _nvrtc_impl, environ = ["KILN_PYTHON", "PATH"], local = True)

def _blas_impl(rctx):
    for d in ["/usr/include/x86_64-linux-gnu/openblas-pthread", "/usr/include/aarch64-linux-gnu/openblas-pthread", "/usr/include/openblas"]:
        if rctx.path(d + "/cblas.h").exists:
            rctx.symlink(d, "include")
            break
    if not rctx.path("include").exists:
        fail("kiln: OpenBLAS headers not found; run scripts/setup.sh")
    rctx.file("BUILD.bazel", """
cc_library(name = "openblas", hdrs = glob(["include/*.h"]), includes = ["include"], linkopts = ["-lopenblas"],
           visibility = ["//visibility:public"])
""")

_blas_repo = repository_rule(implementation = _blas_impl, local = True)

def _system_headers_impl(rctx):
    # Symlink only the named folders of /usr/include, so no other system header shadows a
    # standard one through the repository's include path.
    for d in rctx.attr.dirs:
        src = "/usr/include/" + d
        if not rctx.path(src).exists:
            fail("kiln: %s not found; run scripts/setup.sh" % src)
        rctx.symlink(src, "include/" + d)
    rctx.file("BUILD.bazel", """
cc_library(name = "{target}", hdrs = glob(["include/**"]), includes = ["include"],
           linkopts = {linkopts}, visibility = ["//visibility:public"])
""".format(target = rctx.attr.target, linkopts = repr(rctx.attr.linkopts)))

_system_headers = repository_rule(
    implementation = _system_headers_impl,
    attrs = {"dirs": attr.string_list(), "target": attr.string(), "linkopts": attr.string_list()},
    local = True,
)

def kiln_system_repositories():
    _python_repo(name = "local_python")
    _llvm_repo(name = "local_llvm")
    _catch2_repo(name = "catch2")
    _nvrtc_repo(name = "local_nvrtc")
    _blas_repo(name = "openblas")
    _system_headers(name = "fmt", dirs = ["fmt"], target = "fmt", linkopts = ["-lfmt"])
    _system_headers(name = "pybind11", dirs = ["pybind11"], target = "pybind11")
    _system_headers(name = "nlohmann_json", dirs = ["nlohmann"], target = "json")
