// C ABI of the OSCAR runtime loader: rotation bundles for serving engines (pure C99, no
// exceptions).
#ifndef OSCAR_OSCAR_RUNTIME_H
#define OSCAR_OSCAR_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Layouts and conventions (docs/runtime.md, docs/bundle-format.md):
// - Matrices are float32, row-major [d, d] (d = head_dim), applied to row vectors: x_rot = x R.
// - Keys are stored as ((k - k_mean) / k_smooth) R_K, queries enter as (q * k_smooth) R_K, values
//   as (v - v_mean) R_V; the attention output over rotated values is mapped back with
//   o = o_rot R_V^T + v_mean. Missing means are zero and missing smoothing scales one.
// - Query head h reads KV head h / (num_heads / num_kv_heads) (grouped-query attention).
// - Per-head tensors of one layer are contiguous, KV head outermost: the pointer returned for KV
//   head 0 addresses the whole layer ([num_kv_heads, d, d] or [num_kv_heads, d]).
// Errors: every function that can fail returns an oscar_status (or NULL / 0 where documented) and
// leaves a one-line message for oscar_runtime_last_error() on the calling thread (thread-local, so
// threads never see each other's messages).
// Thread safety: a handle is immutable after oscar_runtime_open, so any number of threads may call
// the const functions on one handle at once; oscar_runtime_close must not race with them.

#if defined(_WIN32)
#if defined(OSCAR_RUNTIME_BUILDING)
#define OSCAR_RUNTIME_API __declspec(dllexport)
#else
#define OSCAR_RUNTIME_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define OSCAR_RUNTIME_API __attribute__((visibility("default")))
#else
#define OSCAR_RUNTIME_API
#endif

// Bumped whenever a change breaks binary compatibility (the shared library's SONAME follows it).
#define OSCAR_RUNTIME_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

// What a call returned:
//   INVALID_ARGUMENT  NULL handle or pointer, index out of range, bad enum value
//   IO_ERROR          a file or directory is missing or unreadable
//   FORMAT_ERROR      not a bundle, truncated, corrupt, newer format, inconsistent values
//   MODEL_MISMATCH    the bundle was not computed for the engine's model
//   UNSUPPORTED       valid input this build cannot handle (e.g. INT2 rows with head_dim % 4 != 0)
typedef enum oscar_status {
  OSCAR_STATUS_OK = 0,
  OSCAR_STATUS_INVALID_ARGUMENT = 1,
  OSCAR_STATUS_IO_ERROR = 2,
  OSCAR_STATUS_FORMAT_ERROR = 3,
  OSCAR_STATUS_MODEL_MISMATCH = 4,
  OSCAR_STATUS_UNSUPPORTED = 5,
  OSCAR_STATUS_OUT_OF_MEMORY = 6,
  OSCAR_STATUS_INTERNAL_ERROR = 7
} oscar_status;

// Which side of the cache a tensor belongs to.
typedef enum oscar_kv { OSCAR_KV_KEY = 0, OSCAR_KV_VALUE = 1 } oscar_kv;

// The affine maps an engine applies, each out = in M + b on row vectors, with mu = k_mean,
// s = k_smooth, nu = v_mean of the layer and KV head (mu = 0, s = 1, nu = 0 when absent):
//   KEY            k_rot = ((k - mu) / s) R_K   M = diag(1/s) R_K      b = -((mu / s) R_K)
//   QUERY          q_rot = (q * s) R_K          M = diag(s) R_K        b = 0
//   VALUE          v_rot = (v - nu) R_V         M = R_V                b = -(nu R_V)
//   OUTPUT         o = o_rot R_V^T + nu         M = R_V^T              b = nu
//   KEY_INVERSE    k = (k_rot R_K^T) * s + mu   M = R_K^T diag(s)      b = mu
//   VALUE_INVERSE  v = v_rot R_V^T + nu         the same map as OUTPUT
typedef enum oscar_transform {
  OSCAR_TRANSFORM_KEY = 0,
  OSCAR_TRANSFORM_QUERY = 1,
  OSCAR_TRANSFORM_VALUE = 2,
  OSCAR_TRANSFORM_OUTPUT = 3,
  OSCAR_TRANSFORM_KEY_INVERSE = 4,
  OSCAR_TRANSFORM_VALUE_INVERSE = 5
} oscar_transform;

