#include "distributed/nccl_group.h"

#include "codegen/cuda/driver.h"
#include "codegen/cuda/event.h"
#include "cuda/backend.h"
#include "distributed/nccl_library.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace kiln::distributed {

using codegen::cuda::CudaEvent;
using codegen::cuda::Driver;

/// The communicator and what Works in flight need of it; they may outlive the group.
struct NcclState {
  const nccl::Library *lib = nullptr;
  const Driver *driver = nullptr;
  int device = 0;
  std::mutex mu;             ///< NCCL calls on one communicator must not overlap
  nccl::Comm comm = nullptr; ///< null once destroyed or aborted
  std::string failure;       ///< why it was aborted; empty while usable

  /// Aborts the communicator (its kernels stop waiting for peers) for `why`; `mu` held.
  void abortLocked(std::string why) {
    if (failure.empty())
      failure = std::move(why);
    if (!comm)
      return;
    try {
      driver->primaryContext(device);
    } catch (const std::exception &) {
      // Aborting anyway frees what NCCL can; the error being raised says what went wrong.
    }
    lib->commAbort(comm);
    comm = nullptr;
  }
};

namespace {

// kiln queues its CUDA work on each device's default stream (codegen/cuda/event.h).
const nccl::Stream kDefaultStream = nullptr;

NcclGroup *gGroup = nullptr;

constexpr const char *kAbortedNote =
    "; the NCCL communicator was aborted, so CUDA collectives cannot run again in this process";

void check(const nccl::Library &lib, nccl::Result r, const std::string &what) {
  if (r != nccl::kSuccess && r != nccl::kInProgress)
    fail(ErrorKind::Runtime, "kiln.distributed.{}: NCCL failed: {}", what, lib.message(r));
}

nccl::DataType ncclType(const char *what, DType t) {
  switch (t) {
  case DType::Float32:
    return nccl::kFloat32;
  case DType::Float64:
    return nccl::kFloat64;
  case DType::BFloat16:
    return nccl::kBfloat16;
  case DType::Float16:
    return nccl::kFloat16;
  case DType::Int64:
    return nccl::kInt64;
  case DType::Int32:
    return nccl::kInt32;
  case DType::Int8:
    return nccl::kInt8;
  case DType::UInt8:
  case DType::Bool: // one byte, 0 or 1: MAX and MIN of bytes are OR and AND
    return nccl::kUint8;
  default:
    fail(ErrorKind::Runtime,
         "kiln.distributed.{}: the NCCL backend does not carry {} tensors (float32, float64, "
         "bfloat16, float16, int64, int32, int8, uint8 and bool)",
         what, dtypeName(t));
  }
}

nccl::RedOp ncclOp(const nccl::Library &lib, const char *what, DType t, ReduceOp op) {
  checkReduceOp(what, t, op);
  switch (op) {
  case ReduceOp::Sum:
    return nccl::kSum;
  case ReduceOp::Product:
    return nccl::kProd;
  case ReduceOp::Max:
    return nccl::kMax;
  case ReduceOp::Min:
    return nccl::kMin;
  case ReduceOp::Avg:
    KILN_CHECK(lib.version >= 21000,
               "kiln.distributed.{}: ReduceOp.AVG needs NCCL 2.10 or later, {} has {}", what,
               lib.path, lib.versionString());
    return nccl::kAvg;
  }
  return nccl::kSum;
}

/// The local rank that picks this process's device: LOCAL_RANK (torchrun's), else Open MPI's,
/// else the world rank (one machine).
int localRank(const ProcessGroup &world) {
  for (const char *name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"}) {
    const char *value = std::getenv(name);
    if (!value || !*value)
      continue;
    char *end = nullptr;
    errno = 0;
    long v = std::strtol(value, &end, 10);
    KILN_CHECK(errno == 0 && *end == '\0' && v >= 0 && v <= INT32_MAX,
               "kiln.distributed: {}={} is not a local rank (a non-negative integer)", name, value);
    return static_cast<int>(v);
  }
  return world.rank();
}

} // namespace

std::string NcclGroup::cudaMissing() {
  std::string reason;
  cuda::Backend *backend = cuda::Backend::get(&reason);
  if (!backend)
    return fmt::format("no CUDA device ({})", reason);
  if (backend->emulated())
    return "no CUDA device (KILN_CUDA_EMULATOR=1 emulates one in host memory, which NCCL cannot "
           "use)";
  if (backend->deviceCount() == 0)
    return "no CUDA device (the driver reports none)";
  return {};
}

