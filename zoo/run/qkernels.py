"""Block-quantised matrix products for CPU decoding: GGUF's own 4-bit and 8-bit blocks, read as
they are stored, multiplied with float32 activations.

Why a kernel of zoo's own.  A decoding step at batch 1 is a row of matrix-vector products, one per
weight matrix; each weight is read once and used once.  PyTorch ships three CPU kernels for packed
weights, and none of them fits a GGUF model at batch 1 (one thread, SmolLM2-135M's layers,
measured in ``benchmarks/int4_decode.py --kernels``):

- ``aten._weight_int4pack_mm_for_cpu`` takes bfloat16 activations and bfloat16 scales (so its
  answer is not the file's: a Q4_1 block's scale and minimum are float16, and each activation is
  rounded to 8 bits of mantissa), and streams 4-9 GB/s;
- ``aten._weight_int8pack_mm`` has one scale per output row (a Q8_0 file has one per 32 weights:
  re-quantising per row rounds the weights a second time) and widens each weight before the
  multiply: 3.4 ms for SmolLM2's 49,152 x 576 output layer;
- ``aten._dyn_quant_matmul_4bit`` is KleidiAI's, an ARM kernel (a slow reference loop on x86).

The kernels here (C++ built once per machine by ``torch.utils.cpp_extension``, AVX-512 where the
CPU has it, a plain loop the compiler vectorises where it does not) compute exactly the product of
the activations with the *dequantised* weights, in float32:

==========  ===========================================  =========================================
op          weights                                      per block of 32 inputs of one output row
==========  ===========================================  =========================================
``q4_mm``   ``codes (N, K/2) uint8, scale, lo (N, K/32)``  ``w = scale * q + lo``, ``q`` in 0..15
                                                         (GGUF's Q4_1; zoo's asymmetric int4)
``q8_mm``   ``codes (N, K) int8, scale (N, K/32)``        ``w = scale * q``, ``q`` in -127..127
                                                         (GGUF's Q8_0)
==========  ===========================================  =========================================

The 4-bit codes of one block sit in 16 bytes as GGUF stores them: byte ``j`` holds input ``j`` in
its low nibble and input ``j + 16`` in its high one.  Each block is unpacked into 32 float32
weights (``w = fma(q, scale, lo)``) and multiplied into one accumulator per input row; the rows of
the output are split between PyTorch's threads.  A model converted from a Q4_1 / Q8_0 file whose
blocks are put back this way (:func:`zoo.run.precision.quantize_gguf`) computes what the float32
conversion computes, up to the order of the float32 additions, from 4.5 (Q4_1) or 8.5 (Q8_0) bits
a weight instead of 32.

For a long input (a prefill: ``M >= DEQUANT_ROWS`` rows) reading each block once per row is the
wrong trade: :func:`q4_dequant` / :func:`q8_dequant` unpack the whole matrix to float32 once and
PyTorch's own float32 GEMM (MKL / oneDNN) does the product at the matmul peak.

The ops are registered as ``torch.ops.zoo.q4_mm`` etc. with shape functions, so a compiled decoding
step (:mod:`zoo.run.compiled`) calls them as library kernels inside its graph.  Where no C++
compiler is available :func:`available` is False (``unavailable()`` says why) and the callers keep
PyTorch's own kernels.
"""
from __future__ import annotations

import os
import threading

import torch

#: rows (tokens) from which a product dequantises the whole matrix and runs a float32 GEMM
DEQUANT_ROWS = 16
#: inputs per block (GGUF's Q4_0/Q4_1/Q8_0 blocks, and zoo's int4 group)
BLOCK = 32

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cstdint>
#include <cmath>
#include <vector>
#include <algorithm>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t BLK = 32;

// The activations of one product, rounded once per call: each block of 32 inputs of each row
// as int16 codes xq with one float scale xs (xs = max|x| / 32767, so |x - xs * xq| <= xs / 2).
struct QX {
  std::vector<int16_t> q;
  std::vector<float> s;
};