// Memory layout of a [d, d] matrix written by oscar_runtime_transform_matrix.
typedef enum oscar_layout {
  OSCAR_LAYOUT_ROW_MAJOR = 0,  // M[i * d + j]: out = in M (what the bundle stores for R)
  OSCAR_LAYOUT_TRANSPOSED = 1  // M^T row-major = M column-major: the [out, in] weight layout of a
                               // linear layer y = x W^T (torch.nn.Linear, GEMM with B transposed)
} oscar_layout;

// A loaded bundle (opaque).
typedef struct oscar_runtime oscar_runtime;

// Options of oscar_runtime_open; start from oscar_runtime_default_params().
typedef struct oscar_runtime_params {
  // Check max |R R^T - I| of every rotation at open: O(layers * KV heads * d^3), about 0.6 s for
  // 32 layers x 8 KV heads x d = 128 on a 2-vCPU machine, where the rest of open takes 0.15 s
  // (docs/runtime.md). The checksum already catches corruption; this catches a producer that
  // wrote a non-orthogonal matrix. Default true.
  bool check_orthogonality;
  double orthogonality_tolerance;  // default 1e-5 (float32 storage gives about 1e-7)
} oscar_runtime_params;

// The engine's view of its model, for oscar_runtime_validate; start from
// oscar_runtime_default_model_desc(). The four dimensions are required; the rest is compared only
// when set (non-NULL and non-empty strings, rope_theta > 0).
typedef struct oscar_model_desc {
  int64_t num_layers;
  int64_t num_heads;     // query heads
  int64_t num_kv_heads;  // key/value heads
  int64_t head_dim;
  const char* architecture;           // e.g. "LlamaForCausalLM" (config.json "architectures"[0])
  const char* config_sha256;          // hex sha256 of the checkpoint's config.json
  const char* weights_header_sha256;  // docs/bundle-format.md: sha256 over the safetensors headers
  double rope_theta;                  // RoPE base
} oscar_model_desc;

// Everything the manifest says, for display and for engines' own checks. Strings are owned by the
// handle and valid until oscar_runtime_close. New fields are only ever appended.
typedef struct oscar_runtime_info {
  int format_version;  // 1, or 2 when keys are smoothed
  const char* origin;  // the path (or name) the bundle was opened from
  // Model identity.
  const char* architecture;
  const char* model_type;
  const char* model_name;
  int64_t num_layers;
  int64_t num_heads;
  int64_t num_kv_heads;
  int64_t head_dim;
  const char* rope_type;
  double rope_theta;
  double rope_factor;
  const char* config_sha256;
  const char* weights_header_sha256;
  // Quantization (how the cache is meant to be stored).
  int bits;                 // 2
  int64_t group_size;       // channels per scale/zero group (head_dim when the manifest says 0)
  int64_t sink_tokens;      // first tokens kept in BF16
  int64_t recent_tokens;    // most recent tokens kept in BF16
  const char* scale_dtype;  // bf16 | f16 | f32
  const char* row_packing;  // int2-strided
  // Calibration.
  bool keys_centered;    // k_mean present
  bool values_centered;  // v_mean present
  bool keys_smoothed;    // k_smooth present (format 2)
  double smooth_keys;    // smoothing strength alpha (0: none)
  const char* grouping;  // head | layer
  const char* value_objective;
  const char* composition;
  const char* clip_method;
  const char* dataset_name;
  const char* dataset_sha256;
  int64_t calibration_tokens;
  int64_t calibration_seq_len;
  const char* eigen_backend;
  const char* calibration_device;
  // Provenance.
  const char* tool_version;
  const char* git_commit;
  const char* created;        // ISO-8601 UTC
  const char* tensor_sha256;  // checksum of every tensor (verified at open)
  // Checksum of the manifest text (verified at open); "" for a bundle written before manifest
  // checksums, whose manifest nothing vouches for.
  const char* manifest_sha256;
} oscar_runtime_info;

