#include "distributed/mpi_library.h"

#include "runtime/error.h"

#include <dlfcn.h>

#include <cstdlib>

namespace kiln::distributed::mpi {
namespace {

template <typename T> void resolve(void *lib, const char *name, T &out) {
  void *sym = dlsym(lib, name);
  KILN_CHECK(sym != nullptr, "kiln.distributed: {} is missing from Open MPI's libmpi", name);
  out = reinterpret_cast<T>(sym);
}

Library load() {
  const char *env = std::getenv("KILN_MPI_LIB");
  const char *path = env && *env ? env : "libmpi.so.40";
  // Global: Open MPI's own plugins, which it dlopens in turn, resolve libmpi's symbols.
  void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  KILN_CHECK(lib != nullptr,
             "kiln.distributed: the MPI backend needs Open MPI ({} could not be loaded: {}); "
             "install openmpi-bin (scripts/setup.sh does)",
             path, dlerror());
  Library l{};
  resolve(lib, "MPI_Init_thread", l.initThread);
  resolve(lib, "MPI_Initialized", l.initialized);
  resolve(lib, "MPI_Finalized", l.finalized);
  resolve(lib, "MPI_Finalize", l.finalize);
  resolve(lib, "MPI_Comm_rank", l.commRank);
  resolve(lib, "MPI_Comm_size", l.commSize);
  resolve(lib, "MPI_Comm_set_errhandler", l.commSetErrhandler);
  resolve(lib, "MPI_Error_string", l.errorString);
  resolve(lib, "MPI_Abort", l.abort);
  resolve(lib, "MPI_Iallreduce", l.iallreduce);
  resolve(lib, "MPI_Ibcast", l.ibcast);
  resolve(lib, "MPI_Iallgather", l.iallgather);
  resolve(lib, "MPI_Ireduce_scatter_block", l.ireduceScatterBlock);
  resolve(lib, "MPI_Ireduce", l.ireduce);
  resolve(lib, "MPI_Ibarrier", l.ibarrier);
  resolve(lib, "MPI_Isend", l.isend);
  resolve(lib, "MPI_Irecv", l.irecv);
  resolve(lib, "MPI_Test", l.test);
  resolve(lib, "MPI_Comm_split", l.commSplit);
  resolve(lib, "MPI_Iprobe", l.iprobe);
  // Predefined handles are the addresses of these objects.
  auto handle = [&](const char *name) {
    void *sym = dlsym(lib, name);
    KILN_CHECK(sym != nullptr, "kiln.distributed: {} is missing from libmpi (not Open MPI?)", name);
    return sym;
  };
  l.world = handle("ompi_mpi_comm_world");
  l.null = handle("ompi_mpi_comm_null");
  l.errorsReturn = handle("ompi_mpi_errors_return");
  l.f32 = handle("ompi_mpi_float");
  l.f64 = handle("ompi_mpi_double");
  l.i8 = handle("ompi_mpi_int8_t");
  l.u8 = handle("ompi_mpi_uint8_t");
  l.i16 = handle("ompi_mpi_int16_t");
  l.i32 = handle("ompi_mpi_int32_t");
  l.i64 = handle("ompi_mpi_int64_t");
  l.u16 = handle("ompi_mpi_uint16_t");
  l.boolean = handle("ompi_mpi_c_bool");
  l.sum = handle("ompi_mpi_op_sum");
  l.prod = handle("ompi_mpi_op_prod");
  l.max = handle("ompi_mpi_op_max");
  l.min = handle("ompi_mpi_op_min");
  return l;
}

} // namespace

std::string Library::message(int code) const {
  char text[512];
  int len = 0;
  if (errorString(code, text, &len) != kSuccess)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

const Library &library() {
  static const Library l = load();
  return l;
}

} // namespace kiln::distributed::mpi