QX quantize_x(const float* x, int64_t M, int64_t K) {
  QX r;
  r.q.resize(M * K);
  r.s.resize(M * K / BLK);
  for (int64_t b = 0; b < M * K / BLK; ++b) {
    const float* xb = x + b * BLK;
    float amax = 0.f;
    for (int j = 0; j < BLK; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float sc = amax / 32767.f;
    const float inv = amax > 0.f ? 32767.f / amax : 0.f;
    r.s[b] = sc;
    for (int j = 0; j < BLK; ++j) r.q[b * BLK + j] = int16_t(std::nearbyint(xb[j] * inv));
  }
  return r;
}

// y[m, n] = sum_g scale[n, g] * xs[m, g] * (q[n, g, :] . xq[m, g, :]) + lo[n, g] * sum(x[m, g, :])
// q from the nibbles (byte j of a block: input j low, input j + 16 high), int16 x int16 -> int32
// dot products (vpdpwssd) per block, then one float multiply-add per block.
template <int MT>
void q4_rows(const QX& qx, const float* xsum, int64_t M, int64_t K, const uint8_t* codes,
             const float* scale, const float* lo, float* y, int64_t N, int64_t n0, int64_t n1) {
  const int64_t G = K / BLK;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* c = codes + n * (K / 2);
    const float* s = scale + n * G;
    const float* l = lo + n * G;
    for (int64_t m0 = 0; m0 < M; m0 += MT) {
      const int64_t mt = std::min<int64_t>(MT, M - m0);
      float lsum[MT];
      for (int i = 0; i < MT; ++i) lsum[i] = 0.f;
#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
      __m512 tot[MT];
      float ss[MT][64];  // scale[n, g] * xs[m, g] per block (G <= 64 here; larger K: below)
      for (int i = 0; i < MT; ++i) {
        tot[i] = _mm512_setzero_ps();
        if (i < mt)
          for (int64_t g = 0; g < G; ++g) {
            const int64_t xb = (m0 + i) * G + g;
            ss[i][g & 63] = s[g] * qx.s[xb];
            lsum[i] += l[g] * xsum[xb];
          }
      }
      const __m512i shifts = _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL,
                                              0x0004000400040004LL, 0x0004000400040004LL, 0, 0, 0, 0);
      const __m512i low4 = _mm512_set1_epi16(0x0F);
      for (int64_t g = 0; g < G; ++g) {
        // the block's 16 bytes in both halves, widened to int16, the high half shifted by 4
        const __m256i b = _mm256_broadcastsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + g * 16)));
        const __m512i w = _mm512_and_si512(_mm512_srlv_epi16(_mm512_cvtepu8_epi16(b), shifts), low4);
        for (int i = 0; i < MT; ++i) {
          if (i < mt) {
            const int64_t xb = (m0 + i) * G + g;
            const __m512i xv = _mm512_loadu_si512(qx.q.data() + xb * BLK);
            const __m512i d = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w, xv);
            const float sg = G <= 64 ? ss[i][g] : s[g] * qx.s[xb];
            tot[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(sg), tot[i]);
          }
        }
      }
      for (int i = 0; i < mt; ++i) y[(m0 + i) * N + n] = _mm512_reduce_add_ps(tot[i]) + lsum[i];
#else
      float acc[MT];
      for (int i = 0; i < MT; ++i) acc[i] = 0.f;
      int16_t w[BLK];
      for (int64_t g = 0; g < G; ++g) {
        for (int j = 0; j < 16; ++j) {
          w[j] = c[g * 16 + j] & 15;
          w[j + 16] = c[g * 16 + j] >> 4;
        }
        for (int i = 0; i < mt; ++i) {
          const int64_t xb = (m0 + i) * G + g;
          const int16_t* xq = qx.q.data() + xb * BLK;
          int32_t d = 0;
          for (int j = 0; j < BLK; ++j) d += int32_t(w[j]) * int32_t(xq[j]);
          acc[i] += float(d) * (s[g] * qx.s[xb]);
          lsum[i] += l[g] * xsum[xb];
        }
      }
      for (int i = 0; i < mt; ++i) y[(m0 + i) * N + n] = acc[i] + lsum[i];
