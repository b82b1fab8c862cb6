/* tests/models/check_models.c — Check suite for models/: safetensors parsing and mapping (single and sharded),
 * config.json parsing (Qwen3, Llama family, rope scaling), model binding, and invalid input of every kind. */
#include <check.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/model.h"
#include "models/model_config.h"
#include "models/safetensors.h"
#define TEST_TMPDIR "models"
#include "tests/test_env.h"

/* Returns a static "tmpdir/name" (one at a time is enough here). */
static const char *tmp_path(const char *name)
{
	static char buf[2][512];
	static int which;
	which ^= 1;
	snprintf(buf[which], sizeof buf[which], "%s/%s", tmpdir, name);
	return buf[which];
}

static void write_bytes(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	fclose(f);
}

static void write_text(const char *path, const char *text)
{
	write_bytes(path, text, strlen(text));
}

/* Writes a safetensors file: 8-byte little-endian header_len, the header, then data_len bytes (data, or a
 * counting pattern when data is NULL). header_len is normally strlen(header); passing another value makes
 * a lying length prefix. */
static void write_st_raw(const char *path, uint64_t header_len, const char *header, const void *data, size_t data_len)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	uint8_t len8[8];
	for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(header_len >> (8 * i));
	fwrite(len8, 1, 8, f);
	fwrite(header, 1, strlen(header), f);
	for (size_t i = 0; i < data_len; i++) fputc(data ? ((const uint8_t *)data)[i] : (int)(i & 0xff), f);
	fclose(f);
}

static void write_st(const char *path, const char *header, size_t data_len)
{
	write_st_raw(path, strlen(header), header, NULL, data_len);
}

/* Asserts the message names the file and (when given) the tensor and the problem. */
static void check_err(const char *err, const char *file, const char *tensor, const char *what, int line)
{
	if (getenv("AAH_TEST_VERBOSE")) fprintf(stderr, "line %d: %s\n", line, err);   /* to read the messages */
	ck_assert_msg(strstr(err, file) != NULL, "line %d: message lacks file '%s': %s", line, file, err);
	ck_assert_msg(!tensor || strstr(err, tensor), "line %d: message lacks tensor %s: %s", line, tensor, err);
	ck_assert_msg(!what || strstr(err, what), "line %d: message lacks '%s': %s", line, what, err);
}
#define ck_assert_err(err, file, tensor, what) check_err((err), (file), (tensor), (what), __LINE__)

/* ---- tiny synthetic models: hidden 8, 2 heads, 1 KV head, head_dim 4, ffn 16, vocab 32, 2 layers ---- */

typedef struct tspec {
	char name[96];            /* empty: left out */
	const char *dtype;
	int32_t nd;
	int64_t shape[2];
} tspec;

enum { TINY_MAX = 64 };

static int tiny_add(tspec *t, int n, const char *name, const char *dtype, int32_t nd, int64_t d0, int64_t d1)
{
	snprintf(t[n].name, sizeof t[n].name, "%s", name);
	t[n].dtype = dtype;
	t[n].nd = nd;
	t[n].shape[0] = d0;
	t[n].shape[1] = d1;
	return n + 1;
}

static int tiny_specs(tspec *t, int qk_norm, int lm_head)
{
	int n = 0;
	char name[96];
	n = tiny_add(t, n, "model.embed_tokens.weight", "F32", 2, 32, 8);
	n = tiny_add(t, n, "model.norm.weight", "F32", 1, 8, 0);
	if (lm_head) n = tiny_add(t, n, "lm_head.weight", "BF16", 2, 32, 8);
	for (int l = 0; l < 2; l++) {
		static const struct { const char *s; int32_t nd; int64_t d0, d1; } rows[] = {
			{ "input_layernorm.weight", 1, 8, 0 }, { "self_attn.q_proj.weight", 2, 8, 8 },
			{ "self_attn.k_proj.weight", 2, 4, 8 }, { "self_attn.v_proj.weight", 2, 4, 8 },
			{ "self_attn.o_proj.weight", 2, 8, 8 }, { "post_attention_layernorm.weight", 1, 8, 0 },
			{ "mlp.gate_proj.weight", 2, 16, 8 }, { "mlp.up_proj.weight", 2, 16, 8 },
			{ "mlp.down_proj.weight", 2, 8, 16 }, { "self_attn.q_norm.weight", 1, 4, 0 },
			{ "self_attn.k_norm.weight", 1, 4, 0 },
		};
		for (int r = 0; r < (qk_norm ? 11 : 9); r++) {
			snprintf(name, sizeof name, "model.layers.%d.%s", l, rows[r].s);
			n = tiny_add(t, n, name, l ? "F16" : "F32", rows[r].nd, rows[r].d0, rows[r].d1);
		}
	}
	return n;
}

static tspec *tiny_get(tspec *t, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(t[i].name, name)) return &t[i];
	ck_abort_msg("no spec %s", name);
	return NULL;
}

