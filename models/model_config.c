/* models/model_config.c — reads a Hugging Face config.json into model_config, refusing any architecture or
 * option whose forward pass we do not implement, and computes the rotary frequencies (with rope scaling). */
#include "model_config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/errf.h"

#define CFG_MAX_SIZE (1 << 24)
#define CFG_MAX_VOCAB (1 << 22)
#define CFG_MAX_LAYERS 1024

/* Reading context: the JSON object, and the name used in messages ("config.json" or its path). */
typedef struct cfg_reader {
	json_t *obj;
	const char *file;
	const char *scope;   /* "" or "rope_scaling.", prefixed to key names in messages */
	char *err;
	size_t err_len;
} cfg_reader;

/* Integer key in [lo, hi]. Absent or null: *out = def, or an error when required. */
static int cfg_int(const cfg_reader *r, const char *key, bool required, int32_t def, int64_t lo, int64_t hi,
                   int32_t *out)
{
	json_t *v = json_object_get(r->obj, key);
	if (!v || json_is_null(v)) {
		if (required) {
			aah_errf(r->err, r->err_len, "%s: '%s%s' is missing", r->file, r->scope, key);
			return -1;
		}
		*out = def;
		return 0;
	}
	if (!json_is_integer(v)) {
		aah_errf(r->err, r->err_len, "%s: '%s%s' must be an integer, not %s", r->file, r->scope, key,
		         aah_json_kind(v));
		return -1;
	}
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi) {
		aah_errf(r->err, r->err_len, "%s: '%s%s' is %lld, must be in %lld..%lld", r->file, r->scope, key,
		         (long long)x, (long long)lo, (long long)hi);
		return -1;
	}
	*out = (int32_t)x;
	return 0;
}

/* Positive finite number (integer or real) from r->obj; absent or null gives def (def < 0: required). */
static int cfg_num(const cfg_reader *r, const char *key, double def, double *out)
{
	json_t *v = json_object_get(r->obj, key);
	if (!v || json_is_null(v)) {
		if (def < 0) {
			aah_errf(r->err, r->err_len, "%s: '%s%s' is missing", r->file, r->scope, key);
			return -1;
		}
		*out = def;
		return 0;
	}
	if (!json_is_number(v)) {
		aah_errf(r->err, r->err_len, "%s: '%s%s' must be a number, not %s", r->file, r->scope, key,
		         aah_json_kind(v));
		return -1;
	}
	double x = json_number_value(v);
	if (!(x > 0) || !isfinite(x) || x > 3e38) {
		aah_errf(r->err, r->err_len, "%s: '%s%s' is %g, must be a positive number", r->file, r->scope, key, x);
		return -1;
	}
	*out = x;
	return 0;
}

/* Boolean key; absent or null gives def. */
static int cfg_bool(const cfg_reader *r, const char *key, bool def, bool *out)
{
	json_t *v = json_object_get(r->obj, key);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_boolean(v)) {
		aah_errf(r->err, r->err_len, "%s: '%s' must be true or false, not %s", r->file, key, aah_json_kind(v));
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

/* A token id: an integer, a list of them (the first is taken), or null/absent (-1). */
static int cfg_token_id(const cfg_reader *r, const char *key, int32_t *out)
{
	json_t *v = json_object_get(r->obj, key);
	*out = -1;
	if (json_is_array(v)) v = json_array_get(v, 0);   /* NULL for an empty list */
	if (!v || json_is_null(v)) return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
		aah_errf(r->err, r->err_len, "%s: '%s' must be a non-negative integer, a list of them, or null", r->file,
		         key);
		return -1;
	}
	*out = (int32_t)json_integer_value(v);
	return 0;
}

static bool cfg_has_arch(json_t *archs, const char *name)
{
	size_t i;
	json_t *a;
	json_array_foreach(archs, i, a)
		if (json_is_string(a) && !strcmp(json_string_value(a), name)) return true;
	return false;
}

