"""One C++ call per decoded token for a q4 Llama-architecture model: the fused decoding step.

Why.  A q4 model (:func:`zoo.run.precision.quantize_q4`) decoding through the module tree pays for
~6,000 operator calls a token (30 blocks of norms, projections, rotary positions, cache writes,
attention over the cache's whole capacity, residuals) before and after its block products: 6-9 ms
a token of Python and dispatch beside ~11 ms of products on SmolLM2-135M, where llama.cpp spends
8.8 ms on everything.  :class:`Plan` does the whole step in one call: RMSNorm, the fused q/k/v
product, RoPE, the KV-cache append, attention over the *filled* part of the cache, the output
product, the residual, RMSNorm, the fused gate/up product, SiLU x up, the down product, the
residual, the final norm and the Q8_0 LM head.  Every buffer is allocated once per generation.

The products are llama.cpp's: each input vector is rounded once to 8-bit blocks (Q8_0-like: per
block of 32 inputs ``xs = max|x| / 127``, ``xq = round(x / xs)`` in -127..127, and the exact float
sum of the block for Q4_1's minimum), and every product is integer dot products of codes with
``xq`` per block -- ``_mm512_dpbusd_epi32`` (AVX-512 VNNI: 64 multiply-adds of u8 x s8 an
instruction) -- then one float multiply-add per block::

    y[n] = sum_g  scale[n, g] * xs[g] * (q[n, g, :] . xq[g, :])  +  lo[n, g] * sum(x[g, :])   (Q4_1)
    y[n] = sum_g  scale[n, g] * xs[g] * (q[n, g, :] . xq[g, :])                             (Q8_0)

The weights are *repacked* once per model (:func:`repack_q4`, :func:`repack_q8`) into records, one
per 16 output rows and block of 32 inputs: the 16 rows' codes interleaved, so that one 64-byte
load holds 4 consecutive inputs of each of 16 rows and one ``vpdpbusd`` with the 4 inputs
broadcast advances all 16 rows (no horizontal sums), then the 16 rows' scales (and Q4_1's
minimums) -- float16 when every scale is a float16 number, as a GGUF file's are, else float32.
The codes stay 4 bits (Q4_1: low nibble input ``4c + b``, high nibble input ``16 + 4c + b`` of the
block).  Q8_0's signed codes meet the signed activations as ``(xq + 128) . q - 128 * sum(q)``, the
code sums taken by the same instruction (nothing extra stored).  All of a model's records lie in
one buffer on 2 MiB pages (``arena``: Linux transparent huge pages), in the order a step reads
them, and each record's cache lines are asked for before its arithmetic.

Why it is laid out so.  A token reads every weight once (~97 MB for the 135M model) and computes
little on each byte, so the step is bound by how fast one core can stream memory.  Measured on
SmolLM2-135M (1 thread): the records on ordinary 4 KiB pages stalled on a TLB miss every 4 KiB
(float16 scales, 16% fewer bytes, were 4% *slower* than float32 ones in three streams); on huge
pages with the lines asked for first, 1.3x faster -- at the rate a streaming read of as many bytes
reaches (``benchmarks/llamacpp_decode.py``'s roofline column).

Threads.  One OpenMP parallel region a step, PyTorch's own runtime and thread count
(``torch.set_num_threads``; no threads of its own, so nothing is oversubscribed): the threads split
each product's row groups and the attention's heads and meet at a barrier between phases; norms,
the activations' rounding and residuals run on one thread.  A thread owns whole rows and heads, so
the logits are bit-equal at any thread count.  Where the CPU lacks AVX-512 VNNI (or the extension
is built with ``ZOO_QSTEP_PLAIN``) a plain C++ loop computes the same block arithmetic.

Rounding the activations to 8 bits is what llama.cpp does and what makes the step fast; it is not
the float model's arithmetic, so a fused step's logits differ from the unfused q4 path's (which
rounds activations to int16) by the activations' rounding: :func:`reference_product` is the exact
block arithmetic in float64, for the tests.  Quality on the real SmolLM2-135M: docs/PERFORMANCE.md.

Where it runs.  :func:`zoo.run.steps.decoder_logits` asks :func:`plan_for` once per generation;
the fused step decodes when all of these hold, and the ordinary module path runs otherwise
(:func:`why_not` says which one failed, ``zoo bench`` prints it):

- the model is q4 (``quantize_q4``; every block projection 4-bit blocks, the LM head Q8_0) and
  float32;
- the architecture is a plain Llama: decoder-only, RMSNorm pre-norm blocks, RoPE (any scaling that
  does not depend on the call's length), SwiGLU with SiLU, SDPA attention with only the causal
  mask, no biases, no q/k norms, no soft-cap or head scale, no sliding windows or per-layer
  patterns;
- batch 1, no padding, no prefix LM, greedy or sampled (beam search has more rows);
- no PyTorch hooks on any module (a hook must fire: the module path runs), and not
  ``compile=True`` (the compiled graph runs what it compiled);
- ``ZOO_NO_QSTEP`` is not set and :func:`enabled` was not turned off (``with qstep.disabled():``).

The prefill runs through the model (a float32 GEMM on the dequantised weights from 16 tokens, the
q4 kernels below that), filling the model's own KV cache; the fused steps continue in the same
buffers.
"""
from __future__ import annotations

import contextlib
import os
import threading

import torch

BLOCK = 32
ROWS = 16  # output rows interleaved per repacked group

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <cstdint>
#include <cmath>
#include <vector>
#include <algorithm>
#include <cstdlib>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__) && !defined(ZOO_QSTEP_PLAIN)
#define ZOO_VNNI 1
#include <immintrin.h>
#endif

