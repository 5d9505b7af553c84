// Per-row scalars and code thresholds of the INT2 quantizer of bf16 rows, shared by the CUDA
// demotion kernel and a CPU test: the same IEEE float operations in the same order on both sides.
//
// A row's codes depend on its elements only through a monotone function: c = clamp(x, lo, hi),
// then clamp(floor(RN(RN(c / scale + zero) + 0.5)), 0, 3) (divide_by gives the codes of a correctly
// rounded division on the domain where it is used, and each step is non-decreasing). So for bf16
// x the code is [x >= T1] + [x >= T2] + [x >= T3], Tj the smallest bf16 value whose code is >= j:
// three comparisons per element instead of a division. row_threshold finds Tj from the analytic
// estimate (j - 0.5 - zero) * scale by checking the code function itself at Tj and below it, and
// says when it cannot decide (the caller then quantizes the row the ordinary way); row_thresholds
// finds all three at once, without branches, for a thread that quantizes a row alone.
//
// Included by int2_quantize.cuh inside a namespace (and by the CPU test): it includes nothing.
#pragma once

#if defined(__CUDACC__)
#define INT2T_FN __host__ __device__ __forceinline__
#else
#define INT2T_FN inline
#endif

namespace int2t {

INT2T_FN unsigned bits_of(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  unsigned u;
  __builtin_memcpy(&u, &v, sizeof u);
  return u;
#endif
}

INT2T_FN float float_of(unsigned u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float v;
  __builtin_memcpy(&v, &u, sizeof v);
  return v;
#endif
}

// Single IEEE operations, rounded to nearest; the host side must be built without FMA contraction.
INT2T_FN float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
INT2T_FN float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
INT2T_FN float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
INT2T_FN float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}
INT2T_FN float rcp_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __frcp_rn(a);
#else
  return 1.0f / a;
#endif
}
// fminf / fmaxf: a NaN operand yields the other one.
INT2T_FN float min_f(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fminf(a, b);
#else
  return __builtin_fminf(a, b);
#endif
}
INT2T_FN float max_f(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fmaxf(a, b);
#else
  return __builtin_fmaxf(a, b);
#endif
}
INT2T_FN float abs_f(float a) { return float_of(bits_of(a) & 0x7fffffffu); }
INT2T_FN float copysign_f(float a, float sign) {
  return float_of((bits_of(a) & 0x7fffffffu) | (bits_of(sign) & 0x80000000u));
}
INT2T_FN bool is_inf(float a) { return (bits_of(a) & 0x7fffffffu) == 0x7f800000u; }
INT2T_FN bool is_nan(float a) { return (bits_of(a) & 0x7fffffffu) > 0x7f800000u; }

// Round to nearest even onto bf16 (overflow to infinity), widened back to float; NaN stays NaN.
INT2T_FN float round_bf16(float v) {
#if defined(__CUDA_ARCH__)
  return __bfloat162float(__float2bfloat16_rn(v));
#else
  if (is_nan(v)) return v;
  unsigned u = bits_of(v);
  u += 0x7fffu + ((u >> 16) & 1u);
  return float_of(u & 0xffff0000u);
#endif
}

// RN(1/3).
constexpr float kReciprocalOf3 = 0x1.555556p-2f;

// x / s from inverse = RN(1/s): the rounded product and one correction by the exact remainder.
// Where it is used (see row_scalars), it gives the same stored scale, zero and codes as a correctly
// rounded division (exhaustively checked on its domain; the comment in int2_quantize.cuh says how).
INT2T_FN float divide_by(float x, float s, float inverse) {
  const float q = mul_rn(x, inverse);
  return fma_rn(fma_rn(-q, s, x), inverse, q);
}

// The scalars of a row, as int2::quantize_group computes them with bf16 scale and zero.
struct RowScalars {
  float lo, hi;     // clipped range; lo is +0 for a zero minimum
  float scale;      // stored scale (bf16 value)
  float zero;       // stored zero (bf16 value); valid when reciprocal
  float inverse;    // RN(1 / scale); valid when reciprocal
  bool reciprocal;  // the domain on which divide_by may replace the division (else: divide)
};

