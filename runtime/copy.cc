#include "runtime/copy.h"

#include "runtime/device_memory.h"
#include "runtime/error.h"
#include "runtime/loops.h"

#include <cstring>

namespace kiln {

namespace {

/// Whether `t` is contiguous and starts its bytes at address(): one memcpy moves it.
bool isDense(const Tensor &t) { return t.isContiguous(); }

/// copyInto when either side is on a device: the bytes cross the bus once, in the layout and
/// dtype of the side that is not the host's, and the host or the device does the rest.
void copyAcrossDevices(const Tensor &dst, const Tensor &src) {
  Device dd = dst.device(), sd = src.device();
  if (dd == sd) {
    deviceMemory(dd).copyOnDevice(dst, src);
    return;
  }
  size_t bytes = static_cast<size_t>(dst.numel() * dst.itemsize());
  if (sd.type == DeviceType::CPU) { // host -> device
    Tensor host = src.dtype() == dst.dtype() && isDense(src) ? src : src.to(dst.dtype(), true);
    if (!host.isContiguous())
      host = host.contiguous();
    if (isDense(dst)) {
      deviceMemory(dd).copyToDevice(dd.index, dst.address(), host.rawData(), bytes);
      return;
    }
    Tensor staged = Tensor::empty(dst.sizes(), dst.dtype(), dd);
    deviceMemory(dd).copyToDevice(dd.index, staged.address(), host.rawData(), bytes);
    deviceMemory(dd).copyOnDevice(dst, staged);
    return;
  }
  if (dd.type == DeviceType::CPU) { // device -> host
    Tensor dense = isDense(src) ? src : src.clone();
    size_t srcBytes = static_cast<size_t>(dense.numel() * dense.itemsize());
    if (dense.dtype() == dst.dtype() && isDense(dst)) {
      deviceMemory(sd).copyToHost(sd.index, dst.rawData(), dense.address(), srcBytes);
      return;
    }
    Tensor host = Tensor::empty(dense.sizes(), dense.dtype());
    deviceMemory(sd).copyToHost(sd.index, host.rawData(), dense.address(), srcBytes);
    copyInto(dst, host);
    return;
  }
  // Between two devices: through the host.
  Tensor host = Tensor::empty(src.sizes(), src.dtype());
  copyInto(host, src);
  copyInto(dst, host);
}

} // namespace

void copyInto(const Tensor &dst, const Tensor &src) {
  KILN_CHECK(dst.sizes() == src.sizes(), "copy: shape mismatch {} vs {}", dst.shapeStr(),
             src.shapeStr());
  if (dst.numel() == 0)
    return;
  if (!dst.isCpu() || !src.isCpu()) {
    copyAcrossDevices(dst, src);
    return;
  }
  Tensor ops[2] = {dst, src};
  NdLoop loop(dst.sizes(), ops);
  if (dst.dtype() == src.dtype()) {
    const int64_t sz = dst.itemsize();
    loop.run([sz](char **p, const int64_t *s, int64_t n) {
      if (s[0] == sz && s[1] == sz) {
        if (sz == 4 && n <= 64) { // short rows (attention heads): a call per row costs more
          auto *d = reinterpret_cast<uint32_t *>(p[0]);
          const auto *q = reinterpret_cast<const uint32_t *>(p[1]);
          for (int64_t i = 0; i < n; ++i)
            d[i] = q[i];
          return;
        }
        std::memcpy(p[0], p[1], n * sz);
        return;
      }
      // Strided rows (a permuted tensor made contiguous): one typed load and store per
      // element, where a memcpy call of a run-time size per element cost five times as much.
      dispatchBySize(sz, [&]<typename U>() {
        char *d = p[0];
        const char *q = p[1];
        const int64_t sd = s[0], sq = s[1];
        for (int64_t i = 0; i < n; ++i, d += sd, q += sq) {
          U v;
          std::memcpy(&v, q, sizeof(U)); // fixed size: a plain load, also when unaligned
          std::memcpy(d, &v, sizeof(U));
        }
      });
    });
    return;
  }
  dispatchAll(dst.dtype(), [&]<typename To>() {
    dispatchAll(src.dtype(), [&]<typename From>() {
      loop.run(makeInner<To, From>([](From v) { return convertValue<To>(v); }));
    });
  });
}

void fillInto(const Tensor &dst, const Scalar &value) {
  if (dst.numel() == 0)
    return;
  if (!dst.isCpu()) {
    deviceMemory(dst.device()).fill(dst, value);
    return;
  }
  Tensor ops[1] = {dst};
  NdLoop loop(dst.sizes(), ops);
  dispatchAll(dst.dtype(), [&]<typename T>() {
    T v = isFloating(dst.dtype())   ? convertValue<T>(value.toDouble())
          : std::is_same_v<T, bool> ? convertValue<T>(value.toBool())
                                    : convertValue<T>(value.toInt());
    loop.run([v](char **p, const int64_t *s, int64_t n) {
      char *d = p[0];
      if (s[0] == sizeof(T)) {
        T *out = reinterpret_cast<T *>(d);
        for (int64_t i = 0; i < n; ++i)
          out[i] = v;
        return;
      }
      for (int64_t i = 0; i < n; ++i, d += s[0])
        *reinterpret_cast<T *>(d) = v;
    });
  });
}

} // namespace kiln
