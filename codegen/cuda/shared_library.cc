#include "codegen/cuda/shared_library.h"

#include <algorithm>
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

} // namespace kiln::codegen::cuda