std::string NcclGroup::libraryMissing() {
  std::string reason;
  return nccl::tryLibrary(&reason) ? std::string() : reason;
}

std::string NcclGroup::unavailableReason() {
  std::string cuda = cudaMissing(), library = libraryMissing();
  if (!cuda.empty() && !library.empty())
    return cuda + "; and " + library;
  return cuda.empty() ? library : cuda;
}

bool NcclGroup::initialized() { return gGroup != nullptr; }

NcclGroup &NcclGroup::current() {
  KILN_CHECK(gGroup,
             "kiln.distributed: CUDA tensors need the NCCL backend: init_process_group(backend="
             "'nccl') (or 'cpu:mpi,cuda:nccl') sets it up");
  return *gGroup;
}

NcclGroup &NcclGroup::init(ProcessGroup &world, int device) {
  KILN_CHECK(!gGroup, "kiln.distributed: the NCCL group is already initialized");
  if (std::string why = unavailableReason(); !why.empty())
    fail(ErrorKind::Runtime, "kiln.distributed: the NCCL backend cannot run here: {}", why);
  const int count = cuda::Backend::get()->deviceCount();
  if (device < 0)
    device = localRank(world) % count;
  KILN_CHECK(device < count,
             "kiln.distributed: device_id cuda:{} does not exist (this machine has {} CUDA "
             "device{})",
             device, count, count == 1 ? "" : "s");
  const nccl::Library &lib = nccl::library();
  const Driver *driver = Driver::get();
  KILN_CHECK(driver, "kiln.distributed: the NCCL backend cannot run here: {}",
             Driver::unavailableReason());

  // Rank 0's id reaches the others over MPI, whose broadcast has the group's timeout: a rank
  // that never gets here is an error, not a hang in ncclCommInitRank.
  Tensor id = Tensor::empty({static_cast<int64_t>(sizeof(nccl::UniqueId))}, DType::UInt8);
  std::memset(id.rawData(), 0, sizeof(nccl::UniqueId));
  if (world.rank() == 0)
    check(lib, lib.getUniqueId(reinterpret_cast<nccl::UniqueId *>(id.rawData())),
          "init_process_group (ncclGetUniqueId)");
  world.broadcast(id, 0)->wait();
  nccl::UniqueId uid;
  std::memcpy(&uid, id.rawData(), sizeof uid);

  // NCCL's CUDA runtime works on the context current on the calling thread.
  driver->primaryContext(device);
  nccl::Comm comm = nullptr;
  check(lib, lib.commInitRank(&comm, world.size(), uid, world.rank()),
        fmt::format("init_process_group (ncclCommInitRank, rank {} of {} on cuda:{})", world.rank(),
                    world.size(), device));
  auto state = std::make_shared<NcclState>();
  state->lib = &lib;
  state->driver = driver;
  state->device = device;
  state->comm = comm;
  gGroup = new NcclGroup(world, device, std::move(state));
  return *gGroup;
}

NcclGroup::NcclGroup(ProcessGroup &world, int device, std::shared_ptr<NcclState> state)
    : world_(world), device_(device), state_(std::move(state)) {}

NcclGroup::~NcclGroup() {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->comm)
    return;
  try {
    state_->driver->primaryContext(device_);
  } catch (const std::exception &) {
    return; // the context is gone, and the communicator's memory with it
  }
  // ncclCommDestroy waits, without a deadline, for the communicator's queued work, which never
  // ends when a peer died while a collective was queued (an async bucket whose Work was dropped
  // while an error unwound). Wait for the device with the group's timeout first; abort when it
  // does not drain, or after a failure.
  bool drained = state_->failure.empty();
  if (drained) {
    try {
      CudaEvent done(*state_->driver, device_, CudaEvent::kDisableTiming);
      done.record();
      using Clock = std::chrono::steady_clock;
      auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(world_.timeoutSeconds()));
      while (drained && !done.query()) {
        nccl::Result async = nccl::kSuccess;
        state_->lib->commGetAsyncError(state_->comm, &async);
        drained =
            Clock::now() < deadline && (async == nccl::kSuccess || async == nccl::kInProgress);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    } catch (const std::exception &) {
      drained = false;
    }
  }
  if (drained)
    state_->lib->commDestroy(state_->comm);
  else
    state_->lib->commAbort(state_->comm);
  state_->comm = nullptr;
}

