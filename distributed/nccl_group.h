#pragma once
/// The NCCL group of kiln.distributed: the collectives of torch.distributed on CUDA tensors, over
/// NCCL (nccl_library.h, opened with dlopen), for the same ranks as the MPI world group
/// (process_group.h), which bootstraps it and stays the group of CPU tensors.
///
/// Setup (init, collective over the world): rank 0 asks NCCL for a unique id, the world group
/// broadcasts its 128 bytes, and every rank creates its communicator on its device: the one
/// asked for, else LOCAL_RANK (or Open MPI's OMPI_COMM_WORLD_LOCAL_RANK) modulo the device count.
///
/// Each collective is queued on the device's default stream, the stream kiln queues all its CUDA
/// work on, so it runs after the ops that produced its tensors and before the ops that read
/// them, with no host synchronization. It returns the MPI group's Work: completion is a CUDA
/// event recorded behind the collective; Work::wait polls it with the world group's timeout and
/// checks the communicator's asynchronous error meanwhile. When the timeout passes, or NCCL
/// reports an error (a peer that died), the communicator is aborted, so its kernels stop, and
/// the wait raises; the group cannot run collectives after that. As with MPI, the ranks compare
/// each collective's element count and dtype first (over MPI), so a mismatch is an error on every
/// rank instead of a hang or corrupt data.
///
/// The deadline covers the device's work, not NCCL's setup: ncclCommInitRank, and the
/// connections NCCL makes between the ranks at their first collectives of each kind (unless
/// NCCL_RUNTIME_CONNECT=0 makes them all at init), block the calling thread until every rank
/// takes part. The MPI bootstrap before init has the deadline, so a rank that never joins is
/// still an error there.

#include "distributed/process_group.h"
#include "runtime/tensor.h"

#include <memory>
#include <string>

namespace kiln::distributed {

struct NcclState;

class NcclGroup {
public:
  /// Why NCCL cannot use a CUDA device here (no driver or GPU, or only the host emulator);
  /// empty when it can.
  static std::string cudaMissing();
  /// Why libnccl cannot be loaded (nccl_library.h); empty when it can.
  static std::string libraryMissing();
  /// Both reasons, joined; empty when the NCCL backend can run here.
  static std::string unavailableReason();

  /// Creates the group over `world`'s ranks on CUDA device `device` (-1: from the local rank).
  /// Every rank must call it. Throws kiln's RuntimeError naming what is missing when NCCL cannot
  /// run here, and when the group already exists.
  static NcclGroup &init(ProcessGroup &world, int device);
  static bool initialized();
  /// The initialized group; throws naming how to create it.
  static NcclGroup &current();
  /// Releases the communicator (ncclCommDestroy, or ncclCommAbort after a failure) and forgets
  /// the group; a no-op when none exists.
  static void destroy();

  int rank() const { return world_.rank(); }
  int size() const { return world_.size(); }
  int device() const { return device_; }
  /// NCCL's version, "2.28.3".
  std::string version() const;

  WorkPtr allReduce(const Tensor &t, ReduceOp op);
  WorkPtr broadcast(const Tensor &t, int src);
  /// out holds size() blocks of in's elements, in rank order.
  WorkPtr allGather(const Tensor &out, const Tensor &in);
  /// in holds size() blocks of out's elements; out gets block rank() reduced over ranks.
  WorkPtr reduceScatter(const Tensor &out, const Tensor &in, ReduceOp op);
  WorkPtr reduce(const Tensor &t, int dst, ReduceOp op);
  /// NCCL has no tags: a send matches the peer's next recv from this rank.
  WorkPtr send(const Tensor &t, int dst);
  WorkPtr recv(const Tensor &t, int src);

  ~NcclGroup();
  NcclGroup(const NcclGroup &) = delete;
  NcclGroup &operator=(const NcclGroup &) = delete;

private:
  NcclGroup(ProcessGroup &world, int device, std::shared_ptr<NcclState> state);
  /// Checks `t` for `what`: a contiguous CUDA tensor on this group's device, of a dtype NCCL
  /// carries; returns NCCL's type for it.
  int checkTensor(const char *what, const Tensor &t) const;
  /// Queues `call` (one NCCL call on the communicator and the default stream, moving `count`
  /// elements) and returns its Work, whose completion step is `finish`.
  template <typename Call>
  WorkPtr launch(std::string what, std::function<void()> finish, size_t count, Call call);

  ProcessGroup &world_;
  int device_;
  std::shared_ptr<NcclState> state_; ///< shared with Works in flight
};

} // namespace kiln::distributed
