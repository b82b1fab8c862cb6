/* tests/tools/check_mkmodel.c — Check suite for aah-mkmodel and tools/convert/safetensors_write: runs the built tool into temp
 * directories and reads everything back (config.json, safetensors headers and bytes, shard index, tokenizer). */
#include <check.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "models/model.h"
#include "base/fs.h"
#include "models/safetensors.h"
#include "tools/convert/safetensors_write.h"
#define TEST_TMPDIR "mkmodel"
#include "tests/test_env.h"

static const char *tool_path(void)
{
	static char path[512];
	snprintf(path, sizeof path, "%s/aah-mkmodel", build_dir());
	return path;
}

/* "tmpdir/name" in one of 16 rotating static buffers: copy it to keep it across many calls. */
static const char *tmp_path(const char *name)
{
	static char buf[16][512];
	static int which;
	which = (which + 1) % 16;
	snprintf(buf[which], sizeof buf[which], "%s/%s", tmpdir, name);
	return buf[which];
}

/* Runs aah-mkmodel with the NULL-terminated arguments; its output goes to tmpdir/tool.log (printed on
 * AAH_TEST_VERBOSE). Returns the exit status, or -1 when it did not exit normally. */
static int run_tool(const char *arg, ...)
{
	const char *argv[64];
	int n = 0;
	argv[n++] = tool_path();
	va_list ap;
	va_start(ap, arg);
	for (const char *a = arg; a && n < 63; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	ck_assert_msg(access(tool_path(), X_OK) == 0, "%s is not built (set AAH_BUILD)", tool_path());
	char log[600];
	snprintf(log, sizeof log, "%s/tool.log", tmpdir);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (!freopen(log, "w", stdout) || !freopen(log, "a", stderr))
			_exit(127);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	if (getenv("AAH_TEST_VERBOSE")) {
		FILE *f = fopen(log, "r");
		char line[512];
		while (f && fgets(line, sizeof line, f))
			fputs(line, stderr);
		if (f)
			fclose(f);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Writes the tiny Qwen3 model with the small test tokenizer into tmpdir/name, plus extra arguments. */
static const char *make_tiny(const char *name, const char *a1, const char *a2, const char *a3, const char *a4)
{
	char tok[512];
	snprintf(tok, sizeof tok, "%s/qwen3-small-a", testdata());
	const char *out = tmp_path(name);
	int rc = run_tool("--out", out, "--preset", "tiny", "--tokenizer", tok, a1, a2, a3, a4, (const char *)NULL);
	ck_assert_int_eq(rc, 0);
	return out;
}

/* ---- a safetensors file parsed here, independently of models/safetensors.c ---- */

typedef struct tfile {
	unsigned char *bytes;    /* the whole file */
	size_t size;
	uint64_t header_len;
	json_t *header;          /* parsed header */
} tfile;

static void tfile_read(tfile *t, const char *path)
{
	t->bytes = read_all(path, &t->size);
	ck_assert_uint_ge(t->size, 8);
	t->header_len = 0;
	for (int i = 7; i >= 0; i--)
		t->header_len = t->header_len << 8 | t->bytes[i];
	ck_assert_uint_le(8 + t->header_len, t->size);
	json_error_t je;
	t->header = json_loadb((const char *)t->bytes + 8, (size_t)t->header_len, JSON_REJECT_DUPLICATES, &je);
	ck_assert_msg(t->header != NULL, "%s: header: %s", path, je.text);
}

static void tfile_free(tfile *t)
{
	json_decref(t->header);
	free(t->bytes);
}

/* The tensor's entry, its bytes and byte count. */
static const json_t *tfile_tensor(const tfile *t, const char *name, const unsigned char **data, size_t *len)
{
	const json_t *e = json_object_get(t->header, name);
	if (!e)
		return NULL;
	const json_t *off = json_object_get(e, "data_offsets");
	uint64_t a = (uint64_t)json_integer_value(json_array_get(off, 0));
	uint64_t b = (uint64_t)json_integer_value(json_array_get(off, 1));
	ck_assert_uint_le(a, b);
	ck_assert_uint_le(8 + t->header_len + b, t->size);
	if (data)
		*data = t->bytes + 8 + t->header_len + a;
	if (len)
		*len = (size_t)(b - a);
	return e;
}

static float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float v;
	if (e == 0)
		v = ldexpf((float)m, -24);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexpf((float)(m | 0x400), (int)e - 25);
	uint32_t u;
	memcpy(&u, &v, sizeof u);
	u |= sign;
	memcpy(&v, &u, sizeof v);
	return v;
}

/* ---- the tensors the tiny preset must hold ---- */

typedef struct want_tensor {
	char name[96];
	int64_t rows, cols;      /* cols 0: 1-D */
} want_tensor;

/* Fills w (room for 64) with the expected tensors of a model; returns the count. */
static int want_tensors(want_tensor *w, int layers, int hidden, int heads, int kv, int hd, int ff, int vocab,
                        bool qwen, bool tied)
{
	int n = 0;
#define WANT(r, c, ...)                                                   \
	do {                                                              \
		snprintf(w[n].name, sizeof w[n].name, __VA_ARGS__);       \
		w[n].rows = (r);                                          \
		w[n].cols = (c);                                          \
		n++;                                                      \
	} while (0)
	WANT(vocab, hidden, "model.embed_tokens.weight");
	WANT(hidden, 0, "model.norm.weight");
	if (!tied)
		WANT(vocab, hidden, "lm_head.weight");
	for (int l = 0; l < layers; l++) {
		WANT(hidden, 0, "model.layers.%d.input_layernorm.weight", l);
		WANT(hidden, 0, "model.layers.%d.post_attention_layernorm.weight", l);
		WANT(heads * hd, hidden, "model.layers.%d.self_attn.q_proj.weight", l);
		WANT(kv * hd, hidden, "model.layers.%d.self_attn.k_proj.weight", l);
		WANT(kv * hd, hidden, "model.layers.%d.self_attn.v_proj.weight", l);
		WANT(hidden, heads * hd, "model.layers.%d.self_attn.o_proj.weight", l);
		if (qwen) {
			WANT(hd, 0, "model.layers.%d.self_attn.q_norm.weight", l);
			WANT(hd, 0, "model.layers.%d.self_attn.k_norm.weight", l);
		}
		WANT(ff, hidden, "model.layers.%d.mlp.gate_proj.weight", l);
		WANT(ff, hidden, "model.layers.%d.mlp.up_proj.weight", l);
		WANT(hidden, ff, "model.layers.%d.mlp.down_proj.weight", l);
	}
#undef WANT
	return n;
}

/* Checks that file t holds exactly the wanted tensors with the dtype and shape asked. */
static void check_tensor_set(const tfile *t, const want_tensor *w, int n, const char *dtype)
{
	for (int i = 0; i < n; i++) {
		const json_t *e = tfile_tensor(t, w[i].name, NULL, NULL);
		ck_assert_msg(e != NULL, "tensor %s missing", w[i].name);
		ck_assert_str_eq(json_string_value(json_object_get(e, "dtype")), dtype);
		const json_t *shape = json_object_get(e, "shape");
		ck_assert_uint_eq(json_array_size(shape), w[i].cols ? 2 : 1);
		ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), w[i].rows);
		if (w[i].cols)
			ck_assert_int_eq(json_integer_value(json_array_get(shape, 1)), w[i].cols);
	}
	size_t keys = json_object_size(t->header) - (json_object_get(t->header, "__metadata__") ? 1 : 0);
	ck_assert_uint_eq(keys, (size_t)n);
}

