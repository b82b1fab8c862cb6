/* models/gguf_model.c — opens a GGUF model: metadata → a config.json-shaped object that model_config_parse checks as
 * it checks any config (one set of rules for both formats), tensor names → Hugging Face names, types → st_dtype. */
#include "gguf_model.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "models/errf.h"
#include "models/gguf.h"

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

int gguf_model_path(const char *path, char *out, size_t out_len, char *err, size_t err_len)
{
	struct stat st;
	if (!path || stat(path, &st) != 0)
		return 0;
	if (S_ISREG(st.st_mode)) {
		if (!ends_with(path, ".gguf"))
			return 0;
		snprintf(out, out_len, "%s", path);
		return 1;
	}
	if (!S_ISDIR(st.st_mode))
		return 0;
	char probe[4096];
	snprintf(probe, sizeof probe, "%s/config.json", path);
	if (stat(probe, &st) == 0)
		return 0;
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int found = 0;
	struct dirent *de;
	char first[4096] = "";
	while ((de = readdir(d))) {
		if (!ends_with(de->d_name, ".gguf"))
			continue;
		snprintf(probe, sizeof probe, "%s/%s", path, de->d_name);
		if (stat(probe, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (found++) {
			aah_errf(err, err_len, "%s: holds several .gguf files (%s and %s): name the one to load", path, first,
			         de->d_name);
			closedir(d);
			return -1;
		}
		snprintf(first, sizeof first, "%s", de->d_name);
	}
	closedir(d);
	if (!found)
		return 0;
	snprintf(out, out_len, "%s/%s", path, first);
	return 1;
}

/* llama.cpp's per-layer tensor names (blk.N.<name>.weight) and their Hugging Face suffixes. */
static const struct {
	const char *gguf, *hf;
} gm_layer_names[] = {
	{ "attn_norm", "input_layernorm" },
	{ "attn_q", "self_attn.q_proj" },
	{ "attn_k", "self_attn.k_proj" },
	{ "attn_v", "self_attn.v_proj" },
	{ "attn_output", "self_attn.o_proj" },
	{ "attn_q_norm", "self_attn.q_norm" },
	{ "attn_k_norm", "self_attn.k_norm" },
	{ "ffn_norm", "post_attention_layernorm" },
	{ "ffn_gate", "mlp.gate_proj" },
	{ "ffn_up", "mlp.up_proj" },
	{ "ffn_down", "mlp.down_proj" },
};

/* The Hugging Face name of GGUF tensor name (NUL-terminated) into out; -1 when it is none aahd knows. */
static int gm_hf_name(const char *name, char *out, size_t out_len)
{
	const char *dot = strrchr(name, '.');
	if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias")))
		return -1;
	const char *kind = dot + 1;
	size_t base = (size_t)(dot - name);
	if (base == 10 && !strncmp(name, "token_embd", base)) {
		snprintf(out, out_len, "model.embed_tokens.%s", kind);
		return 0;
	}
	if (base == 11 && !strncmp(name, "output_norm", base)) {
		snprintf(out, out_len, "model.norm.%s", kind);
		return 0;
	}
	if (base == 6 && !strncmp(name, "output", base)) {
		snprintf(out, out_len, "lm_head.%s", kind);
		return 0;
	}
	unsigned layer;
	int used = 0;
	if (sscanf(name, "blk.%u.%n", &layer, &used) != 1 || used == 0 || layer > 100000 || name[4] == '+' ||
	    name[4] == '-' || name[4] == ' ')
		return -1;
	const char *part = name + used;
	size_t plen = (size_t)(dot - part);
	for (size_t i = 0; i < sizeof gm_layer_names / sizeof gm_layer_names[0]; i++)
		if (strlen(gm_layer_names[i].gguf) == plen && !strncmp(part, gm_layer_names[i].gguf, plen)) {
			snprintf(out, out_len, "model.layers.%u.%s.%s", layer, gm_layer_names[i].hf, kind);
			return 0;
		}
	return -1;
}

const char *gguf_model_tensor_name(const char *hf, char *out, size_t out_len)
{
	static const struct {
		const char *hf, *gguf;
	} top[] = { { "model.embed_tokens.", "token_embd." }, { "model.norm.", "output_norm." }, { "lm_head.", "output." } };
	for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
		if (!strncmp(hf, top[i].hf, strlen(top[i].hf))) {
			snprintf(out, out_len, "%s%s", top[i].gguf, hf + strlen(top[i].hf));
			return out;
		}
	unsigned layer;
	int used = 0;
	if (sscanf(hf, "model.layers.%u.%n", &layer, &used) == 1 && used > 0) {
		const char *part = hf + used, *dot = strrchr(part, '.');
		for (size_t i = 0; dot && i < sizeof gm_layer_names / sizeof gm_layer_names[0]; i++)
			if (strlen(gm_layer_names[i].hf) == (size_t)(dot - part) &&
			    !strncmp(part, gm_layer_names[i].hf, (size_t)(dot - part))) {
				snprintf(out, out_len, "blk.%u.%s%s", layer, gm_layer_names[i].gguf, dot);
				return out;
			}
	}
	snprintf(out, out_len, "%s", hf);
	return out;
}

/* Sets key in o from GGUF integer key gkey (required or not); 0, or -1 with err. */
static int gm_copy_int(json_t *o, const gguf_file *g, const char *gkey, const char *key, bool required,
                       const char *file, char *err, size_t err_len)
{
	int64_t v;
	char msg[256];
	int r = gguf_get_int(g, gkey, &v, msg, sizeof msg);
	if (r < 0) {
		aah_errf(err, err_len, "%s: %s", file, msg);
		return -1;
	}
	if (r == 0 && required) {
		aah_errf(err, err_len, "%s: key '%s' is missing", file, gkey);
		return -1;
	}
	if (r == 1) json_object_set_new(o, key, json_integer(v));
	return 0;
}

/* gguf_get_float with the message naming file: 1 read into *v, 0 absent (*v untouched), -1 not a float. */
static int gm_get_float(const gguf_file *g, const char *gkey, double *v, const char *file, char *err, size_t err_len)
{
	char msg[256];
	int r = gguf_get_float(g, gkey, v, msg, sizeof msg);
	if (r < 0)
		aah_errf(err, err_len, "%s: %s", file, msg);
	return r;
}

static int gm_copy_float(json_t *o, const gguf_file *g, const char *gkey, const char *key, const char *file,
                         char *err, size_t err_len)
{
	double v;
	int r = gm_get_float(g, gkey, &v, file, err, err_len);
	if (r == 1) json_object_set_new(o, key, json_real(v));
	return r < 0 ? -1 : 0;
}

/* llama.cpp's YaRN keys into rs, the config.json rope_scaling they stand for: original_context_length; beta_fast /
 * beta_slow (32 and 1 when absent); the attention factor, which llama.cpp's rope kernel computes as attn_factor ·
 * (0.1·ln(factor) + 1) with attn_factor 1 unless rope.scaling.yarn_attn_factor says. An extrapolation factor other
 * than 1, a log multiplier (DeepSeek's mscale) or a rope.scaling.attn_factor other than 1 is refused. */
static int gm_yarn(json_t *rs, const gguf_file *g, const char *a, double factor, const char *file, char *err,
                   size_t err_len)
{
	char k[128];
	snprintf(k, sizeof k, "%s.rope.scaling.original_context_length", a);
	if (gm_copy_int(rs, g, k, "original_max_position_embeddings", false, file, err, err_len))
		return -1;
	snprintf(k, sizeof k, "%s.rope.scaling.yarn_beta_fast", a);
	if (gm_copy_float(rs, g, k, "beta_fast", file, err, err_len))
		return -1;
	snprintf(k, sizeof k, "%s.rope.scaling.yarn_beta_slow", a);
	if (gm_copy_float(rs, g, k, "beta_slow", file, err, err_len))
		return -1;
	static const struct { const char *suffix; double only; } unsupported[] = {
		{ "yarn_ext_factor", 1.0 }, { "yarn_log_multiplier", 0.0 }, { "attn_factor", 1.0 } };
	for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
		double v = unsupported[i].only;
		snprintf(k, sizeof k, "%s.rope.scaling.%s", a, unsupported[i].suffix);
		if (gm_get_float(g, k, &v, file, err, err_len) < 0)
			return -1;
		if (v != unsupported[i].only) {
			aah_errf(err, err_len, "%s: %s %g is not supported (only %g)", file, k, v, unsupported[i].only);
			return -1;
		}
	}
	double af = 1;
	snprintf(k, sizeof k, "%s.rope.scaling.yarn_attn_factor", a);
	if (gm_get_float(g, k, &af, file, err, err_len) < 0)
		return -1;
	if (!(af > 0 && af < 1e30)) {
		aah_errf(err, err_len, "%s: %s is %g, must be a positive number", file, k, af);
		return -1;
	}
	json_object_set_new(rs, "attention_factor", json_real(af * model_config_yarn_mscale(factor)));
	return 0;
}

/* llama.cpp's rope_freqs tensor (its converter writes one for Llama 3.1's rope scaling): head_dim / 2 positive f32
 * factors, each frequency divided by its own (as llama.cpp's RoPE divides θ), into c. */
static int gm_rope_factors(model_config *c, const gguf_tensor_info *ti, const char *file, char *err, size_t err_len)
{
	const int64_t half = c->head_dim / 2;
	if (ti->type != GGML_TYPE_F32 || ti->n_dims != 1 || ti->ne[0] != half) {
		aah_errf(err, err_len, "%s: tensor 'rope_freqs.weight' must be %lld f32 values (head_dim / 2), not %u-D of "
		         "ggml type %u with %lld values", file, (long long)half, ti->n_dims, ti->type, (long long)ti->ne[0]);
		return -1;
	}
	if (half > MODEL_ROPE_MAX_FACTORS) {
		aah_errf(err, err_len, "%s: tensor 'rope_freqs.weight': head_dim %d is beyond the %d supported with "
		         "per-frequency factors", file, c->head_dim, 2 * MODEL_ROPE_MAX_FACTORS);
		return -1;
	}
	if (c->rope_scaling != MODEL_ROPE_NONE) {
		aah_errf(err, err_len, c->rope_scaling == MODEL_ROPE_FACTORS
		                           ? "%s: tensor 'rope_freqs.weight' appears twice"
		                           : "%s: tensor 'rope_freqs.weight' beside a rope.scaling.type is not supported",
		         file);
		return -1;
	}
	for (int64_t j = 0; j < half; j++) {
		float v;
		memcpy(&v, (const char *)ti->data + 4 * j, 4);
		if (!(v > 0) || !isfinite(v)) {
			aah_errf(err, err_len, "%s: tensor 'rope_freqs.weight' value %lld is %g (factors must be positive and "
			         "finite)", file, (long long)j, (double)v);
			return -1;
		}
		c->rope_freq_factors[j] = v;
	}
	c->rope_scaling = MODEL_ROPE_FACTORS;
	return 0;
}

/* The GGUF metadata as a config.json object (caller json_decref's it), for model_config_parse. */
static json_t *gm_config_json(const gguf_file *g, const char *file, char *err, size_t err_len)
{
	gguf_str arch;
	char msg[256];
	int r = gguf_get_str(g, "general.architecture", &arch, msg, sizeof msg);
	if (r <= 0) {
		aah_errf(err, err_len, "%s: %s", file, r < 0 ? msg : "key 'general.architecture' is missing");
		return NULL;
	}
	char a[16];
	if (arch.len == 5 && !memcmp(arch.s, "qwen3", 5)) snprintf(a, sizeof a, "qwen3");
	else if (arch.len == 5 && !memcmp(arch.s, "llama", 5)) snprintf(a, sizeof a, "llama");
	else {
		aah_errf(err, err_len, "%s: architecture '%.*s' is not supported (only qwen3 and llama)", file,
		         (int)(arch.len > 64 ? 64 : arch.len), arch.s);
		return NULL;
	}
	json_t *o = json_object();
	if (!o) {
		aah_errf(err, err_len, "%s: out of memory", file);
		return NULL;
	}
	json_object_set_new(o, "model_type", json_string(a));
	char k[128];
#define GM_INT(suffix, key, req)                                                                  \
	(snprintf(k, sizeof k, "%s.%s", a, suffix), gm_copy_int(o, g, k, key, req, file, err, err_len))
#define GM_FLOAT(suffix, key) (snprintf(k, sizeof k, "%s.%s", a, suffix), gm_copy_float(o, g, k, key, file, err, err_len))
	if (GM_INT("block_count", "num_hidden_layers", true) || GM_INT("embedding_length", "hidden_size", true) ||
	    GM_INT("feed_forward_length", "intermediate_size", true) ||
	    GM_INT("attention.head_count", "num_attention_heads", true) ||
	    GM_INT("attention.head_count_kv", "num_key_value_heads", false) ||
	    GM_INT("attention.key_length", "head_dim", false) ||
	    GM_INT("context_length", "max_position_embeddings", true) ||
	    GM_FLOAT("attention.layer_norm_rms_epsilon", "rms_norm_eps") || GM_FLOAT("rope.freq_base", "rope_theta") ||
	    gm_copy_int(o, g, "tokenizer.ggml.bos_token_id", "bos_token_id", false, file, err, err_len) ||
	    gm_copy_int(o, g, "tokenizer.ggml.eos_token_id", "eos_token_id", false, file, err, err_len))
		goto fail;
	/* value_length must equal key_length; rope.dimension_count must be the whole head (aahd rotates all of it) */
	int64_t kl = -1, vl = -1, rd = -1;
	snprintf(k, sizeof k, "%s.attention.key_length", a);
	if (gguf_get_int(g, k, &kl, msg, sizeof msg) < 0) goto fail_msg;
	snprintf(k, sizeof k, "%s.attention.value_length", a);
	if (gguf_get_int(g, k, &vl, msg, sizeof msg) < 0) goto fail_msg;
	snprintf(k, sizeof k, "%s.rope.dimension_count", a);
	if (gguf_get_int(g, k, &rd, msg, sizeof msg) < 0) goto fail_msg;
	if (vl >= 0 && kl >= 0 && vl != kl) {
		aah_errf(err, err_len, "%s: %s.attention.value_length %lld differs from key_length %lld (not supported)",
		         file, a, (long long)vl, (long long)kl);
		goto fail;
	}
	if (rd >= 0) {
		int64_t hd = kl;
		if (hd < 0) {
			json_t *h = json_object_get(o, "hidden_size"), *n = json_object_get(o, "num_attention_heads");
			hd = json_integer_value(n) > 0 ? json_integer_value(h) / json_integer_value(n) : -1;
		}
		if (rd != hd) {
			aah_errf(err, err_len, "%s: %s.rope.dimension_count %lld is not the head dimension %lld (partial "
			         "rotary embedding is not supported)", file, a, (long long)rd, (long long)hd);
			goto fail;
		}
	}
	gguf_str st;
	snprintf(k, sizeof k, "%s.rope.scaling.type", a);
	r = gguf_get_str(g, k, &st, msg, sizeof msg);
	if (r < 0) goto fail_msg;
	if (r == 1 && !(st.len == 4 && !memcmp(st.s, "none", 4))) {
		const bool yarn = st.len == 4 && !memcmp(st.s, "yarn", 4);
		if (!yarn && !(st.len == 6 && !memcmp(st.s, "linear", 6))) {
			aah_errf(err, err_len, "%s: %s '%.*s' is not supported (only none, linear and yarn)", file, k,
			         (int)(st.len > 32 ? 32 : st.len), st.s);
			goto fail;
		}
		double f;
		snprintf(k, sizeof k, "%s.rope.scaling.factor", a);
		r = gguf_get_float(g, k, &f, msg, sizeof msg);
		if (r < 0) goto fail_msg;
		if (r == 0) {
			aah_errf(err, err_len, "%s: %s rope scaling without '%s'", file, yarn ? "yarn" : "linear", k);
			goto fail;
		}
		json_t *rs = json_object();
		json_object_set_new(rs, "rope_type", json_string(yarn ? "yarn" : "linear"));
		json_object_set_new(rs, "factor", json_real(f));
		json_object_set_new(o, "rope_scaling", rs);
		if (yarn && gm_yarn(rs, g, a, f, file, err, err_len))
			goto fail;
	}
	/* the vocabulary is token_embd's row count (llama.cpp's tokens array may be padded or not) */
	const gguf_tensor_info *emb = gguf_find_tensor(g, "token_embd.weight");
	if (!emb || emb->n_dims != 2) {
		aah_errf(err, err_len, "%s: tensor 'token_embd.weight' is %s", file, emb ? "not 2-D" : "missing");
		goto fail;
	}
	json_object_set_new(o, "vocab_size", json_integer(emb->ne[1]));
	json_object_set_new(o, "tie_word_embeddings", json_boolean(!gguf_find_tensor(g, "output.weight")));
	return o;
#undef GM_INT
#undef GM_FLOAT
fail_msg:
	aah_errf(err, err_len, "%s: %s", file, msg);
fail:
	json_decref(o);
	return NULL;
}

/* Puts the rows of a llama attn_q / attn_k back from llama.cpp's interleaved order: within each head of d rows, HF
 * row r was written at row 2r (r < d/2) or 2(r − d/2) + 1. Rows are whole blocks, so any type moves row by row.
 * Fills t->owned (freed with the set) and points t->data at it. */
static int gm_unpermute(st_tensor *t, int64_t head_dim, const char *file, char *err, size_t err_len)
{
	int64_t rows = t->shape[0];
	if (head_dim <= 0 || head_dim % 2 || rows % head_dim) {
		aah_errf(err, err_len, "%s: tensor '%s' has %lld rows, not whole heads of %lld", file, t->name,
		         (long long)rows, (long long)head_dim);
		return -1;
	}
	size_t rb = t->nbytes / (size_t)rows;
	unsigned char *dst = malloc(t->nbytes ? t->nbytes : 1);
	if (!dst) {
		aah_errf(err, err_len, "%s: out of memory", file);
		return -1;
	}
	const unsigned char *src = t->data;
	for (int64_t r = 0; r < rows; r++) {
		int64_t h = r / head_dim, j = r % head_dim;
		int64_t from = h * head_dim + (j < head_dim / 2 ? 2 * j : 2 * (j - head_dim / 2) + 1);
		memcpy(dst + (size_t)r * rb, src + (size_t)from * rb, rb);
	}
	t->owned = dst;
	t->data = dst;
	return 0;
}

static int gm_cmp_tensor(const void *a, const void *b)
{
	return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

int gguf_model_config(model_config *c, const gguf_file *g, const char *file, char *err, size_t err_len)
{
	json_t *cfg = gm_config_json(g, file, err, err_len);
	if (!cfg)
		return -1;
	char *text = json_dumps(cfg, JSON_COMPACT);
	json_decref(cfg);
	if (!text) {
		aah_errf(err, err_len, "%s: out of memory", file);
		return -1;
	}
	char msg[512];
	int cr = model_config_parse(c, text, strlen(text), msg, sizeof msg);
	free(text);
	if (cr) {
		/* model_config_parse names config.json's keys; say they came from this file's metadata */
		aah_errf(err, err_len, "%s (metadata read as config.json): %s", file, msg);
		return -1;
	}
	return 0;
}

int gguf_model_open(model_files *m, const char *file, char *err, size_t err_len)
{
	gguf_file g;
	memset(&g, 0, sizeof g);
	int rc = -1;
	char msg[512];
	m->gguf_path = strdup(file);
	const char *slash = strrchr(file, '/');
	m->dir = slash ? strndup(file, (size_t)(slash > file ? slash - file : 1)) : strdup(".");
	m->st.files = calloc(1, sizeof *m->st.files);
	if (!m->gguf_path || !m->dir || !m->st.files) {
		aah_errf(err, err_len, "%s: out of memory", file);
		return -1;
	}
	st_file *f = &m->st.files[0];
	f->path = strdup(file);
	m->st.n_files = 1;
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	if (!f->path || fd < 0) {
		aah_errf(err, err_len, "%s: cannot open: %s", file, f->path ? strerror(errno) : "out of memory");
		if (fd >= 0) close(fd);
		return -1;
	}
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || sb.st_size < 24) {
		aah_errf(err, err_len, "%s: not a regular file of at least 24 bytes", file);
		close(fd);
		return -1;
	}
	void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	int map_errno = errno;
	close(fd);
	if (map == MAP_FAILED) {
		aah_errf(err, err_len, "%s: mmap failed: %s", file, strerror(map_errno));
		return -1;
	}
	f->map = map;
	f->size = (size_t)sb.st_size;
	if (gguf_parse(&g, map, f->size, msg, sizeof msg)) {
		aah_errf(err, err_len, "%s: %s", file, msg);
		return -1;
	}
	if (gguf_model_config(&m->config, &g, file, err, err_len))
		goto out;
	gguf_str tmpl;
	int tr = gguf_get_str(&g, "tokenizer.chat_template", &tmpl, msg, sizeof msg);
	if (tr < 0) {
		aah_errf(err, err_len, "%s: %s", file, msg);
		goto out;
	}
	if (tr == 1 && !(m->chat_template = strndup(tmpl.s, (size_t)tmpl.len))) {
		aah_errf(err, err_len, "%s: out of memory", file);
		goto out;
	}
	if (g.n_tensors > INT32_MAX) {
		aah_errf(err, err_len, "%s: %lld tensors", file, (long long)g.n_tensors);
		goto out;
	}
	m->st.tensors = calloc((size_t)(g.n_tensors ? g.n_tensors : 1), sizeof *m->st.tensors);
	if (!m->st.tensors) {
		aah_errf(err, err_len, "%s: out of memory", file);
		goto out;
	}
	for (int64_t i = 0; i < g.n_tensors; i++) {
		const gguf_tensor_info *ti = &g.tensors[i];
		char gname[256], hf[300];
		if (ti->name.len >= sizeof gname || memchr(ti->name.s, 0, (size_t)ti->name.len)) {
			aah_errf(err, err_len, "%s: tensor '%.64s…' has an unusable name", file, ti->name.s);
			goto out;
		}
		memcpy(gname, ti->name.s, (size_t)ti->name.len);
		gname[ti->name.len] = 0;
		if (!strcmp(gname, "rope_freqs.weight")) {   /* a part of the config, not a weight */
			if (gm_rope_factors(&m->config, ti, file, err, err_len))
				goto out;
			continue;
		}
		st_tensor *t = &m->st.tensors[m->st.n_tensors++];
		if (gm_hf_name(gname, hf, sizeof hf)) {
			aah_errf(err, err_len, "%s: tensor '%s' is not one of the %s architecture's", file, gname,
			         m->config.arch == MODEL_ARCH_QWEN3 ? "qwen3" : "llama");
			goto out;
		}
		t->name = strdup(hf);
		if (!t->name) {
			aah_errf(err, err_len, "%s: out of memory", file);
			goto out;
		}
		t->dtype = (st_dtype)gguf_ggml_to_aah(ti->type);
		t->n_dims = (int32_t)ti->n_dims;
		for (uint32_t d = 0; d < ti->n_dims; d++)
			t->shape[d] = ti->ne[ti->n_dims - 1 - d];   /* ggml's ne[0] is the last (fastest) dimension */
		t->data = ti->data;
		t->nbytes = (size_t)ti->nbytes;
		t->file = 0;
	}
	qsort(m->st.tensors, (size_t)m->st.n_tensors, sizeof *m->st.tensors, gm_cmp_tensor);
	for (int32_t i = 1; i < m->st.n_tensors; i++)
		if (!strcmp(m->st.tensors[i].name, m->st.tensors[i - 1].name)) {
			aah_errf(err, err_len, "%s: two tensors map onto '%s'", file, m->st.tensors[i].name);
			goto out;
		}
	if (m->config.arch == MODEL_ARCH_LLAMA) {
		for (int32_t i = 0; i < m->st.n_tensors; i++) {
			st_tensor *t = &m->st.tensors[i];
			if (t->n_dims == 2 && (ends_with(t->name, "self_attn.q_proj.weight") ||
			                       ends_with(t->name, "self_attn.k_proj.weight")) &&
			    gm_unpermute(t, m->config.head_dim, file, err, err_len))
				goto out;
		}
	}
	rc = 0;
out:
	gguf_free(&g);
	return rc;
}