#endif
    }
  }
}

// y[m, n] = sum_g scale[n, g] * xs[m, g] * (q[n, g, :] . xq[m, g, :]), q int8.
template <int MT>
void q8_rows(const QX& qx, int64_t M, int64_t K, const int8_t* codes, const float* scale,
             float* y, int64_t N, int64_t n0, int64_t n1) {
  const int64_t G = K / BLK;
  for (int64_t n = n0; n < n1; ++n) {
    const int8_t* c = codes + n * K;
    const float* s = scale + n * G;
    for (int64_t m0 = 0; m0 < M; m0 += MT) {
      const int64_t mt = std::min<int64_t>(MT, M - m0);
#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
      __m512 tot[MT];
      for (int i = 0; i < MT; ++i) tot[i] = _mm512_setzero_ps();
      for (int64_t g = 0; g < G; ++g) {
        const __m512i w = _mm512_cvtepi8_epi16(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + g * BLK)));
        for (int i = 0; i < MT; ++i) {
          if (i < mt) {
            const int64_t xb = (m0 + i) * G + g;
            const __m512i xv = _mm512_loadu_si512(qx.q.data() + xb * BLK);
            const __m512i d = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w, xv);
            tot[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(s[g] * qx.s[xb]), tot[i]);
          }
        }
      }
      for (int i = 0; i < mt; ++i) y[(m0 + i) * N + n] = _mm512_reduce_add_ps(tot[i]);
#else
      float acc[MT];
      for (int i = 0; i < MT; ++i) acc[i] = 0.f;
      for (int64_t g = 0; g < G; ++g) {
        for (int i = 0; i < mt; ++i) {
          const int64_t xb = (m0 + i) * G + g;
          const int16_t* xq = qx.q.data() + xb * BLK;
          int32_t d = 0;
          for (int j = 0; j < BLK; ++j) d += int32_t(c[g * BLK + j]) * int32_t(xq[j]);
          acc[i] += float(d) * (s[g] * qx.s[xb]);
        }
      }
      for (int i = 0; i < mt; ++i) y[(m0 + i) * N + n] = acc[i];
#endif
    }
  }
}

void check(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale, int64_t per_row) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "zoo block kernels: x must be a contiguous (M, K) float32 tensor");
  const int64_t K = x.size(1);
  TORCH_CHECK(K % BLK == 0, "zoo block kernels: K = ", K, " is not a multiple of 32");
  TORCH_CHECK(codes.dim() == 2 && codes.is_contiguous() && codes.size(1) == K / per_row,
              "zoo block kernels: codes must be contiguous (N, K/", per_row, ")");
  TORCH_CHECK(scale.dim() == 2 && scale.scalar_type() == at::kFloat && scale.is_contiguous() &&
              scale.size(0) == codes.size(0) && scale.size(1) == K / BLK,
              "zoo block kernels: scale must be contiguous (N, K/32) float32");
}

int64_t grain(int64_t N, int64_t M) {
  // enough rows per task that a thread's share is not eaten by the parallel region's start-up
  return std::max<int64_t>(16, 4096 / std::max<int64_t>(M, 1) / 8);
}

at::Tensor q4_mm(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale,
                 const at::Tensor& lo) {
  check(x, codes, scale, 2);
  TORCH_CHECK(codes.scalar_type() == at::kByte, "zoo::q4_mm: codes must be uint8");
  TORCH_CHECK(lo.sizes() == scale.sizes() && lo.scalar_type() == at::kFloat && lo.is_contiguous(),
              "zoo::q4_mm: lo must be like scale");
  const int64_t M = x.size(0), K = x.size(1), N = codes.size(0);
  auto y = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const uint8_t* cp = codes.data_ptr<uint8_t>();
  const float* sp = scale.data_ptr<float>();
  const float* lp = lo.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const QX qx = quantize_x(xp, M, K);
  std::vector<float> xsum(M * K / BLK);  // the exact float sums of each block of x: lo's term
  for (int64_t b = 0; b < M * K / BLK; ++b) {
    float t = 0.f;
    for (int j = 0; j < BLK; ++j) t += xp[b * BLK + j];
    xsum[b] = t;
  }
  at::parallel_for(0, N, grain(N, M), [&](int64_t n0, int64_t n1) {
    if (M == 1) q4_rows<1>(qx, xsum.data(), M, K, cp, sp, lp, yp, N, n0, n1);
    else q4_rows<4>(qx, xsum.data(), M, K, cp, sp, lp, yp, N, n0, n1);
  });
  return y;
}

