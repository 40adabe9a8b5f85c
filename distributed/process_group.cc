#include "distributed/process_group.h"

#include "distributed/mpi_library.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::distributed {
namespace {

const mpi::Library &lib() { return mpi::library(); }

void check(int code, const std::string &what) {
  if (code != mpi::kSuccess)
    fail(ErrorKind::Runtime, "kiln.distributed: {} failed: {}", what, lib().message(code));
}

mpi::Op mpiOp(ReduceOp op) {
  switch (op) {
  case ReduceOp::Product:
    return lib().prod;
  case ReduceOp::Max:
    return lib().max;
  case ReduceOp::Min:
    return lib().min;
  default:
    return lib().sum;
  }
}

/// The MPI type a tensor's elements travel as (half precision as 16-bit words when no
/// arithmetic is done on them).
mpi::Datatype mpiType(DType t) {
  switch (t) {
  case DType::Float32:
    return lib().f32;
  case DType::Float64:
    return lib().f64;
  case DType::Int64:
    return lib().i64;
  case DType::Int32:
    return lib().i32;
  case DType::Int16:
    return lib().i16;
  case DType::Int8:
    return lib().i8;
  case DType::UInt8:
    return lib().u8;
  case DType::Bool:
    return lib().boolean;
  case DType::Float16:
  case DType::BFloat16:
    return lib().u16;
  default:
    fail(ErrorKind::Runtime, "kiln.distributed: dtype {} is not supported", dtypeName(t));
  }
}

void requireDense(const char *what, const Tensor &t) {
  KILN_CHECK(t.isCpu(), "kiln.distributed.{}: the MPI backend takes CPU tensors, got {}", what,
             t.device().str());
  KILN_CHECK(t.isContiguous(), "kiln.distributed.{}: Tensors must be contiguous", what);
  KILN_CHECK(t.numel() <= INT_MAX,
             "kiln.distributed.{}: {} elements exceed MPI's 32-bit count; split the tensor", what,
             t.numel());
}

int count(const Tensor &t) { return static_cast<int>(t.numel()); }

/// The buffer a reduction runs on: the tensor itself, or a float32 copy of a half one (MPI has
/// no 16-bit float arithmetic); finish() writes a copy back and divides an average.
struct ReduceBuffer {
  Tensor buffer;
  std::function<void()> finish;
};

ReduceBuffer reduceBuffer(const char *what, const Tensor &t, ReduceOp op, int size) {
  checkReduceOp(what, t.dtype(), op);
  Tensor buf = isReducedFloat(t.dtype()) ? t.to(DType::Float32) : t;
  Tensor target = t;
  auto finish = [buf, target, op, size]() mutable {
    Tensor result = buf;
    if (op == ReduceOp::Avg)
      result = ops::div(buf, Tensor::wrapScalar(Scalar(static_cast<double>(size))));
    if (!result.isSameAs(target))
      target.copy_(result);
    target.bumpVersion();
  };
  return {buf, finish};
}

ProcessGroup *gWorld = nullptr;

/// Open MPI moves a non-blocking collective along only inside MPI calls, so without help an
/// all-reduce started from a backward hook would sit still until the step waits for it. While any
/// operation is open, this thread probes MPI every few tens of microseconds (MPI_Iprobe touches
/// no request of ours, so it may run beside the caller's MPI_Test under MPI_THREAD_MULTIPLE),
/// which moves them all; DistributedDataParallel's buckets then travel while the backward
/// computes. It sleeps while nothing is open.
class Progress {
public:
  void opened() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable())
      thread_ = std::thread([this] { loop(); });
    if (++open_ == 1)
      wake_.notify_one();
  }
  void closed() {
    std::lock_guard<std::mutex> lock(mu_);
    --open_;
  }
  /// Before MPI_Finalize: no MPI call may follow it.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      wake_.notify_one();
    }
    if (thread_.joinable())
      thread_.join();
  }

