// Direct float32 convolution for stride-1 windows on AVX-512 CPUs: no column matrix, no BLAS.
//
// With stride 1, the input window of output position (od, oh, ow) for kernel tap (kd, kh, kw)
// starts at the same offset from the output position in every row of a zero-padded copy of the
// image. Flattening the padded image with its own row pitch Wp (and plane pitch Hp * Wp) makes
// every tap a constant offset: out[o, p] = sum over (c, tap) of w[o, c, tap] * in[c, p + off].
// A register tile of 8 output channels x 48 consecutive flattened positions then runs over all
// C * taps products with three vector loads and eight broadcasts per step (24 FMAs), reading the
// padded image straight from cache: no im2col write and no packing of a column matrix. The
// positions in the padding columns of the pitch (ow >= outW, oh >= outH) are computed and thrown
// away, which costs (Wp - outW) / Wp of the work. Each output is a dot product summed in
// (channel, tap) order, so results do not depend on the thread count.
#include "runtime/ops/conv_impl.h"
#include "runtime/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace kiln::ops::detail {

namespace {

constexpr int64_t kTileOut = 8;                    // output channels per register tile
constexpr int64_t kTileVecs = 3;                   // 16-float vectors per register tile
constexpr int64_t kTilePos = 16 * kTileVecs;       // flattened positions per register tile
constexpr int64_t kTilesPerTask = 4;               // position tiles one parallel task computes
constexpr double kMinUsedPositions = 0.8;          // share of computed positions that are outputs
constexpr int64_t kMinTaskWork = int64_t{1} << 20; // multiply-adds worth a thread's wake-up

/// Zero-padded, flattened geometry of one direct convolution.
struct DirectPlan {
  std::array<int64_t, 3> padded; // Dp, Hp, Wp
  int64_t plane = 0;             // Dp * Hp * Wp
  int64_t positions = 0;         // flattened positions up to the last valid output, plus one
  int64_t imageFloats = 0;       // channels * plane, plus slack read by the last tiles
  std::vector<int64_t> offsets;  // per (channel, tap): offset of its input from the position
};

DirectPlan makePlan(const ConvGeometry &g) {
  DirectPlan d;
  for (int i = 0; i < 3; ++i)
    d.padded[i] = g.out[i] + g.dilation[i] * (g.kernel[i] - 1);
  d.plane = d.padded[0] * d.padded[1] * d.padded[2];
  const int64_t rowPitch = d.padded[2], slicePitch = d.padded[1] * d.padded[2];
  d.positions = (g.out[0] - 1) * slicePitch + (g.out[1] - 1) * rowPitch + g.out[2];
  d.offsets.reserve(g.colRows());
  int64_t maxTap = 0;
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
          int64_t tap =
              kd * g.dilation[0] * slicePitch + kh * g.dilation[1] * rowPitch + kw * g.dilation[2];
          maxTap = std::max(maxTap, tap);
          d.offsets.push_back(c * d.plane + tap);
        }
  // The last tile reads up to kTilePos positions past `positions` at the largest tap.
  int64_t lastRead = (g.channels - 1) * d.plane + maxTap + d.positions + kTilePos;
  d.imageFloats = std::max(g.channels * d.plane, lastRead);
  return d;
}

/// Copies one [channels, in...] image into its zero-padded [channels, padded...] form.
void padImage(const ConvGeometry &g, const DirectPlan &d, const float *src, float *dst) {
  std::fill(dst + g.channels * d.plane, dst + d.imageFloats, 0.0f);
  const int64_t wp = d.padded[2], w = g.in[2], left = g.padBefore[2];
  // Columns of the padded row the input covers (a window may not reach the last input columns).
  const int64_t copyW = std::min(w, wp - left);
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t z = 0; z < d.padded[0]; ++z)
      for (int64_t y = 0; y < d.padded[1]; ++y) {
        float *row = dst + c * d.plane + (z * d.padded[1] + y) * wp;
        int64_t iz = z - g.padBefore[0], iy = y - g.padBefore[1];
        if (iz < 0 || iz >= g.in[0] || iy < 0 || iy >= g.in[1]) {
          std::fill(row, row + wp, 0.0f);
          continue;
        }
        const float *in = src + ((c * g.in[0] + iz) * g.in[1] + iy) * w;
        std::fill(row, row + left, 0.0f);
        std::memcpy(row + left, in, copyW * sizeof(float));
        std::fill(row + left + copyW, row + wp, 0.0f);
      }
}