namespace {

constexpr int64_t BLK = 32, R = 16;

bool vnni() {
#ifdef ZOO_VNNI
  return true;
#else
  return false;
#endif
}

// ------------------------------------------------------------------ activations: 8-bit blocks
// xq[k] = round(x[k] / xs[g]) (nearest, ties to even), xs[g] = max|x_g| / 127; xsum[g] = sum x_g
void quantize(const float* x, int64_t K, int8_t* xq, float* xs, float* xsum) {
  const int64_t G = K / BLK;
  for (int64_t g = 0; g < G; ++g) {
    const float* b = x + g * BLK;
#ifdef ZOO_VNNI
    const __m512 a0 = _mm512_loadu_ps(b), a1 = _mm512_loadu_ps(b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a0), _mm512_abs_ps(a1)));
    const float d = amax / 127.f;
    const float id = d > 0.f ? 1.f / d : 0.f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(a0, vid));  // MXCSR: nearest, ties even
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(a1, vid));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + g * BLK), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + g * BLK + 16), _mm512_cvtsepi32_epi8(q1));
    float s = 0.f;
    for (int j = 0; j < BLK; ++j) s += b[j];
    xs[g] = d;
    xsum[g] = s;
#else
    float amax = 0.f, s = 0.f;
    for (int j = 0; j < BLK; ++j) amax = std::max(amax, std::fabs(b[j]));
    const float d = amax / 127.f;
    const float id = d > 0.f ? 1.f / d : 0.f;
    for (int j = 0; j < BLK; ++j) {
      const float v = std::nearbyint(b[j] * id);
      xq[g * BLK + j] = int8_t(std::max(-127.f, std::min(127.f, v)));
      s += b[j];
    }
    xs[g] = d;
    xsum[g] = s;
#endif
  }
}

// ------------------------------------------------------------------ repacked weights
// One stream of records, one record per (group of 16 output rows r, input block g), so that a
// thread reads its rows' codes and scales front to back (one prefetch stream, nothing else):
//   Q4 record: codes 256 B -- chunk c, row i, byte b holds q[16r + i, g, 4c + b] (low nibble) |
//              q[16r + i, g, 16 + 4c + b] << 4 -- then scale[16], then lo[16]
//   Q8 record: codes 512 B -- chunk c (8), row i, byte b: q[16r + i, g, 4c + b] -- then scale[16]
// The scales are float16 where every one is a float16 number (a GGUF file's always are: its
// blocks store them so) and float32 otherwise: S = 2 or 4 bytes a scale.
struct Mat {
  int64_t N = 0, K = 0, G = 0, bits = 4, S = 4, rec = 0;
  const uint8_t* data = nullptr;
  at::Tensor keep;  // owns the bytes behind the pointer
};

inline float scalar_at(const uint8_t* p, int i, bool half) {
  if (half) return float(reinterpret_cast<const at::Half*>(p)[i]);
  return reinterpret_cast<const float*>(p)[i];
}

#ifdef ZOO_VNNI
// ask for every cache line of a record before its arithmetic: the loads of its codes and scales
// are then in flight together (measured: 1.2x a token on SmolLM2-135M over letting the loads ask)
inline void touch(const uint8_t* c, int64_t rec) {
  for (int64_t l = 0; l < rec; l += 64) _mm_prefetch(reinterpret_cast<const char*>(c + l), _MM_HINT_T0);
}

template <bool H> inline __m512 load16(const uint8_t* p) {
  if constexpr (H) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  else return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
}

template <bool H>
void q4_vnni(const Mat& m, const int8_t* xq, const float* xs, const float* xsum, float* y,
             int64_t r0, int64_t r1) {
  const int64_t G = m.G, rec = m.rec;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* c = m.data + r * G * rec;
    __m512 acc = _mm512_setzero_ps(), accl = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; ++g, c += rec) {
      const int32_t* xb = reinterpret_cast<const int32_t*>(xq + g * BLK);
      touch(c, rec);
      __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k) {
        const __m512i w = _mm512_loadu_si512(c + k * 64);
        d0 = _mm512_dpbusd_epi32(d0, _mm512_and_si512(w, low4), _mm512_set1_epi32(xb[k]));
        d1 = _mm512_dpbusd_epi32(d1, _mm512_and_si512(_mm512_srli_epi16(w, 4), low4),
                                 _mm512_set1_epi32(xb[4 + k]));
      }
      const __m512 s = _mm512_mul_ps(load16<H>(c + 256), _mm512_set1_ps(xs[g]));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1)), s, acc);
      accl = _mm512_fmadd_ps(load16<H>(c + 256 + 16 * (H ? 2 : 4)), _mm512_set1_ps(xsum[g]), accl);
    }
    _mm512_storeu_ps(y + r * R, _mm512_add_ps(acc, accl));
  }
}

template <bool H>
void q8_vnni(const Mat& m, const int8_t* xq, const float* xs, float* y, int64_t r0, int64_t r1) {
  const int64_t G = m.G, rec = m.rec;
  const __m512i off = _mm512_set1_epi8(char(0x80));
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* c = m.data + r * G * rec;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; ++g, c += rec) {
      const int32_t* xb = reinterpret_cast<const int32_t*>(xq + g * BLK);
      // the signed codes meet xq + 128 (unsigned bytes: the xor flips the sign bit); the 128 x
      // sum of the codes comes off again, summed by the same instruction (no stored sums to read)
      touch(c, rec);
      __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512(), z = _mm512_setzero_si512();
      for (int k = 0; k < 8; k += 2) {
        const __m512i w0 = _mm512_loadu_si512(c + k * 64), w1 = _mm512_loadu_si512(c + (k + 1) * 64);
        d0 = _mm512_dpbusd_epi32(d0, _mm512_xor_si512(_mm512_set1_epi32(xb[k]), off), w0);
        d1 = _mm512_dpbusd_epi32(d1, _mm512_xor_si512(_mm512_set1_epi32(xb[k + 1]), off), w1);
        z = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, off, w0), off, w1);
      }
      const __m512i d = _mm512_sub_epi32(_mm512_add_epi32(d0, d1), z);
      const __m512 s = _mm512_mul_ps(load16<H>(c + 512), _mm512_set1_ps(xs[g]));
      if (g & 1) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc1);
      else acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc0);
    }
    _mm512_storeu_ps(y + r * R, _mm512_add_ps(acc0, acc1));
  }
}
#endif