// xmin, xmax: the row's smallest and largest element (not NaN); t >= 0: the clip threshold.
// Clamping is monotone, so the clipped range is the clamped raw range.
INT2T_FN RowScalars row_scalars(float xmin, float xmax, float t) {
  RowScalars r;
  r.lo = add_rn(min_f(max_f(xmin, -t), t), 0.0f);  // a zero minimum is +0, as in the reference
  r.hi = min_f(max_f(xmax, -t), t);
  float scale = round_bf16(divide_by(sub_rn(r.hi, r.lo), 3.0f, kReciprocalOf3));
  if (!(scale > 0.0f) || is_inf(scale)) scale = 1.0f;
  // lo and hi finite, scale >= 2^-90, |c| <= 1024 scale for every c in [lo, hi] (or scale = 1).
  const float extent = max_f(abs_f(r.lo), abs_f(r.hi));
  r.reciprocal = scale >= 0x1p-90f &&
                 (extent <= mul_rn(1024.0f, scale) || (scale == 1.0f && extent <= 0x1.fffffep127f));
  r.scale = scale;
  r.inverse = 0.0f;
  r.zero = 0.0f;
  if (r.reciprocal) {
    r.inverse = rcp_rn(scale);
    // |lo / scale| <= 1024, or scale = 1 and the quotient is -lo: never infinite.
    r.zero = round_bf16(copysign_f(divide_by(-r.lo, scale, r.inverse), -r.lo));
  }
  return r;
}

// The code of c in [lo, hi] is >= j (1..3) exactly when this is >= j: floor(v) >= j iff v >= j,
// and the clamp to 0..3 changes no such comparison.
INT2T_FN float code_value(float c, const RowScalars& r) {
  return add_rn(add_rn(divide_by(c, r.scale, r.inverse), r.zero), 0.5f);
}

// Neighbouring bf16 values (as floats) of a bf16 value v, with -0 and +0 one value; v finite, and
// not the largest finite magnitude in the direction of the step.
INT2T_FN float bf16_below(float v) {
  if (v == 0.0f) return float_of(0x80010000u);
  return float_of(v > 0.0f ? bits_of(v) - 0x10000u : bits_of(v) + 0x10000u);
}
INT2T_FN float bf16_above(float v) {
  if (v == 0.0f) return float_of(0x00010000u);
  return float_of(v > 0.0f ? bits_of(v) + 0x10000u : bits_of(v) - 0x10000u);
}

// Threshold encodings (bf16 bits): every element, no element (a NaN: no comparison holds).
constexpr unsigned short kAllElements = 0xff80u;  // -inf
constexpr unsigned short kNoElement = 0x7fffu;    // NaN

// Candidate steps of the threshold search: the estimate is nearly always the threshold or one
// bf16 step off (the CPU test counts how often the search gives up).
constexpr int kThresholdSteps = 4;

// The search's constants for level j (1..3): code >= j iff RN(u + 0.5) >= j for u = RN(q + zero),
// q the quotient: iff u >= u_min, u_min being j - 0.5 or the float below it; iff q + zero reaches
// u_min less half the gap below it (up to a tie). Where j - 0.5 - zero is near 0 that half gap
// decides where the threshold lies. They depend on j alone.
struct LevelSearch {
  float level, u_min, half_gap;
};
INT2T_FN LevelSearch level_search(int j) {
  LevelSearch s;
  s.level = static_cast<float>(j);
  const float a = s.level - 0.5f;
  const float a_below = float_of(bits_of(a) - 1u);
  s.u_min = add_rn(a_below, 0.5f) >= s.level ? a_below : a;
  s.half_gap = mul_rn(sub_rn(s.u_min, float_of(bits_of(s.u_min) - 1u)), 0.5f);
  return s;
}

