#pragma once
/// SharedLibrary: a library opened with dlopen at run time, for the CUDA pieces kiln never links
/// against (libnvrtc, libcuda): a machine without them still builds, loads and runs kiln.

#include <memory>
#include <mutex>
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

/// Where one CUDA library (libnvrtc, libcublas) may be, in the order to try: `$envVar` (a file,
/// or a folder to look in), the toolkit's folders, the wheel folders under every root given to
/// addRoot (the frontend adds `sys.path`) and under `$VIRTUAL_ENV`'s site-packages, then the
/// bare names for the loader's own search. In a folder the first of `names` present wins, else
/// the first `anyPrefix*` file (not an `.alt.` variant). Thread-safe.
class LibrarySearch {
public:
  LibrarySearch(const char *envVar, std::vector<std::string> names, std::string anyPrefix,
                std::vector<std::string> wheelDirs)
      : envVar_(envVar), names_(std::move(names)), anyPrefix_(std::move(anyPrefix)),
        wheelDirs_(std::move(wheelDirs)) {}

  void addRoot(const std::string &dir);
  /// Every candidate once, in order.
  std::vector<std::string> candidates() const;

private:
  void addFolder(const std::string &dir, std::vector<std::string> &out) const;
  void addSitePackages(const std::string &root, std::vector<std::string> &out) const;

  const char *envVar_;
  std::vector<std::string> names_;
  std::string anyPrefix_;
  std::vector<std::string> wheelDirs_;
  mutable std::mutex mu_;
  std::vector<std::string> roots_;
};

} // namespace kiln::codegen::cuda