void q4_groups(const Mat& m, const int8_t* xq, const float* xs, const float* xsum, float* y,
               int64_t r0, int64_t r1) {
#ifdef ZOO_VNNI
  if (m.S == 2) q4_vnni<true>(m, xq, xs, xsum, y, r0, r1);
  else q4_vnni<false>(m, xq, xs, xsum, y, r0, r1);
#else
  const int64_t G = m.G;
  const bool half = m.S == 2;
  for (int64_t r = r0; r < r1; ++r) {
    float acc[R] = {0}, accl[R] = {0};
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* c = m.data + (r * G + g) * m.rec;
      const int8_t* xb = xq + g * BLK;
      for (int i = 0; i < R; ++i) {
        int32_t d = 0;
        for (int k = 0; k < 4; ++k)
          for (int b = 0; b < 4; ++b) {
            const uint8_t v = c[k * 64 + i * 4 + b];
            d += int32_t(v & 15) * xb[4 * k + b] + int32_t(v >> 4) * xb[16 + 4 * k + b];
          }
        acc[i] += float(d) * (scalar_at(c + 256, i, half) * xs[g]);
        accl[i] += scalar_at(c + 256 + 16 * m.S, i, half) * xsum[g];
      }
    }
    for (int i = 0; i < R; ++i) y[r * R + i] = acc[i] + accl[i];
  }
#endif
}

void q8_groups(const Mat& m, const int8_t* xq, const float* xs, float* y, int64_t r0, int64_t r1) {
#ifdef ZOO_VNNI
  if (m.S == 2) q8_vnni<true>(m, xq, xs, y, r0, r1);
  else q8_vnni<false>(m, xq, xs, y, r0, r1);
#else
  const int64_t G = m.G;
  const bool half = m.S == 2;
  for (int64_t r = r0; r < r1; ++r) {
    float acc[R] = {0};
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* c = m.data + (r * G + g) * m.rec;
      const int8_t* xb = xq + g * BLK;
      for (int i = 0; i < R; ++i) {
        int32_t d = 0;
        for (int k = 0; k < 8; ++k)
          for (int b = 0; b < 4; ++b)
            d += int32_t(reinterpret_cast<const int8_t*>(c)[k * 64 + i * 4 + b]) * xb[4 * k + b];
        acc[i] += float(d) * (scalar_at(c + 512, i, half) * xs[g]);
      }
    }
    for (int i = 0; i < R; ++i) y[r * R + i] = acc[i];
  }
#endif
}

Mat make_mat(int64_t bits, int64_t N, int64_t K, const at::Tensor& records) {
  TORCH_CHECK(bits == 4 || bits == 8, "zoo qstep: bits must be 4 or 8");
  TORCH_CHECK(N % R == 0 && K % BLK == 0, "zoo qstep: N must be a multiple of 16, K of 32");
  const int64_t G = K / BLK, codes = bits == 4 ? 256 : 512, scales = bits == 4 ? 32 : 16;
  TORCH_CHECK(records.is_contiguous() && records.scalar_type() == at::kByte && records.dim() == 3 &&
              records.size(0) == N / R && records.size(1) == G, "zoo qstep: records (N/16, G, bytes) uint8");
  const int64_t rec = records.size(2);
  TORCH_CHECK(rec == codes + 2 * scales || rec == codes + 4 * scales,
              "zoo qstep: a record is the codes then float16 or float32 scales");
  Mat m;
  m.N = N; m.K = K; m.G = G; m.bits = bits; m.rec = rec; m.S = (rec - codes) / scales;
  m.data = records.data_ptr<uint8_t>();
  m.keep = records;
  return m;
}

struct Act {  // one input vector, rounded
  std::vector<int8_t> q;
  std::vector<float> s, sum;
  void fit(int64_t K) { if ((int64_t)q.size() < K) { q.resize(K); s.resize(K / BLK); sum.resize(K / BLK); } }
};

void product(const Mat& m, const float* x, Act& a, float* y) {
  a.fit(m.K);
  quantize(x, m.K, a.q.data(), a.s.data(), a.sum.data());
  const int64_t groups = m.N / R;
  const int8_t* xq = a.q.data();
  const float* xs = a.s.data();
  const float* xsum = a.sum.data();
  // a thread's share at least ~32 KB of codes, so a parallel region pays for its start
  const int64_t grain = std::max<int64_t>(1, 32768 / (m.G * 16 * (m.bits == 4 ? 16 : 32)));
  at::parallel_for(0, groups, grain, [&](int64_t r0, int64_t r1) {
    if (m.bits == 4) q4_groups(m, xq, xs, xsum, y, r0, r1);
    else q8_groups(m, xq, xs, y, r0, r1);
  });
}

// thread tid of nth: its contiguous share of m's row groups, from activations rounded already
void rows(const Mat& m, const Act& a, float* y, int tid, int nth) {
  const int64_t groups = m.N / R, per = (groups + nth - 1) / nth;
  const int64_t r0 = std::min(groups, tid * per), r1 = std::min(groups, r0 + per);
  if (r0 >= r1) return;
  if (m.bits == 4) q4_groups(m, a.q.data(), a.s.data(), a.sum.data(), y, r0, r1);
  else q8_groups(m, a.q.data(), a.s.data(), y, r0, r1);
}

void round_act(const float* x, int64_t K, Act& a) {
  a.fit(K);
  quantize(x, K, a.q.data(), a.s.data(), a.sum.data());
}