at::Tensor q8_mm(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale) {
  check(x, codes, scale, 1);
  TORCH_CHECK(codes.scalar_type() == at::kChar, "zoo::q8_mm: codes must be int8");
  const int64_t M = x.size(0), K = x.size(1), N = codes.size(0);
  auto y = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const int8_t* cp = codes.data_ptr<int8_t>();
  const float* sp = scale.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const QX qx = quantize_x(xp, M, K);
  at::parallel_for(0, N, grain(N, M), [&](int64_t n0, int64_t n1) {
    if (M == 1) q8_rows<1>(qx, M, K, cp, sp, yp, N, n0, n1);
    else q8_rows<4>(qx, M, K, cp, sp, yp, N, n0, n1);
  });
  return y;
}

at::Tensor q4_dequant(const at::Tensor& codes, const at::Tensor& scale, const at::Tensor& lo) {
  const int64_t N = codes.size(0), K = codes.size(1) * 2, G = K / BLK;
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.is_contiguous() && scale.is_contiguous() &&
              lo.is_contiguous() && scale.size(0) == N && scale.size(1) == G,
              "zoo::q4_dequant: codes (N, K/2) uint8, scale and lo (N, K/32) float32");
  auto w = at::empty({N, K}, scale.options());
  const uint8_t* cp = codes.data_ptr<uint8_t>();
  const float* sp = scale.data_ptr<float>();
  const float* lp = lo.data_ptr<float>();
  float* wp = w.data_ptr<float>();
  at::parallel_for(0, N * G, 256, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* c = cp + b * 16;
      float* o = wp + b * BLK;
      for (int j = 0; j < 16; ++j) {
        o[j] = sp[b] * float(c[j] & 15) + lp[b];
        o[j + 16] = sp[b] * float(c[j] >> 4) + lp[b];
      }
    }
  });
  return w;
}

at::Tensor q8_dequant(const at::Tensor& codes, const at::Tensor& scale) {
  const int64_t N = codes.size(0), K = codes.size(1), G = K / BLK;
  TORCH_CHECK(codes.scalar_type() == at::kChar && codes.is_contiguous() && scale.is_contiguous() &&
              scale.size(0) == N && scale.size(1) == G,
              "zoo::q8_dequant: codes (N, K) int8, scale (N, K/32) float32");
  auto w = at::empty({N, K}, scale.options());
  const int8_t* cp = codes.data_ptr<int8_t>();
  const float* sp = scale.data_ptr<float>();
  float* wp = w.data_ptr<float>();
  at::parallel_for(0, N * G, 256, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int j = 0; j < BLK; ++j) wp[b * BLK + j] = sp[b] * float(cp[b * BLK + j]);
  });
  return w;
}

}  // namespace