/* Mean and standard deviation of a BF16 tensor's elements. */
static void bf16_stats(const tfile *t, const char *name, double *mean, double *std)
{
	const unsigned char *p;
	size_t len;
	ck_assert_ptr_nonnull(tfile_tensor(t, name, &p, &len));
	double s = 0, s2 = 0;
	size_t n = len / 2;
	for (size_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		double v = bf16_to_f32(h);
		ck_assert_msg(isfinite(v), "%s[%zu] is not finite", name, i);
		s += v;
		s2 += v * v;
	}
	*mean = s / (double)n;
	*std = sqrt(s2 / (double)n - *mean * *mean);
}

/* ================================================================ config.json */

static json_t *load_config(const char *dir)
{
	char path[2600];
	snprintf(path, sizeof path, "%s/config.json", dir);
	json_error_t je;
	json_t *c = json_load_file(path, 0, &je);
	ck_assert_msg(c != NULL, "%s: %s", path, je.text);
	return c;
}

static int64_t cfg_int(const json_t *c, const char *key)
{
	const json_t *v = json_object_get(c, key);
	ck_assert_msg(json_is_integer(v), "config.json: %s is not an integer", key);
	return json_integer_value(v);
}

START_TEST(test_config_qwen3_tiny)
{
	const char *out = make_tiny("m", NULL, NULL, NULL, NULL);
	json_t *c = load_config(out);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)), "Qwen3ForCausalLM");
	ck_assert_uint_eq(json_array_size(json_object_get(c, "architectures")), 1);
	ck_assert_str_eq(json_string_value(json_object_get(c, "model_type")), "qwen3");
	ck_assert_int_eq(cfg_int(c, "hidden_size"), 64);
	ck_assert_int_eq(cfg_int(c, "num_hidden_layers"), 2);
	ck_assert_int_eq(cfg_int(c, "num_attention_heads"), 4);
	ck_assert_int_eq(cfg_int(c, "num_key_value_heads"), 2);
	ck_assert_int_eq(cfg_int(c, "head_dim"), 16);
	ck_assert_int_eq(cfg_int(c, "intermediate_size"), 128);
	ck_assert_int_eq(cfg_int(c, "max_position_embeddings"), 4096);
	/* qwen3-small-a: ids 0 … 2050 (2048 BPE + 3 added) → 2051, rounded up to 8 */
	ck_assert_int_eq(cfg_int(c, "vocab_size"), 2056);
	ck_assert_int_eq(cfg_int(c, "bos_token_id"), 2048);
	ck_assert_int_eq(cfg_int(c, "eos_token_id"), 2048);
	ck_assert(json_is_true(json_object_get(c, "tie_word_embeddings")));
	ck_assert(json_is_false(json_object_get(c, "attention_bias")));
	ck_assert(json_is_null(json_object_get(c, "rope_scaling")));
	ck_assert_ptr_nonnull(json_object_get(c, "rope_scaling"));
	ck_assert_str_eq(json_string_value(json_object_get(c, "hidden_act")), "silu");
	ck_assert_str_eq(json_string_value(json_object_get(c, "torch_dtype")), "bfloat16");
	ck_assert_double_eq_tol(json_number_value(json_object_get(c, "rms_norm_eps")), 1e-6, 1e-12);
	ck_assert_double_eq_tol(json_number_value(json_object_get(c, "rope_theta")), 1e6, 1e-3);
	ck_assert(json_is_number(json_object_get(c, "attention_dropout")));
	ck_assert(json_is_number(json_object_get(c, "initializer_range")));
	ck_assert(json_is_string(json_object_get(c, "transformers_version")));
	ck_assert(json_is_boolean(json_object_get(c, "use_cache")));
	ck_assert(json_is_false(json_object_get(c, "use_sliding_window")));
	ck_assert_int_eq(cfg_int(c, "max_window_layers"), 2);
	json_decref(c);
}
END_TEST