/* Writes the specs as one safetensors file, tensors packed in order. */
static void tiny_write_st(const char *path, const tspec *t, int n)
{
	char *hdr = malloc(64 * 1024);
	size_t at = (size_t)snprintf(hdr, 64 * 1024, "{\"__metadata__\": {\"format\": \"pt\"}");
	size_t off = 0;
	for (int i = 0; i < n; i++) {
		if (!t[i].name[0]) continue;
		size_t esz = strcmp(t[i].dtype, "F32") ? 2 : 4, count = 1;
		for (int d = 0; d < t[i].nd; d++) count *= (size_t)t[i].shape[d];
		at += (size_t)snprintf(hdr + at, 64 * 1024 - at, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [", t[i].name,
		                       t[i].dtype);
		for (int d = 0; d < t[i].nd; d++)
			at += (size_t)snprintf(hdr + at, 64 * 1024 - at, d ? ", %lld" : "%lld", (long long)t[i].shape[d]);
		at += (size_t)snprintf(hdr + at, 64 * 1024 - at, "], \"data_offsets\": [%zu, %zu]}", off,
		                       off + count * esz);
		off += count * esz;
	}
	snprintf(hdr + at, 64 * 1024 - at, "}");
	write_st(path, hdr, off);
	free(hdr);
}

static void tiny_write_config(const char *dir, const char *model_type, int tied)
{
	char cfg[1024], path[512];
	snprintf(cfg, sizeof cfg,
	         "{\"model_type\": \"%s\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 2,"
	         " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 4, \"vocab_size\": 32,"
	         " \"max_position_embeddings\": 128, \"tie_word_embeddings\": %s}",
	         model_type, tied ? "true" : "false");
	snprintf(path, sizeof path, "%s/config.json", dir);
	write_text(path, cfg);
}

/* ======================= reference models ======================= */

START_TEST(test_load_small_a)
{
	char dir[512], err[512];
	snprintf(dir, sizeof dir, "%s/qwen3-small-a", testdata());
	model_files m;
	ck_assert_msg(model_files_load(&m, dir, err, sizeof err) == 0, "%s", err);
	const model_config *c = &m.config;
	ck_assert_int_eq(c->arch, MODEL_ARCH_QWEN3);
	ck_assert(c->qk_norm);
	ck_assert_int_eq(c->hidden_size, 64);
	ck_assert_int_eq(c->intermediate_size, 192);
	ck_assert_int_eq(c->n_layers, 2);
	ck_assert_int_eq(c->n_heads, 4);
	ck_assert_int_eq(c->n_kv_heads, 2);
	ck_assert_int_eq(c->head_dim, 32);
	ck_assert_int_eq(c->vocab_size, 2056);
	ck_assert_int_eq(c->max_position_embeddings, 4096);
	ck_assert_int_eq(c->bos_token_id, 2048);
	ck_assert_int_eq(c->eos_token_id, 2048);
	ck_assert(!c->tie_word_embeddings);
	ck_assert_float_eq(c->rope_theta, 1e6f);
	ck_assert_float_eq(c->rms_norm_eps, 1e-6f);
	ck_assert_int_eq(c->rope_scaling, MODEL_ROPE_NONE);

	ck_assert_int_eq(m.st.n_files, 1);
	ck_assert_int_eq(m.st.n_tensors, 3 + 2 * 11);
	ck_assert_ptr_ne(m.w.lm_head, m.w.embed);
	ck_assert_int_eq(m.w.embed->dtype, ST_BF16);
	ck_assert_int_eq(m.w.embed->shape[0], 2056);
	ck_assert_int_eq(m.w.embed->shape[1], 64);
	ck_assert_uint_eq(m.w.embed->nbytes, 2056 * 64 * 2);
	for (int l = 0; l < 2; l++) {
		const model_layer_weights *w = &m.w.layers[l];
		ck_assert_int_eq(w->wq->shape[0], 128);
		ck_assert_int_eq(w->wk->shape[0], 64);
		ck_assert_int_eq(w->wo->shape[1], 128);
		ck_assert_int_eq(w->w_down->shape[1], 192);
		ck_assert_ptr_nonnull(w->q_norm);
		ck_assert_int_eq(w->k_norm->shape[0], 32);
	}
	/* Every tensor lies inside the mapping, after the header. */
	const uint8_t *map = m.st.files[0].map;
	for (int32_t i = 0; i < m.st.n_tensors; i++) {
		const uint8_t *p = m.st.tensors[i].data;
		ck_assert(p >= map + 8 && p + m.st.tensors[i].nbytes <= map + m.st.files[0].size);
		if (i) ck_assert_int_lt(strcmp(m.st.tensors[i - 1].name, m.st.tensors[i].name), 0);
	}
	/* Norm weights are finite BF16 values. */
	const uint16_t *nw = m.w.norm->data;
	for (int i = 0; i < 64; i++) {
		uint32_t bits = (uint32_t)nw[i] << 16;
		float x;
		memcpy(&x, &bits, 4);
		ck_assert(isfinite(x));
	}
	ck_assert_ptr_null(st_find(&m.st, "model.layers.2.input_layernorm.weight"));
	ck_assert_ptr_null(st_find(&m.st, ""));
	model_files_free(&m);
	model_files_free(&m);   /* safe twice */
}
END_TEST

START_TEST(test_load_small_b)
{
	char dir[512], err[512];
	snprintf(dir, sizeof dir, "%s/qwen3-small-b", testdata());
	model_files m;
	ck_assert_msg(model_files_load(&m, dir, err, sizeof err) == 0, "%s", err);
	const model_config *c = &m.config;
	ck_assert_int_eq(c->hidden_size, 128);
	ck_assert_int_eq(c->intermediate_size, 256);
	ck_assert_int_eq(c->n_layers, 3);
	ck_assert_int_eq(c->n_heads, 8);
	ck_assert_int_eq(c->n_kv_heads, 1);   /* MQA */
	ck_assert_int_eq(c->head_dim, 16);
	ck_assert(c->tie_word_embeddings);
	ck_assert_ptr_eq(m.w.lm_head, m.w.embed);
	ck_assert_ptr_null(st_find(&m.st, "lm_head.weight"));
	for (int l = 0; l < 3; l++) {
		ck_assert_int_eq(m.w.layers[l].wk->shape[0], 16);
		ck_assert_int_eq(m.w.layers[l].wv->shape[1], 128);
		ck_assert_int_eq(m.w.layers[l].q_norm->shape[0], 16);
	}
	ck_assert_str_eq(st_find(&m.st, "model.norm.weight")->name, "model.norm.weight");
	model_files_free(&m);
}
END_TEST

/* ======================= config.json: real configs ======================= */

static const char qwen3_4b_config[] =
	"{\n"
	"  \"architectures\": [\"Qwen3ForCausalLM\"],\n"
	"  \"attention_bias\": false,\n"
	"  \"attention_dropout\": 0.0,\n"
	"  \"bos_token_id\": 151643,\n"
	"  \"eos_token_id\": 151643,\n"
	"  \"head_dim\": 128,\n"
	"  \"hidden_act\": \"silu\",\n"
	"  \"hidden_size\": 2560,\n"
	"  \"initializer_range\": 0.02,\n"
	"  \"intermediate_size\": 9728,\n"
	"  \"max_position_embeddings\": 32768,\n"
	"  \"max_window_layers\": 36,\n"
	"  \"model_type\": \"qwen3\",\n"
	"  \"num_attention_heads\": 32,\n"
	"  \"num_hidden_layers\": 36,\n"
	"  \"num_key_value_heads\": 8,\n"
	"  \"rms_norm_eps\": 1e-06,\n"
	"  \"rope_scaling\": null,\n"
	"  \"rope_theta\": 1000000,\n"
	"  \"sliding_window\": null,\n"
	"  \"tie_word_embeddings\": true,\n"
	"  \"torch_dtype\": \"bfloat16\",\n"
	"  \"transformers_version\": \"4.51.0\",\n"
	"  \"use_cache\": true,\n"
	"  \"use_sliding_window\": false,\n"
	"  \"vocab_size\": 151936\n"
	"}\n";

/* Llama-3.1-8B-Instruct's config.json (eos is a list there). */
static const char llama31_8b_config[] =
	"{\n"
	"  \"architectures\": [\"LlamaForCausalLM\"],\n"
	"  \"attention_bias\": false,\n"
	"  \"attention_dropout\": 0.0,\n"
	"  \"bos_token_id\": 128000,\n"
	"  \"eos_token_id\": [128001, 128008, 128009],\n"
	"  \"hidden_act\": \"silu\",\n"
	"  \"hidden_size\": 4096,\n"
	"  \"initializer_range\": 0.02,\n"
	"  \"intermediate_size\": 14336,\n"
	"  \"max_position_embeddings\": 131072,\n"
	"  \"mlp_bias\": false,\n"
	"  \"model_type\": \"llama\",\n"
	"  \"num_attention_heads\": 32,\n"
	"  \"num_hidden_layers\": 32,\n"
	"  \"num_key_value_heads\": 8,\n"
	"  \"pretraining_tp\": 1,\n"
	"  \"rms_norm_eps\": 1e-05,\n"
	"  \"rope_scaling\": {\n"
	"    \"factor\": 8.0,\n"
	"    \"low_freq_factor\": 1.0,\n"
	"    \"high_freq_factor\": 4.0,\n"
	"    \"original_max_position_embeddings\": 8192,\n"
	"    \"rope_type\": \"llama3\"\n"
	"  },\n"
	"  \"rope_theta\": 500000.0,\n"
	"  \"tie_word_embeddings\": false,\n"
	"  \"torch_dtype\": \"bfloat16\",\n"
	"  \"transformers_version\": \"4.43.0.dev0\",\n"
	"  \"use_cache\": true,\n"
	"  \"vocab_size\": 128256\n"
	"}\n";

static int parse_cfg(model_config *c, const char *json, char *err, size_t err_len)
{
	return model_config_parse(c, json, strlen(json), err, err_len);
}

START_TEST(test_config_qwen3_4b)
{
	model_config c;
	char err[512];
	ck_assert_msg(parse_cfg(&c, qwen3_4b_config, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(c.arch, MODEL_ARCH_QWEN3);
	ck_assert(c.qk_norm);
	ck_assert_int_eq(c.hidden_size, 2560);
	ck_assert_int_eq(c.intermediate_size, 9728);
	ck_assert_int_eq(c.n_layers, 36);
	ck_assert_int_eq(c.n_heads, 32);
	ck_assert_int_eq(c.n_kv_heads, 8);
	ck_assert_int_eq(c.head_dim, 128);   /* not hidden / heads = 80 */
	ck_assert_int_eq(c.vocab_size, 151936);
	ck_assert_int_eq(c.max_position_embeddings, 32768);
	ck_assert_float_eq(c.rope_theta, 1e6f);
	ck_assert_float_eq(c.rms_norm_eps, 1e-6f);
	ck_assert(c.tie_word_embeddings);
	ck_assert_int_eq(c.bos_token_id, 151643);
	ck_assert_int_eq(c.eos_token_id, 151643);
	ck_assert_int_eq(c.rope_scaling, MODEL_ROPE_NONE);
	float f[64];
	model_config_rope_freqs(&c, f);
	ck_assert_float_eq(f[0], 1.0f);
	ck_assert_double_eq_tol(f[1] / pow(1e6, -2.0 / 128), 1.0, 1e-6);
	ck_assert_double_eq_tol(f[63] / pow(1e6, -126.0 / 128), 1.0, 1e-6);
}
END_TEST

START_TEST(test_config_llama31_8b)
{
	model_config c;
	char err[512];
	ck_assert_msg(parse_cfg(&c, llama31_8b_config, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(c.arch, MODEL_ARCH_LLAMA);
	ck_assert(!c.qk_norm);
	ck_assert_int_eq(c.hidden_size, 4096);
	ck_assert_int_eq(c.intermediate_size, 14336);
	ck_assert_int_eq(c.n_layers, 32);
	ck_assert_int_eq(c.n_heads, 32);
	ck_assert_int_eq(c.n_kv_heads, 8);
	ck_assert_int_eq(c.head_dim, 128);   /* derived: 4096 / 32 */
	ck_assert_int_eq(c.vocab_size, 128256);
	ck_assert_int_eq(c.max_position_embeddings, 131072);
	ck_assert_float_eq(c.rms_norm_eps, 1e-5f);
	ck_assert_float_eq(c.rope_theta, 500000.0f);
	ck_assert(!c.tie_word_embeddings);
	ck_assert_int_eq(c.bos_token_id, 128000);
	ck_assert_int_eq(c.eos_token_id, 128001);
	ck_assert_int_eq(c.rope_scaling, MODEL_ROPE_LLAMA3);
	ck_assert_float_eq(c.rope_factor, 8.0f);
	ck_assert_float_eq(c.rope_low_freq_factor, 1.0f);
	ck_assert_float_eq(c.rope_high_freq_factor, 4.0f);
	ck_assert_int_eq(c.rope_original_max_pos, 8192);
	/* Reference values from Hugging Face's _compute_llama3_parameters formula, evaluated in float64 in
	 * Python: j 0 and 20 are high-frequency (kept), 29..34 blended, 35 and 63 low-frequency (÷ 8). */
	static const struct { int j; double want; } ref[] = {
		{ 0, 1.0 },
		{ 20, 0.016560440080994446 },
		{ 29, 0.002166570763503359 },
		{ 30, 0.0013718935677611381 },
		{ 33, 0.00031269375038406517 },
		{ 34, 0.00017850781276799638 },
		{ 35, 9.556212353964683e-05 },
		{ 63, 3.068925988914511e-07 },
	};
	float f[64];
	model_config_rope_freqs(&c, f);
	for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++)
		ck_assert_msg(fabs(f[ref[i].j] / ref[i].want - 1.0) < 2e-6, "inv_freq[%d] = %.9g, want %.9g", ref[i].j,
		              f[ref[i].j], ref[i].want);
	for (int j = 1; j < 64; j++) ck_assert(f[j] < f[j - 1]);   /* still monotone after blending */
	/* the same scaling as llama.cpp stores it (per-frequency factors, a GGUF's rope_freqs): the same frequencies */
	model_config fc = c;
	model_config_llama3_factors(&c, fc.rope_freq_factors);
	ck_assert_float_eq(fc.rope_freq_factors[0], 1.0f);
	ck_assert_float_eq(fc.rope_freq_factors[63], 8.0f);
	fc.rope_scaling = MODEL_ROPE_FACTORS;
	float g[64];
	model_config_rope_freqs(&fc, g);
	for (int j = 0; j < 64; j++)
		ck_assert_msg(fabs((double)g[j] / f[j] - 1.0) < 3e-7, "inv_freq[%d]: %.9g by factors, %.9g by llama3", j,
		              (double)g[j], (double)f[j]);
}
END_TEST

START_TEST(test_config_defaults)
{
	model_config c;
	char err[512];
	const char *minimal = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,"
	                      " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100,"
	                      " \"max_position_embeddings\": 256}";
	ck_assert_msg(parse_cfg(&c, minimal, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(c.n_kv_heads, 4);
	ck_assert_int_eq(c.head_dim, 16);
	ck_assert_float_eq(c.rope_theta, 10000.0f);
	ck_assert_float_eq(c.rms_norm_eps, 1e-6f);
	ck_assert(!c.tie_word_embeddings);
	ck_assert_int_eq(c.bos_token_id, -1);
	ck_assert_int_eq(c.eos_token_id, -1);
	ck_assert_int_eq(c.rope_scaling, MODEL_ROPE_NONE);
	float f[8];
	model_config_rope_freqs(&c, f);
	ck_assert_double_eq_tol(f[4] / pow(10000.0, -8.0 / 16), 1.0, 1e-6);

	/* architectures alone; null token ids; empty eos list; rope "default". */
	const char *archs = "{\"architectures\": [\"Foo\", \"Qwen3ForCausalLM\"], \"hidden_size\": 64,"
	                    " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
	                    " \"num_key_value_heads\": null, \"vocab_size\": 100, \"max_position_embeddings\": 256,"
	                    " \"bos_token_id\": null, \"eos_token_id\": [], \"hidden_act\": null,"
	                    " \"rope_scaling\": {\"rope_type\": \"default\"}}";
	ck_assert_msg(parse_cfg(&c, archs, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(c.arch, MODEL_ARCH_QWEN3);
	ck_assert(c.qk_norm);
	ck_assert_int_eq(c.n_kv_heads, 4);
	ck_assert_int_eq(c.bos_token_id, -1);
	ck_assert_int_eq(c.eos_token_id, -1);
	ck_assert_int_eq(c.rope_scaling, MODEL_ROPE_NONE);

	const char *llama_arch = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,"
	                         " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
	                         " \"vocab_size\": 100, \"max_position_embeddings\": 256, \"eos_token_id\": 7}";
	ck_assert_msg(parse_cfg(&c, llama_arch, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(c.arch, MODEL_ARCH_LLAMA);
	ck_assert_int_eq(c.eos_token_id, 7);
}
END_TEST

START_TEST(test_config_mistral_and_linear)
{
	model_config c;
	char err[512];
	const char *mistral = "{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128,"
	                      " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
	                      " \"vocab_size\": 100, \"max_position_embeddings\": 256, \"sliding_window\": null,"
	                      " \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4}}";
	ck_assert_msg(parse_cfg(&c, mistral, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(c.arch, MODEL_ARCH_LLAMA);
	ck_assert(!c.qk_norm);
	ck_assert_int_eq(c.rope_scaling, MODEL_ROPE_LINEAR);
	ck_assert_float_eq(c.rope_factor, 4.0f);
	float f[8];
	model_config_rope_freqs(&c, f);
	ck_assert_double_eq_tol(f[0], 0.25, 1e-9);
	ck_assert_double_eq_tol(f[3] / (pow(10000.0, -6.0 / 16) / 4), 1.0, 1e-6);
}
END_TEST

/* YaRN as Hugging Face's _compute_yarn_parameters computes it (its formula again here, in double): Qwen3's recipe
 * (factor 4 over 32768 positions, θ 1e6, d 128), then the defaults (factor from max_position_embeddings, no
 * truncation) and an attention factor of its own. */
static void yarn_want(double theta, int d, double factor, double orig, double fast, double slow, bool truncate,
                      double *want)
{
	const double pi = 3.14159265358979323846;
	double low = d * log(orig / (fast * 2 * pi)) / (2 * log(theta)), high = d * log(orig / (slow * 2 * pi)) / (2 * log(theta));
	if (truncate)
		low = floor(low), high = ceil(high);
	low = low < 0 ? 0 : low;
	high = high > d - 1 ? d - 1 : high;
	if (low == high)
		high += 0.001;
	for (int j = 0; j < d / 2; j++) {
		double r = (j - low) / (high - low);
		r = r < 0 ? 0 : r > 1 ? 1 : r;
		const double extrap = pow(theta, -2.0 * j / d), e = 1 - r;
		want[j] = extrap / factor * (1 - e) + extrap * e;
	}
}

START_TEST(test_config_yarn)
{
	model_config c;
	char err[512];
	const char *qwen = "{\"model_type\": \"qwen3\", \"hidden_size\": 256, \"intermediate_size\": 512,"
	                   " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"head_dim\": 128, \"vocab_size\": 100,"
	                   " \"max_position_embeddings\": 131072, \"rope_theta\": 1000000,"
	                   " \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0,"
	                   " \"original_max_position_embeddings\": 32768}}";
	ck_assert_msg(parse_cfg(&c, qwen, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(c.rope_scaling, MODEL_ROPE_YARN);
	ck_assert_int_eq(c.rope_original_max_pos, 32768);
	ck_assert_double_eq_tol(c.rope_attn_factor, 0.1 * log(4.0) + 1, 1e-6);
	ck_assert_double_eq_tol(model_config_score_scale(&c), pow(0.1 * log(4.0) + 1, 2), 1e-6);
	float f[64];
	double want[64];
	model_config_rope_freqs(&c, f);
	yarn_want(1e6, 128, 4, 32768, 32, 1, true, want);
	int kept = 0, blended = 0, scaled = 0;
	for (int j = 0; j < 64; j++) {
		ck_assert_msg(fabs(f[j] / want[j] - 1) < 1e-6, "inv_freq[%d] = %.9g, want %.9g", j, (double)f[j], want[j]);
		const double base = pow(1e6, -2.0 * j / 128), ratio = want[j] / base;
		kept += fabs(ratio - 1) < 1e-12, scaled += fabs(ratio - 0.25) < 1e-12;
		blended += ratio > 0.25 + 1e-12 && ratio < 1 - 1e-12;
	}
	ck_assert_msg(kept && blended && scaled, "kept %d, blended %d, scaled %d: not every part of the ramp", kept, blended,
	              scaled);
	/* no original length: the model's, factor then its own; no truncation; an attention factor given */
	const char *dflt = "{\"model_type\": \"qwen3\", \"hidden_size\": 256, \"intermediate_size\": 512,"
	                   " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"head_dim\": 128, \"vocab_size\": 100,"
	                   " \"max_position_embeddings\": 40960, \"rope_theta\": 1000000,"
	                   " \"rope_scaling\": {\"rope_type\": \"yarn\", \"original_max_position_embeddings\": 32768,"
	                   " \"truncate\": false, \"attention_factor\": 1.25, \"beta_fast\": 16, \"beta_slow\": 2}}";
	ck_assert_msg(parse_cfg(&c, dflt, err, sizeof err) == 0, "%s", err);
	ck_assert_double_eq_tol(c.rope_factor, 40960.0 / 32768, 1e-6);
	ck_assert_double_eq_tol(model_config_score_scale(&c), 1.25 * 1.25, 1e-6);
	model_config_rope_freqs(&c, f);
	yarn_want(1e6, 128, 40960.0 / 32768, 32768, 16, 2, false, want);
	for (int j = 0; j < 64; j++)
		ck_assert_msg(fabs(f[j] / want[j] - 1) < 1e-6, "inv_freq[%d] = %.9g, want %.9g", j, (double)f[j], want[j]);
	/* and every other scaling leaves the scores alone */
	const char *none = "{\"model_type\": \"qwen3\", \"hidden_size\": 256, \"intermediate_size\": 512,"
	                   " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"vocab_size\": 100,"
	                   " \"max_position_embeddings\": 4096, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}}";
	ck_assert_msg(parse_cfg(&c, none, err, sizeof err) == 0, "%s", err);
	ck_assert_double_eq(model_config_score_scale(&c), 1.0);
}
END_TEST

START_TEST(test_config_load_file)
{
	model_config c;
	char err[512], dir[512];
	snprintf(dir, sizeof dir, "%s/qwen3-small-b", testdata());
	ck_assert_msg(model_config_load(&c, dir, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(c.n_kv_heads, 1);
	ck_assert_int_eq(model_config_load(&c, tmpdir, err, sizeof err), -1);
	ck_assert_err(err, tmpdir, NULL, "config.json");
	write_text(tmp_path("config.json"), "{\"model_type\": \"gemma\"}");
	ck_assert_int_eq(model_config_load(&c, tmpdir, err, sizeof err), -1);
	ck_assert_err(err, tmp_path("config.json"), NULL, "gemma");
}
END_TEST

/* ======================= config.json: invalid, one key at a time ======================= */

/* A valid base config; each row sets (or, with NULL, deletes) up to two keys and names what the message
 * must contain (the key, or the refused value). */
static const char base_config[] =
	"{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"hidden_size\": 64,"
	" \"intermediate_size\": 192, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
	" \"head_dim\": 32, \"vocab_size\": 2056, \"max_position_embeddings\": 4096, \"rope_theta\": 1000000,"
	" \"rms_norm_eps\": 1e-6, \"hidden_act\": \"silu\", \"attention_bias\": false, \"tie_word_embeddings\": false,"
	" \"bos_token_id\": 1, \"eos_token_id\": 2, \"rope_scaling\": null, \"sliding_window\": null}";

static const struct bad_config {
	const char *key, *value, *key2, *value2, *expect;
} bad_configs[] = {
	{ "model_type", "\"qwen2\"", 0, 0, "qwen2" },
	{ "model_type", "\"gemma\"", 0, 0, "gemma" },
	{ "model_type", "\"qwen3_moe\"", 0, 0, "qwen3_moe" },
	{ "model_type", "5", 0, 0, "model_type" },
	{ "model_type", NULL, "architectures", "[\"Qwen2ForCausalLM\"]", "Qwen2ForCausalLM" },
	{ "model_type", NULL, "architectures", "\"Qwen3ForCausalLM\"", "architectures" },
	{ "model_type", NULL, "architectures", NULL, "model_type" },
	{ "hidden_size", "\"64\"", 0, 0, "hidden_size" },
	{ "hidden_size", "0", 0, 0, "hidden_size" },
	{ "hidden_size", "-64", 0, 0, "hidden_size" },
	{ "hidden_size", "64.5", 0, 0, "hidden_size" },
	{ "hidden_size", "33554432", 0, 0, "hidden_size" },
	{ "hidden_size", "true", 0, 0, "hidden_size" },
	{ "hidden_size", "99999999999999999999", 0, 0, "config.json" },   /* jansson: integer overflow */
	{ "hidden_size", NULL, 0, 0, "hidden_size" },
	{ "intermediate_size", NULL, 0, 0, "intermediate_size" },
	{ "intermediate_size", "[192]", 0, 0, "intermediate_size" },
	{ "vocab_size", "4194305", 0, 0, "vocab_size" },
	{ "vocab_size", NULL, 0, 0, "vocab_size" },
	{ "num_hidden_layers", "1025", 0, 0, "num_hidden_layers" },
	{ "num_hidden_layers", "0", 0, 0, "num_hidden_layers" },
	{ "num_attention_heads", "0", 0, 0, "num_attention_heads" },
	{ "num_attention_heads", NULL, 0, 0, "num_attention_heads" },
	{ "num_key_value_heads", "3", 0, 0, "num_key_value_heads" },
	{ "num_key_value_heads", "8", 0, 0, "num_key_value_heads" },
	{ "num_key_value_heads", "-2", 0, 0, "num_key_value_heads" },
	{ "head_dim", "33", 0, 0, "head_dim" },
	{ "head_dim", "\"32\"", 0, 0, "head_dim" },
	{ "head_dim", "0", 0, 0, "head_dim" },
	{ "head_dim", "16777216", 0, 0, "head_dim" },
	{ "head_dim", NULL, "num_attention_heads", "6", "num_attention_heads" },   /* 64 % 6 != 0 */
	{ "max_position_embeddings", "-1", 0, 0, "max_position_embeddings" },
	{ "max_position_embeddings", NULL, 0, 0, "max_position_embeddings" },
	{ "hidden_act", "\"gelu\"", 0, 0, "gelu" },
	{ "hidden_act", "3", 0, 0, "hidden_act" },
	{ "attention_bias", "true", 0, 0, "attention_bias" },
	{ "attention_bias", "\"no\"", 0, 0, "attention_bias" },
	{ "mlp_bias", "true", 0, 0, "mlp_bias" },
	{ "use_sliding_window", "true", 0, 0, "use_sliding_window" },
	{ "model_type", "\"mistral\"", "sliding_window", "4096", "sliding_window" },
	{ "quantization_config", "{\"quant_method\": \"gptq\"}", 0, 0, "quantization_config" },
	{ "rope_theta", "\"big\"", 0, 0, "rope_theta" },
	{ "rope_theta", "0", 0, 0, "rope_theta" },
	{ "rope_theta", "-10000", 0, 0, "rope_theta" },
	{ "rope_theta", "1e300", 0, 0, "rope_theta" },
	{ "rms_norm_eps", "0", 0, 0, "rms_norm_eps" },
	{ "rms_norm_eps", "[1e-6]", 0, 0, "rms_norm_eps" },
	{ "tie_word_embeddings", "\"yes\"", 0, 0, "tie_word_embeddings" },
	{ "tie_word_embeddings", "1", 0, 0, "tie_word_embeddings" },
	{ "bos_token_id", "\"1\"", 0, 0, "bos_token_id" },
	{ "eos_token_id", "-5", 0, 0, "eos_token_id" },
	{ "eos_token_id", "[\"a\"]", 0, 0, "eos_token_id" },
	{ "eos_token_id", "1.5", 0, 0, "eos_token_id" },
	{ "eos_token_id", "4294967296", 0, 0, "eos_token_id" },
	{ "rope_scaling", "\"linear\"", 0, 0, "rope_scaling" },
	{ "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4, \"mscale\": 1, \"mscale_all_dim\": 1}", 0, 0, "mscale" },
	{ "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4, \"beta_fast\": 1, \"beta_slow\": 1}", 0, 0, "beta_fast" },
	{ "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 0}", 0, 0, "factor" },
	{ "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4, \"attention_factor\": -1}", 0, 0, "attention_factor" },
	{ "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4, \"truncate\": \"no\"}", 0, 0, "truncate" },
	{ "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 0}", 0, 0,
	  "original_max_position_embeddings" },
	{ "rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2}", 0, 0, "dynamic" },
	{ "rope_scaling", "{\"rope_type\": \"longrope\"}", 0, 0, "longrope" },
	{ "rope_scaling", "{\"factor\": 2}", 0, 0, "rope_type" },
	{ "rope_scaling", "{\"rope_type\": 3}", 0, 0, "rope_type" },
	{ "rope_scaling", "{\"rope_type\": \"linear\"}", 0, 0, "factor" },
	{ "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 0}", 0, 0, "factor" },
	{ "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": \"2\"}", 0, 0, "factor" },
	{ "rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4}",
	  0, 0, "original_max_position_embeddings" },
	{ "rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8, \"high_freq_factor\": 4,"
	  " \"original_max_position_embeddings\": 8192}", 0, 0, "low_freq_factor" },
	{ "rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, \"high_freq_factor\": 4,"
	  " \"original_max_position_embeddings\": 8192}", 0, 0, "high_freq_factor" },
	{ "rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
	  " \"original_max_position_embeddings\": -8192}", 0, 0, "original_max_position_embeddings" },
};

static void set_key(json_t *o, const char *key, const char *value)
{
	if (!key) return;
	if (!value) {
		json_object_del(o, key);
		return;
	}
	json_error_t e;
	json_t *v = json_loads(value, JSON_DECODE_ANY, &e);
	ck_assert_msg(v != NULL, "bad test value %s", value);
	json_object_set_new(o, key, v);
}

START_TEST(test_config_invalid_keys)
{
	const struct bad_config *b = &bad_configs[_i];
	json_error_t e;
	json_t *o = json_loads(base_config, 0, &e);
	ck_assert_ptr_nonnull(o);
	char *text;
	json_t *probe = b->value ? json_loads(b->value, JSON_DECODE_ANY, &e) : NULL;
	if (b->value && !probe) {
		/* jansson cannot hold the value (e.g. an integer overflow): place the raw text in the JSON. */
		json_object_set_new(o, b->key, json_string("@@"));
		char *t = json_dumps(o, 0);
		char *at = strstr(t, "\"@@\"");
		ck_assert_ptr_nonnull(at);
		text = malloc(strlen(t) + strlen(b->value) + 1);
		sprintf(text, "%.*s%s%s", (int)(at - t), t, b->value, at + 4);
		free(t);
	} else {
		json_decref(probe);
		set_key(o, b->key, b->value);
		set_key(o, b->key2, b->value2);
		text = json_dumps(o, 0);
	}
	json_decref(o);
	model_config c;
	char err[512] = "";
	int rc = model_config_parse(&c, text, strlen(text), err, sizeof err);
	ck_assert_msg(rc == -1, "accepted %s = %s", b->key, b->value ? b->value : "(deleted)");
	ck_assert_err(err, "config.json", NULL, b->expect);
	free(text);
}
END_TEST

START_TEST(test_config_invalid_json)
{
	static const char *bad[] = { "", "{", "[]", "42", "null", "{}", "{\"model_type\": \"qwen3\"", "\xff\xfe",
	                             "{\"model_type\": \"qwen3\", \"model_type\": \"llama\"}" };
	model_config c;
	char err[512];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = 0;
		ck_assert_int_eq(model_config_parse(&c, bad[i], strlen(bad[i]), err, sizeof err), -1);
		ck_assert_err(err, "config.json", NULL, NULL);
	}
	/* A tiny err buffer is never overrun, and a NULL one is allowed. */
	char small[8];
	ck_assert_int_eq(model_config_parse(&c, "{}", 2, small, sizeof small), -1);
	ck_assert_uint_eq(strlen(small), 7);
	ck_assert_int_eq(model_config_parse(&c, "{}", 2, NULL, 0), -1);
}
END_TEST

/* ======================= safetensors: valid files ======================= */

START_TEST(test_st_valid)
{
	/* Metadata, a 0-dim scalar, an empty tensor at a shared offset, and a gap before the last tensor. */
	const char *hdr = "{\"__metadata__\": {\"format\": \"pt\", \"note\": \"x\"},"
	                  " \"b\": {\"dtype\": \"F16\", \"shape\": [2, 3], \"data_offsets\": [4, 16]},"
	                  " \"a\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]},"
	                  " \"e\": {\"dtype\": \"BF16\", \"shape\": [0, 5], \"data_offsets\": [16, 16]},"
	                  " \"c\": {\"dtype\": \"BF16\", \"shape\": [1, 1, 1, 2], \"data_offsets\": [20, 24]}}   ";
	const char *path = tmp_path("ok.safetensors");
	write_st(path, hdr, 24);
	st_set s;
	char err[512];
	ck_assert_msg(st_open_file(&s, path, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(s.n_tensors, 4);
	ck_assert_int_eq(s.n_files, 1);
	ck_assert_str_eq(s.files[0].path, path);
	ck_assert_str_eq(s.tensors[0].name, "a");
	ck_assert_str_eq(s.tensors[3].name, "e");
	const st_tensor *a = st_find(&s, "a"), *b = st_find(&s, "b"), *c = st_find(&s, "c"), *e = st_find(&s, "e");
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(a->n_dims, 0);
	ck_assert_uint_eq(a->nbytes, 4);
	ck_assert_int_eq(b->dtype, ST_F16);
	ck_assert_int_eq(b->n_dims, 2);
	ck_assert_int_eq(b->shape[1], 3);
	ck_assert_int_eq(c->n_dims, 4);
	ck_assert_uint_eq(e->nbytes, 0);
	ck_assert_ptr_null(st_find(&s, "d"));
	/* Data is in place when the file aligns it, else an owned copy of the same bytes: write_st filled byte i
	 * of the data with i. */
	const uint8_t *base = (const uint8_t *)s.files[0].map + 8 + strlen(hdr);
	if ((uintptr_t)base % 4 == 0) {
		ck_assert_ptr_eq(a->data, base);
		ck_assert_ptr_null(a->owned);
	} else {
		ck_assert_ptr_eq(a->data, a->owned);
		ck_assert_int_eq(memcmp(a->data, base, a->nbytes), 0);
	}
	ck_assert_int_eq((int)((uintptr_t)a->data % 4), 0);
	ck_assert_int_eq((int)((uintptr_t)b->data % 2), 0);
	ck_assert_int_eq(memcmp(b->data, base + 4, b->nbytes), 0);
	ck_assert_uint_eq(((const uint8_t *)c->data)[0], 20);
	ck_assert_uint_eq(((const uint8_t *)b->data)[11], 15);
	st_close(&s);
	st_close(&s);

	/* The parser on its own: offsets come back as pointers relative to 0. */
	st_tensor *t;
	int32_t n;
	ck_assert_msg(st_parse_header(hdr, strlen(hdr), 24, &t, &n, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(n, 4);
	ck_assert_str_eq(t[1].name, "b");
	ck_assert_uint_eq((uintptr_t)t[1].data, 4);
	st_tensors_free(t, n);
	ck_assert_int_eq(st_parse_header("{}", 2, 0, &t, &n, err, sizeof err), 0);
	ck_assert_int_eq(n, 0);
	st_tensors_free(t, n);

	st_set z;
	memset(&z, 0, sizeof z);
	st_close(&z);
	ck_assert_ptr_null(st_find(&z, "a"));
}
END_TEST

/* ======================= safetensors: invalid headers ======================= */

static const struct bad_st {
	const char *header;
	size_t data_len;
	const char *tensor, *expect;
} bad_sts[] = {
	{ "{\"w\": ", 8, NULL, "not valid JSON" },
	{ "not json at all", 8, NULL, "not valid JSON" },
	{ "", 8, NULL, "not valid JSON" },
	{ "[1, 2]", 8, NULL, "not a JSON object" },
	{ "{\"w\": {\"dtype\": \"I8\", \"shape\": [4], \"data_offsets\": [0, 4]}}", 4, "'w'", "I8" },
	{ "{\"w\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8, "'w'", "F64" },
	{ "{\"w\": {\"dtype\": \"bf16\", \"shape\": [1], \"data_offsets\": [0, 2]}}", 8, "'w'", "bf16" },
	{ "{\"w\": {\"dtype\": 2, \"shape\": [1], \"data_offsets\": [0, 2]}}", 8, "'w'", "dtype" },
	{ "{\"w\": {\"shape\": [1], \"data_offsets\": [0, 2]}}", 8, "'w'", "dtype" },
	{ "{\"model.norm.weight\": {\"dtype\": \"BF16\", \"shape\": [64], \"data_offsets\": [0, 100]}}", 128,
	  "'model.norm.weight'", "shape [64] × 2 bytes = 128 but data_offsets span 100" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 12]}}", 24, "'w'", "= 24" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8, "'w'", "outside" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8, "'w'", "end before" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [9223372036854775800, 9223372036854775804]}}",
	  8, "'w'", "outside" },
	{ "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
	  " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12, "'b'", "overlap" },
	{ "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
	  " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 16, "'a'", "overlap" },
	{ "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
	  " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, "'b'", "overlap" },
	{ "{\"dup\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
	  " \"dup\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, "dup", "twice" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 8, "'w'", "negative" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, -4]}}", 8, "'w'", "negative" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 8, "'w'", "data_offsets" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 8, "'w'", "data_offsets" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4.0]}}", 8, "'w'", "data_offsets" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": \"0-4\"}}", 8, "'w'", "data_offsets" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", 8, "'w'", "data_offsets" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 8, "'w'", "shape" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 8, "'w'", "shape" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": 4, \"data_offsets\": [0, 16]}}", 16, "'w'", "shape" },
	{ "{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 16]}}", 16, "'w'", "shape" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [1, 1, 1, 1, 1], \"data_offsets\": [0, 4]}}", 8, "'w'",
	  "dimensions" },
	{ "{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], \"data_offsets\": [0, 4]}}",
	  8, "'w'", "overflow" },
	{ "{\"w\": {\"dtype\": \"BF16\", \"shape\": [4611686018427387904, 4], \"data_offsets\": [0, 0]}}", 8, "'w'",
	  "overflow" },
	{ "{\"w\": 5}", 8, "'w'", "not a JSON object" },
	{ "{\"w\": [\"F32\", [1], [0, 4]]}", 8, "'w'", "not a JSON object" },
	{ "{\"__metadata__\": 5}", 8, NULL, "__metadata__" },
	{ "{\"__metadata__\": {\"format\": 1}}", 8, NULL, "format" },
};

START_TEST(test_st_invalid_header)
{
	const struct bad_st *b = &bad_sts[_i];
	const char *path = tmp_path("bad.safetensors");
	write_st(path, b->header, b->data_len);
	st_set s;
	char err[512] = "";
	ck_assert_msg(st_open_file(&s, path, err, sizeof err) == -1, "accepted %s", b->header);
	ck_assert_err(err, path, b->tensor, b->expect);
	ck_assert_ptr_null(s.tensors);
	ck_assert_int_eq(s.n_files, 0);
	/* The same through st_open_dir. */
	rename(path, tmp_path("model.safetensors"));
	ck_assert_int_eq(st_open_dir(&s, tmpdir, err, sizeof err), -1);
	ck_assert_err(err, tmp_path("model.safetensors"), b->tensor, b->expect);
}
END_TEST

/* File-level problems: the length prefix and the file size. */
START_TEST(test_st_invalid_file)
{
	st_set s;
	char err[512], path[512];
	snprintf(path, sizeof path, "%s", tmp_path("f.safetensors"));

	write_bytes(path, "\x10\x00\x00", 3);   /* truncated inside the length prefix */
	ck_assert_int_eq(st_open_file(&s, path, err, sizeof err), -1);
	ck_assert_err(err, path, NULL, "too short");

	write_bytes(path, "", 0);
	ck_assert_int_eq(st_open_file(&s, path, err, sizeof err), -1);
	ck_assert_err(err, path, NULL, "too short");

	write_st_raw(path, 1ull << 40, "{}", NULL, 0);   /* huge header length */
	ck_assert_int_eq(st_open_file(&s, path, err, sizeof err), -1);
	ck_assert_err(err, path, NULL, "header length");

	write_st_raw(path, UINT64_MAX, "{}", NULL, 0);
	ck_assert_int_eq(st_open_file(&s, path, err, sizeof err), -1);
	ck_assert_err(err, path, NULL, "header length");

	write_st_raw(path, 100, "{}", NULL, 10);   /* header says 100 bytes, file holds 12 after the prefix */
	ck_assert_int_eq(st_open_file(&s, path, err, sizeof err), -1);
	ck_assert_err(err, path, NULL, "header length");

	/* Truncated data: the header promises 16 bytes, the file holds 8. */
	write_st(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8);
	ck_assert_int_eq(st_open_file(&s, path, err, sizeof err), -1);
	ck_assert_err(err, path, "'w'", "outside");

	write_st_raw(path, 2, "{}", NULL, 0);   /* the header ends at the file's end: valid, no tensors */
	ck_assert_msg(st_open_file(&s, path, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(s.n_tensors, 0);
	st_close(&s);

	write_st_raw(path, 4, "{}", NULL, 2);   /* header takes 2 data bytes that are not JSON */
	ck_assert_int_eq(st_open_file(&s, path, err, sizeof err), -1);
	ck_assert_err(err, path, NULL, "JSON");

	ck_assert_int_eq(st_open_file(&s, tmp_path("absent.safetensors"), err, sizeof err), -1);
	ck_assert_err(err, tmp_path("absent.safetensors"), NULL, "cannot open");

	ck_assert_int_eq(st_open_file(&s, tmpdir, err, sizeof err), -1);
	ck_assert_err(err, tmpdir, NULL, "regular file");

	/* A directory with neither file. */
	unlink(path);
	ck_assert_int_eq(st_open_dir(&s, tmpdir, err, sizeof err), -1);
	ck_assert_err(err, tmpdir, NULL, "model.safetensors");
}
END_TEST

/* ======================= safetensors: sharded ======================= */

static const char shard1_hdr[] =
	"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
	" \"b\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [8, 16]}}";
static const char shard2_hdr[] =
	"{\"c\": {\"dtype\": \"F16\", \"shape\": [3], \"data_offsets\": [0, 6]}}";

static void write_shards(const char *index)
{
	write_st(tmp_path("model-00001-of-00002.safetensors"), shard1_hdr, 16);
	write_st(tmp_path("model-00002-of-00002.safetensors"), shard2_hdr, 6);
	write_text(tmp_path("model.safetensors.index.json"), index);
}

START_TEST(test_st_sharded_valid)
{
	write_shards("{\"metadata\": {\"total_size\": 22}, \"weight_map\": {"
	             "\"a\": \"model-00001-of-00002.safetensors\", \"b\": \"model-00001-of-00002.safetensors\","
	             " \"c\": \"model-00002-of-00002.safetensors\"}}");
	/* A stray single file beside the index is ignored: the index wins. */
	write_st(tmp_path("model.safetensors"), "{}", 0);
	st_set s;
	char err[512];
	ck_assert_msg(st_open_dir(&s, tmpdir, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(s.n_files, 2);
	ck_assert_int_eq(s.n_tensors, 3);
	const st_tensor *a = st_find(&s, "a"), *c = st_find(&s, "c");
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_nonnull(strstr(s.files[a->file].path, "model-00001-of-00002"));
	ck_assert_ptr_nonnull(strstr(s.files[c->file].path, "model-00002-of-00002"));
	ck_assert_int_eq(c->dtype, ST_F16);
	const uint8_t *c_at = (const uint8_t *)s.files[c->file].map + 8 + strlen(shard2_hdr);
	ck_assert_ptr_eq(c->data, (uintptr_t)c_at % 2 == 0 ? c_at : (const uint8_t *)c->owned);
	ck_assert_int_eq(memcmp(c->data, c_at, c->nbytes), 0);
	st_close(&s);
}
END_TEST

static const struct bad_index {
	const char *index;
	const char *file, *tensor, *expect;   /* file: as in tmp_path, or NULL for the index file */
} bad_indexes[] = {
	/* a missing shard */
	{ "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", \"c\": \"model-00003-of-00003.safetensors\"}}",
	  "model-00003-of-00003.safetensors", NULL, "cannot open" },
	/* shard names that leave the directory */
	{ "{\"weight_map\": {\"a\": \"../model-00001-of-00002.safetensors\"}}", NULL, "'a'", "plain file name" },
	{ "{\"weight_map\": {\"a\": \"sub/model.safetensors\"}}", NULL, "'a'", "plain file name" },
	{ "{\"weight_map\": {\"a\": \"/etc/passwd\"}}", NULL, "'a'", "plain file name" },
	{ "{\"weight_map\": {\"a\": \"..\"}}", NULL, "'a'", "plain file name" },
	{ "{\"weight_map\": {\"a\": \"\"}}", NULL, "'a'", "plain file name" },
	/* tensor mapped to the wrong shard */
	{ "{\"weight_map\": {\"a\": \"model-00002-of-00002.safetensors\", \"c\": \"model-00002-of-00002.safetensors\"}}",
	  "model-00002-of-00002.safetensors", "'a'", "missing" },
	{ "{\"weight_map\": {\"a\": \"model-00002-of-00002.safetensors\", \"b\": \"model-00001-of-00002.safetensors\","
	  " \"c\": \"model-00002-of-00002.safetensors\"}}", "model-00002-of-00002.safetensors", "'a'", "00001" },
	/* tensor mapped to a shard that holds nothing of that name */
	{ "{\"weight_map\": {\"zz\": \"model-00001-of-00002.safetensors\"}}", "model-00001-of-00002.safetensors",
	  "'zz'", "missing" },
	/* malformed index */
	{ "{\"weight_map\": {\"a\": 1}}", NULL, "'a'", "not a string" },
	{ "{\"weight_map\": [\"a\"]}", NULL, NULL, "weight_map" },
	{ "{\"metadata\": {}}", NULL, NULL, "weight_map" },
	{ "{\"weight_map\": {}}", NULL, NULL, "empty" },
	{ "{\"weight_map\": {", NULL, NULL, "JSON" },
	{ "{\"weight_map\": {\"a\": \"x\", \"a\": \"y\"}}", NULL, NULL, "JSON" },
};

START_TEST(test_st_sharded_invalid)
{
	const struct bad_index *b = &bad_indexes[_i];
	write_shards(b->index);
	st_set s;
	char err[512] = "";
	ck_assert_msg(st_open_dir(&s, tmpdir, err, sizeof err) == -1, "accepted %s", b->index);
	ck_assert_err(err, tmp_path(b->file ? b->file : "model.safetensors.index.json"), b->tensor, b->expect);
	ck_assert_ptr_null(s.files);
	ck_assert_int_eq(s.n_tensors, 0);
}
END_TEST

START_TEST(test_st_sharded_duplicate)
{
	write_st(tmp_path("s1.safetensors"), shard1_hdr, 16);
	write_st(tmp_path("s2.safetensors"), "{\"b\": {\"dtype\": \"F16\", \"shape\": [3], \"data_offsets\": [0, 6]}}", 6);
	write_text(tmp_path("model.safetensors.index.json"),
	           "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}");
	st_set s;
	char err[512];
	ck_assert_int_eq(st_open_dir(&s, tmpdir, err, sizeof err), -1);
	ck_assert_err(err, "s1.safetensors", "'b'", "s2.safetensors");
	/* A bad shard is reported under its own name. */
	write_st(tmp_path("s2.safetensors"), "{\"c\": {\"dtype\": \"I8\", \"shape\": [3], \"data_offsets\": [0, 3]}}", 3);
	ck_assert_int_eq(st_open_dir(&s, tmpdir, err, sizeof err), -1);
	ck_assert_err(err, tmp_path("s2.safetensors"), "'c'", "I8");
}
END_TEST

/* ======================= model binding ======================= */

START_TEST(test_model_tiny_ok)
{
	tspec t[TINY_MAX];
	char err[512];
	model_files m;
	/* Llama: no q/k norm, untied, lm_head present. */
	int n = tiny_specs(t, 0, 1);
	tiny_write_config(tmpdir, "llama", 0);
	tiny_write_st(tmp_path("model.safetensors"), t, n);
	ck_assert_msg(model_files_load(&m, tmpdir, err, sizeof err) == 0, "%s", err);
	ck_assert_ptr_null(m.w.layers[0].q_norm);
	ck_assert_ptr_null(m.w.layers[1].k_norm);
	ck_assert_int_eq(m.w.layers[1].w_up->dtype, ST_F16);
	ck_assert_int_eq(m.w.lm_head->dtype, ST_BF16);
	ck_assert_str_eq(m.dir, tmpdir);
	model_files_free(&m);

	/* Tied, but lm_head.weight present anyway: it is used. */
	tiny_write_config(tmpdir, "llama", 1);
	ck_assert_msg(model_files_load(&m, tmpdir, err, sizeof err) == 0, "%s", err);
	ck_assert_ptr_ne(m.w.lm_head, m.w.embed);
	ck_assert_str_eq(m.w.lm_head->name, "lm_head.weight");
	model_files_free(&m);

	/* Qwen3, tied, no lm_head. */
	n = tiny_specs(t, 1, 0);
	tiny_write_config(tmpdir, "qwen3", 1);
	tiny_write_st(tmp_path("model.safetensors"), t, n);
	ck_assert_msg(model_files_load(&m, tmpdir, err, sizeof err) == 0, "%s", err);
	ck_assert_ptr_eq(m.w.lm_head, m.w.embed);
	ck_assert_int_eq(m.w.layers[1].q_norm->shape[0], 4);
	model_files_free(&m);
}
END_TEST

/* Each row breaks one thing in an otherwise valid tiny model. */
static const struct bad_model {
	const char *model_type;
	int tied, lm_head;
	const char *tensor;        /* the spec to change */
	int32_t nd;                /* -1: remove it; else its new shape */
	int64_t d0, d1;
	const char *add;           /* a tensor to add (with the shape above), or NULL */
	const char *expect;
} bad_models[] = {
	{ "llama", 0, 1, "model.layers.1.mlp.up_proj.weight", -1, 0, 0, NULL, "is missing" },
	{ "llama", 0, 1, "model.layers.1.mlp.up_proj.weight", 2, 16, 7, NULL, "has shape [16, 7], expected [16, 8]" },
	{ "llama", 0, 1, "model.layers.0.self_attn.k_proj.weight", 2, 8, 8, NULL, "expected [4, 8]" },
	{ "llama", 0, 1, "model.layers.0.self_attn.o_proj.weight", 2, 8, 4, NULL, "expected [8, 8]" },
	{ "llama", 0, 1, "model.layers.1.mlp.down_proj.weight", 2, 16, 8, NULL, "expected [8, 16]" },
	{ "llama", 0, 1, "model.norm.weight", 2, 8, 1, NULL, "has shape [8, 1], expected [8]" },
	{ "llama", 0, 1, "model.layers.0.input_layernorm.weight", 1, 9, 0, NULL, "expected [8]" },
	{ "llama", 0, 1, "model.embed_tokens.weight", 2, 31, 8, NULL, "expected [32, 8]" },
	{ "llama", 0, 1, "model.embed_tokens.weight", -1, 0, 0, NULL, "is missing" },
	{ "llama", 0, 1, "lm_head.weight", 2, 32, 9, NULL, "expected [32, 8]" },
	{ "llama", 0, 1, "lm_head.weight", -1, 0, 0, NULL, "is missing" },    /* untied, no lm_head */
	{ "qwen3", 1, 0, "model.layers.1.self_attn.q_norm.weight", -1, 0, 0, NULL, "is missing" },
	{ "qwen3", 1, 0, "model.layers.0.self_attn.k_norm.weight", 1, 8, 0, NULL, "expected [4]" },
	{ "llama", 0, 1, "model.layers.0.self_attn.q_proj.bias", 1, 8, 0, "model.layers.0.self_attn.q_proj.bias",
	  "bias" },
	{ "llama", 0, 1, "model.layers.2.input_layernorm.weight", 1, 8, 0, "model.layers.2.input_layernorm.weight",
	  "num_hidden_layers" },
};

START_TEST(test_model_invalid)
{
	const struct bad_model *b = &bad_models[_i];
	tspec t[TINY_MAX];
	int n = tiny_specs(t, !strcmp(b->model_type, "qwen3"), b->lm_head);
	if (b->add) n = tiny_add(t, n, b->add, "F32", b->nd, b->d0, b->d1);
	tspec *s = tiny_get(t, n, b->tensor);
	if (b->nd < 0) {
		s->name[0] = 0;
	} else {
		s->nd = b->nd;
		s->shape[0] = b->d0;
		s->shape[1] = b->d1;
	}
	tiny_write_config(tmpdir, b->model_type, b->tied);
	tiny_write_st(tmp_path("model.safetensors"), t, n);
	model_files m;
	char err[512] = "";
	ck_assert_msg(model_files_load(&m, tmpdir, err, sizeof err) == -1, "accepted a broken %s", b->tensor);
	/* Missing: named under the directory; present but wrong: under the file that holds it. */
	ck_assert_err(err, b->nd < 0 ? tmpdir : tmp_path("model.safetensors"), b->tensor, b->expect);
	ck_assert_ptr_null(m.w.layers);
	ck_assert_ptr_null(m.dir);
}
END_TEST

START_TEST(test_model_invalid_dir)
{
	model_files m;
	char err[512];
	/* No config.json. */
	ck_assert_int_eq(model_files_load(&m, tmpdir, err, sizeof err), -1);
	ck_assert_err(err, tmpdir, NULL, "config.json");
	/* Config but no weights. */
	tiny_write_config(tmpdir, "llama", 0);
	ck_assert_int_eq(model_files_load(&m, tmpdir, err, sizeof err), -1);
	ck_assert_err(err, tmpdir, NULL, "model.safetensors");
	/* Refused config. */
	write_text(tmp_path("config.json"), "{\"model_type\": \"qwen2\", \"attention_bias\": true}");
	ck_assert_int_eq(model_files_load(&m, tmpdir, err, sizeof err), -1);
	ck_assert_err(err, tmp_path("config.json"), NULL, "qwen2");
	/* A weights file that is not safetensors. */
	tiny_write_config(tmpdir, "llama", 0);
	write_text(tmp_path("model.safetensors"), "PK\x03\x04 this is a zip, not safetensors");
	ck_assert_int_eq(model_files_load(&m, tmpdir, err, sizeof err), -1);
	ck_assert_err(err, tmp_path("model.safetensors"), NULL, "header length");
	ck_assert_int_eq(model_files_load(&m, "/nonexistent/aah-model", err, sizeof err), -1);
	ck_assert_err(err, "/nonexistent/aah-model", NULL, NULL);
}
END_TEST

static Suite *models_suite(void)
{
	Suite *s = suite_create("models");
	TCase *tc;

	tc = tcase_create("reference_models");
	tcase_add_test(tc, test_load_small_a);
	tcase_add_test(tc, test_load_small_b);
	suite_add_tcase(s, tc);

	tc = tcase_create("config");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, test_config_qwen3_4b);
	tcase_add_test(tc, test_config_llama31_8b);
	tcase_add_test(tc, test_config_defaults);
	tcase_add_test(tc, test_config_mistral_and_linear);
	tcase_add_test(tc, test_config_yarn);
	tcase_add_test(tc, test_config_load_file);
	suite_add_tcase(s, tc);

	tc = tcase_create("config_invalid");
	tcase_add_loop_test(tc, test_config_invalid_keys, 0, (int)(sizeof bad_configs / sizeof bad_configs[0]));
	tcase_add_test(tc, test_config_invalid_json);
	suite_add_tcase(s, tc);

	tc = tcase_create("safetensors");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, test_st_valid);
	tcase_add_test(tc, test_st_sharded_valid);
	suite_add_tcase(s, tc);

	tc = tcase_create("safetensors_invalid");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_loop_test(tc, test_st_invalid_header, 0, (int)(sizeof bad_sts / sizeof bad_sts[0]));
	tcase_add_test(tc, test_st_invalid_file);
	tcase_add_loop_test(tc, test_st_sharded_invalid, 0, (int)(sizeof bad_indexes / sizeof bad_indexes[0]));
	tcase_add_test(tc, test_st_sharded_duplicate);
	suite_add_tcase(s, tc);

	tc = tcase_create("model_binding");
	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_add_test(tc, test_model_tiny_ok);
	tcase_add_loop_test(tc, test_model_invalid, 0, (int)(sizeof bad_models / sizeof bad_models[0]));
	tcase_add_test(tc, test_model_invalid_dir);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(models_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