// y = x @ W^T through the fused kernels (tests and benchmarks): x (K,) float32 -> (N,)
at::Tensor matvec(int64_t bits, int64_t N, int64_t K, const at::Tensor& records, const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous() && x.numel() == K,
              "zoo qstep: x must be a contiguous float32 vector of K = ", K);
  const Mat m = make_mat(bits, N, K, records);
  auto y = at::empty({N}, x.options());
  Act a;
  product(m, x.data_ptr<float>(), a, y.data_ptr<float>());
  return y;
}

// the activation rounding alone (tests): (xq int8 (K,), xs (K/32,), xsum (K/32,))
std::vector<at::Tensor> quantize_act(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous() && x.numel() % BLK == 0,
              "zoo qstep: x must be a contiguous float32 vector, a multiple of 32 long");
  const int64_t K = x.numel();
  auto q = at::empty({K}, x.options().dtype(at::kChar));
  auto s = at::empty({K / BLK}, x.options());
  auto t = at::empty({K / BLK}, x.options());
  quantize(x.data_ptr<float>(), K, q.data_ptr<int8_t>(), s.data_ptr<float>(), t.data_ptr<float>());
  return {q, s, t};
}

void rmsnorm(const float* x, const float* w, float eps, int64_t D, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < D; ++i) ss += double(x[i]) * x[i];
  const float r = 1.f / std::sqrt(float(ss / D) + eps);
  for (int64_t i = 0; i < D; ++i) out[i] = w[i] * (x[i] * r);
}

float dot(const float* a, const float* b, int64_t n) {
#ifdef ZOO_VNNI
  if (n % 16 == 0) {
    __m512 s = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) s = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s);
    return _mm512_reduce_add_ps(s);
  }
#endif
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float p, const float* v, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += p * v[i];
}

struct Layer {
  at::Tensor attn_norm, ffn_norm;
  Mat qkv, out, gateup, down;
  at::Tensor k, v;  // (h_kv, capacity, hd) views of the model's cache buffers
};

class Plan {
 public:
  Plan(int64_t D, int64_t H, int64_t HKV, int64_t HD, int64_t FF, int64_t V, double eps,
       bool interleaved, double scale, at::Tensor emb, at::Tensor final_norm, at::Tensor cos,
       at::Tensor sin)
      : D_(D), H_(H), HKV_(HKV), HD_(HD), FF_(FF), V_(V), eps_(float(eps)),
        interleaved_(interleaved), scale_(float(scale)), emb_(emb.contiguous()),
        final_norm_(final_norm.contiguous()), cos_(cos.contiguous()), sin_(sin.contiguous()) {
    TORCH_CHECK(emb_.scalar_type() == at::kFloat && emb_.size(1) == D, "zoo qstep: emb (V, D) float32");
    TORCH_CHECK(H % HKV == 0 && HD % 2 == 0, "zoo qstep: heads must be a multiple of kv heads");
    TORCH_CHECK(cos_.dim() == 2 && cos_.size(1) == HD / 2 && sin_.sizes() == cos_.sizes(),
                "zoo qstep: cos/sin (capacity, hd/2)");
    x_.resize(D); h_.resize(D); att_.resize(H * HD); o_.resize(std::max(D, V_));
    qkv_.resize((H + 2 * HKV) * HD); ff_.resize(2 * FF); act_.resize(FF);
  }

  void add_layer(at::Tensor attn_norm, at::Tensor ffn_norm, at::Tensor qkv, at::Tensor out,
                 at::Tensor gateup, at::Tensor down) {
    Layer l;
    l.attn_norm = attn_norm.contiguous();
    l.ffn_norm = ffn_norm.contiguous();
    const int64_t Q = (H_ + 2 * HKV_) * HD_;
    l.qkv = make_mat(4, Q, D_, qkv);
    l.out = make_mat(4, D_, H_ * HD_, out);
    l.gateup = make_mat(4, 2 * FF_, D_, gateup);
    l.down = make_mat(4, D_, FF_, down);
    layers_.push_back(std::move(l));
  }

  void set_head(int64_t Np, at::Tensor head) {
    head_ = make_mat(8, Np, D_, head);
    o_.resize(std::max<int64_t>(o_.size(), Np));
  }

  // the model's cache buffers after the prefill: k, v (1, h_kv, capacity, hd) per layer
  void set_cache(std::vector<at::Tensor> ks, std::vector<at::Tensor> vs) {
    TORCH_CHECK(ks.size() == layers_.size() && vs.size() == layers_.size(), "zoo qstep: one cache per layer");
    for (size_t i = 0; i < ks.size(); ++i) {
      TORCH_CHECK(ks[i].is_contiguous() && vs[i].is_contiguous() && ks[i].scalar_type() == at::kFloat &&
                  ks[i].size(0) == 1 && ks[i].size(1) == HKV_ && ks[i].size(3) == HD_ &&
                  vs[i].sizes() == ks[i].sizes(), "zoo qstep: cache buffers (1, h_kv, capacity, hd) float32");
      layers_[i].k = ks[i][0];
      layers_[i].v = vs[i][0];
    }
    cap_ = ks.empty() ? 0 : ks[0].size(2);
    scores_.resize(cap_);
  }