START_TEST(test_config_llama_overrides)
{
	const char *out = tmp_path("llama");
	int rc = run_tool("--out", out, "--arch", "llama", "--preset", "tiny", "--hidden", "96", "--layers", "3",
	                  "--heads", "6", "--kv-heads", "3", "--head-dim", "8", "--intermediate", "200", "--vocab", "1000",
	                  "--max-pos", "128", "--rope-theta", "10000.5", "--eps", "1e-5", "--tied", "0", "--dtype", "f16",
	                  (const char *)NULL);
	ck_assert_int_eq(rc, 0);
	json_t *c = load_config(out);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)), "LlamaForCausalLM");
	ck_assert_str_eq(json_string_value(json_object_get(c, "model_type")), "llama");
	ck_assert_int_eq(cfg_int(c, "hidden_size"), 96);
	ck_assert_int_eq(cfg_int(c, "num_hidden_layers"), 3);
	ck_assert_int_eq(cfg_int(c, "num_attention_heads"), 6);
	ck_assert_int_eq(cfg_int(c, "num_key_value_heads"), 3);
	ck_assert_int_eq(cfg_int(c, "head_dim"), 8);
	ck_assert_int_eq(cfg_int(c, "intermediate_size"), 200);
	ck_assert_int_eq(cfg_int(c, "vocab_size"), 1000);
	ck_assert_int_eq(cfg_int(c, "max_position_embeddings"), 128);
	ck_assert_double_eq_tol(json_number_value(json_object_get(c, "rope_theta")), 10000.5, 1e-9);
	ck_assert_double_eq_tol(json_number_value(json_object_get(c, "rms_norm_eps")), 1e-5, 1e-12);
	ck_assert(json_is_false(json_object_get(c, "tie_word_embeddings")));
	ck_assert(json_is_false(json_object_get(c, "mlp_bias")));
	ck_assert_str_eq(json_string_value(json_object_get(c, "torch_dtype")), "float16");
	ck_assert(json_is_integer(json_object_get(c, "bos_token_id")));
	ck_assert(json_is_integer(json_object_get(c, "eos_token_id")));
	json_decref(c);

	tfile t;
	tfile_read(&t, tmp_path("llama/model.safetensors"));
	want_tensor w[64];
	int n = want_tensors(w, 3, 96, 6, 3, 8, 200, 1000, false, false);
	check_tensor_set(&t, w, n, "F16");
	ck_assert_ptr_null(json_object_get(t.header, "model.layers.0.self_attn.q_norm.weight"));
	/* F16 values are finite and sane */
	const unsigned char *p;
	size_t len;
	tfile_tensor(&t, "model.norm.weight", &p, &len);
	for (size_t i = 0; i < len / 2; i++) {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		float v = f16_to_f32(h);
		ck_assert(v > 0.3f && v < 1.7f);
	}
	tfile_free(&t);
}
END_TEST

/* ================================================================ tensors and layout */

START_TEST(test_tensors_expected)
{
	make_tiny("m", NULL, NULL, NULL, NULL);
	tfile t;
	tfile_read(&t, tmp_path("m/model.safetensors"));
	want_tensor w[64];
	int n = want_tensors(w, 2, 64, 4, 2, 16, 128, 2056, true, true);
	check_tensor_set(&t, w, n, "BF16");
	ck_assert_ptr_null(json_object_get(t.header, "lm_head.weight"));   /* tied */
	tfile_free(&t);

	/* untied: lm_head appears */
	make_tiny("u", "--tied", "0", NULL, NULL);
	tfile_read(&t, tmp_path("u/model.safetensors"));
	n = want_tensors(w, 2, 64, 4, 2, 16, 128, 2056, true, false);
	check_tensor_set(&t, w, n, "BF16");
	tfile_free(&t);
}
END_TEST

START_TEST(test_header_layout)
{
	make_tiny("m", NULL, NULL, NULL, NULL);
	tfile t;
	tfile_read(&t, tmp_path("m/model.safetensors"));
	ck_assert_uint_eq(t.header_len % 8, 0);
	/* padding: spaces after the closing brace */
	const char *h = (const char *)t.bytes + 8;
	size_t end = (size_t)t.header_len;
	while (end > 0 && h[end - 1] == ' ')
		end--;
	ck_assert_uint_gt(end, 0);
	ck_assert_int_eq(h[end - 1], '}');
	ck_assert_uint_lt((size_t)t.header_len - end, 8);
	/* metadata */
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(t.header, "__metadata__"), "format")), "pt");
	ck_assert_int_eq(strncmp(h, "{\"__metadata__\"", 15), 0);
	/* keys in name order in the text */
	const char *key;
	const json_t *v;
	const char *names[128];
	size_t n = 0;
	json_object_foreach(t.header, key, v) {
		if (strcmp(key, "__metadata__") != 0)
			names[n++] = key;
	}
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < n; j++) {
			char qi[128], qj[128];
			snprintf(qi, sizeof qi, "\"%s\":{", names[i]);
			snprintf(qj, sizeof qj, "\"%s\":{", names[j]);
			const char *pi = strstr(h, qi), *pj = strstr(h, qj);
			ck_assert(pi && pj);
			if (strcmp(names[i], names[j]) < 0)
				ck_assert_msg(pi < pj, "%s written after %s", names[i], names[j]);
		}
	}
	/* offsets tile the data section exactly: sort the spans and walk them */
	uint64_t spans[128][2];
	for (size_t i = 0; i < n; i++) {
		const json_t *off = json_object_get(json_object_get(t.header, names[i]), "data_offsets");
		spans[i][0] = (uint64_t)json_integer_value(json_array_get(off, 0));
		spans[i][1] = (uint64_t)json_integer_value(json_array_get(off, 1));
	}
	uint64_t at = 0;
	for (size_t k = 0; k < n; k++) {
		size_t found = n;
		for (size_t i = 0; i < n; i++)
			if (spans[i][0] == at && spans[i][1] >= at)
				found = i;
		ck_assert_msg(found < n, "no tensor starts at data offset %llu", (unsigned long long)at);
		at = spans[found][1];
	}
	ck_assert_uint_eq(8 + t.header_len + at, t.size);
	/* data in the order Hugging Face writes it: the embedding first */
	const json_t *off = json_object_get(json_object_get(t.header, "model.embed_tokens.weight"), "data_offsets");
	ck_assert_int_eq(json_integer_value(json_array_get(off, 0)), 0);
	tfile_free(&t);
	ck_assert(!aah_path_exists(tmp_path("m/model.safetensors.tmp")));
	ck_assert(!aah_path_exists(tmp_path("m/config.json.tmp")));
}
END_TEST