TORCH_LIBRARY(zoo, m) {
  m.def("q4_mm(Tensor x, Tensor codes, Tensor scale, Tensor lo) -> Tensor");
  m.def("q8_mm(Tensor x, Tensor codes, Tensor scale) -> Tensor");
  m.def("q4_dequant(Tensor codes, Tensor scale, Tensor lo) -> Tensor");
  m.def("q8_dequant(Tensor codes, Tensor scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(zoo, CPU, m) {
  m.impl("q4_mm", &q4_mm);
  m.impl("q8_mm", &q8_mm);
  m.impl("q4_dequant", &q4_dequant);
  m.impl("q8_dequant", &q8_dequant);
}
"""

_lock = threading.Lock()
_state: dict = {}


def _build() -> None:
    """Build and load the ops once per process (the build is cached on disk per machine)."""
    from torch.utils import cpp_extension

    # -fopenmp: at::parallel_for is an OpenMP region compiled into this library (PyTorch's runtime,
    # its thread count); built without it (v3) every kernel ran on one thread whatever --threads said
    flags = ["-O3", "-march=native", "-ffp-contract=off", "-fopenmp"]
    cpp_extension.load_inline(name="zoo_qkernels_v4", cpp_sources=[_SOURCE], functions=None,
                              extra_cflags=flags, extra_ldflags=["-fopenmp"], is_python_module=False,
                              verbose=False)

    @torch.library.register_fake("zoo::q4_mm")
    def _(x, codes, scale, lo):
        return x.new_empty(x.size(0), codes.size(0))

    @torch.library.register_fake("zoo::q8_mm")
    def _(x, codes, scale):
        return x.new_empty(x.size(0), codes.size(0))

    @torch.library.register_fake("zoo::q4_dequant")
    def _(codes, scale, lo):
        return scale.new_empty(codes.size(0), codes.size(1) * 2)

    @torch.library.register_fake("zoo::q8_dequant")
    def _(codes, scale):
        return scale.new_empty(codes.size(0), codes.size(1))


#: the ops' default overloads once built (calling an overload skips ``torch.ops``' look-ups, a few
#: microseconds a call that ~200 products a decoding step would pay): name -> OpOverload
OPS: dict = {}


def available() -> bool:
    """True once the block kernels are built and loaded (the first call builds them: ~30-90 s with
    a cold cache, then a load from ``TORCH_EXTENSIONS_DIR``); False where they cannot be (no C++
    compiler, or ``ZOO_NO_QKERNELS=1``): :func:`unavailable` says why."""
    with _lock:
        if "ok" not in _state:
            if os.environ.get("ZOO_NO_QKERNELS"):
                _state.update(ok=False, why="ZOO_NO_QKERNELS is set")
            else:
                try:
                    _build()
                    OPS.update({n: getattr(torch.ops.zoo, n).default
                                for n in ("q4_mm", "q8_mm", "q4_dequant", "q8_dequant")})
                    _state.update(ok=True, why=None)
                except Exception as exc:  # noqa: BLE001 - no compiler, a failed build: fall back
                    _state.update(ok=False, why=f"{type(exc).__name__}: {str(exc).strip()[:300]}")
        return _state["ok"]


def unavailable() -> str | None:
    """Why :func:`available` is False (None when the kernels are loaded or not tried yet)."""
    return _state.get("why")


# ---------------------------------------------------------------------- packing (plain torch)
def pack_q4(q: torch.Tensor) -> torch.Tensor:
    """``q (N, K)`` integer codes in 0..15 -> ``(N, K/2)`` uint8 in GGUF's block order: byte ``j``
    of a block holds input ``j`` (low nibble) and input ``j + 16`` (high nibble)."""
    N, K = q.shape
    b = q.to(torch.uint8).reshape(N, K // BLOCK, 2, 16)
    return (b[:, :, 0] | (b[:, :, 1] << 4)).reshape(N, K // 2).contiguous()


def unpack_q4(codes: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`pack_q4`: ``(N, K/2)`` uint8 -> ``(N, K)`` int32 codes in 0..15."""
    N, H = codes.shape
    b = codes.reshape(N, H // 16, 1, 16)
    return torch.cat([b & 15, b >> 4], dim=2).reshape(N, 2 * H).to(torch.int32)


def q4_reference(x: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor, lo: torch.Tensor
                 ) -> torch.Tensor:
    """What ``torch.ops.zoo.q4_mm`` computes, in plain PyTorch (for tests and the fallback)."""
    N = codes.size(0)
    w = unpack_q4(codes).float().view(N, -1, BLOCK) * scale[..., None] + lo[..., None]
    return x @ w.view(N, -1).T


def q8_reference(x: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What ``torch.ops.zoo.q8_mm`` computes, in plain PyTorch."""
    N = codes.size(0)
    w = codes.float().view(N, -1, BLOCK) * scale[..., None]
    return x @ w.view(N, -1).T