void NcclGroup::destroy() {
  delete gGroup;
  gGroup = nullptr;
}

std::string NcclGroup::version() const { return state_->lib->versionString(); }

int NcclGroup::checkTensor(const char *what, const Tensor &t) const {
  KILN_CHECK(t.device().type == DeviceType::CUDA,
             "kiln.distributed.{}: the NCCL backend takes CUDA tensors, got one on {}", what,
             t.device().str());
  KILN_CHECK(t.device().index == device_,
             "kiln.distributed.{}: the tensor is on {}, but this rank's NCCL group runs on "
             "cuda:{} (init_process_group's device_id, or LOCAL_RANK, chooses the device)",
             what, t.device().str(), device_);
  KILN_CHECK(t.isContiguous(), "kiln.distributed.{}: Tensors must be contiguous", what);
  return ncclType(what, t.dtype());
}

template <typename Call>
WorkPtr NcclGroup::launch(std::string what, std::function<void()> finish, size_t count, Call call) {
  auto w = std::make_shared<Work>();
  w->what_ = std::move(what);
  w->finish_ = std::move(finish);
  w->timeoutSeconds_ = world_.timeoutSeconds();
  w->rank_ = rank();
  w->size_ = size();
  if (count == 0) // every rank agreed on nothing to move: complete, without a call into NCCL
    return w;
  NcclState &s = *state_;
  auto event = std::make_shared<CudaEvent>(*s.driver, device_, CudaEvent::kDisableTiming);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    KILN_CHECK(s.failure.empty(),
               "kiln.distributed.{}: the NCCL communicator was aborted ({}): CUDA collectives "
               "cannot run again in this process",
               w->what_, s.failure);
    KILN_CHECK(s.comm, "kiln.distributed.{}: the NCCL group was destroyed", w->what_);
    s.driver->primaryContext(device_);
    check(*s.lib, call(s.comm), w->what_);
  }
  event->record(); // the default stream, behind the NCCL call
  w->poll_ = [state = state_, event, what = w->what_, rank = rank(), size = size()]() -> bool {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (!state->failure.empty())
        fail(ErrorKind::Runtime, "kiln.distributed: {} on rank {} of {} cannot complete: {}{}",
             what, rank, size, state->failure, kAbortedNote);
      nccl::Result async = nccl::kSuccess;
      if (state->comm)
        state->lib->commGetAsyncError(state->comm, &async);
      if (async != nccl::kSuccess && async != nccl::kInProgress) {
        std::string error = state->lib->message(async);
        state->abortLocked(fmt::format("NCCL reported {} during {}", error, what));
        fail(ErrorKind::Runtime,
             "kiln.distributed: {} on rank {} of {} failed: NCCL reported {} (a peer exited, or "
             "its device or network failed){}",
             what, rank, size, error, kAbortedNote);
      }
    }
    return event->query();
  };
  w->onTimeout_ = [state = state_, what = w->what_] {
    std::lock_guard<std::mutex> lock(state->mu);
    state->abortLocked(fmt::format("{} timed out", what));
    return std::string(kAbortedNote);
  };
  return w;
}

WorkPtr NcclGroup::allReduce(const Tensor &t, ReduceOp op) {
  const auto type = static_cast<nccl::DataType>(checkTensor("all_reduce", t));
  const nccl::RedOp red = ncclOp(*state_->lib, "all_reduce", t.dtype(), op);
  world_.checkAgreement("all_reduce", t);
  void *buf = t.address();
  const size_t n = static_cast<size_t>(t.numel());
  const nccl::Library &lib = *state_->lib;
  return launch("all_reduce", writtenStep(t), n, [&](nccl::Comm c) {
    return lib.allReduce(buf, buf, n, type, red, c, kDefaultStream);
  });
}

WorkPtr NcclGroup::broadcast(const Tensor &t, int src) {
  const auto type = static_cast<nccl::DataType>(checkTensor("broadcast", t));
  KILN_CHECK(src >= 0 && src < size(), "kiln.distributed.broadcast: src {} is not a rank of {}",
             src, size());
  world_.checkAgreement("broadcast", t);
  void *buf = t.address();
  const size_t n = static_cast<size_t>(t.numel());
  const nccl::Library &lib = *state_->lib;
  return launch("broadcast", writtenStep(t), n, [&](nccl::Comm c) {
    return lib.broadcast(buf, buf, n, type, src, c, kDefaultStream);
  });
}

