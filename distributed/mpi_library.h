#pragma once
/// Open MPI's C API, opened with dlopen from libmpi.so.40 (Debian's openmpi-bin): the handful of
/// entry points kiln's process groups use, and the predefined handles, which Open MPI exports as
/// global objects (MPI_COMM_WORLD is &ompi_mpi_comm_world). Opening it needs no MPI headers at
/// build time, so one build serves machines with and without MPI.

#include <string>

namespace kiln::distributed::mpi {

// Open MPI's handle types are pointers to opaque structs.
using Comm = void *;
using Datatype = void *;
using Op = void *;
using Request = void *;
using Errhandler = void *;

/// Open MPI 4's MPI_Status layout.
struct Status {
  int source, tag, error, cancelled;
  size_t ucount;
};

inline constexpr int kSuccess = 0;
inline void *const kInPlace = reinterpret_cast<void *>(1); // Open MPI's MPI_IN_PLACE
inline constexpr int kThreadSerialized = 2;
inline constexpr int kThreadMultiple = 3;
inline constexpr int kAnySource = -1, kAnyTag = -1;
inline constexpr int kUndefined = -32766; // Open MPI's MPI_UNDEFINED (a split color: no group)

struct Library {
  int (*initThread)(int *, char ***, int, int *);
  int (*initialized)(int *);
  int (*finalized)(int *);
  int (*finalize)();
  int (*commRank)(Comm, int *);
  int (*commSize)(Comm, int *);
  int (*commSetErrhandler)(Comm, Errhandler);
  int (*errorString)(int, char *, int *);
  int (*abort)(Comm, int);
  int (*iallreduce)(const void *, void *, int, Datatype, Op, Comm, Request *);
  int (*ibcast)(void *, int, Datatype, int, Comm, Request *);
  int (*iallgather)(const void *, int, Datatype, void *, int, Datatype, Comm, Request *);
  int (*ireduceScatterBlock)(const void *, void *, int, Datatype, Op, Comm, Request *);
  int (*ireduce)(const void *, void *, int, Datatype, Op, int, Comm, Request *);
  int (*ibarrier)(Comm, Request *);
  int (*isend)(const void *, int, Datatype, int, int, Comm, Request *);
  int (*irecv)(void *, int, Datatype, int, int, Comm, Request *);
  int (*test)(Request *, int *, Status *);
  int (*commSplit)(Comm, int, int, Comm *);
  int (*iprobe)(int, int, Comm, int *, Status *);

  Comm world, null;
  Errhandler errorsReturn;
  Datatype f32, f64, i8, u8, i16, i32, i64, boolean, u16;
  Op sum, prod, max, min;

  /// The error text MPI gives for `code`.
  std::string message(int code) const;
};

/// The library, loaded on first use; throws kiln's RuntimeError naming what is missing (no Open
/// MPI installed, or a libmpi without these symbols). KILN_MPI_LIB names another path.
const Library &library();

} // namespace kiln::distributed::mpi
