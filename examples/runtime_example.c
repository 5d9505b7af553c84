// Engine-side example: open an OSCAR bundle, check it against the model, apply it to KV rows (C
// ABI).
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oscar/oscar_runtime.h"

static const char* const kProgram = "oscar-runtime-example";

static void usage(FILE* out) {
  fprintf(
      out,
      "usage: %s BUNDLE (--config CONFIG_JSON | --model MODEL_DIR |\n"
      "           --layers N --heads N --kv-heads N --head-dim N [--arch NAME]\n"
      "           [--rope-theta X] [--config-sha256 HEX] [--weights-sha256 HEX])\n"
      "           [--skip-hashes]\n"
      "\n"
      "Opens an OSCAR rotation bundle, checks that it was computed for the model (given as a\n"
      "Hugging Face config.json, a checkpoint directory, or its dimensions), prints a summary,\n"
      "and round-trips one synthetic key and value row per layer and KV head through the\n"
      "bundle's rotation and the INT2 format, reporting the error. Exit status: 0 on success,\n"
      "1 on an error (one line on stderr), 2 on a usage error.\n",
      kProgram);
}

// One line on stderr for a failed library call; returns the exit status.
static int report(oscar_status status) {
  const char* message = oscar_runtime_last_error();
  fprintf(stderr, "%s: %s\n", kProgram, message[0] != '\0' ? message : oscar_status_string(status));
  return 1;
}

static int usage_error(const char* what, const char* arg) {
  fprintf(stderr, "%s: %s%s%s (see --help)\n", kProgram, what, arg ? " " : "", arg ? arg : "");
  return 2;
}

static bool parse_int(const char* text, int64_t* out) {
  char* end = NULL;
  errno = 0;
  const long long v = strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v <= 0) return false;
  *out = (int64_t)v;
  return true;
}

// Deterministic standard normal numbers (xorshift64* and Box-Muller), so runs are reproducible.
static double next_normal(uint64_t* state) {
  double u[2];
  for (int i = 0; i < 2; ++i) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    u[i] = ((double)((*state * 2685821657736338717ull) >> 11) + 0.5) / 9007199254740992.0;
  }
  return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

struct RoundTrip {
  double sum, max;
  int64_t rows;
};

// x -> rotate -> INT2 -> dequantize -> rotate back; adds ||x_hat - x|| / ||x|| to `stats`.
static oscar_status round_trip(const oscar_runtime* rt, oscar_kv kind, int64_t layer, int64_t head,
                               const float* x, float* work, uint8_t* packed, float* scales,
                               float* zeros, struct RoundTrip* stats) {
  const int64_t d = oscar_runtime_get_info(rt)->head_dim;
  const bool key = kind == OSCAR_KV_KEY;
  oscar_status s = oscar_runtime_apply(rt, key ? OSCAR_TRANSFORM_KEY : OSCAR_TRANSFORM_VALUE, layer,
                                       head, x, work, 1);
  if (s == OSCAR_STATUS_OK) {
    s = oscar_runtime_quantize_int2(rt, kind, layer, head, work, packed, scales, zeros);
  }
  if (s == OSCAR_STATUS_OK) s = oscar_runtime_dequantize_int2(rt, packed, scales, zeros, work);
  if (s == OSCAR_STATUS_OK) {
    s = oscar_runtime_apply(rt, key ? OSCAR_TRANSFORM_KEY_INVERSE : OSCAR_TRANSFORM_VALUE_INVERSE,
                            layer, head, work, work, 1);
  }
  if (s != OSCAR_STATUS_OK) return s;
  double err = 0.0, norm = 0.0;
  for (int64_t i = 0; i < d; ++i) {
    err += ((double)work[i] - x[i]) * ((double)work[i] - x[i]);
    norm += (double)x[i] * x[i];
  }
  const double rel = norm > 0.0 ? sqrt(err / norm) : 0.0;
  stats->sum += rel;
  stats->max = rel > stats->max ? rel : stats->max;
  stats->rows += 1;
  return OSCAR_STATUS_OK;
}