// The search's first candidate for Tj: the analytic estimate, rounded to bf16.
INT2T_FN float threshold_estimate(const RowScalars& r, const LevelSearch& s) {
  return round_bf16(mul_rn(sub_rn(sub_rn(s.u_min, r.zero), s.half_gap), r.scale));
}

// Tj (bf16 bits) for j in 1..3: for every non-NaN bf16 x, code(clamp(x, lo, hi)) >= j exactly
// when x >= Tj. Requires r.reciprocal. Sets *decided = false when the search gives up.
INT2T_FN unsigned short row_threshold(const RowScalars& r, int j, bool* decided) {
  const LevelSearch s = level_search(j);
  const float level = s.level;
  *decided = true;
  if (code_value(r.lo, r) >= level) return kAllElements;
  if (code_value(r.hi, r) < level) return kNoElement;
  // Now lo < Tj <= hi. Start from the estimate, kept inside (lo, hi].
  const float above_lo = bf16_above(r.lo);
  float v = min_f(max_f(threshold_estimate(r, s), above_lo), r.hi);
  for (int step = 0; step < kThresholdSteps; ++step) {
    if (code_value(v, r) >= level) {
      if (v == above_lo) return static_cast<unsigned short>(bits_of(v) >> 16);
      const float below = bf16_below(v);  // lo < below < v
      if (code_value(below, r) < level) return static_cast<unsigned short>(bits_of(v) >> 16);
      v = below;
    } else {
      v = bf16_above(v);  // v < hi, since code(hi) >= j
    }
  }
  *decided = false;
  return kNoElement;
}

// T1, T2 and T3 (bf16 bits, t[j - 1]) as row_threshold gives them, for a thread that quantizes a
// row alone. row_threshold is a serial chain per level, a branch per candidate; here every
// level's first candidates are evaluated up front (the estimate v and its bf16 neighbours, codes
// of lo and hi once for all three), so the three searches are independent chains without
// branches. Each level settles as row_threshold's first two steps would: at v (code(v) >= j, and
// v is just above lo or code(below v) < j), or just above v (code(v) < j <= code(above v); the
// value below that one is v, or the other zero, whose code is the same). When a level needs more
// steps (none did in the CPU test's 1.17 M rows), all three take row_threshold itself, and the
// levels that did are added to *searched when it is given. Returns false exactly when
// row_threshold gives up on a level. Requires r.reciprocal.
INT2T_FN bool row_thresholds(const RowScalars& r, unsigned short (&t)[3], int* searched = nullptr) {
  const float code_lo = code_value(r.lo, r), code_hi = code_value(r.hi, r);
  const float above_lo = bf16_above(r.lo);
  int unsettled = 0;
  for (int j = 1; j <= 3; ++j) {  // unrolled: three independent chains
    const LevelSearch s = level_search(j);
    const float v = min_f(max_f(threshold_estimate(r, s), above_lo), r.hi);
    // v is in [above_lo, hi] once lo < Tj <= hi; the neighbours are evaluated whatever the case
    // (a neighbour past the finite range gives a code that is never used).
    const float below = bf16_below(v), above = bf16_above(v);
    const bool at = code_value(v, r) >= s.level;
    const bool below_reaches = code_value(below, r) >= s.level;
    const bool above_reaches = code_value(above, r) >= s.level;
    const bool settled = code_lo >= s.level || code_hi < s.level ||
                         (at ? v == above_lo || !below_reaches : above_reaches);
    unsettled += settled ? 0 : 1;
    t[j - 1] = code_lo >= s.level  ? kAllElements
               : code_hi < s.level ? kNoElement
                                   : static_cast<unsigned short>(bits_of(at ? v : above) >> 16);
  }
  if (unsettled == 0) return true;
  if (searched != nullptr) *searched += unsettled;
  bool decided = true;
  for (int j = 1; j <= 3; ++j) {
    bool level_decided = true;
    t[j - 1] = row_threshold(r, j, &level_decided);
    decided = decided && level_decided;
  }
  return decided;
}

}  // namespace int2t

#undef INT2T_FN
