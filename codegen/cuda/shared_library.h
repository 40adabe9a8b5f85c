#pragma once
/// SharedLibrary: a library opened with dlopen at run time, for the CUDA pieces kiln never links
/// against (libnvrtc, libcuda): a machine without them still builds, loads and runs kiln.

#include <memory>
#include <string>
#include <vector>

namespace kiln::codegen::cuda {

class SharedLibrary {
public:
  /// Opens `path` (a file path, or a bare name for the loader's search). Returns null and sets
  /// `error` (dlerror's text) when it cannot be loaded. `global` makes its symbols visible to
  /// libraries loaded later (RTLD_GLOBAL).
  static std::unique_ptr<SharedLibrary> open(const std::string &path, std::string *error,
                                             bool global = false);
  ~SharedLibrary();
  SharedLibrary(const SharedLibrary &) = delete;
  SharedLibrary &operator=(const SharedLibrary &) = delete;

  /// The address of `name`, or null when the library does not export it.
  void *symbol(const char *name) const;
  /// The file the loader actually opened (resolved through the search path), else the request.
  const std::string &path() const { return path_; }

private:
  SharedLibrary(void *handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void *handle_;
  std::string path_;
};

/// Resolves `name` from `lib` into the function pointer `fn`; when missing, appends `name` to
/// `missing` and leaves fn null.
template <typename Fn>
void resolve(const SharedLibrary &lib, Fn &fn, const char *name,
             std::vector<std::string> &missing) {
  fn = reinterpret_cast<Fn>(lib.symbol(name));
  if (!fn)
    missing.push_back(name);
}

/// The files matching `prefix*` in `dir`, sorted; empty when dir does not exist.
std::vector<std::string> filesWithPrefix(const std::string &dir, const std::string &prefix);

} // namespace kiln::codegen::cuda