// ---- Library -----------------------------------------------------------------------------------

// OSCAR_RUNTIME_ABI_VERSION of the loaded library.
OSCAR_RUNTIME_API int oscar_runtime_abi_version(void);
// The toolchain version the library was built from, e.g. "0.1.0".
OSCAR_RUNTIME_API const char* oscar_runtime_version(void);
// A fixed name for a status ("ok", "invalid argument", ...); never NULL.
OSCAR_RUNTIME_API const char* oscar_status_string(oscar_status status);
// The message of the last failure on this thread: functions returning an oscar_status set it when
// they fail and clear it ("") when they succeed; the others (oscar_runtime_get_info, ...) set it
// when they return NULL / 0 and leave it alone otherwise. Valid until the calling thread's next
// call into the library. Never NULL.
OSCAR_RUNTIME_API const char* oscar_runtime_last_error(void);

OSCAR_RUNTIME_API oscar_runtime_params oscar_runtime_default_params(void);
OSCAR_RUNTIME_API oscar_model_desc oscar_runtime_default_model_desc(void);

// ---- Open, validate, close ---------------------------------------------------------------------

// Reads and fully checks a bundle file (header, manifest, shapes, checksum, values; orthogonality
// when asked). `params` NULL: defaults. On success *out holds a new handle, else NULL.
OSCAR_RUNTIME_API oscar_status oscar_runtime_open(const char* path,
                                                  const oscar_runtime_params* params,
                                                  oscar_runtime** out);
// The same from the bytes of a whole bundle file in memory (copied; `data` may be freed after);
// `name` (may be NULL) names it in messages.
OSCAR_RUNTIME_API oscar_status oscar_runtime_open_memory(const void* data, size_t size,
                                                         const char* name,
                                                         const oscar_runtime_params* params,
                                                         oscar_runtime** out);
// Frees a handle; NULL is a no-op.
OSCAR_RUNTIME_API void oscar_runtime_close(oscar_runtime* rt);

// OSCAR_STATUS_MODEL_MISMATCH, with every differing field named in the message, unless the bundle
// was computed for the described model.
OSCAR_RUNTIME_API oscar_status oscar_runtime_validate(const oscar_runtime* rt,
                                                      const oscar_model_desc* model);
// The same against a Hugging Face config.json: dimensions, architecture, RoPE and (when
// `check_hash`) the file's sha256.
OSCAR_RUNTIME_API oscar_status oscar_runtime_validate_config(const oscar_runtime* rt,
                                                             const char* config_json_path,
                                                             bool check_hash);
// The same against a checkpoint directory (config.json and safetensors headers), as
// `oscar-bundle verify --model` does; `check_hashes` false compares the dimensions, architecture
// and RoPE only.
OSCAR_RUNTIME_API oscar_status oscar_runtime_validate_model_dir(const oscar_runtime* rt,
                                                                const char* model_dir,
                                                                bool check_hashes);

// ---- Metadata ----------------------------------------------------------------------------------

// NULL for a NULL handle.
OSCAR_RUNTIME_API const oscar_runtime_info* oscar_runtime_get_info(const oscar_runtime* rt);
// The whole manifest as compact JSON (docs/bundle-format.md); NULL for a NULL handle.
OSCAR_RUNTIME_API const char* oscar_runtime_manifest_json(const oscar_runtime* rt);

// ---- Tensors (pointers into the handle, valid until oscar_runtime_close) ----------------------

// R_K or R_V of one layer and KV head: [d, d] row-major, x_rot = x R.
OSCAR_RUNTIME_API oscar_status oscar_runtime_rotation(const oscar_runtime* rt, oscar_kv kind,
                                                      int64_t layer, int64_t kv_head,
                                                      const float** out);