/* Qwen3 or the Llama family, from model_type, else from architectures. */
static int cfg_arch(const cfg_reader *r, model_config *c, bool *is_mistral)
{
	json_t *mt = json_object_get(r->obj, "model_type"), *archs = json_object_get(r->obj, "architectures");
	*is_mistral = false;
	if (mt && !json_is_null(mt)) {
		if (!json_is_string(mt)) {
			aah_errf(r->err, r->err_len, "%s: 'model_type' must be a string, not %s", r->file, aah_json_kind(mt));
			return -1;
		}
		const char *t = json_string_value(mt);
		if (!strcmp(t, "qwen3")) c->arch = MODEL_ARCH_QWEN3;
		else if (!strcmp(t, "llama")) c->arch = MODEL_ARCH_LLAMA;
		else if (!strcmp(t, "mistral")) c->arch = MODEL_ARCH_LLAMA, *is_mistral = true;
		else {
			aah_errf(r->err, r->err_len, "%s: model_type '%.64s' is not supported (only qwen3, llama, mistral)",
			         r->file, t);
			return -1;
		}
		return 0;
	}
	if (archs && !json_is_array(archs)) {
		aah_errf(r->err, r->err_len, "%s: 'architectures' must be an array, not %s", r->file, aah_json_kind(archs));
		return -1;
	}
	if (cfg_has_arch(archs, "Qwen3ForCausalLM")) c->arch = MODEL_ARCH_QWEN3;
	else if (cfg_has_arch(archs, "LlamaForCausalLM")) c->arch = MODEL_ARCH_LLAMA;
	else if (cfg_has_arch(archs, "MistralForCausalLM")) c->arch = MODEL_ARCH_LLAMA, *is_mistral = true;
	else {
		const char *first = json_string_value(json_array_get(archs, 0));
		if (first)
			aah_errf(r->err, r->err_len, "%s: architecture '%.64s' is not supported (only Qwen3ForCausalLM, "
			         "LlamaForCausalLM, MistralForCausalLM)", r->file, first);
		else
			aah_errf(r->err, r->err_len, "%s: neither 'model_type' nor 'architectures' names the model", r->file);
		return -1;
	}
	return 0;
}

/* rope_scaling: null, default, linear, llama3 or yarn; anything else (dynamic, longrope, …) is refused. Called after
 * max_position_embeddings is read (yarn's defaults come from it). */