START_TEST(test_weight_statistics)
{
	make_tiny("m", NULL, NULL, NULL, NULL);
	tfile t;
	tfile_read(&t, tmp_path("m/model.safetensors"));
	double mean, std;
	/* RMSNorm weights near 1, q/k norms near their gain (2), projections N(0, 1/√64) */
	bf16_stats(&t, "model.layers.0.input_layernorm.weight", &mean, &std);
	ck_assert_double_eq_tol(mean, 1.0, 0.06);
	ck_assert_double_gt(std, 0.05);
	ck_assert_double_lt(std, 0.16);
	bf16_stats(&t, "model.layers.1.self_attn.q_norm.weight", &mean, &std);
	ck_assert_double_eq_tol(mean, 2.0, 0.15);
	bf16_stats(&t, "model.layers.1.mlp.gate_proj.weight", &mean, &std);
	ck_assert_double_eq_tol(mean, 0.0, 0.01);
	ck_assert_double_eq_tol(std, 0.125, 0.006);
	bf16_stats(&t, "model.embed_tokens.weight", &mean, &std);   /* logit std 6 / √64 */
	ck_assert_double_eq_tol(mean, 0.0, 0.01);
	ck_assert_double_eq_tol(std, 0.75, 0.02);
	bf16_stats(&t, "model.layers.0.mlp.down_proj.weight", &mean, &std);
	ck_assert_double_gt(std, 0.1);                               /* large: the residual must dominate */
	tfile_free(&t);
}
END_TEST

/* ================================================================ determinism */

static bool same_file(const char *a, const char *b)
{
	size_t la, lb;
	unsigned char *x = read_all(a, &la), *y = read_all(b, &lb);
	bool same = la == lb && memcmp(x, y, la) == 0;
	free(x);
	free(y);
	return same;
}

START_TEST(test_seed_determinism)
{
	make_tiny("a", "--seed", "7", NULL, NULL);
	make_tiny("b", "--seed", "7", NULL, NULL);
	make_tiny("c", "--seed", "8", NULL, NULL);
	ck_assert(same_file(tmp_path("a/model.safetensors"), tmp_path("b/model.safetensors")));
	ck_assert(same_file(tmp_path("a/config.json"), tmp_path("b/config.json")));
	ck_assert(!same_file(tmp_path("a/model.safetensors"), tmp_path("c/model.safetensors")));
	/* same layout, different bytes in every tensor */
	tfile a, c;
	tfile_read(&a, tmp_path("a/model.safetensors"));
	tfile_read(&c, tmp_path("c/model.safetensors"));
	ck_assert_uint_eq(a.header_len, c.header_len);
	ck_assert_int_eq(memcmp(a.bytes, c.bytes, 8 + a.header_len), 0);
	const char *key;
	const json_t *v;
	json_object_foreach(a.header, key, v) {
		if (!strcmp(key, "__metadata__"))
			continue;
		const unsigned char *pa, *pc;
		size_t la, lc;
		tfile_tensor(&a, key, &pa, &la);
		tfile_tensor(&c, key, &pc, &lc);
		ck_assert_msg(memcmp(pa, pc, la) != 0, "%s is the same under two seeds", key);
	}
	/* tensors of one model differ from each other too (the name keys the stream) */
	const unsigned char *g, *u;
	size_t lg, lu;
	tfile_tensor(&a, "model.layers.0.mlp.gate_proj.weight", &g, &lg);
	tfile_tensor(&a, "model.layers.0.mlp.up_proj.weight", &u, &lu);
	ck_assert(memcmp(g, u, lg) != 0);
	tfile_free(&a);
	tfile_free(&c);
}
END_TEST

/* The same tensor whatever the file layout or dtype: sharded = single, and bf16 = bf16(f32). */
START_TEST(test_layout_independence)
{
	make_tiny("one", NULL, NULL, NULL, NULL);
	make_tiny("sh", "--shard-size", "50000", NULL, NULL);
	make_tiny("f32", "--dtype", "f32", NULL, NULL);
	tfile one, f32;
	tfile_read(&one, tmp_path("one/model.safetensors"));
	tfile_read(&f32, tmp_path("f32/model.safetensors"));
	json_error_t je;
	json_t *index = json_load_file(tmp_path("sh/model.safetensors.index.json"), 0, &je);
	ck_assert_ptr_nonnull(index);
	const char *key;
	const json_t *v;
	json_object_foreach(one.header, key, v) {
		if (!strcmp(key, "__metadata__"))
			continue;
		const unsigned char *p1, *p2, *pf;
		size_t l1, l2, lf;
		tfile_tensor(&one, key, &p1, &l1);
		char shard[2600];
		snprintf(shard, sizeof shard, "%s/sh/%s", tmpdir,
		         json_string_value(json_object_get(json_object_get(index, "weight_map"), key)));
		tfile s;
		tfile_read(&s, shard);
		ck_assert_ptr_nonnull(tfile_tensor(&s, key, &p2, &l2));
		ck_assert_uint_eq(l1, l2);
		ck_assert_msg(memcmp(p1, p2, l1) == 0, "%s differs between single and sharded", key);
		tfile_free(&s);
		ck_assert_ptr_nonnull(tfile_tensor(&f32, key, &pf, &lf));
		ck_assert_uint_eq(lf, 2 * l1);
		for (size_t i = 0; i < l1 / 2; i++) {
			float x;
			uint16_t h;
			memcpy(&x, pf + 4 * i, 4);
			memcpy(&h, p1 + 2 * i, 2);
			ck_assert_msg(st_f32_to_bf16(x) == h, "%s[%zu]: bf16 file is not bf16(f32 file)", key, i);
		}
	}
	json_decref(index);
	tfile_free(&one);
	tfile_free(&f32);
}
END_TEST

/* ================================================================ shards */