private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      wake_.wait(lock, [this] { return open_ > 0 || stop_; });
      if (stop_)
        return;
      lock.unlock();
      int flag = 0;
      mpi::Status status{};
      lib().iprobe(mpi::kAnySource, mpi::kAnyTag, lib().world, &flag, &status);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::thread thread_;
  int open_ = 0;
  bool stop_ = false;
};

/// The progress thread, when MPI runs with MPI_THREAD_MULTIPLE (null otherwise, and after
/// finalize: operations then advance only while the caller tests or waits).
Progress *gProgress = nullptr;

} // namespace

namespace {

/// Requests whose Work was dropped before they completed (a wait that timed out, an error that
/// unwound past a pending bucket): MPI may still write into their operands, so the operands
/// (held by the completion step) live here until the request is done. Each new operation sweeps
/// the finished ones; finalize, which ends the rest, drops them all.
struct Orphan {
  mpi::Request request;
  std::function<void()> keep;
};
std::mutex gOrphansMutex;
std::vector<Orphan> gOrphans;

void sweepOrphans() {
  std::lock_guard<std::mutex> lock(gOrphansMutex);
  std::erase_if(gOrphans, [](Orphan &o) {
    int flag = 0;
    mpi::Status status{};
    return lib().test(&o.request, &flag, &status) != mpi::kSuccess || flag;
  });
}

} // namespace

Work::~Work() {
  if (request_) {
    std::lock_guard<std::mutex> lock(gOrphansMutex);
    gOrphans.push_back({request_, std::move(finish_)});
  }
  if (progressed_ && gProgress)
    gProgress->closed();
}

const char *reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return "SUM";
  case ReduceOp::Avg:
    return "AVG";
  case ReduceOp::Product:
    return "PRODUCT";
  case ReduceOp::Max:
    return "MAX";
  case ReduceOp::Min:
    return "MIN";
  }
  return "?";
}

void checkReduceOp(const char *what, DType dtype, ReduceOp op) {
  if (op == ReduceOp::Avg)
    KILN_CHECK(isFloating(dtype),
               "kiln.distributed.{}: ReduceOp.AVG needs a floating tensor, got {}", what,
               dtypeName(dtype));
  KILN_CHECK(dtype != DType::Bool || op == ReduceOp::Max || op == ReduceOp::Min,
             "kiln.distributed.{}: bool tensors reduce with MAX or MIN only, not {}", what,
             reduceOpName(op));
}

std::function<void()> writtenStep(Tensor t, Tensor keep) {
  return [t, keep]() mutable { t.bumpVersion(); };
}

std::function<void()> keepingStep(Tensor t) {
  return [t] {};
}

bool Work::isCompleted() {
  if (done_)
    return true;
  if (request_) {
    int flag = 0;
    mpi::Status status{};
    check(lib().test(&request_, &flag, &status), what_);
    if (!flag)
      return false;
    request_ = nullptr; // MPI_REQUEST_NULL once complete
    if (progressed_ && gProgress)
      gProgress->closed();
    progressed_ = false;
  } else if (poll_) {
    if (!poll_())
      return false;
    poll_ = nullptr;
  }
  done_ = true;
  if (finish_)
    finish_();
  return true;
}

void Work::wait() {
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(timeoutSeconds_));
  for (int polls = 0; !isCompleted(); ++polls) {
    if (Clock::now() > deadline) {
      std::string after = onTimeout_ ? onTimeout_() : std::string();
      fail(ErrorKind::Runtime,
           "kiln.distributed: {} on rank {} of {} did not complete within {} s{}: another rank "
           "exited, skipped this collective or has not reached it (init_process_group's "
           "timeout= sets the limit){}",
           what_, rank_, size_, timeoutSeconds_, stage_, after);
    }
    if (polls > 1000) // spin briefly, then let the other ranks' processes have the cores
      std::this_thread::sleep_for(std::chrono::microseconds(polls > 20000 ? 1000 : 50));
  }
}

