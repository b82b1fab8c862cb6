/* models/model_config.h — a model's shape and hyper-parameters, read from Hugging Face config.json.
 * Qwen3 (q/k RMSNorm per head) and the Llama family (no q/k norm); anything else is refused. */
#ifndef AAH_MODEL_CONFIG_H
#define AAH_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum model_arch { MODEL_ARCH_QWEN3 = 0, MODEL_ARCH_LLAMA = 1 } model_arch;

typedef enum model_rope_scaling {
	MODEL_ROPE_NONE = 0,
	MODEL_ROPE_LINEAR = 1,     /* positions divided by factor */
	MODEL_ROPE_LLAMA3 = 2,     /* Llama 3.1 frequency-dependent scaling */
	MODEL_ROPE_FACTORS = 3,    /* each frequency divided by its own factor (a GGUF's rope_freqs tensor) */
	MODEL_ROPE_YARN = 4,       /* YaRN: frequencies blended by a ramp, cos and sin times an attention factor */
} model_rope_scaling;

/* The most frequency factors a config holds (head_dim ≤ 512). */
#define MODEL_ROPE_MAX_FACTORS 256

typedef struct model_config {
	model_arch arch;
	int32_t vocab_size;
	int32_t hidden_size;
	int32_t n_layers;
	int32_t n_heads;            /* query heads */
	int32_t n_kv_heads;
	int32_t head_dim;           /* config head_dim, else hidden_size / n_heads */
	int32_t intermediate_size;
	int32_t max_position_embeddings;
	float rms_norm_eps;
	float rope_theta;
	model_rope_scaling rope_scaling;
	float rope_factor;                   /* linear, llama3 and yarn */
	float rope_low_freq_factor;          /* llama3 */
	float rope_high_freq_factor;         /* llama3 */
	int32_t rope_original_max_pos;       /* llama3 and yarn */
	float rope_beta_fast, rope_beta_slow;   /* yarn: the ramp's ends, in rotations over the original context */
	bool rope_truncate;                  /* yarn: the ramp's ends floored and ceiled to whole dimensions */
	float rope_attn_factor;              /* yarn: cos and sin multiplied by it (1 otherwise) */
	float rope_freq_factors[MODEL_ROPE_MAX_FACTORS];   /* factors: head_dim / 2 divisors, never from config.json */
	bool tie_word_embeddings;
	bool qk_norm;               /* true for Qwen3 */
	int32_t bos_token_id;       /* -1 when absent */
	int32_t eos_token_id;       /* -1 when absent (the first, when config gives a list) */
} model_config;

/* Parses config.json text. Returns 0, or -1 with a plain message in err (e.g. "config.json: hidden_act
 * 'gelu' is not supported (only silu)"). Validates: positive sizes, n_heads % n_kv_heads == 0, even
 * head_dim, known architecture / model_type, hidden_act silu, no attention bias. */
int model_config_parse(model_config *c, const char *json, size_t len, char *err, size_t err_len);
/* Reads and parses dir/config.json. */
int model_config_load(model_config *c, const char *dir, char *err, size_t err_len);
/* Whether tokenizer t fits the model: no more tokens than embedding rows (a padded embedding may have more rows), and
 * its beginning and end tokens inside them. 0, or -1 with the reason in err. */
int model_config_check_tokenizer(const model_config *c, const tokenizer *t, char *err, size_t err_len);

/* Fills inv_freq[head_dim/2] with the rotary inverse frequencies, scaling included. */
void model_config_rope_freqs(const model_config *c, float *inv_freq);
/* What the attention scores are multiplied by beyond 1/sqrt(head_dim): YaRN's attention factor squared (its cos and
 * sin scale both q and k), 1 for every other scaling. */
float model_config_score_scale(const model_config *c);
/* YaRN's default attention factor for a scaling factor: 0.1·ln(factor) + 1 (1 for factor ≤ 1), as Hugging Face's
 * get_mscale and llama.cpp's rope kernel compute it. */
double model_config_yarn_mscale(double factor);
/* The per-frequency factors that llama.cpp stores for Llama 3.1 scaling (its rope_freqs tensor, head_dim / 2 of
 * them): the unscaled inverse frequency over the scaled one, as its converter computes them. */
void model_config_llama3_factors(const model_config *c, float *factors);

#ifdef __cplusplus
}
#endif
#endif
