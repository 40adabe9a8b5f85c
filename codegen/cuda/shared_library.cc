#include "codegen/cuda/shared_library.h"

#include <algorithm>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <link.h>

namespace kiln::codegen::cuda {

std::unique_ptr<SharedLibrary> SharedLibrary::open(const std::string &path, std::string *error,
                                                   bool global) {
  void *handle = ::dlopen(path.c_str(), RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
  if (!handle) {
    const char *why = ::dlerror();
    *error = why ? why : "dlopen failed";
    return nullptr;
  }
  std::string resolved = path;
  struct link_map *map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
    resolved = map->l_name;
  return std::unique_ptr<SharedLibrary>(new SharedLibrary(handle, std::move(resolved)));
}

SharedLibrary::~SharedLibrary() { ::dlclose(handle_); }

void *SharedLibrary::symbol(const char *name) const { return ::dlsym(handle_, name); }

std::vector<std::string> filesWithPrefix(const std::string &dir, const std::string &prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0)
      out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
bool isDir(const std::string &p) {
  std::error_code ec;
  return std::filesystem::is_directory(p, ec);
}
} // namespace

void LibrarySearch::addRoot(const std::string &dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(roots_.begin(), roots_.end(), dir) == roots_.end())
    roots_.push_back(dir);
}

void LibrarySearch::addFolder(const std::string &dir, std::vector<std::string> &out) const {
  if (!isDir(dir))
    return;
  namespace fs = std::filesystem;
  for (const std::string &name : names_) {
    std::error_code ec;
    if (fs::exists(fs::path(dir) / name, ec)) {
      out.push_back((fs::path(dir) / name).string());
      return;
    }
  }
  for (const std::string &f : filesWithPrefix(dir, anyPrefix_))
    if (f.find(".alt.") == std::string::npos) {
      out.push_back(f);
      return;
    }
}

void LibrarySearch::addSitePackages(const std::string &root, std::vector<std::string> &out) const {
  for (const std::string &sub : wheelDirs_)
    addFolder((std::filesystem::path(root) / sub).string(), out);
}

std::vector<std::string> LibrarySearch::candidates() const {
  std::vector<std::string> out;
  if (const char *env = std::getenv(envVar_); env && *env) {
    if (isDir(env))
      addFolder(env, out);
    else
      out.push_back(env);
  }
  addFolder("/usr/local/cuda/lib64", out);
#if defined(__aarch64__)
  addFolder("/usr/local/cuda/targets/sbsa-linux/lib", out);
#else
  addFolder("/usr/local/cuda/targets/x86_64-linux/lib", out);
#endif
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string &root : roots_)
      addSitePackages(root, out);
  }
  if (const char *venv = std::getenv("VIRTUAL_ENV"); venv && *venv)
    for (const std::string &py : filesWithPrefix(std::string(venv) + "/lib", "python3"))
      addSitePackages(py + "/site-packages", out);
  for (const std::string &name : names_)
    out.push_back(name);
  // The same file can be reached twice (a symlinked toolkit, a root given twice).
  std::vector<std::string> unique;
  for (const std::string &c : out)
    if (std::find(unique.begin(), unique.end(), c) == unique.end())
      unique.push_back(c);
  return unique;
}

} // namespace kiln::codegen::cuda