static int cfg_rope_scaling(const cfg_reader *r, model_config *c)
{
	json_t *rs = json_object_get(r->obj, "rope_scaling");
	c->rope_scaling = MODEL_ROPE_NONE;
	c->rope_factor = 1.0f;
	c->rope_low_freq_factor = 1.0f;
	c->rope_high_freq_factor = 1.0f;
	c->rope_original_max_pos = 0;
	c->rope_beta_fast = 32.0f;
	c->rope_beta_slow = 1.0f;
	c->rope_truncate = true;
	c->rope_attn_factor = 1.0f;
	if (!rs || json_is_null(rs)) return 0;
	if (!json_is_object(rs)) {
		aah_errf(r->err, r->err_len, "%s: 'rope_scaling' must be an object or null, not %s", r->file,
		         aah_json_kind(rs));
		return -1;
	}
	json_t *ty = json_object_get(rs, "rope_type");
	if (!ty || json_is_null(ty)) ty = json_object_get(rs, "type");
	if (!json_is_string(ty)) {
		aah_errf(r->err, r->err_len, "%s: 'rope_scaling' has no string 'rope_type' (or 'type')", r->file);
		return -1;
	}
	const char *t = json_string_value(ty);
	double factor, low, high;
	cfg_reader sub = *r;
	sub.obj = rs;
	sub.scope = "rope_scaling.";
	if (!strcmp(t, "default")) return 0;
	if (!strcmp(t, "linear")) {
		if (cfg_num(&sub, "factor", -1, &factor)) return -1;
		c->rope_scaling = MODEL_ROPE_LINEAR;
		c->rope_factor = (float)factor;
		return 0;
	}
	if (!strcmp(t, "llama3")) {
		if (cfg_num(&sub, "factor", -1, &factor) || cfg_num(&sub, "low_freq_factor", -1, &low) ||
		    cfg_num(&sub, "high_freq_factor", -1, &high) ||
		    cfg_int(&sub, "original_max_position_embeddings", true, 0, 1, CFG_MAX_SIZE, &c->rope_original_max_pos))
			return -1;
		if (!(high > low)) {
			aah_errf(r->err, r->err_len, "%s: rope_scaling 'high_freq_factor' %g must exceed 'low_freq_factor' %g",
			         r->file, high, low);
			return -1;
		}
		c->rope_scaling = MODEL_ROPE_LLAMA3;
		c->rope_factor = (float)factor;
		c->rope_low_freq_factor = (float)low;
		c->rope_high_freq_factor = (float)high;
		return 0;
	}
	if (!strcmp(t, "yarn")) {
		/* Hugging Face's _compute_yarn_parameters: original_max_position_embeddings defaults to the model's, factor to
		 * max_position_embeddings over it; attention_factor to 0.1·ln(factor) + 1; beta_fast 32, beta_slow 1 */
		double attn, fast, slow;
		if (cfg_int(&sub, "original_max_position_embeddings", false, c->max_position_embeddings, 1, CFG_MAX_SIZE,
		            &c->rope_original_max_pos) ||
		    cfg_num(&sub, "factor", (double)c->max_position_embeddings / c->rope_original_max_pos, &factor) ||
		    cfg_num(&sub, "attention_factor", 0, &attn) || cfg_num(&sub, "beta_fast", 32, &fast) ||
		    cfg_num(&sub, "beta_slow", 1, &slow) || cfg_bool(&sub, "truncate", true, &c->rope_truncate))
			return -1;
		if (json_object_get(rs, "mscale") || json_object_get(rs, "mscale_all_dim")) {
			aah_errf(r->err, r->err_len, "%s: yarn rope_scaling with 'mscale' / 'mscale_all_dim' (DeepSeek's variant) "
			         "is not supported", r->file);
			return -1;
		}
		if (!(fast > slow)) {
			aah_errf(r->err, r->err_len, "%s: rope_scaling 'beta_fast' %g must exceed 'beta_slow' %g", r->file, fast,
			         slow);
			return -1;
		}
		c->rope_scaling = MODEL_ROPE_YARN;
		c->rope_factor = (float)factor;
		c->rope_beta_fast = (float)fast;
		c->rope_beta_slow = (float)slow;
		c->rope_attn_factor = (float)(attn > 0 ? attn : model_config_yarn_mscale(factor));
		return 0;
	}
	aah_errf(r->err, r->err_len, "%s: rope_scaling type '%.32s' is not supported (only linear, llama3, yarn)", r->file,
	         t);
	return -1;
}