WorkPtr NcclGroup::allGather(const Tensor &out, const Tensor &in) {
  const auto type = static_cast<nccl::DataType>(checkTensor("all_gather", in));
  checkTensor("all_gather", out);
  KILN_CHECK(out.numel() == in.numel() * size() && out.dtype() == in.dtype(),
             "kiln.distributed.all_gather: the output must hold world_size ({}) times the "
             "input's {} elements of {}, got {} of {}",
             size(), in.numel(), dtypeName(in.dtype()), out.numel(), dtypeName(out.dtype()));
  world_.checkAgreement("all_gather", in);
  const void *send = in.address();
  void *recv = out.address();
  const size_t n = static_cast<size_t>(in.numel());
  const nccl::Library &lib = *state_->lib;
  return launch("all_gather", writtenStep(out, in), n, [&](nccl::Comm c) {
    return lib.allGather(send, recv, n, type, c, kDefaultStream);
  });
}

WorkPtr NcclGroup::reduceScatter(const Tensor &out, const Tensor &in, ReduceOp op) {
  const auto type = static_cast<nccl::DataType>(checkTensor("reduce_scatter", out));
  checkTensor("reduce_scatter", in);
  KILN_CHECK(in.numel() == out.numel() * size() && out.dtype() == in.dtype(),
             "kiln.distributed.reduce_scatter: the input must hold world_size ({}) times the "
             "output's {} elements of {}, got {} of {}",
             size(), out.numel(), dtypeName(out.dtype()), in.numel(), dtypeName(in.dtype()));
  const nccl::RedOp red = ncclOp(*state_->lib, "reduce_scatter", out.dtype(), op);
  world_.checkAgreement("reduce_scatter", in);
  const void *send = in.address();
  void *recv = out.address();
  const size_t n = static_cast<size_t>(out.numel());
  const nccl::Library &lib = *state_->lib;
  return launch("reduce_scatter", writtenStep(out, in), n, [&](nccl::Comm c) {
    return lib.reduceScatter(send, recv, n, type, red, c, kDefaultStream);
  });
}

WorkPtr NcclGroup::reduce(const Tensor &t, int dst, ReduceOp op) {
  const auto type = static_cast<nccl::DataType>(checkTensor("reduce", t));
  KILN_CHECK(dst >= 0 && dst < size(), "kiln.distributed.reduce: dst {} is not a rank of {}", dst,
             size());
  const nccl::RedOp red = ncclOp(*state_->lib, "reduce", t.dtype(), op);
  world_.checkAgreement("reduce", t);
  void *buf = t.address();
  const size_t n = static_cast<size_t>(t.numel());
  const nccl::Library &lib = *state_->lib;
  // Only the root's tensor receives the result; the others' is only read.
  return launch("reduce", rank() == dst ? writtenStep(t) : keepingStep(t), n, [&](nccl::Comm c) {
    return lib.reduce(buf, buf, n, type, red, dst, c, kDefaultStream);
  });
}

WorkPtr NcclGroup::send(const Tensor &t, int dst) {
  const auto type = static_cast<nccl::DataType>(checkTensor("send", t));
  KILN_CHECK(dst >= 0 && dst < size() && dst != rank(),
             "kiln.distributed.send: dst {} is not another rank of {}", dst, size());
  const void *buf = t.address();
  const size_t n = static_cast<size_t>(t.numel());
  const nccl::Library &lib = *state_->lib;
  return launch("send to rank " + std::to_string(dst), keepingStep(t), n,
                [&](nccl::Comm c) { return lib.send(buf, n, type, dst, c, kDefaultStream); });
}

WorkPtr NcclGroup::recv(const Tensor &t, int src) {
  const auto type = static_cast<nccl::DataType>(checkTensor("recv", t));
  KILN_CHECK(src >= 0 && src < size() && src != rank(),
             "kiln.distributed.recv: src {} is not another rank of {}", src, size());
  void *buf = t.address();
  const size_t n = static_cast<size_t>(t.numel());
  const nccl::Library &lib = *state_->lib;
  return launch("recv from rank " + std::to_string(src), writtenStep(t), n,
                [&](nccl::Comm c) { return lib.recv(buf, n, type, src, c, kDefaultStream); });
}

} // namespace kiln::distributed
