#pragma once
/// The process group of kiln.distributed: every process of an MPI job (launched by mpirun or
/// kilnrun) and the collectives of torch.distributed on CPU tensors, over Open MPI. It also
/// bootstraps the NCCL group of CUDA tensors (nccl_group.h), whose operations are the same Work.
///
/// Each operation is started non-blocking, moved along by a progress thread while the caller
/// computes (MPI_THREAD_MULTIPLE; KILN_MPI_NO_PROGRESS_THREAD=1 turns it off), and finished by
/// Work::wait, which polls it with a deadline: a rank that died, skipped the collective or passed a
/// different tensor makes the others raise an error naming the operation and the rank within the
/// group's timeout, never hang. Before each collective the ranks compare what they pass (element
/// count and dtype) in one small all-reduce, so a mismatch is an error on every rank instead of
/// corrupt data.

#include "runtime/tensor.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln::distributed {

enum class ReduceOp { Sum, Avg, Product, Max, Min };
/// torch's name of `op` ("SUM"), for error messages.
const char *reduceOpName(ReduceOp op);
/// torch's refusals, shared by both backends: AVG of a non-floating tensor, and any reduction
/// of bool tensors but MAX and MIN.
void checkReduceOp(const char *what, DType dtype, ReduceOp op);
/// A Work's completion step after an operation that wrote `t` (its version moves) and read
/// `keep`; both stay alive until the operation is done.
std::function<void()> writtenStep(Tensor t, Tensor keep = Tensor());
/// A Work's completion step after an operation that only read `t`: it stays alive until then.
std::function<void()> keepingStep(Tensor t);

/// An operation in flight, of either backend: an MPI request, or work queued on a device whose
/// completion `poll_` tests (nccl_group.h).
class Work {
public:
  Work() = default;
  Work(const Work &) = delete;
  Work &operator=(const Work &) = delete;
  ~Work();
  /// Polls once; true when finished (its result written).
  bool isCompleted();
  /// Blocks until finished; throws when the group's timeout passes first.
  void wait();

private:
  friend class ProcessGroup;
  friend class NcclGroup;
  void *request_ = nullptr;    ///< the MPI request; null once complete
  std::function<bool()> poll_; ///< without a request: true once done; may throw (a failed peer)
  std::function<std::string()> onTimeout_; ///< before the timeout error (NCCL aborts its
                                           ///< communicator); returns text the error ends with
  std::function<void()> finish_; ///< after completion: the average's division, a copy back; it
                                 ///< also holds the operands' memory until then
  std::string what_;
  std::string stage_; ///< "while the ranks compared their tensors", or empty
  double timeoutSeconds_ = 0;
  int rank_ = 0, size_ = 0;
  bool done_ = false;
  bool progressed_ = false; ///< counted by the progress thread while its request is open
};
using WorkPtr = std::shared_ptr<Work>;

class ProcessGroup {
public:
  /// The world group, initializing MPI on first use (a process started without mpirun is a
  /// world of one).
  static ProcessGroup &world(double timeoutSeconds);
  /// Whether world() has been called and the group not finalized.
  static bool initialized();
  /// The initialized world group; throws torch's error before init_process_group.
  static ProcessGroup &current();

  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeoutSeconds() const { return timeoutSeconds_; }
  void setTimeout(double seconds) { timeoutSeconds_ = seconds; }

  WorkPtr allReduce(const Tensor &t, ReduceOp op);
  WorkPtr broadcast(const Tensor &t, int src);
  /// out holds size() blocks of in's elements, in rank order.
  WorkPtr allGather(const Tensor &out, const Tensor &in);
  /// in holds size() blocks of out's elements; out gets block rank() reduced over ranks.
  WorkPtr reduceScatter(const Tensor &out, const Tensor &in, ReduceOp op);
  WorkPtr reduce(const Tensor &t, int dst, ReduceOp op);
  WorkPtr send(const Tensor &t, int dst, int tag);
  WorkPtr recv(const Tensor &t, int src, int tag);
  WorkPtr barrier();
  /// Finalizes MPI (destroy_process_group); the group cannot be used again in this process.
  void finalize();
  /// torch's new_group: a group of this group's ranks `ranks` (distinct, in range), ordered by
  /// their rank here. Every rank of this group must call it with the same list (they agree on it
  /// first, within the timeout, so a rank that does not come is an error, not a hang); a rank
  /// outside `ranks` gets null.
  std::shared_ptr<ProcessGroup> split(const std::vector<int> &ranks);
  /// Compares `t`'s element count and dtype across the ranks in one small all-reduce (blocking,
  /// with the timeout); throws on every rank when they differ. A group of another backend calls
  /// it before its own collective, so a mismatch is an error everywhere instead of a hang.
  void checkAgreement(const std::string &what, const Tensor &t);

private:
  ProcessGroup() = default;
  /// A Work for `what` with its completion step; the caller starts its request.
  WorkPtr start(std::string what, std::function<void()> finish);

  void *comm_ = nullptr; ///< the MPI communicator
  bool isWorld_ = false;
  int rank_ = 0, size_ = 1;
  double timeoutSeconds_ = 1800;
  bool finalized_ = false;
};

} // namespace kiln::distributed