START_TEST(test_shards_index)
{
	char out[512];
	snprintf(out, sizeof out, "%s", make_tiny("sh", "--shard-size", "100000", NULL, NULL));
	ck_assert(!aah_path_exists(tmp_path("sh/model.safetensors")));
	json_error_t je;
	json_t *index = json_load_file(tmp_path("sh/model.safetensors.index.json"), 0, &je);
	ck_assert_msg(index != NULL, "index: %s", je.text);
	const json_t *map = json_object_get(index, "weight_map");
	ck_assert(json_is_object(map));
	want_tensor w[64];
	int n = want_tensors(w, 2, 64, 4, 2, 16, 128, 2056, true, true);
	ck_assert_uint_eq(json_object_size(map), (size_t)n);
	/* every tensor: in the map, in the named file; shards follow HF's name pattern and stay under the size
	 * unless a single tensor is bigger */
	int n_files = 0;
	uint64_t total = 0;
	char names[32][64];
	for (int i = 0; i < n; i++) {
		const char *file = json_string_value(json_object_get(map, w[i].name));
		ck_assert_msg(file != NULL, "%s not in weight_map", w[i].name);
		int k, of;
		char tail[32];
		ck_assert_int_eq(sscanf(file, "model-%05d-of-%05d%31s", &k, &of, tail), 3);
		ck_assert_str_eq(tail, ".safetensors");
		ck_assert_int_ge(k, 1);
		ck_assert_int_le(k, of);
		bool seen = false;
		for (int f = 0; f < n_files; f++)
			seen |= strcmp(names[f], file) == 0;
		if (!seen)
			snprintf(names[n_files++], sizeof names[0], "%s", file);
	}
	ck_assert_int_gt(n_files, 2);
	for (int f = 0; f < n_files; f++) {
		char path[2600];
		snprintf(path, sizeof path, "%s/%s", out, names[f]);
		tfile t;
		tfile_read(&t, path);
		size_t in_file = 0;
		uint64_t data = t.size - 8 - t.header_len;
		const char *key;
		const json_t *v;
		json_object_foreach(t.header, key, v) {
			if (!strcmp(key, "__metadata__"))
				continue;
			ck_assert_str_eq(json_string_value(json_object_get(map, key)), names[f]);
			in_file++;
		}
		ck_assert_msg(data <= 100000 || in_file == 1, "%s holds %zu tensors in %llu bytes", names[f], in_file,
		              (unsigned long long)data);
		total += data;
		tfile_free(&t);
	}
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(index, "metadata"), "total_size")),
	                 (json_int_t)total);
	json_decref(index);

	/* rewriting the same directory as one file removes the index and the shards */
	make_tiny("sh", NULL, NULL, NULL, NULL);
	ck_assert(aah_path_exists(tmp_path("sh/model.safetensors")));
	ck_assert(!aah_path_exists(tmp_path("sh/model.safetensors.index.json")));
	char path[2600];
	snprintf(path, sizeof path, "%s/%s", out, names[0]);
	ck_assert(!aah_path_exists(path));
	/* a shard size above the model's size: one file, no index */
	make_tiny("big", "--shard-size", "1G", NULL, NULL);
	ck_assert(aah_path_exists(tmp_path("big/model.safetensors")));
	ck_assert(!aah_path_exists(tmp_path("big/model.safetensors.index.json")));
}
END_TEST

/* ================================================================ tokenizer */

START_TEST(test_tokenizer_copied)
{
	char out[512];
	snprintf(out, sizeof out, "%s", make_tiny("m", NULL, NULL, NULL, NULL));
	const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
	for (int i = 0; i < 2; i++) {
		char a[2600], b[2600];
		snprintf(a, sizeof a, "%s/qwen3-small-a/%s", testdata(), files[i]);
		snprintf(b, sizeof b, "%s/%s", out, files[i]);
		ck_assert_msg(same_file(a, b), "%s not copied as is", files[i]);
	}
	ck_assert(!aah_path_exists(tmp_path("m/tokenizer.model")));
	/* an explicit vocab above the tokenizer's is kept; one below it is refused */
	make_tiny("v", "--vocab", "4096", NULL, NULL);
	json_t *c = load_config(tmp_path("v"));
	ck_assert_int_eq(cfg_int(c, "vocab_size"), 4096);
	json_decref(c);
	char tok[512];
	snprintf(tok, sizeof tok, "%s/qwen3-small-a", testdata());
	ck_assert_int_eq(run_tool("--out", tmp_path("v2"), "--preset", "tiny", "--tokenizer", tok, "--vocab", "2050",
	                          (const char *)NULL), 2);
	/* the real-model presets keep their vocabulary */
	ck_assert_int_eq(run_tool("--out", tmp_path("q"), "--preset", "qwen3-0.6b", "--layers", "1", "--hidden", "16",
	                          "--heads", "2", "--kv-heads", "1", "--head-dim", "8", "--intermediate", "16",
	                          "--tokenizer", tok, (const char *)NULL), 0);
	c = load_config(tmp_path("q"));
	ck_assert_int_eq(cfg_int(c, "vocab_size"), 151936);
	json_decref(c);
}
END_TEST

/* A SentencePiece tokenizer.model alone (the trained runs' own): read as aahd reads it, through models/tokenizer.h —
 * its piece count and its <s>/</s> ids; and a ModelProto that sentencepiece itself refuses is refused too. */