static int cfg_parse_object(model_config *c, const cfg_reader *r)
{
	bool mistral, flag;
	memset(c, 0, sizeof *c);
	if (cfg_arch(r, c, &mistral)) return -1;
	c->qk_norm = c->arch == MODEL_ARCH_QWEN3;

	if (cfg_int(r, "vocab_size", true, 0, 1, CFG_MAX_VOCAB, &c->vocab_size) ||
	    cfg_int(r, "hidden_size", true, 0, 1, CFG_MAX_SIZE, &c->hidden_size) ||
	    cfg_int(r, "intermediate_size", true, 0, 1, CFG_MAX_SIZE, &c->intermediate_size) ||
	    cfg_int(r, "num_hidden_layers", true, 0, 1, CFG_MAX_LAYERS, &c->n_layers) ||
	    cfg_int(r, "num_attention_heads", true, 0, 1, CFG_MAX_SIZE, &c->n_heads) ||
	    cfg_int(r, "num_key_value_heads", false, c->n_heads, 1, CFG_MAX_SIZE, &c->n_kv_heads) ||
	    cfg_int(r, "max_position_embeddings", true, 0, 1, CFG_MAX_SIZE, &c->max_position_embeddings))
		return -1;
	json_t *hd = json_object_get(r->obj, "head_dim");
	if (hd && !json_is_null(hd)) {
		if (cfg_int(r, "head_dim", true, 0, 1, CFG_MAX_SIZE, &c->head_dim)) return -1;
	} else {
		if (c->hidden_size % c->n_heads) {
			aah_errf(r->err, r->err_len, "%s: 'hidden_size' %d is not a multiple of 'num_attention_heads' %d "
			         "(and no 'head_dim' is given)", r->file, c->hidden_size, c->n_heads);
			return -1;
		}
		c->head_dim = c->hidden_size / c->n_heads;
	}
	if (c->head_dim % 2) {
		aah_errf(r->err, r->err_len, "%s: 'head_dim' %d must be even (rotary embedding pairs)", r->file, c->head_dim);
		return -1;
	}
	if (c->n_heads % c->n_kv_heads) {
		aah_errf(r->err, r->err_len, "%s: 'num_attention_heads' %d is not a multiple of 'num_key_value_heads' %d",
		         r->file, c->n_heads, c->n_kv_heads);
		return -1;
	}
	/* Keeps every projection's row count inside int32 arithmetic downstream. */
	if ((int64_t)c->n_heads * c->head_dim > CFG_MAX_SIZE) {
		aah_errf(r->err, r->err_len, "%s: 'num_attention_heads' × 'head_dim' = %lld exceeds %d", r->file,
		         (long long)c->n_heads * c->head_dim, CFG_MAX_SIZE);
		return -1;
	}

	json_t *act = json_object_get(r->obj, "hidden_act");
	if (act && !json_is_null(act)) {
		if (!json_is_string(act)) {
			aah_errf(r->err, r->err_len, "%s: 'hidden_act' must be a string, not %s", r->file, aah_json_kind(act));
			return -1;
		}
		if (strcmp(json_string_value(act), "silu")) {
			aah_errf(r->err, r->err_len, "%s: hidden_act '%.32s' is not supported (only silu)", r->file,
			         json_string_value(act));
			return -1;
		}
	}
	if (cfg_bool(r, "attention_bias", false, &flag)) return -1;
	if (flag) {
		aah_errf(r->err, r->err_len, "%s: 'attention_bias' true is not supported", r->file);
		return -1;
	}
	if (cfg_bool(r, "mlp_bias", false, &flag)) return -1;
	if (flag) {
		aah_errf(r->err, r->err_len, "%s: 'mlp_bias' true is not supported", r->file);
		return -1;
	}
	/* Qwen3 only slides its window when use_sliding_window is set; Mistral whenever sliding_window is set. */
	if (c->arch == MODEL_ARCH_QWEN3) {
		if (cfg_bool(r, "use_sliding_window", false, &flag)) return -1;
		if (flag) {
			aah_errf(r->err, r->err_len, "%s: 'use_sliding_window' true is not supported", r->file);
			return -1;
		}
	}
	json_t *sw = json_object_get(r->obj, "sliding_window");
	if (mistral && sw && !json_is_null(sw)) {
		aah_errf(r->err, r->err_len, "%s: mistral 'sliding_window' must be null (sliding-window attention is not "
		         "supported)", r->file);
		return -1;
	}
	json_t *q = json_object_get(r->obj, "quantization_config");
	if (q && !json_is_null(q)) {
		aah_errf(r->err, r->err_len, "%s: 'quantization_config' is present: quantized models are not supported",
		         r->file);
		return -1;
	}

	double theta, eps;
	if (cfg_num(r, "rope_theta", 10000.0, &theta) || cfg_num(r, "rms_norm_eps", 1e-6, &eps))
		return -1;
	/* in range, not only positive: a base at or below 1 makes no rotation frequencies, an epsilon of 1 or more
	 * swamps any activation (real models: 1e4 … 1e7, and 1e-6 … 1e-5) */
	if (theta <= 1 || eps >= 1) {
		aah_errf(r->err, r->err_len, "%s: '%s' is %g, must be %s", r->file, theta <= 1 ? "rope_theta" : "rms_norm_eps",
		         theta <= 1 ? theta : eps, theta <= 1 ? "above 1" : "below 1");
		return -1;
	}
	c->rope_theta = (float)theta;
	c->rms_norm_eps = (float)eps;
	if (cfg_rope_scaling(r, c) || cfg_bool(r, "tie_word_embeddings", false, &c->tie_word_embeddings) ||
	    cfg_token_id(r, "bos_token_id", &c->bos_token_id) || cfg_token_id(r, "eos_token_id", &c->eos_token_id))
		return -1;
	/* a special token past the embedding could never be fed, and an end token past it never generated */
	if (c->bos_token_id >= c->vocab_size || c->eos_token_id >= c->vocab_size) {
		const bool bos = c->bos_token_id >= c->vocab_size;
		aah_errf(r->err, r->err_len, "%s: '%s' %d is past the vocabulary (vocab_size %d rows)", r->file,
		         bos ? "bos_token_id" : "eos_token_id", bos ? c->bos_token_id : c->eos_token_id, c->vocab_size);
		return -1;
	}
	return 0;
}