  // one token at absolute position pos (= its cache slot): the next-token logits (1, V).
  // One parallel region for the whole step (PyTorch's thread count, its OpenMP runtime): the
  // threads split each product's rows and the attention's heads, and meet at a barrier between
  // phases; the short serial parts (norms, rounding the activations, residuals) run on one
  // thread.  No region is started per product (a token has 121 products).
  at::Tensor step(int64_t token, int64_t pos) {
    TORCH_CHECK(token >= 0 && token < emb_.size(0), "zoo qstep: token id out of range");
    TORCH_CHECK(pos >= 0 && pos < cap_ && pos < cos_.size(0), "zoo qstep: position ", pos,
                " is past the cache (capacity ", cap_, ")");
    const int64_t D = D_, HD = HD_, Q = H_ * HD, KV = HKV_ * HD, half = HD / 2, T = pos + 1;
    const int64_t per = H_ / HKV_, cap = cap_;
    const int nt = std::max(1, at::get_num_threads());
    if ((int64_t)scores_.size() < nt * cap) scores_.resize(nt * cap);
    float* x = x_.data();
    std::copy_n(emb_.data_ptr<float>() + token * D, D, x);
    const float* cs = cos_.data_ptr<float>() + pos * half;
    const float* sn = sin_.data_ptr<float>() + pos * half;
    auto logits = at::empty({1, V_}, emb_.options());
#pragma omp parallel num_threads(nt)
    {
#ifdef _OPENMP
      const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
#else
      const int tid = 0, nth = 1;
#endif
      for (auto& l : layers_) {
        float* kc = l.k.data_ptr<float>();
        float* vc = l.v.data_ptr<float>();
#pragma omp single
        {
          rmsnorm(x, l.attn_norm.data_ptr<float>(), eps_, D, h_.data());
          round_act(h_.data(), D, act8_);
        }
        rows(l.qkv, act8_, qkv_.data(), tid, nth);
#pragma omp barrier
#pragma omp for schedule(static)
        for (int64_t j = 0; j < HKV_; ++j) {  // k heads: rotate, append k and v to the cache
          float* k = qkv_.data() + Q + j * HD;
          rope(k, cs, sn);
          std::copy_n(k, HD, kc + (j * cap + pos) * HD);
          std::copy_n(qkv_.data() + Q + KV + j * HD, HD, vc + (j * cap + pos) * HD);
        }
#pragma omp for schedule(static)
        for (int64_t hh = 0; hh < H_; ++hh) {  // q heads: rotate, attend over the filled slots 0..pos
          float* q = qkv_.data() + hh * HD;
          rope(q, cs, sn);
          float* sc = scores_.data() + tid * cap;
          const float* kh = kc + (hh / per) * cap * HD;
          const float* vh = vc + (hh / per) * cap * HD;
          float mx = -INFINITY;
          for (int64_t t = 0; t < T; ++t) {
            sc[t] = dot(q, kh + t * HD, HD) * scale_;
            mx = std::max(mx, sc[t]);
          }
          float tot = 0.f;
          for (int64_t t = 0; t < T; ++t) { sc[t] = std::exp(sc[t] - mx); tot += sc[t]; }
          float* z = att_.data() + hh * HD;
          std::fill_n(z, HD, 0.f);
          for (int64_t t = 0; t < T; ++t) axpy(sc[t], vh + t * HD, z, HD);
          const float inv = 1.f / tot;
          for (int64_t i = 0; i < HD; ++i) z[i] *= inv;
        }
#pragma omp single
        round_act(att_.data(), H_ * HD, act8_);
        rows(l.out, act8_, o_.data(), tid, nth);
#pragma omp barrier
#pragma omp single
        {
          for (int64_t i = 0; i < D; ++i) x[i] += o_[i];
          rmsnorm(x, l.ffn_norm.data_ptr<float>(), eps_, D, h_.data());
          round_act(h_.data(), D, act8_);
        }
        rows(l.gateup, act8_, ff_.data(), tid, nth);
#pragma omp barrier
#pragma omp for schedule(static)
        for (int64_t i = 0; i < FF_; ++i) {
          const float g = ff_[i];
          act_[i] = g / (1.f + std::exp(-g)) * ff_[FF_ + i];
        }
#pragma omp single
        round_act(act_.data(), FF_, act8_);
        rows(l.down, act8_, o_.data(), tid, nth);
#pragma omp barrier
#pragma omp single
        for (int64_t i = 0; i < D; ++i) x[i] += o_[i];
      }
#pragma omp single
      {
        rmsnorm(x, final_norm_.data_ptr<float>(), eps_, D, h_.data());
        round_act(h_.data(), D, act8_);
      }
      rows(head_, act8_, o_.data(), tid, nth);
    }
    std::copy_n(o_.data(), V_, logits.data_ptr<float>());
    return logits;
  }

 private:
  void rope(float* v, const float* c, const float* s) const {
    const int64_t half = HD_ / 2;
    if (interleaved_) {
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * c[i] - b * s[i];
        v[2 * i + 1] = a * s[i] + b * c[i];
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = a * s[i] + b * c[i];
      }
    }
  }

  int64_t D_, H_, HKV_, HD_, FF_, V_, cap_ = 0;
  float eps_;
  bool interleaved_;
  float scale_;
  at::Tensor emb_, final_norm_, cos_, sin_;
  std::vector<Layer> layers_;
  Mat head_;
  std::vector<float> x_, h_, att_, o_, qkv_, ff_, act_, scores_;
  Act act8_;
};

