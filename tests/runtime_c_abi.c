// The runtime's C ABI used from C99 (so the header is checked as C); driven by test_runtime.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oscar/oscar_runtime.h"

int oscar_test_c_abi(const char* bundle_path, char* message, size_t message_size);

// Records the first failed condition and leaves.
#define REQUIRE(cond)                                                                  \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      snprintf(message, message_size, "line %d: %s (last error: %s)", __LINE__, #cond, \
               oscar_runtime_last_error());                                            \
      goto done;                                                                       \
    }                                                                                  \
  } while (0)

// Opens the bundle, reads it, validates it both ways, applies it to a row and quantizes that.
// Returns 0 when every check passed, else 1 with `message` naming the failed one.
int oscar_test_c_abi(const char* bundle_path, char* message, size_t message_size) {
  int failed = 1;
  oscar_runtime* rt = NULL;
  float* row = NULL;
  float* rotated = NULL;
  float* back = NULL;
  float* matrix = NULL;
  float* scales = NULL;
  float* zeros = NULL;
  uint8_t* packed = NULL;
  message[0] = '\0';

  oscar_runtime_params params = oscar_runtime_default_params();
  REQUIRE(params.check_orthogonality);
  REQUIRE(oscar_runtime_open(bundle_path, &params, &rt) == OSCAR_STATUS_OK);
  REQUIRE(rt != NULL);
  REQUIRE(oscar_runtime_last_error()[0] == '\0');

  const oscar_runtime_info* info = oscar_runtime_get_info(rt);
  REQUIRE(info != NULL);
  REQUIRE(info->num_layers > 0 && info->head_dim > 0);
  REQUIRE(strcmp(info->origin, bundle_path) == 0);
  const int64_t d = info->head_dim;

  oscar_model_desc model = oscar_runtime_default_model_desc();
  model.num_layers = info->num_layers;
  model.num_heads = info->num_heads;
  model.num_kv_heads = info->num_kv_heads;
  model.head_dim = info->head_dim;
  model.architecture = info->architecture;
  REQUIRE(oscar_runtime_validate(rt, &model) == OSCAR_STATUS_OK);
  model.head_dim = d + 4;
  REQUIRE(oscar_runtime_validate(rt, &model) == OSCAR_STATUS_MODEL_MISMATCH);
  REQUIRE(strstr(oscar_runtime_last_error(), "head_dim") != NULL);

  const float* r = NULL;
  REQUIRE(oscar_runtime_rotation(rt, OSCAR_KV_KEY, 0, 0, &r) == OSCAR_STATUS_OK && r != NULL);
  float clip = 0.0f;
  REQUIRE(oscar_runtime_clip_ratio(rt, OSCAR_KV_VALUE, 0, 0, &clip) == OSCAR_STATUS_OK);
  REQUIRE(clip > 0.0f && clip <= 1.0f);
  REQUIRE(oscar_runtime_rotation(rt, OSCAR_KV_KEY, info->num_layers, 0, &r) ==
          OSCAR_STATUS_INVALID_ARGUMENT);
  REQUIRE(strstr(oscar_runtime_last_error(), "out of range") != NULL);

  row = malloc((size_t)d * sizeof(float));
  rotated = malloc((size_t)d * sizeof(float));
  back = malloc((size_t)d * sizeof(float));
  matrix = malloc((size_t)(d * d) * sizeof(float));
  packed = malloc((size_t)oscar_runtime_int2_row_bytes(rt));
  scales = malloc((size_t)oscar_runtime_int2_row_groups(rt) * sizeof(float));
  zeros = malloc((size_t)oscar_runtime_int2_row_groups(rt) * sizeof(float));
  REQUIRE(row && rotated && back && matrix && packed && scales && zeros);
  for (int64_t i = 0; i < d; ++i) row[i] = (float)sin(0.7 * (double)i) * 2.0f;

  REQUIRE(oscar_runtime_apply(rt, OSCAR_TRANSFORM_KEY, 0, 0, row, rotated, 1) == OSCAR_STATUS_OK);
  REQUIRE(oscar_runtime_apply(rt, OSCAR_TRANSFORM_KEY_INVERSE, 0, 0, rotated, back, 1) ==
          OSCAR_STATUS_OK);
  for (int64_t i = 0; i < d; ++i) REQUIRE(fabs(back[i] - row[i]) < 1e-4);

  REQUIRE(oscar_runtime_quantize_int2(rt, OSCAR_KV_KEY, 0, 0, rotated, packed, scales, zeros) ==
          OSCAR_STATUS_OK);
  REQUIRE(oscar_runtime_dequantize_int2(rt, packed, scales, zeros, back) == OSCAR_STATUS_OK);
  double err = 0.0, norm = 0.0;
  for (int64_t i = 0; i < d; ++i) {
    err += (back[i] - rotated[i]) * (back[i] - rotated[i]);
    norm += rotated[i] * rotated[i];
  }
  REQUIRE(norm > 0.0 && sqrt(err / norm) < 0.6);  // 2 bits per element: coarse, never garbage

  // Enum arguments outside their enumerators (valid C values, unlike in C++) are argument errors.
  REQUIRE(oscar_runtime_rotation(rt, (oscar_kv)7, 0, 0, &r) == OSCAR_STATUS_INVALID_ARGUMENT);
  REQUIRE(strstr(oscar_runtime_last_error(), "kind 7") != NULL);
  REQUIRE(oscar_runtime_mean(rt, (oscar_kv)-1, 0, 0, &r) == OSCAR_STATUS_INVALID_ARGUMENT);
  REQUIRE(oscar_runtime_quantize_int2(rt, (oscar_kv)2, 0, 0, rotated, packed, scales, zeros) ==
          OSCAR_STATUS_INVALID_ARGUMENT);
  REQUIRE(oscar_runtime_apply(rt, (oscar_transform)9, 0, 0, row, rotated, 1) ==
          OSCAR_STATUS_INVALID_ARGUMENT);
  REQUIRE(strstr(oscar_runtime_last_error(), "transform 9") != NULL);
  REQUIRE(oscar_runtime_transform_matrix(rt, OSCAR_TRANSFORM_QUERY, 0, 0, (oscar_layout)5, matrix,
                                         NULL) == OSCAR_STATUS_INVALID_ARGUMENT);
  REQUIRE(strstr(oscar_runtime_last_error(), "layout 5") != NULL);
  REQUIRE(oscar_runtime_transform_matrix(rt, OSCAR_TRANSFORM_QUERY, 0, 0, OSCAR_LAYOUT_TRANSPOSED,
                                         matrix, NULL) == OSCAR_STATUS_OK);
  REQUIRE(strcmp(oscar_status_string((oscar_status)99), "unknown status") == 0);
  REQUIRE(strcmp(oscar_status_string(OSCAR_STATUS_IO_ERROR), "I/O error") == 0);

  REQUIRE(oscar_runtime_get_info(NULL) == NULL);
  REQUIRE(strstr(oscar_runtime_last_error(), "NULL") != NULL);
  REQUIRE(oscar_runtime_validate(NULL, &model) == OSCAR_STATUS_INVALID_ARGUMENT);
  failed = 0;

done:
  free(row);
  free(rotated);
  free(back);
  free(matrix);
  free(packed);
  free(scales);
  free(zeros);
  oscar_runtime_close(rt);
  return failed;
}