int model_config_check_tokenizer(const model_config *c, const tokenizer *t, char *err, size_t err_len)
{
	const int32_t n = tokenizer_vocab_size(t), bos = tokenizer_bos(t), eos = tokenizer_eos(t);
	if (n > c->vocab_size) {
		aah_errf(err, err_len, "the tokenizer has %d tokens but the model's embedding has %d rows (vocab_size): "
		         "the tokenizer is not this model's", n, c->vocab_size);
		return -1;
	}
	if (bos >= c->vocab_size || eos >= c->vocab_size) {
		aah_errf(err, err_len, "the tokenizer's %s token id %d is past the model's %d embedding rows",
		         eos >= c->vocab_size ? "end" : "beginning", eos >= c->vocab_size ? eos : bos, c->vocab_size);
		return -1;
	}
	return 0;
}

static int cfg_parse_named(model_config *c, const char *json, size_t len, const char *file, char *err,
                           size_t err_len)
{
	json_error_t jerr;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		aah_errf(err, err_len, "%s: not valid JSON: %s (line %d, column %d)", file, jerr.text, jerr.line, jerr.column);
		return -1;
	}
	int rc = -1;
	if (!json_is_object(root)) {
		aah_errf(err, err_len, "%s: not a JSON object", file);
	} else {
		cfg_reader r = { root, file, "", err, err_len };
		rc = cfg_parse_object(c, &r);
	}
	json_decref(root);
	return rc;
}

int model_config_parse(model_config *c, const char *json, size_t len, char *err, size_t err_len)
{
	return cfg_parse_named(c, json, len, "config.json", err, err_len);
}

int model_config_load(model_config *c, const char *dir, char *err, size_t err_len)
{
	size_t dl = strlen(dir);
	char *path = malloc(dl + sizeof "/config.json");
	if (!path) {
		aah_errf(err, err_len, "%s: out of memory", dir);
		return -1;
	}
	memcpy(path, dir, dl);
	memcpy(path + dl, "/config.json", sizeof "/config.json");
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	int rc = -1;
	if (!f) {
		aah_errf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
		goto out;
	}
	/* A config.json is a few KiB; 16 MiB is far past any real one. */
	size_t cap = 16u << 20, n = 0;
	buf = malloc(cap);
	if (!buf) {
		aah_errf(err, err_len, "%s: out of memory", path);
		goto out;
	}
	n = fread(buf, 1, cap, f);
	if (ferror(f) || n == cap) {
		aah_errf(err, err_len, "%s: %s", path, n == cap ? "file is too large" : "read error");
		goto out;
	}
	rc = cfg_parse_named(c, buf, n, path, err, err_len);
out:
	if (f) fclose(f);
	free(buf);
	free(path);
	return rc;
}

