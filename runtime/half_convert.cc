// Vectorized float16 <-> float32 conversion of contiguous runs (F16C: 8 values per instruction).
// GCC 12 does not vectorize loops of _Float16 conversions without AVX512-FP16; written per
// element they cost one vcvtph2ps and one scalar store each, several times bfloat16's shifts.
#include "runtime/loops.h"

#include <immintrin.h>

namespace kiln::detail {

void widenHalves(const Half *src, float *dst, int64_t n) {
  int64_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i))));
#endif
  for (; i < n; ++i)
    dst[i] = static_cast<float>(src[i]);
}

void narrowToHalves(const float *src, Half *dst, int64_t n) {
  int64_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i)
    dst[i] = Half(src[i]);
}

} // namespace kiln::detail