ProcessGroup &ProcessGroup::current() {
  KILN_CHECK(initialized(),
             "Default process group has not been initialized, please make sure to call "
             "init_process_group.");
  return *gWorld;
}

ProcessGroup &ProcessGroup::world(double timeoutSeconds) {
  static ProcessGroup *group = [] {
    const mpi::Library &l = lib();
    int already = 0;
    check(l.initialized(&already), "MPI_Initialized");
    if (!already) {
      int provided = 0;
      check(l.initThread(nullptr, nullptr, mpi::kThreadMultiple, &provided), "MPI_Init");
      const char *off = std::getenv("KILN_MPI_NO_PROGRESS_THREAD");
      if (provided >= mpi::kThreadMultiple && !(off && *off && std::strcmp(off, "0") != 0))
        gProgress = new Progress();
    }
    // Errors come back as codes (kiln raises them) instead of aborting the job.
    check(l.commSetErrhandler(l.world, l.errorsReturn), "MPI_Comm_set_errhandler");
    auto *g = new ProcessGroup();
    g->comm_ = l.world;
    g->isWorld_ = true;
    check(l.commRank(l.world, &g->rank_), "MPI_Comm_rank");
    check(l.commSize(l.world, &g->size_), "MPI_Comm_size");
    return g;
  }();
  KILN_CHECK(!group->finalized_,
             "kiln.distributed: the process group was destroyed; MPI cannot be initialized "
             "twice in one process");
  group->timeoutSeconds_ = timeoutSeconds;
  gWorld = group;
  return *group;
}

bool ProcessGroup::initialized() { return gWorld && !gWorld->finalized_; }

void ProcessGroup::finalize() {
  if (finalized_)
    return;
  KILN_CHECK(isWorld_, "kiln.distributed: destroy_process_group of a group from new_group is not "
                       "supported; destroy the default group (MPI ends with it)");
  if (gProgress) {
    gProgress->stop();
    delete gProgress;
    gProgress = nullptr;
  }
  int done = 0;
  lib().finalized(&done);
  if (!done)
    check(lib().finalize(), "MPI_Finalize");
  // What was still pending ended with MPI; its operands can go now.
  std::lock_guard<std::mutex> lock(gOrphansMutex);
  gOrphans.clear();
  finalized_ = true;
}

WorkPtr ProcessGroup::start(std::string what, std::function<void()> finish) {
  KILN_CHECK(!finalized_ && initialized(), "kiln.distributed.{}: the process group was destroyed",
             what);
  sweepOrphans();
  auto w = std::make_shared<Work>();
  w->what_ = std::move(what);
  w->finish_ = std::move(finish);
  w->timeoutSeconds_ = timeoutSeconds_;
  w->rank_ = rank_;
  w->size_ = size_;
  if (gProgress) { // every operation started here opens an MPI request
    gProgress->opened();
    w->progressed_ = true;
  }
  return w;
}

void ProcessGroup::checkAgreement(const std::string &what, const Tensor &t) {
  if (size_ == 1)
    return;
  const int64_t numel = t.numel();
  // One MAX all-reduce gives every rank the largest and (negated) smallest of each value.
  Tensor meta = Tensor::empty({4}, DType::Int64);
  int64_t *m = meta.data<int64_t>();
  int64_t dtype = static_cast<int64_t>(t.dtype());
  m[0] = numel, m[1] = -numel, m[2] = dtype, m[3] = -dtype;
  WorkPtr w = start(what, writtenStep(meta));
  w->stage_ = " (while the ranks compared their tensors)";
  check(lib().iallreduce(mpi::kInPlace, m, 4, lib().i64, lib().max, comm_, &w->request_), what);
  w->wait();
  KILN_CHECK(m[0] == -m[1],
             "kiln.distributed.{}: the ranks passed tensors of different sizes ({} to {} "
             "elements; this rank, {}, passed {})",
             what, -m[1], m[0], rank_, numel);
  KILN_CHECK(m[2] == -m[3],
             "kiln.distributed.{}: the ranks passed tensors of different dtypes (this rank, {}, "
             "passed {})",
             what, rank_, dtypeName(t.dtype()));
}