/* Hugging Face's _compute_llama3_parameters as a divisor of inv_freq f: wavelengths shorter than old_len /
 * high_freq_factor are kept, longer than old_len / low_freq_factor are divided by factor, and in between blended:
 * (1 - s) f / factor + s f = f / (1 / ((1 - s) / factor + s)), s = (old_len / wavelen - low) / (high - low). */
static double llama3_divisor(const model_config *c, double f)
{
	const double pi = 3.14159265358979323846, old_len = c->rope_original_max_pos, factor = c->rope_factor;
	const double low = c->rope_low_freq_factor, high = c->rope_high_freq_factor, wavelen = 2 * pi / f;
	if (wavelen > old_len / low)
		return factor;
	if (wavelen >= old_len / high) {
		const double s = (old_len / wavelen - low) / (high - low);
		return 1 / ((1 - s) / factor + s);
	}
	return 1;
}

double model_config_yarn_mscale(double factor)
{
	return factor <= 1 ? 1.0 : 0.1 * log(factor) + 1.0;
}

float model_config_score_scale(const model_config *c)
{
	return c->rope_attn_factor * c->rope_attn_factor;   /* 1 unless YaRN set it */
}

/* YaRN's blend for frequency j: the dimension where a frequency turns `rot` times over the original context is
 * d·ln(L / (2π·rot)) / (2 ln θ); from the one of beta_fast (low) to the one of beta_slow (high) the weight of the
 * unscaled frequency falls linearly from 1 to 0 (Hugging Face's linear_ramp_factor, llama.cpp's rope_yarn_ramp). */
static double yarn_keep(const model_config *c, int j)
{
	const double pi = 3.14159265358979323846, d = c->head_dim, L = c->rope_original_max_pos;
	const double lt = 2 * log((double)c->rope_theta);
	double low = d * log(L / (2 * pi * c->rope_beta_fast)) / lt, high = d * log(L / (2 * pi * c->rope_beta_slow)) / lt;
	if (c->rope_truncate)
		low = floor(low), high = ceil(high);
	low = fmax(low, 0);
	high = fmin(high, d - 1);
	if (low == high)
		high += 0.001;   /* as both do: no division by zero */
	const double ramp = fmin(fmax((j - low) / (high - low), 0), 1);
	return 1 - ramp;
}

void model_config_rope_freqs(const model_config *c, float *inv_freq)
{
	int half = c->head_dim / 2;
	for (int j = 0; j < half; j++) {
		/* inv_freq[j] = theta^(-2j / head_dim) */
		double f = pow((double)c->rope_theta, -2.0 * j / c->head_dim);
		if (c->rope_scaling == MODEL_ROPE_YARN) {
			const double keep = yarn_keep(c, j);
			f = f / c->rope_factor * (1 - keep) + f * keep;
		} else if (c->rope_scaling == MODEL_ROPE_LINEAR)
			f /= c->rope_factor;
		else if (c->rope_scaling == MODEL_ROPE_LLAMA3)
			f /= llama3_divisor(c, f);
		else if (c->rope_scaling == MODEL_ROPE_FACTORS && j < MODEL_ROPE_MAX_FACTORS)
			f /= c->rope_freq_factors[j];
		inv_freq[j] = (float)f;
	}
}

void model_config_llama3_factors(const model_config *c, float *factors)
{
	for (int j = 0; j < c->head_dim / 2; j++)
		factors[j] = (float)llama3_divisor(c, pow((double)c->rope_theta, -2.0 * j / c->head_dim));
}
