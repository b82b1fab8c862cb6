/* models/model.c — loads a Hugging Face model directory: config.json, then the safetensors, then binds every
 * weight the architecture needs by its Hugging Face name, checking presence, dtype and exact shape. */
#include "model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/errf.h"
#include "models/gguf_model.h"

static void model_shape_str(char *buf, size_t len, int32_t n, const int64_t *shape)
{
	size_t at = (size_t)snprintf(buf, len, "[");
	for (int32_t i = 0; i < n && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, i ? ", %lld" : "%lld", (long long)shape[i]);
	if (at < len) snprintf(buf + at, len - at, "]");
}

/* Finds name and checks it is n_dims-D with shape (d0[, d1]). *out stays valid until st_close. */
static int model_bind(const model_files *m, const char *name, int32_t n_dims, int64_t d0, int64_t d1,
                      const st_tensor **out, char *err, size_t err_len)
{
	const st_tensor *t = st_find(&m->st, name);
	char gname[192];
	if (m->gguf_path)   /* a GGUF file's messages use its own names */
		name = gguf_model_tensor_name(name, gname, sizeof gname);
	if (!t) {
		aah_errf(err, err_len, "%s: tensor '%s' is missing", m->gguf_path ? m->gguf_path : m->dir, name);
		return -1;
	}
	const char *file = m->st.files[t->file].path;
	/* Q8_K is an activation format that no file holds; 1-D weights (norms) must be float */
	if (t->dtype > ST_Q6_K || (n_dims == 1 && t->dtype > ST_BF16)) {
		aah_errf(err, err_len, "%s: tensor '%s' has an unsupported dtype", file, name);
		return -1;
	}
	int64_t want[2] = { d0, d1 };
	bool ok = t->n_dims == n_dims;
	for (int32_t i = 0; ok && i < n_dims; i++) ok = t->shape[i] == want[i];
	if (!ok) {
		char got_s[128], want_s[64];
		model_shape_str(got_s, sizeof got_s, t->n_dims, t->shape);
		model_shape_str(want_s, sizeof want_s, n_dims, want);
		aah_errf(err, err_len, "%s: tensor '%s' has shape %s, expected %s", file, name, got_s, want_s);
		return -1;
	}
	*out = t;
	return 0;
}

/* Binds layer i's tensors "model.layers.{i}.<suffix>". */
static int model_bind_layer(model_files *m, int32_t i, char *err, size_t err_len)
{
	const model_config *c = &m->config;
	model_layer_weights *l = &m->w.layers[i];
	int64_t h = c->hidden_size, q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
	int64_t ff = c->intermediate_size;
	struct {
		const char *suffix;
		int32_t n_dims;
		int64_t d0, d1;
		const st_tensor **out;
	} rows[] = {
		{ "input_layernorm.weight", 1, h, 0, &l->attn_norm },
		{ "self_attn.q_proj.weight", 2, q, h, &l->wq },
		{ "self_attn.k_proj.weight", 2, kv, h, &l->wk },
		{ "self_attn.v_proj.weight", 2, kv, h, &l->wv },
		{ "self_attn.o_proj.weight", 2, h, q, &l->wo },
		{ "post_attention_layernorm.weight", 1, h, 0, &l->ffn_norm },
		{ "mlp.gate_proj.weight", 2, ff, h, &l->w_gate },
		{ "mlp.up_proj.weight", 2, ff, h, &l->w_up },
		{ "mlp.down_proj.weight", 2, h, ff, &l->w_down },
		{ "self_attn.q_norm.weight", 1, c->head_dim, 0, &l->q_norm },   /* the last two: Qwen3 only */
		{ "self_attn.k_norm.weight", 1, c->head_dim, 0, &l->k_norm },
	};
	size_t n_rows = sizeof rows / sizeof rows[0] - (c->qk_norm ? 0 : 2);
	char name[160];
	for (size_t r = 0; r < n_rows; r++) {
		snprintf(name, sizeof name, "model.layers.%d.%s", (int)i, rows[r].suffix);
		if (model_bind(m, name, rows[r].n_dims, rows[r].d0, rows[r].d1, rows[r].out, err, err_len)) return -1;
	}
	return 0;
}

/* Refuses weights that the config says should not be there, since ignoring them would silently change the
 * model: biases (the architectures here have none) and layers beyond num_hidden_layers. */
static int model_check_extra(const model_files *m, char *err, size_t err_len)
{
	char name[96];
	snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", (int)m->config.n_layers);
	const st_tensor *t = st_find(&m->st, name);
	if (t) {
		aah_errf(err, err_len, "%s: tensor '%s' is beyond num_hidden_layers %d", m->st.files[t->file].path, name,
		         (int)m->config.n_layers);
		return -1;
	}
	for (int32_t i = 0; i < m->st.n_tensors; i++) {
		const char *n = m->st.tensors[i].name;
		size_t len = strlen(n);
		if (len >= 5 && !strcmp(n + len - 5, ".bias")) {
			aah_errf(err, err_len, "%s: tensor '%s' is a bias, which this architecture does not have",
			         m->st.files[m->st.tensors[i].file].path, n);
			return -1;
		}
	}
	return 0;
}

int model_files_load(model_files *m, const char *dir, char *err, size_t err_len)
{
	memset(m, 0, sizeof *m);
	m->dir = strdup(dir);
	if (!m->dir) {
		aah_errf(err, err_len, "%s: out of memory", dir);
		return -1;
	}
	char gguf[4096];
	int g = gguf_model_path(dir, gguf, sizeof gguf, err, err_len);
	if (g < 0) goto fail;
	if (g == 1) {
		free(m->dir);
		m->dir = NULL;
		if (gguf_model_open(m, gguf, err, err_len)) goto fail;
	} else if (model_config_load(&m->config, dir, err, err_len) || st_open_dir(&m->st, dir, err, err_len)) {
		goto fail;
	}
	const model_config *c = &m->config;
	m->w.layers = calloc((size_t)c->n_layers, sizeof *m->w.layers);
	if (!m->w.layers) {
		aah_errf(err, err_len, "%s: out of memory", dir);
		goto fail;
	}
	if (model_bind(m, "model.embed_tokens.weight", 2, c->vocab_size, c->hidden_size, &m->w.embed, err, err_len) ||
	    model_bind(m, "model.norm.weight", 1, c->hidden_size, 0, &m->w.norm, err, err_len))
		goto fail;
	for (int32_t i = 0; i < c->n_layers; i++)
		if (model_bind_layer(m, i, err, err_len)) goto fail;
	/* Tied: lm_head is the embedding, unless the file carries lm_head.weight anyway (then that is used). */
	if (c->tie_word_embeddings && !st_find(&m->st, "lm_head.weight"))
		m->w.lm_head = m->w.embed;
	else if (model_bind(m, "lm_head.weight", 2, c->vocab_size, c->hidden_size, &m->w.lm_head, err, err_len))
		goto fail;
	if (model_check_extra(m, err, err_len)) goto fail;
	return 0;
fail:
	model_files_free(m);
	return -1;
}

void model_files_free(model_files *m)
{
	if (!m) return;
	free(m->w.layers);
	st_close(&m->st);
	free(m->dir);
	free(m->gguf_path);
	free(m->chat_template);
	memset(m, 0, sizeof *m);
}