START_TEST(test_tokenizer_sentencepiece)
{
	char tokdir[512], err[512];
	snprintf(tokdir, sizeof tokdir, "%s", tmp_path("sp"));
	ck_assert_int_eq(mkdir(tokdir, 0755), 0);
	char path[2600];
	snprintf(path, sizeof path, "%s/tokenizer.model", tokdir);
	ck_assert_msg(aah_copy_file("runs/aah/tokenizer.model", path, err, sizeof err) == 0, "%s", err);

	char out[512];
	snprintf(out, sizeof out, "%s", tmp_path("m"));
	ck_assert_int_eq(run_tool("--out", out, "--preset", "tiny", "--arch", "llama", "--tokenizer", tokdir,
	                          (const char *)NULL), 0);
	json_t *c = load_config(out);
	ck_assert_int_eq(cfg_int(c, "vocab_size"), 2048);   /* 2048 pieces, already a multiple of 8 */
	ck_assert_int_eq(cfg_int(c, "bos_token_id"), 1);
	ck_assert_int_eq(cfg_int(c, "eos_token_id"), 2);
	json_decref(c);
	char copied[2600];
	snprintf(copied, sizeof copied, "%s/tokenizer.model", out);
	ck_assert(same_file(path, copied));
	ck_assert(!aah_path_exists(tmp_path("m/tokenizer.json")));

	/* ModelProto { pieces (1) = SentencePiece { piece (1), score (2, float), type (3, varint) } …,
	 * trainer_spec (2) = {…} } with no unknown piece: well-formed protobuf that sentencepiece will not load, so
	 * neither would aahd — a usage error, nothing written */
	unsigned char pb[512];
	size_t n = 0;
	const char *pieces[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a", "b", "c", "d", "e", "f", "g", "h"};
	for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
		size_t len = strlen(pieces[i]);
		pb[n++] = 0x0a;                          /* field 1, length-delimited */
		pb[n++] = (unsigned char)(2 + len + 5 + 2);
		pb[n++] = 0x0a;
		pb[n++] = (unsigned char)len;
		memcpy(pb + n, pieces[i], len);
		n += len;
		pb[n++] = 0x15;                          /* field 2, fixed32: score */
		memset(pb + n, 0, 4);
		n += 4;
		pb[n++] = 0x18;                          /* field 3, varint: type */
		pb[n++] = i < 3 ? 3 : 1;
	}
	const unsigned char trainer[] = {0x12, 0x03, 0x08, 0x96, 0x01};   /* field 2: a message with a varint */
	memcpy(pb + n, trainer, sizeof trainer);
	n += sizeof trainer;
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(pb, 1, n, f), n);
	fclose(f);
	ck_assert_int_eq(run_tool("--out", tmp_path("m1"), "--tokenizer", tokdir, (const char *)NULL), 2);
	ck_assert(!aah_path_exists(tmp_path("m1/config.json")));

	/* a truncated protobuf is refused as a usage error */
	f = fopen(path, "wb");
	ck_assert_uint_eq(fwrite(pb, 1, 7, f), 7);
	fclose(f);
	ck_assert_int_eq(run_tool("--out", tmp_path("m2"), "--tokenizer", tokdir, (const char *)NULL), 2);
}
END_TEST

/* ================================================================ bad usage */

START_TEST(test_usage_errors)
{
	char o[512];
	snprintf(o, sizeof o, "%s", tmp_path("x"));
	ck_assert_int_eq(run_tool((const char *)NULL), 2);                                       /* no --out */
	ck_assert_int_eq(run_tool("--preset", "tiny", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--preset", "tiny", "--heads", "6", "--kv-heads", "4", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--preset", "tiny", "--head-dim", "15", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--preset", "tiny", "--hidden", "0", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--preset", "tiny", "--layers", "-1", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--preset", "tiny", "--intermediate", "12x", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--preset", "tiny", "--vocab", "0", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--preset", "nope", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--arch", "gpt2", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--dtype", "f8", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--tied", "2", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--eps", "0", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--rope-theta", "nan", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--seed", "-1", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--shard-size", "0", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--shard-size", "5X", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "--bogus", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", o, "stray", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--out", (const char *)NULL), 2);                             /* missing value */
	ck_assert_int_eq(run_tool("--out", o, "--tokenizer", tmp_path("none"), (const char *)NULL), 2);
	ck_assert(!aah_path_exists(o));          /* nothing is written on a usage error */
	/* an output directory that cannot be made: below a regular file */
	FILE *f = fopen(tmp_path("file"), "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	ck_assert_int_eq(run_tool("--out", tmp_path("file/sub"), "--preset", "tiny", (const char *)NULL), 2);
	ck_assert_int_eq(run_tool("--help", (const char *)NULL), 0);
}
END_TEST

/* ================================================================ conversions */

static uint16_t bf16_of_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return st_f32_to_bf16(f);
}

static uint16_t f16_of_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return st_f32_to_f16(f);
}

START_TEST(test_bf16_conversion)
{
	ck_assert_uint_eq(st_f32_to_bf16(1.0f), 0x3f80);
	ck_assert_uint_eq(st_f32_to_bf16(-2.5f), 0xc020);
	ck_assert_uint_eq(st_f32_to_bf16(0.0f), 0x0000);
	ck_assert_uint_eq(st_f32_to_bf16(-0.0f), 0x8000);
	ck_assert_uint_eq(st_f32_to_bf16(INFINITY), 0x7f80);
	ck_assert_uint_eq(st_f32_to_bf16(-INFINITY), 0xff80);
	/* 1e-40 is an f32 subnormal (bits 0x000116c2): rounds to the bf16 subnormal 0x0001 */
	ck_assert_uint_eq(st_f32_to_bf16(1e-40f), 0x0001);
	ck_assert_uint_eq(bf16_of_bits(0x00008000u), 0x0000);   /* tie at the smallest subnormal → even (0) */
	ck_assert_uint_eq(bf16_of_bits(0x00018000u), 0x0002);   /* tie → even (2) */
	/* NaN stays NaN, even when only low payload bits are set (truncation would make it inf) */
	uint16_t n1 = st_f32_to_bf16(NAN), n2 = bf16_of_bits(0x7f800001u), n3 = bf16_of_bits(0xffc00000u);
	ck_assert(isnan(bf16_to_f32(n1)));
	ck_assert(isnan(bf16_to_f32(n2)));
	ck_assert(isnan(bf16_to_f32(n3)) && (n3 & 0x8000));
	/* round to nearest, ties to even */
	ck_assert_uint_eq(bf16_of_bits(0x3f808000u), 0x3f80);   /* exactly half, kept LSB 0 → down */
	ck_assert_uint_eq(bf16_of_bits(0x3f818000u), 0x3f82);   /* exactly half, kept LSB 1 → up */
	ck_assert_uint_eq(bf16_of_bits(0x3f808001u), 0x3f81);   /* above half → up */
	ck_assert_uint_eq(bf16_of_bits(0x3f807fffu), 0x3f80);   /* below half → down */
	ck_assert_uint_eq(bf16_of_bits(0x3fffffffu), 0x4000);   /* mantissa carry into the exponent */
	ck_assert_uint_eq(bf16_of_bits(0x7f7fffffu), 0x7f80);   /* FLT_MAX rounds to inf */
	ck_assert_uint_eq(bf16_of_bits(0x7f7f7fffu), 0x7f7f);   /* the largest finite bf16 stays */
	/* st_convert_f32 agrees with the scalar function, across the 16-element blocks and the tail */
	float src[37];
	uint16_t dst[37];
	for (int i = 0; i < 37; i++)
		src[i] = (float)i * 0.37f - 5.0f + (i == 20 ? NAN : 0.0f);
	st_convert_f32(dst, ST_BF16, src, 37);
	for (int i = 0; i < 37; i++)
		ck_assert_uint_eq(dst[i], st_f32_to_bf16(src[i]));
}
END_TEST

START_TEST(test_f16_conversion)
{
	ck_assert_uint_eq(st_f32_to_f16(1.0f), 0x3c00);
	ck_assert_uint_eq(st_f32_to_f16(-2.5f), 0xc100);
	ck_assert_uint_eq(st_f32_to_f16(-0.0f), 0x8000);
	ck_assert_uint_eq(st_f32_to_f16(65504.0f), 0x7bff);
	ck_assert_uint_eq(st_f32_to_f16(65519.0f), 0x7bff);
	ck_assert_uint_eq(st_f32_to_f16(65520.0f), 0x7c00);     /* halfway to 65536: ties to even = inf */
	ck_assert_uint_eq(st_f32_to_f16(1e10f), 0x7c00);
	ck_assert_uint_eq(st_f32_to_f16(-INFINITY), 0xfc00);
	ck_assert(isnan(f16_to_f32(st_f32_to_f16(NAN))));
	ck_assert(isnan(f16_to_f32(f16_of_bits(0x7f800001u))));
	ck_assert_uint_eq(st_f32_to_f16(ldexpf(1, -14)), 0x0400);   /* smallest normal */
	ck_assert_uint_eq(st_f32_to_f16(ldexpf(1, -24)), 0x0001);   /* smallest subnormal */
	ck_assert_uint_eq(st_f32_to_f16(ldexpf(1, -25)), 0x0000);   /* half of it: tie → even (0) */
	ck_assert_uint_eq(st_f32_to_f16(ldexpf(3, -26)), 0x0001);   /* 0.75 of it → 1 */
	ck_assert_uint_eq(st_f32_to_f16(ldexpf(3, -25)), 0x0002);   /* 1.5 units: tie → even (2) */
	ck_assert_uint_eq(st_f32_to_f16(ldexpf(5, -25)), 0x0002);   /* 2.5 units: tie → even (2) */
	ck_assert_uint_eq(st_f32_to_f16(1e-8f), 0x0000);
	ck_assert_uint_eq(st_f32_to_f16(ldexpf(1023, -24) + ldexpf(1, -25)), 0x0400);   /* rounds up to normal */
	ck_assert_uint_eq(st_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);                /* tie, LSB 0 → down */
	ck_assert_uint_eq(st_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3c02);                /* tie, LSB 1 → up */
	/* every f16 value survives f16 → f32 → f16 */
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			continue;   /* NaNs: checked above */
		ck_assert_uint_eq(st_f32_to_f16(f16_to_f32((uint16_t)h)), h);
	}
}
END_TEST