// nbytes of uint8 on 2 MiB pages where the kernel gives them (Linux transparent huge pages in
// "madvise" mode): one page-table entry per 2 MiB of weights instead of per 4 KiB, so streaming
// ~100 MB a token does not stall on a TLB miss every 4 KiB
at::Tensor arena(int64_t nbytes) {
  constexpr int64_t HUGE = int64_t(1) << 21;
  const int64_t size = std::max<int64_t>(HUGE, (nbytes + HUGE - 1) / HUGE * HUGE);
  void* p = std::aligned_alloc(HUGE, size_t(size));
  TORCH_CHECK(p != nullptr, "zoo qstep: could not allocate ", size, " bytes for the weights");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(p, size_t(size), MADV_HUGEPAGE);  // advice only: without huge pages it still works
#endif
  return torch::from_blob(p, {nbytes}, [](void* q) { std::free(q); }, at::TensorOptions().dtype(at::kByte));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("vnni", &vnni);
  m.def("arena", &arena);
  m.def("matvec", &matvec);
  m.def("quantize_act", &quantize_act);
  pybind11::class_<Plan>(m, "Plan")
      .def(pybind11::init<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, double, bool, double,
                          at::Tensor, at::Tensor, at::Tensor, at::Tensor>())
      .def("add_layer", &Plan::add_layer)
      .def("set_head", &Plan::set_head)
      .def("set_cache", &Plan::set_cache)
      .def("step", &Plan::step);
}
"""

_lock = threading.Lock()
_built: dict = {}


def extension(plain: bool = False):
    """The built C++ module (``plain=True``: the portable loop even where the CPU has VNNI, for
    the tests), or None where it cannot be built (:func:`unavailable` says why)."""
    key = "plain" if plain else "fast"
    with _lock:
        if key not in _built:
            if os.environ.get("ZOO_NO_QKERNELS"):
                _built[key] = (None, "ZOO_NO_QKERNELS is set")
            else:
                try:
                    from torch.utils import cpp_extension

                    flags = ["-O3", "-march=native", "-fopenmp"] + (["-DZOO_QSTEP_PLAIN"] if plain else [])
                    mod = cpp_extension.load_inline(
                        name=f"zoo_qstep_v2_{key}", cpp_sources=[_SOURCE], functions=None,
                        extra_cflags=flags, extra_ldflags=["-fopenmp"], verbose=False)
                    _built[key] = (mod, None)
                except Exception as exc:  # noqa: BLE001 - no compiler, a failed build: fall back
                    _built[key] = (None, f"{type(exc).__name__}: {str(exc).strip()[:300]}")
        return _built[key][0]


def unavailable(plain: bool = False) -> str | None:
    """Why :func:`extension` gave None (None when built or not tried yet)."""
    return _built.get("plain" if plain else "fast", (None, None))[1]


# ---------------------------------------------------------------------- repacking (plain torch)
def _pad_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    return t if t.size(0) == n else torch.cat([t, t.new_zeros(n - t.size(0), *t.shape[1:])])


def _scale_bytes(*scales: torch.Tensor) -> tuple[bool, list[torch.Tensor]]:
    """Scales ``(R, G, 16)`` as the bytes of a record: float16 when every one of them is a float16
    number (a GGUF file's are), float32 otherwise -- ``(half, [uint8 (R, G, 32 or 64), ...])``."""
    half = all(bool((s.half().float() == s).all()) for s in scales)
    return half, [(s.half() if half else s).contiguous().view(torch.uint8) for s in scales]


def repack_q4(codes: torch.Tensor, scale: torch.Tensor, lo: torch.Tensor) -> tuple:
    """A Q4_1 layer's blocks (:class:`zoo.run.precision.BlockLinear`'s ``codes (N, K/2)`` in GGUF's
    byte order, ``scale, lo (N, K/32)``) as the fused kernel's records: ``(N16, records (N16/16,
    G, 256 + 32 S) uint8, half)`` -- per 16 rows and block, the 16 rows' codes interleaved (chunk,
    row, byte), their 16 scales, their 16 minimums, ``S = 2`` bytes each when all are float16
    numbers (``half``), else 4; ``N16`` is ``N`` rounded up to 16 with zero rows."""
    from .qkernels import unpack_q4

    N, G = scale.shape
    n16 = -(-N // ROWS) * ROWS
    q = _pad_rows(unpack_q4(codes).to(torch.uint8), n16).view(n16 // ROWS, ROWS, G, 2, 4, 4)
    packed = q[:, :, :, 0] | (q[:, :, :, 1] << 4)  # (R, 16 rows, G, 4 chunks, 4 bytes)
    packed = packed.permute(0, 2, 3, 1, 4).reshape(n16 // ROWS, G, 256)
    s = _pad_rows(scale.float(), n16).view(n16 // ROWS, ROWS, G).transpose(1, 2)
    m = _pad_rows(lo.float(), n16).view(n16 // ROWS, ROWS, G).transpose(1, 2)
    half, (sb, mb) = _scale_bytes(s, m)
    return n16, torch.cat([packed, sb, mb], -1).contiguous(), half


def repack_q8(codes: torch.Tensor, scale: torch.Tensor) -> tuple:
    """A Q8_0 layer's blocks (``codes (N, K) int8``, ``scale (N, K/32)``) as records: ``(N16,
    records (N16/16, G, 512 + 16 S) uint8, half)`` -- per 16 rows and block the codes (chunk of 4
    inputs, row, byte) and the 16 scales (float16 where exact, as :func:`repack_q4`)."""
    N, G = scale.shape
    n16 = -(-N // ROWS) * ROWS
    q = _pad_rows(codes, n16).view(n16 // ROWS, ROWS, G, 8, 4)
    packed = q.permute(0, 2, 3, 1, 4).reshape(n16 // ROWS, G, 512).view(torch.uint8)
    s = _pad_rows(scale.float(), n16).view(n16 // ROWS, ROWS, G).transpose(1, 2)
    half, (sb,) = _scale_bytes(s)
    return n16, torch.cat([packed, sb], -1).contiguous(), half


def quantize_activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused step's rounding of an input vector ``x (K,)``, in plain PyTorch: ``(xq (K,) int8,
    xs (K/32,), xsum (K/32,))`` with ``xs = max|x_block| / 127`` and ``xq = round(x / xs)``."""
    b = x.float().view(-1, BLOCK)
    d = b.abs().amax(-1) / 127.0
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    q = torch.round(b * inv[:, None]).clamp(-127, 127).to(torch.int8)
    return q.view(-1), d, b.sum(-1)


def reference_product(x: torch.Tensor, layer) -> torch.Tensor:
    """What the fused kernel computes for ``x (K,)`` and a :class:`~zoo.run.precision.BlockLinear`,
    in float64 from the same rounded activations (a naive loop of the block arithmetic)."""
    from .qkernels import unpack_q4

    xq, xs, xsum = quantize_activations(x)
    codes, scale, lo, _ = layer._kernel
    N = scale.size(0)
    q = (unpack_q4(codes) if layer.bits == 4 else codes.to(torch.int32)).view(N, -1, BLOCK)
    dots = (q.double() * xq.double().view(1, -1, BLOCK)).sum(-1)  # (N, G) exact integers
    y = (dots * scale.double() * xs.double()).sum(-1)
    if layer.bits == 4:
        y = y + (lo.double() * xsum.double()).sum(-1)
    return y


def repacked(layer) -> tuple:
    """A BlockLinear's blocks repacked for :func:`matvec` / :class:`Plan`: ``(bits, N16, K,
    records, half)`` (cached on the layer)."""
    got = getattr(layer, "_qstep_packed", None)
    if got is None:
        codes, scale, lo, _ = layer._kernel
        n16, rec, half = repack_q4(codes, scale, lo) if layer.bits == 4 else repack_q8(codes, scale)
        got = (layer.bits, n16, layer.in_features, rec, half)
        layer._qstep_packed = got
    return got


def matvec(layer, x: torch.Tensor, *, plain: bool = False) -> torch.Tensor:
    """``x (K,) @ W^T`` through the fused step's kernel for a BlockLinear ``layer``: ``(N,)``."""
    ext = extension(plain)
    bits, n16, k, rec, _ = repacked(layer)
    return ext.matvec(bits, n16, k, rec, x.float().contiguous())[:layer.out_features]


# ---------------------------------------------------------------------- when the fused step runs
_enabled = [True]


def enabled() -> bool:
    """False inside :func:`disabled` or with ``ZOO_NO_QSTEP`` set."""
    return _enabled[-1] and not os.environ.get("ZOO_NO_QSTEP")


@contextlib.contextmanager
def disabled():
    """``with qstep.disabled():`` decodes q4 models through the module path (the int16-activation
    q4 kernels), e.g. to compare the two."""
    _enabled.append(False)
    try:
        yield
    finally:
        _enabled.pop()


def _has_hooks(model) -> bool:
    from torch.nn.modules import module as m

    if any(getattr(m, n, None) for n in ("_global_forward_hooks", "_global_forward_pre_hooks")):
        return True
    return any(mod._forward_hooks or mod._forward_pre_hooks for mod in model.modules())


def why_not(model) -> str | None:
    """Why the fused step would not decode ``model`` (None: it would, at batch 1)."""
    from .precision import BlockLinear

    if not enabled():
        return "turned off (ZOO_NO_QSTEP or qstep.disabled())"
    if getattr(model, "quantized", None) != "q4":
        return "not a q4 model (zoo.run.precision.quantize_q4 with head='q8')"
    s = model.spec
    pos = s.positions
    checks = [
        (s.arch == "decoder", "not decoder-only"),
        (pos is not None and pos.kind == "rope", "positions are not RoPE"),
        (s.norm.kind == "rmsnorm", f"norm {s.norm.kind!r} is not rmsnorm"),
        (s.placement.kind == "pre", "not pre-norm blocks"),
        (s.ffn.kind == "swiglu" and getattr(s.ffn.config, "activation", "silu") == "silu"
         and not getattr(s.ffn.config, "bias", False), "the feed-forward is not SwiGLU/SiLU without bias"),
        (s.attention.kind == "sdpa", f"attention kernel {s.attention.kind!r} is not sdpa"),
        (len(s.mask) == 1 and s.mask[0].kind == "causal" and not s.mask_pattern, "masks other than causal"),
        (not (s.qkv_bias or s.out_bias or s.head_bias), "biases"),
        (not s.qk_norm and not s.parallel_residual, "q/k norms or parallel residuals"),
        (s.logit_softcap is None and s.head_scale is None and not s.scale_embeddings
         and not s.embed_norm and s.attn_scale is None, "soft-cap, head or embedding scales"),
        (not s.dense_ffn and not s.encoder and not s.decoder, "per-layer variants"),
    ]
    for ok, why in checks:
        if not ok:
            return f"architecture: {why}"
    rope = model.decoder.positions
    if getattr(rope, "length_dependent", False) or getattr(rope, "group_configs", None) \
            or rope.rot_dim != model.decoder.blocks[0].attn.hd:
        return "architecture: RoPE scaling that depends on the length, per-group bases or partial rotation"
    for i, b in enumerate(model.decoder.blocks):
        a, f = b.attn, b.ffn
        lins = [getattr(a, "qkv", None), getattr(a, "out", None), getattr(f, "gate", None),
                getattr(f, "up", None), getattr(f, "down", None)]
        if not all(isinstance(m, BlockLinear) and m.bits == 4 for m in lins):
            return f"block {i}: a projection is not 4-bit blocks"
        if type(b.attn_res.norm).__name__ != "RMSNorm" or type(b.ffn_res.norm).__name__ != "RMSNorm":
            return f"block {i}: norm is not RMSNorm"
    if type(model.decoder.final_norm).__name__ != "RMSNorm":
        return "the final norm is not RMSNorm"
    if not (isinstance(model.lm_head, BlockLinear) and model.lm_head.bits == 8):
        return "the LM head is not Q8_0 blocks (quantize_q4(head='q8'))"
    if model.tok_emb.weight.dtype != torch.float32:
        return "the embeddings are not float32"
    if _has_hooks(model):
        return "PyTorch hooks are installed (they must fire: the module path runs)"
    if extension() is None:
        return f"the fused step's kernels could not be built ({unavailable()})"
    return None


def _cat(mats: list) -> torch.Tensor:
    """Several BlockLinears of the same input as one repacked matrix (rows stacked)."""
    codes = torch.cat([m._kernel[0] for m in mats])
    scale = torch.cat([m._kernel[1] for m in mats])
    lo = torch.cat([m._kernel[2] for m in mats])
    n16, rec, _ = repack_q4(codes, scale, lo)
    assert n16 == codes.size(0), "stacked rows must be a multiple of 16"
    return rec


def _in_arena(ext, groups: list[tuple]) -> tuple[list[tuple], tuple]:
    """The records of every matrix copied, in the order a step reads them, into one buffer on
    huge pages (``ext.arena``): a step streams one region front to back.  Returns the groups as
    views of it (the last group apart, as in ``groups``)."""
    align = 64
    sizes = [-(-r.numel() // align) * align for g in groups for r in g]
    buf = ext.arena(sum(sizes))
    out, at = [], 0
    for g in groups:
        views = []
        for r in g:
            v = buf[at:at + r.numel()].view(r.shape)
            v.copy_(r)
            views.append(v)
            at += -(-r.numel() // align) * align
        out.append(tuple(views))
    return out[:-1], out[-1]


class Plan:
    """The fused decoding step of one q4 model for one generation (see the module notes)."""

    def __init__(self, model, capacity: int, *, plain: bool = False):
        ext = extension(plain)
        spec, dec = model.spec, model.decoder
        a0 = dec.blocks[0].attn
        H, HKV, HD = a0.h, a0.h_kv, a0.hd
        D, FF = spec.d_model, dec.blocks[0].ffn.gate.out_features
        with torch.no_grad():
            cos, sin = dec.positions.qk_state(torch.arange(capacity)[None])[:2]
        eps = dec.blocks[0].attn_res.norm.config.eps
        rope = dec.positions.config
        packs = getattr(model, "_qstep_layers", None)
        if packs is None:  # repacked once per model, kept for the next generation
            packs = []
            for b in dec.blocks:
                a, f = b.attn, b.ffn
                ok = all(m.out_features % ROWS == 0 for m in (a.qkv, a.out, f.gate, f.up, f.down))
                if not ok:
                    raise ValueError("projection sizes must be multiples of 16")
                packs.append((_cat([a.qkv]), _cat([a.out]), _cat([f.gate, f.up]), _cat([f.down])))
            head = repacked(model.lm_head)
            packs, head_rec = _in_arena(ext, [*packs, (head[3],)])
            head = (*head[:3], head_rec[0], head[4])
            model.lm_head._qstep_packed = head  # matvec reads the same bytes
            model._qstep_layers = packs = (packs, head)
        layers, head = packs
        self._p = ext.Plan(D, H, HKV, HD, FF, spec.vocab_size, float(eps), bool(rope.interleaved),
                           HD ** -0.5, model.tok_emb.weight.detach(),
                           dec.final_norm.weight.detach().float(),
                           cos.reshape(capacity, -1).float(), sin.reshape(capacity, -1).float())
        for b, (qkv, out, gu, down) in zip(dec.blocks, layers):
            self._p.add_layer(b.attn_res.norm.weight.detach().float(), b.ffn_res.norm.weight.detach().float(),
                              qkv, out, gu, down)
        self._p.set_head(head[1], head[3])
        self.V = spec.vocab_size

    def attach(self, cache) -> None:
        """Continue in ``cache`` (a :class:`zoo.model.layers.KVCache` after the prefill)."""
        self._p.set_cache([lc.k for lc in cache.layers], [lc.v for lc in cache.layers])

    def step(self, token: int, pos: int) -> torch.Tensor:
        """The next-token logits ``(1, V)`` after ``token`` at position ``pos``."""
        return self._p.step(int(token), int(pos))[:, :self.V]


def bytes_per_token(model) -> int | None:
    """Bytes a fused step reads for ``model`` once it has decoded (its repacked records, the
    norms, one embedding row); None before its first fused generation."""
    packs = getattr(model, "_qstep_layers", None)
    if packs is None:
        return None
    layers, head = packs
    rec = sum(r.numel() for group in layers for r in group) + head[3].numel()
    D = model.spec.d_model
    norms = 4 * D * (2 * len(layers) + 1)
    return rec + norms + 4 * D


def plan_for(model, B: int, padding, prefix_length, capacity: int) -> Plan | None:
    """A :class:`Plan` when the fused step can decode this generation, else None (the reason:
    :func:`why_not`, or batch/padding/prefix; kept as ``model.qstep_reason``)."""
    why = why_not(model)
    if why is None and (B != 1 or padding is not None or prefix_length is not None):
        why = "batch > 1, padding or a prefix LM"
    if why is None:
        try:
            plan = Plan(model, capacity)
        except ValueError as exc:
            why = f"shapes: {exc}"
    try:
        model.qstep_reason = why
    except (AttributeError, TypeError):
        pass
    return plan if why is None else None


@torch.no_grad()
def decode_logits(model, ids: torch.Tensor, prefill: int = 1, *, plain: bool = False) -> torch.Tensor:
    """Teacher-forced logits of ``ids (1, T)`` as decoding computes them: the first ``prefill``
    tokens through the model (its prefill), every later token through the fused step, one at a
    time; ``(T - prefill + 1, V)``: row ``i`` predicts token ``prefill + i``.  For measuring the
    fused step's quality (tests, ``benchmarks/quantize_quality.py``); raises ValueError with
    :func:`why_not`'s reason where the step does not apply."""
    why = why_not(model)
    if why is not None:
        raise ValueError(f"the fused step does not apply: {why}")
    T = ids.size(1)
    cache = model.new_cache(capacity=T)
    out = [model(ids[:, :prefill], cache=cache)[0, -1:].float()]
    plan = Plan(model, T, plain=plain)
    plan.attach(cache)
    for p in range(prefill, T):
        out.append(plan.step(int(ids[0, p]), p))
    return torch.cat(out)