WorkPtr ProcessGroup::allReduce(const Tensor &t, ReduceOp op) {
  requireDense("all_reduce", t);
  checkAgreement("all_reduce", t);
  ReduceBuffer rb = reduceBuffer("all_reduce", t, op, size_);
  WorkPtr w = start("all_reduce", rb.finish);
  check(lib().iallreduce(mpi::kInPlace, rb.buffer.rawData(), count(rb.buffer),
                         mpiType(rb.buffer.dtype()), mpiOp(op), comm_, &w->request_),
        "all_reduce");
  return w;
}

WorkPtr ProcessGroup::broadcast(const Tensor &t, int src) {
  requireDense("broadcast", t);
  KILN_CHECK(src >= 0 && src < size_, "kiln.distributed.broadcast: src {} is not a rank of {}", src,
             size_);
  checkAgreement("broadcast", t);
  WorkPtr w = start("broadcast", writtenStep(t));
  check(lib().ibcast(t.rawData(), count(t), mpiType(t.dtype()), src, comm_, &w->request_),
        "broadcast");
  return w;
}

WorkPtr ProcessGroup::allGather(const Tensor &out, const Tensor &in) {
  requireDense("all_gather", out);
  requireDense("all_gather", in);
  KILN_CHECK(out.numel() == in.numel() * size_ && out.dtype() == in.dtype(),
             "kiln.distributed.all_gather: the output must hold world_size ({}) times the "
             "input's {} elements of {}, got {} of {}",
             size_, in.numel(), dtypeName(in.dtype()), out.numel(), dtypeName(out.dtype()));
  checkAgreement("all_gather", in);
  WorkPtr w = start("all_gather", writtenStep(out, in));
  mpi::Datatype type = mpiType(in.dtype());
  check(lib().iallgather(in.rawData(), count(in), type, out.rawData(), count(in), type, comm_,
                         &w->request_),
        "all_gather");
  return w;
}

WorkPtr ProcessGroup::reduceScatter(const Tensor &out, const Tensor &in, ReduceOp op) {
  requireDense("reduce_scatter", out);
  requireDense("reduce_scatter", in);
  KILN_CHECK(in.numel() == out.numel() * size_ && out.dtype() == in.dtype(),
             "kiln.distributed.reduce_scatter: the input must hold world_size ({}) times the "
             "output's {} elements of {}, got {} of {}",
             size_, out.numel(), dtypeName(out.dtype()), in.numel(), dtypeName(in.dtype()));
  checkAgreement("reduce_scatter", in);
  ReduceBuffer rb = reduceBuffer("reduce_scatter", out, op, size_);
  Tensor source = isReducedFloat(in.dtype()) ? in.to(DType::Float32) : in;
  WorkPtr w = start("reduce_scatter", [finish = rb.finish, source] { finish(); });
  check(lib().ireduceScatterBlock(source.rawData(), rb.buffer.rawData(), count(rb.buffer),
                                  mpiType(rb.buffer.dtype()), mpiOp(op), comm_, &w->request_),
        "reduce_scatter");
  return w;
}

WorkPtr ProcessGroup::reduce(const Tensor &t, int dst, ReduceOp op) {
  requireDense("reduce", t);
  KILN_CHECK(dst >= 0 && dst < size_, "kiln.distributed.reduce: dst {} is not a rank of {}", dst,
             size_);
  checkAgreement("reduce", t);
  ReduceBuffer rb = reduceBuffer("reduce", t, op, size_);
  const bool root = rank_ == dst;
  // Only the root's tensor receives the result; the others' buffer is only read.
  WorkPtr w = start("reduce", root ? rb.finish : keepingStep(rb.buffer));
  check(lib().ireduce(root ? mpi::kInPlace : rb.buffer.rawData(),
                      root ? rb.buffer.rawData() : nullptr, count(rb.buffer),
                      mpiType(rb.buffer.dtype()), mpiOp(op), dst, comm_, &w->request_),
        "reduce");
  return w;
}