/* ================================================================ the writer itself */

typedef struct ramp_ctx {
	int calls;
	int64_t fail_at;   /* -1: never */
} ramp_ctx;

/* F32 elements i → i·0.5, filled by chunks. */
static int fill_ramp(void *ctx, void *out, int64_t first, int64_t n, char *err, size_t err_len)
{
	ramp_ctx *c = ctx;
	c->calls++;
	if (c->fail_at >= 0 && first + n > c->fail_at) {
		snprintf(err, err_len, "disk on fire");
		return -1;
	}
	float *o = out;
	for (int64_t i = 0; i < n; i++)
		o[i] = (float)(first + i) * 0.5f;
	return 0;
}

START_TEST(test_writer_roundtrip)
{
	char err[512] = "";
	const char *path = tmp_path("w.safetensors");
	st_writer *w = st_writer_open(path, err, sizeof err);
	ck_assert_ptr_nonnull(w);
	ck_assert_int_eq(st_writer_set_metadata(w, "format", "pt"), 0);
	ck_assert_int_eq(st_writer_set_metadata(w, "note", "a \"quoted\"\nline"), 0);
	uint16_t small[3] = {0x3f80, 0xc020, 0x0001};
	int64_t s3[1] = {3}, big[2] = {1000, 1500};   /* 1.5 M floats: several fill chunks */
	ramp_ctx rc = {0, -1};
	ck_assert_int_eq(st_writer_add(w, "zeta.bf16", ST_BF16, 1, s3, small), 0);
	ck_assert_int_eq(st_writer_add_fill(w, "alpha.ramp", ST_F32, 2, big, fill_ramp, &rc), 0);
	float four = 4.0f;   /* must outlive st_writer_close: the writer keeps the pointer */
	ck_assert_int_eq(st_writer_add(w, "scalar", ST_F32, 0, NULL, &four), 0);
	ck_assert_uint_eq(st_writer_data_bytes(w), 6 + 4 * 1500000 + 4);
	ck_assert_int_eq(st_writer_close(w), 0);
	ck_assert_int_gt(rc.calls, 1);
	ck_assert(!aah_path_exists(tmp_path("w.safetensors.tmp")));

	tfile t;
	tfile_read(&t, path);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(t.header, "__metadata__"), "note")),
	                 "a \"quoted\"\nline");
	const unsigned char *p;
	size_t len;
	/* the F32 tensors come first in the data so that they are 4-byte aligned; BF16 after */
	const json_t *e = tfile_tensor(&t, "alpha.ramp", &p, &len);
	ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 0)), 0);
	ck_assert_uint_eq(len, 6000000);
	for (size_t i = 0; i < len / 4; i += 9973) {
		float v;
		memcpy(&v, p + 4 * i, 4);
		ck_assert_float_eq(v, (float)i * 0.5f);
	}
	e = tfile_tensor(&t, "scalar", &p, &len);
	ck_assert_uint_eq(json_array_size(json_object_get(e, "shape")), 0);
	ck_assert_uint_eq(len, 4);
	ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 0)), 6000000);
	e = tfile_tensor(&t, "zeta.bf16", &p, &len);
	ck_assert_uint_eq(len, 6);
	ck_assert_int_eq(memcmp(p, small, 6), 0);
	ck_assert_uint_eq(8 + t.header_len + 6000000 + 4 + 6, t.size);
	tfile_free(&t);

	/* models/safetensors.c reads what the writer wrote */
	st_set s;
	ck_assert_msg(st_open_file(&s, path, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(s.n_tensors, 3);
	const st_tensor *st = st_find(&s, "alpha.ramp");
	ck_assert_ptr_nonnull(st);
	ck_assert_int_eq(st->dtype, ST_F32);
	ck_assert_int_eq(st->shape[1], 1500);
	ck_assert_float_eq(((const float *)st->data)[12345], 12345 * 0.5f);
	st_close(&s);
}
END_TEST

START_TEST(test_writer_failures)
{
	char err[512] = "";
	const char *path = tmp_path("bad.safetensors");
	int64_t shape[1] = {4};
	float data[4] = {0};

	/* a duplicate name fails at close and leaves nothing */
	st_writer *w = st_writer_open(path, err, sizeof err);
	ck_assert_int_eq(st_writer_add(w, "x", ST_F32, 1, shape, data), 0);
	ck_assert_int_eq(st_writer_add(w, "x", ST_F32, 1, shape, data), 0);
	ck_assert_int_eq(st_writer_close(w), -1);
	ck_assert_ptr_nonnull(strstr(err, "twice"));
	ck_assert(!aah_path_exists(path));
	ck_assert(!aah_path_exists(tmp_path("bad.safetensors.tmp")));

	/* a failing fill aborts the file, with its message */
	ramp_ctx rc = {0, 2000000};
	int64_t big[1] = {3000000};
	w = st_writer_open(path, err, sizeof err);
	ck_assert_int_eq(st_writer_add_fill(w, "r", ST_F32, 1, big, fill_ramp, &rc), 0);
	ck_assert_int_eq(st_writer_close(w), -1);
	ck_assert_ptr_nonnull(strstr(err, "disk on fire"));
	ck_assert(!aah_path_exists(path));
	ck_assert(!aah_path_exists(tmp_path("bad.safetensors.tmp")));

	/* refused at add: bad dtype, negative dim, too many dims, reserved name */
	w = st_writer_open(path, err, sizeof err);
	int64_t neg[1] = {-1}, five[5] = {1, 1, 1, 1, 1};
	ck_assert_int_eq(st_writer_add(w, "d", (st_dtype)9, 1, shape, data), -1);
	ck_assert_int_eq(st_writer_add(w, "n", ST_F32, 1, neg, data), -1);
	ck_assert_int_eq(st_writer_add(w, "five", ST_F32, 5, five, data), -1);
	ck_assert_int_eq(st_writer_add(w, "__metadata__", ST_F32, 1, shape, data), -1);
	ck_assert_int_eq(st_writer_add(w, "", ST_F32, 1, shape, data), -1);
	st_writer_discard(w);
	ck_assert(!aah_path_exists(path));

	/* an unwritable place */
	w = st_writer_open("/nonexistent-dir/x.safetensors", err, sizeof err);
	ck_assert_ptr_nonnull(w);
	ck_assert_int_eq(st_writer_close(w), -1);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent-dir/x.safetensors.tmp"));
	ck_assert_ptr_null(st_writer_open("", err, sizeof err));

	/* no tensors at all is still a valid file */
	w = st_writer_open(path, err, sizeof err);
	ck_assert_int_eq(st_writer_close(w), 0);
	tfile t;
	tfile_read(&t, path);
	ck_assert_uint_eq(json_object_size(t.header), 0);
	ck_assert_uint_eq(t.size, 8 + t.header_len);
	tfile_free(&t);
}
END_TEST

/* ================================================================ read back by the project's loaders */

START_TEST(test_loaders_accept)
{
	char err[1024] = "";
	const char *variants[][6] = {
		{"q", NULL, NULL, NULL, NULL},
		{"qs", "--shard-size", "100000", "--tied", "0"},
		{"l", "--arch", "llama", "--dtype", "f16"},
		{"lf", "--arch", "llama", "--dtype", "f32"},
	};
	for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
		const char *dir = make_tiny(variants[i][0], variants[i][1], variants[i][2], variants[i][3], variants[i][4]);
		model_files m;
		ck_assert_msg(model_files_load(&m, dir, err, sizeof err) == 0, "%s: %s", variants[i][0], err);
		ck_assert_int_eq(m.config.hidden_size, 64);
		ck_assert_int_eq(m.config.vocab_size, 2056);
		ck_assert_int_eq(m.config.n_layers, 2);
		ck_assert_int_eq(m.config.head_dim, 16);
		ck_assert_int_eq(m.config.eos_token_id, 2048);
		model_files_free(&m);
	}
}
END_TEST

static Suite *mkmodel_suite(void)
{
	Suite *s = suite_create("mkmodel");
	struct { const char *name; const TTest *tests[8]; } cases[] = {
		{"config", {test_config_qwen3_tiny, test_config_llama_overrides}},
		{"tensors", {test_tensors_expected, test_header_layout, test_weight_statistics}},
		{"determinism", {test_seed_determinism, test_layout_independence}},
		{"shards", {test_shards_index}},
		{"tokenizer", {test_tokenizer_copied, test_tokenizer_sentencepiece}},
		{"usage", {test_usage_errors}},
		{"conversion", {test_bf16_conversion, test_f16_conversion}},
		{"writer", {test_writer_roundtrip, test_writer_failures}},
		{"loaders", {test_loaders_accept}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		TCase *tc = tcase_create(cases[i].name);
		tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
		tcase_set_timeout(tc, 120);   /* sanitizer builds run the tool several times per test */
		for (int k = 0; k < 8 && cases[i].tests[k]; k++)
			tcase_add_test(tc, cases[i].tests[k]);
		suite_add_tcase(s, tc);
	}
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(mkmodel_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
