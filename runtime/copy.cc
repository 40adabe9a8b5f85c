#include "runtime/copy.h"

#include "runtime/error.h"
#include "runtime/loops.h"

#include <cstring>

namespace kiln {

void copyInto(const Tensor &dst, const Tensor &src) {
  KILN_CHECK(dst.sizes() == src.sizes(), "copy: shape mismatch {} vs {}", dst.shapeStr(),
             src.shapeStr());
  KILN_CHECK(dst.device() == src.device(), "copy: device mismatch {} vs {}", dst.device().str(),
             src.device().str());
  if (dst.numel() == 0)
    return;
  Tensor ops[2] = {dst, src};
  NdLoop loop(dst.sizes(), ops);
  if (dst.dtype() == src.dtype()) {
    const int64_t sz = dst.itemsize();
    loop.run([sz](char **p, const int64_t *s, int64_t n) {
      if (s[0] == sz && s[1] == sz) {
        std::memcpy(p[0], p[1], n * sz);
        return;
      }
      char *d = p[0];
      const char *q = p[1];
      for (int64_t i = 0; i < n; ++i, d += s[0], q += s[1])
        std::memcpy(d, q, sz);
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
  Tensor ops[1] = {dst};
  NdLoop loop(dst.sizes(), ops);
  dispatchAll(dst.dtype(), [&]<typename T>() {
    T v = isFloating(dst.dtype()) ? convertValue<T>(value.toDouble())
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