int main(int argc, char** argv) {
  const char* bundle_path = NULL;
  const char* config_path = NULL;
  const char* model_dir = NULL;
  bool check_hashes = true;
  oscar_model_desc model = oscar_runtime_default_model_desc();
  int dims_given = 0;

  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t* dim = NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--skip-hashes") == 0) {
      check_hashes = false;
      continue;
    } else if (a[0] != '-' || a[1] == '\0') {
      if (bundle_path != NULL) return usage_error("unexpected argument", a);
      bundle_path = a;
      continue;
    }
    if (value == NULL) return usage_error("missing value after", a);
    ++i;
    if (strcmp(a, "--config") == 0) {
      config_path = value;
    } else if (strcmp(a, "--model") == 0) {
      model_dir = value;
    } else if (strcmp(a, "--arch") == 0) {
      model.architecture = value;
    } else if (strcmp(a, "--config-sha256") == 0) {
      model.config_sha256 = value;
    } else if (strcmp(a, "--weights-sha256") == 0) {
      model.weights_header_sha256 = value;
    } else if (strcmp(a, "--rope-theta") == 0) {
      char* end = NULL;
      model.rope_theta = strtod(value, &end);
      if (end == value || *end != '\0' || !(model.rope_theta > 0.0)) {
        return usage_error("--rope-theta needs a positive number, got", value);
      }
    } else if (strcmp(a, "--layers") == 0) {
      dim = &model.num_layers;
    } else if (strcmp(a, "--heads") == 0) {
      dim = &model.num_heads;
    } else if (strcmp(a, "--kv-heads") == 0) {
      dim = &model.num_kv_heads;
    } else if (strcmp(a, "--head-dim") == 0) {
      dim = &model.head_dim;
    } else {
      return usage_error("unknown option", a);
    }
    if (dim != NULL) {
      if (!parse_int(value, dim)) return usage_error("expected a positive integer after", a);
      ++dims_given;
    }
  }
  if (bundle_path == NULL) return usage_error("missing the bundle path", NULL);
  const int sources = (config_path != NULL) + (model_dir != NULL) + (dims_given > 0);
  if (sources != 1) {
    return usage_error(
        "describe the model one way: --config, --model, or --layers/--heads/--kv-heads/--head-dim",
        NULL);
  }
  if (dims_given > 0 && dims_given < 4) {
    return usage_error("--layers, --heads, --kv-heads and --head-dim go together", NULL);
  }

  oscar_runtime* rt = NULL;
  const oscar_runtime_params params = oscar_runtime_default_params();
  oscar_status s = oscar_runtime_open(bundle_path, &params, &rt);
  if (s != OSCAR_STATUS_OK) return report(s);

  const char* checked = NULL;
  if (config_path != NULL) {
    s = oscar_runtime_validate_config(rt, config_path, check_hashes);
    checked = check_hashes ? "config.json (dimensions, architecture, RoPE, config sha256)"
                           : "config.json (dimensions, architecture, RoPE)";
  } else if (model_dir != NULL) {
    s = oscar_runtime_validate_model_dir(rt, model_dir, check_hashes);
    checked = check_hashes ? "checkpoint (dimensions, architecture, RoPE, both hashes)"
                           : "checkpoint (dimensions, architecture, RoPE)";
  } else {
    s = oscar_runtime_validate(rt, &model);
    checked = "the given dimensions";
  }
  if (s != OSCAR_STATUS_OK) {
    const int status = report(s);
    oscar_runtime_close(rt);
    return status;
  }

  const oscar_runtime_info* info = oscar_runtime_get_info(rt);
  printf("bundle     %s: format v%d, oscar %s (commit %.12s), created %s\n", info->origin,
         info->format_version, info->tool_version, info->git_commit, info->created);
  printf(
      "model      %s (%s, '%s'): %lld layers, %lld query / %lld KV heads, head_dim %lld, "
      "RoPE %s theta %g\n",
      info->architecture, info->model_type, info->model_name, (long long)info->num_layers,
      (long long)info->num_heads, (long long)info->num_kv_heads, (long long)info->head_dim,
      info->rope_type, info->rope_theta);
  printf("quantize   INT%d, group %lld, %s scales, first %lld and last %lld tokens in BF16\n",
         info->bits, (long long)info->group_size, info->scale_dtype, (long long)info->sink_tokens,
         (long long)info->recent_tokens);
  printf(
      "calibrate  %s, grouping %s, values %s, keys centred %s, values centred %s, "
      "key smoothing %g\n",
      info->composition, info->grouping, info->value_objective, info->keys_centered ? "yes" : "no",
      info->values_centered ? "yes" : "no", info->smooth_keys);
  printf("validated  against %s\n", checked);

  const int64_t d = info->head_dim;
  float* x = malloc((size_t)d * sizeof(float));
  float* work = malloc((size_t)d * sizeof(float));
  uint8_t* packed = malloc((size_t)oscar_runtime_int2_row_bytes(rt) + 1);
  float* scales = malloc((size_t)oscar_runtime_int2_row_groups(rt) * sizeof(float));
  float* zeros = malloc((size_t)oscar_runtime_int2_row_groups(rt) * sizeof(float));
  struct RoundTrip stats[2] = {{0.0, 0.0, 0}, {0.0, 0.0, 0}};
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  const bool out_of_memory =
      x == NULL || work == NULL || packed == NULL || scales == NULL || zeros == NULL;
  if (out_of_memory) fprintf(stderr, "%s: out of memory\n", kProgram);
  for (int64_t layer = 0; !out_of_memory && s == OSCAR_STATUS_OK && layer < info->num_layers;
       ++layer) {
    for (int64_t head = 0; s == OSCAR_STATUS_OK && head < info->num_kv_heads; ++head) {
      for (int kind = 0; s == OSCAR_STATUS_OK && kind < 2; ++kind) {
        // A synthetic row around the bundle's mean (real engines pass their K/V projections).
        const float* mean = NULL;
        s = oscar_runtime_mean(rt, (oscar_kv)kind, layer, head, &mean);
        for (int64_t i = 0; s == OSCAR_STATUS_OK && i < d; ++i) {
          x[i] = (float)next_normal(&rng) + (mean != NULL ? mean[i] : 0.0f);
        }
        if (s == OSCAR_STATUS_OK) {
          s = round_trip(rt, (oscar_kv)kind, layer, head, x, work, packed, scales, zeros,
                         &stats[kind]);
        }
      }
    }
  }
  int status = 0;
  if (out_of_memory) {
    status = 1;
  } else if (s != OSCAR_STATUS_OK) {
    status = report(s);
  } else {
    printf(
        "round trip rotate -> INT2 -> dequantize -> rotate back, one synthetic row per layer, "
        "KV head and side (%lld each):\n",
        (long long)stats[0].rows);
    printf("           keys   relative L2 error mean %.4f, max %.4f\n",
           stats[0].sum / (double)stats[0].rows, stats[0].max);
    printf("           values relative L2 error mean %.4f, max %.4f\n",
           stats[1].sum / (double)stats[1].rows, stats[1].max);
  }
  free(x);
  free(work);
  free(packed);
  free(scales);
  free(zeros);
  oscar_runtime_close(rt);
  return status;
}