/// This thread's padded-image buffer of at least `floats` floats, reused across calls so that
/// repeated convolutions of one shape allocate and page in nothing. Requests above kKeepBytes
/// get a buffer of their own in `own` instead, freed by the caller's scope.
float *imageBuffer(int64_t floats, std::unique_ptr<float[]> &own) {
  constexpr int64_t kKeepBytes = int64_t{64} << 20;
  if (floats * static_cast<int64_t>(sizeof(float)) > kKeepBytes) {
    own.reset(new float[floats]);
    return own.get();
  }
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < floats)
    buffer.resize(floats);
  return buffer.data();
}

/// tile[i][0..48) = sum over j < k of w[i * k + j] x image[offsets[j] + 0..48) for the
/// `rows` <= 8 weight rows from w (rows past the last repeat it; their results are not stored).
/// The weights are read in place: each row is a sequential stream, and a per-call repacking would
/// cost as much as the convolution when the weights outweigh the image (deep, small layers).
__attribute__((target("avx512f"))) void directTile(const float *image, const int64_t *offsets,
                                                   int64_t k, const float *w, int64_t rows,
                                                   float *tile) {
  const float *wr[kTileOut];
  for (int64_t i = 0; i < kTileOut; ++i)
    wr[i] = w + std::min(i, rows - 1) * k;
  __m512 acc[kTileOut][kTileVecs];
#pragma GCC unroll 8
  for (int64_t i = 0; i < kTileOut; ++i)
#pragma GCC unroll 3
    for (int64_t v = 0; v < kTileVecs; ++v)
      acc[i][v] = _mm512_setzero_ps();
  for (int64_t j = 0; j < k; ++j) {
    const float *src = image + offsets[j];
    __m512 a0 = _mm512_loadu_ps(src), a1 = _mm512_loadu_ps(src + 16),
           a2 = _mm512_loadu_ps(src + 32);
#pragma GCC unroll 8
    for (int64_t i = 0; i < kTileOut; ++i) {
      __m512 b = _mm512_set1_ps(wr[i][j]);
      acc[i][0] = _mm512_fmadd_ps(a0, b, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(a1, b, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(a2, b, acc[i][2]);
    }
  }
#pragma GCC unroll 8
  for (int64_t i = 0; i < kTileOut; ++i)
#pragma GCC unroll 3
    for (int64_t v = 0; v < kTileVecs; ++v)
      _mm512_storeu_ps(tile + i * kTilePos + v * 16, acc[i][v]);
}

/// Writes the valid positions [p0, p0 + kTilePos) of a computed tile to output channels
/// [o0, o1) of `out` ([og, outVolume]), adding the bias.
void storeTile(const ConvGeometry &g, const DirectPlan &d, const float *tile, int64_t p0,
               int64_t o0, int64_t o1, const float *bias, float *out) {
  const int64_t wp = d.padded[2], slice = d.padded[1] * wp, l = g.outVolume();
  int64_t p = p0, end = std::min(p0 + kTilePos, d.positions);
  while (p < end) {
    int64_t z = p / slice, y = (p % slice) / wp, x = p % wp;
    int64_t run = std::min(end - p, wp - x); // positions left in this padded row
    if (y < g.out[1] && x < g.out[2]) {
      int64_t n = std::min(run, g.out[2] - x), dst = (z * g.out[1] + y) * g.out[2] + x;
      for (int64_t o = o0; o < o1; ++o) {
        const float *t = tile + (o - o0) * kTilePos + (p - p0);
        float b = bias ? bias[o] : 0.0f, *q = out + o * l + dst;
        for (int64_t i = 0; i < n; ++i)
          q[i] = t[i] + b;
      }
    }
    p += run;
  }
}

} // namespace

bool convDirectApplies(const ConvGeometry &g, int64_t outPerGroup) {
  static const bool supported = __builtin_cpu_supports("avx512f");
  if (!supported || outPerGroup < kTileOut / 2 || g.isPointwise())
    return false;
  for (int i = 0; i < 3; ++i)
    if (g.stride[i] != 1)
      return false;
  // Small images are mostly padding columns and partial tiles (7x7 with a 3x3 window: half the
  // computed positions); im2col + GEMM computes only the outputs there.
  const DirectPlan d = makePlan(g);
  int64_t computed = (d.positions + kTilePos - 1) / kTilePos * kTilePos;
  return g.outVolume() >= kMinUsedPositions * computed;
}

void convDirect(const ConvGeometry &g, int64_t batch, int64_t groups, int64_t og, const float *x,
                const float *w, const float *bias, float *out) {
  const DirectPlan d = makePlan(g);
  const int64_t k = g.colRows(), blocks = (og + kTileOut - 1) / kTileOut;
  const int64_t images = batch * groups, imageSize = g.channels * g.inVolume();
  const int64_t tiles = (d.positions + kTilePos - 1) / kTilePos;
  const int64_t chunks = (tiles + kTilesPerTask - 1) / kTilesPerTask;
  // Position tiles [c0, c1) chunks of image i, read from its padded copy.
  auto run = [&](int64_t i, const float *image, int64_t c0, int64_t c1) {
    alignas(64) float tile[kTileOut * kTilePos];
    int64_t gi = i % groups;
    float *o = out + i * og * g.outVolume();
    for (int64_t c = c0; c < c1; ++c) {
      int64_t tile0 = c * kTilesPerTask, tile1 = std::min(tiles, tile0 + kTilesPerTask);
      // The chunk's image rows stay in cache while every weight block passes over them.
      for (int64_t b = 0; b < blocks; ++b) {
        int64_t o0 = b * kTileOut, o1 = std::min(og, o0 + kTileOut);
        const float *wb = w + (gi * og + o0) * k;
        for (int64_t tl = tile0; tl < tile1; ++tl) {
          int64_t p0 = tl * kTilePos;
          directTile(image + p0, d.offsets.data(), k, wb, o1 - o0, tile);
          storeTile(g, d, tile, p0, o0, o1, bias ? bias + gi * og : nullptr, o);
        }
      }
    }
  };
  // Multiply-adds of one chunk, and how many chunks make a task worth a thread's wake-up.
  const int64_t chunkWork = std::max<int64_t>(1, kTilesPerTask * kTilePos * k * blocks * kTileOut);
  const int64_t chunkGrain = std::max<int64_t>(1, kMinTaskWork / chunkWork);
  if (images >= numThreads() || inParallelRegion()) {
    // Whole images per thread: each pads into its own reused buffer, which stays in cache.
    int64_t imageGrain = std::max<int64_t>(1, chunkGrain / chunks);
    parallelFor(0, images, imageGrain, [&](int64_t i0, int64_t i1) {
      std::unique_ptr<float[]> own;
      float *image = imageBuffer(d.imageFloats, own);
      for (int64_t i = i0; i < i1; ++i) {
        padImage(g, d, x + i * imageSize, image);
        run(i, image, 0, chunks);
      }
    });
    return;
  }
  // Fewer images than threads: the threads split each image's positions.
  std::unique_ptr<float[]> own;
  float *image = imageBuffer(d.imageFloats, own);
  for (int64_t i = 0; i < images; ++i) {
    padImage(g, d, x + i * imageSize, image);
    parallelFor(0, chunks, chunkGrain, [&](int64_t c0, int64_t c1) { run(i, image, c0, c1); });
  }
}

} // namespace kiln::ops::detail