// Eigenvalues of C_Q (keys) or C_S (values): [d], descending.
OSCAR_RUNTIME_API oscar_status oscar_runtime_eigenvalues(const oscar_runtime* rt, oscar_kv kind,
                                                         int64_t layer, int64_t kv_head,
                                                         const float** out);
// Clip ratio in (0, 1] of the INT2 quantizer for that side, layer and KV head.
OSCAR_RUNTIME_API oscar_status oscar_runtime_clip_ratio(const oscar_runtime* rt, oscar_kv kind,
                                                        int64_t layer, int64_t kv_head, float* out);
// Key mean mu or value mean nu: [d]. *out is NULL (status OK) when that side is not centred.
OSCAR_RUNTIME_API oscar_status oscar_runtime_mean(const oscar_runtime* rt, oscar_kv kind,
                                                  int64_t layer, int64_t kv_head,
                                                  const float** out);
// Key smoothing scales s > 0: [d]. *out is NULL (status OK) when keys are not smoothed.
OSCAR_RUNTIME_API oscar_status oscar_runtime_key_smoothing(const oscar_runtime* rt, int64_t layer,
                                                           int64_t kv_head, const float** out);

// ---- Applying a bundle on the CPU --------------------------------------------------------------

// Writes the folded affine map of `which` (see oscar_transform): `matrix` receives d * d floats in
// `layout`, `bias` d floats. `bias` may be NULL only when the map has no bias (queries; keys or
// values without a mean); otherwise that is an error rather than a silently wrong fold.
OSCAR_RUNTIME_API oscar_status oscar_runtime_transform_matrix(const oscar_runtime* rt,
                                                              oscar_transform which, int64_t layer,
                                                              int64_t kv_head, oscar_layout layout,
                                                              float* matrix, float* bias);
// Applies `which` to `n_rows` contiguous rows of d floats: out[r] = map(in[r]). `out` may equal
// `in` (in place) but must not otherwise overlap it. Element-wise steps first (mean, smoothing),
// then the products summed in index order in float32 without FMA: for keys this is exactly the
// row the project's INT2 cache kernels store before rounding to bf16.
OSCAR_RUNTIME_API oscar_status oscar_runtime_apply(const oscar_runtime* rt, oscar_transform which,
                                                   int64_t layer, int64_t kv_head, const float* in,
                                                   float* out, int64_t n_rows);

// ---- INT2 rows (the project's reference format, docs/int2-format.md) ---------------------------

// Bytes of packed codes per row (d / 4) and scale/zero groups per row (d / group_size); 0 for a
// NULL handle.
OSCAR_RUNTIME_API int64_t oscar_runtime_int2_row_bytes(const oscar_runtime* rt);
OSCAR_RUNTIME_API int64_t oscar_runtime_int2_row_groups(const oscar_runtime* rt);
// Quantizes one rotated row (output of OSCAR_TRANSFORM_KEY or _VALUE) with the bundle's group
// size, scale dtype and the clip ratio of `kind`, layer and KV head: `packed` receives d / 4 bytes,
// `scales` and `zeros` one float per group (already rounded to the scale dtype). Non-finite input
// is OSCAR_STATUS_INVALID_ARGUMENT.
OSCAR_RUNTIME_API oscar_status oscar_runtime_quantize_int2(const oscar_runtime* rt, oscar_kv kind,
                                                           int64_t layer, int64_t kv_head,
                                                           const float* row_rot, uint8_t* packed,
                                                           float* scales, float* zeros);
// Dequantizes one packed row back to d floats in the rotated basis.
OSCAR_RUNTIME_API oscar_status oscar_runtime_dequantize_int2(const oscar_runtime* rt,
                                                             const uint8_t* packed,
                                                             const float* scales,
                                                             const float* zeros, float* row_rot);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // OSCAR_OSCAR_RUNTIME_H