WorkPtr ProcessGroup::send(const Tensor &t, int dst, int tag) {
  requireDense("send", t);
  KILN_CHECK(dst >= 0 && dst < size_ && dst != rank_,
             "kiln.distributed.send: dst {} is not another rank of {}", dst, size_);
  WorkPtr w = start("send to rank " + std::to_string(dst), keepingStep(t));
  check(lib().isend(t.rawData(), count(t), mpiType(t.dtype()), dst, tag, comm_, &w->request_),
        "send");
  return w;
}

WorkPtr ProcessGroup::recv(const Tensor &t, int src, int tag) {
  requireDense("recv", t);
  KILN_CHECK(src >= 0 && src < size_ && src != rank_,
             "kiln.distributed.recv: src {} is not another rank of {}", src, size_);
  WorkPtr w = start("recv from rank " + std::to_string(src), writtenStep(t));
  check(lib().irecv(t.rawData(), count(t), mpiType(t.dtype()), src, tag, comm_, &w->request_),
        "recv");
  return w;
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(const std::vector<int> &ranks) {
  std::vector<bool> listed(static_cast<size_t>(size_), false);
  for (int r : ranks) {
    KILN_CHECK(r >= 0 && r < size_, "kiln.distributed.new_group: rank {} is not a rank of the {}",
               r, size_);
    KILN_CHECK(!listed[r], "kiln.distributed.new_group: rank {} is listed twice", r);
    listed[r] = true;
  }
  // MPI_Comm_split blocks until every rank calls it: first agree, with the deadline, on the list
  // (its length, then its entries), so a rank that never comes is an error instead of a hang.
  auto agree = [this](const std::vector<int64_t> &values) {
    Tensor low = Tensor::empty({static_cast<int64_t>(values.size())}, DType::Int64);
    std::copy(values.begin(), values.end(), low.data<int64_t>());
    Tensor high = low.clone();
    allReduce(low, ReduceOp::Min)->wait();
    allReduce(high, ReduceOp::Max)->wait();
    KILN_CHECK(std::equal(values.begin(), values.end(), low.data<int64_t>()) &&
                   std::equal(values.begin(), values.end(), high.data<int64_t>()),
               "kiln.distributed.new_group: the ranks passed different rank lists (every rank "
               "must call new_group with the same ranks)");
  };
  agree({static_cast<int64_t>(ranks.size())});
  if (!ranks.empty())
    agree(std::vector<int64_t>(ranks.begin(), ranks.end()));
  const bool member = listed[rank_];
  int position = 0;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == rank_)
      position = static_cast<int>(i);
  mpi::Comm comm = nullptr;
  check(lib().commSplit(comm_, member ? 0 : mpi::kUndefined, position, &comm), "new_group");
  if (!member || comm == lib().null)
    return nullptr;
  check(lib().commSetErrhandler(comm, lib().errorsReturn), "MPI_Comm_set_errhandler");
  std::shared_ptr<ProcessGroup> g(new ProcessGroup());
  g->comm_ = comm;
  g->timeoutSeconds_ = timeoutSeconds_;
  check(lib().commRank(comm, &g->rank_), "MPI_Comm_rank");
  check(lib().commSize(comm, &g->size_), "MPI_Comm_size");
  return g;
}

WorkPtr ProcessGroup::barrier() {
  WorkPtr w = start("barrier", nullptr);
  check(lib().ibarrier(comm_, &w->request_), "barrier");
  return w;
}

} // namespace kiln::distributed
