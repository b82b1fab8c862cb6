/* tools/convert/tensor_names.c — state-dict names to Hugging Face names (see tensor_names.h): each source tensor fills one
 * slot of the model (global or per layer), then the slots become output tensors with the config's shapes. */
#include "tools/convert/tensor_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/errf.h"

/* The slots of one layer, and of the model. The last four are nanoGPT's fused or differently split matrices. */
enum {
	L_ATTN_NORM, L_Q, L_K, L_V, L_O, L_Q_NORM, L_K_NORM, L_FFN_NORM, L_GATE, L_UP, L_DOWN,
	L_C_ATTN, L_C_FC, L_C_FC1, L_C_FC2, L_N
};
enum { G_EMBED, G_NORM, G_HEAD, G_N };

static const char *const hf_layer[L_N] = {
	[L_ATTN_NORM] = "input_layernorm.weight", [L_Q] = "self_attn.q_proj.weight", [L_K] = "self_attn.k_proj.weight",
	[L_V] = "self_attn.v_proj.weight", [L_O] = "self_attn.o_proj.weight", [L_Q_NORM] = "self_attn.q_norm.weight",
	[L_K_NORM] = "self_attn.k_norm.weight", [L_FFN_NORM] = "post_attention_layernorm.weight",
	[L_GATE] = "mlp.gate_proj.weight", [L_UP] = "mlp.up_proj.weight", [L_DOWN] = "mlp.down_proj.weight",
};
static const char *const nano_layer[L_N] = {
	[L_ATTN_NORM] = "ln_1.weight", [L_O] = "attn.c_proj.weight", [L_Q_NORM] = "attn.q_norm.weight",
	[L_K_NORM] = "attn.k_norm.weight", [L_FFN_NORM] = "ln_2.weight", [L_DOWN] = "mlp.c_proj.weight",
	[L_C_ATTN] = "attn.c_attn.weight", [L_C_FC] = "mlp.c_fc.weight", [L_C_FC1] = "mlp.c_fc1.weight",
	[L_C_FC2] = "mlp.c_fc2.weight",
};
static const char *const hf_global[G_N] = { "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight" };
static const char *const nano_global[G_N] = { "transformer.wte.weight", "transformer.ln_f.weight", "lm_head.weight" };

#define MAX_UNKNOWN 8

typedef struct tn_build {
	const char *const *names;
	const tc_tensor *t;
	int32_t n;
	size_t strip;                /* bytes of common prefix dropped from every name */
	const model_config *c;
	bool rope_interleaved;       /* permute q/k rows and q/k norms from interleaved to rotate-half RoPE order */
	int32_t global[G_N];
	int32_t (*layer)[L_N];
	int style;                   /* 0 unknown, 1 hugging face, 2 nanogpt */
	int32_t n_unknown, n_dropped;
	const char *unknown[MAX_UNKNOWN];
	char *err;
	size_t err_len;
} tn_build;

static const char *src_name(const tn_build *b, int32_t i)
{
	return b->names[i];
}

/* A common "module." / "_orig_mod." prefix, as often as every name has one. */
static size_t common_prefix(const char *const *names, int32_t n)
{
	static const char *const prefixes[] = { "module.", "_orig_mod." };
	size_t at = 0;
	for (bool again = n > 0; again;) {
		again = false;
		for (size_t k = 0; k < 2; k++) {
			size_t len = strlen(prefixes[k]);
			bool all = true;
			for (int32_t i = 0; i < n && all; i++)
				all = !strncmp(names[i] + at, prefixes[k], len);
			if (all) {
				at += len;
				again = true;
			}
		}
	}
	return at;
}

/* "N." at s: a layer index without leading zeros; *rest after the dot. -1 when s does not start so. */
static int64_t layer_index(const char *s, const char **rest)
{
	if (s[0] < '0' || s[0] > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
		return -1;
	int64_t v = 0;
	size_t i = 0;
	for (; s[i] >= '0' && s[i] <= '9'; i++) {
		v = v * 10 + (s[i] - '0');
		if (v > (1 << 24))
			return -1;
	}
	if (s[i] != '.')
		return -1;
	*rest = s + i + 1;
	return v;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

static void note_unknown(tn_build *b, int32_t i)
{
	if (b->n_unknown < MAX_UNKNOWN)
		b->unknown[b->n_unknown] = src_name(b, i);
	b->n_unknown++;
}

static int set_slot(tn_build *b, int32_t *slot, int32_t i)
{
	if (*slot >= 0) {
		aah_errf(b->err, b->err_len, "tensors '%s' and '%s' both map to the same weight", src_name(b, *slot),
		         src_name(b, i));
		return -1;
	}
	*slot = i;
	return 0;
}

static int set_style(tn_build *b, int style, int32_t i)
{
	if (b->style && b->style != style) {
		aah_errf(b->err, b->err_len, "the state dict mixes Hugging Face names (model.…) and nanoGPT names "
		         "(transformer.…), e.g. '%s': refused", src_name(b, i));
		return -1;
	}
	b->style = style;
	return 0;
}

/* Puts source i in its slot, or counts it unknown. */
static int classify(tn_build *b, int32_t i)
{
	const char *s = b->names[i] + b->strip, *rest;
	if (ends_with(s, ".bias") && !(strncmp(s, "transformer.h.", 14) == 0 && ends_with(s, ".attn.bias"))) {
		aah_errf(b->err, b->err_len, "tensor '%s' is a bias: aahd's architectures (Qwen3, Llama) have none", s);
		return -1;
	}
	if (!strcmp(s, "transformer.wpe.weight")) {
		aah_errf(b->err, b->err_len, "tensor 'transformer.wpe.weight' is a learned position embedding: a GPT-2 model, "
		         "which aahd's model family (rotary positions) cannot run");
		return -1;
	}
	for (int k = 0; k < G_N; k++) {
		if (!strcmp(s, hf_global[k]) || !strcmp(s, nano_global[k])) {
			if (k != G_HEAD && set_style(b, !strcmp(s, hf_global[k]) ? 1 : 2, i))
				return -1;
			return set_slot(b, &b->global[k], i);
		}
	}
	int style = 0;
	const char *const *table = NULL;
	if (!strncmp(s, "model.layers.", 13)) {
		style = 1;
		table = hf_layer;
		s += 13;
	} else if (!strncmp(s, "transformer.h.", 14)) {
		style = 2;
		table = nano_layer;
		s += 14;
	}
	int64_t l = table ? layer_index(s, &rest) : -1;
	if (l < 0) {
		note_unknown(b, i);
		return 0;
	}
	if (set_style(b, style, i))
		return -1;
	if (l >= b->c->n_layers) {
		aah_errf(b->err, b->err_len, "tensor '%s' belongs to layer %lld, beyond the config's num_hidden_layers %d",
		         b->names[i] + b->strip, (long long)l, (int)b->c->n_layers);
		return -1;
	}
	for (int k = 0; k < L_N; k++)
		if (table[k] && !strcmp(rest, table[k]))
			return set_slot(b, &b->layer[l][k], i);
	/* derived buffers that carry no weights */
	if ((style == 1 && !strcmp(rest, "self_attn.rotary_emb.inv_freq")) ||
	    (style == 2 && (!strcmp(rest, "attn.rotary_emb.inv_freq") ||
	                    (!strcmp(rest, "attn.bias") && b->t[i].n_dims == 4)))) {
		b->n_dropped++;
		return 0;
	}
	if (style == 2 && ends_with(rest, ".bias")) {
		aah_errf(b->err, b->err_len, "tensor '%s' is a bias: aahd's architectures (Qwen3, Llama) have none",
		         b->names[i] + b->strip);
		return -1;
	}
	note_unknown(b, i);
	return 0;
}

static void shape_str(char *buf, size_t len, int32_t n, const int64_t *shape)
{
	size_t at = (size_t)snprintf(buf, len, "[");
	for (int32_t i = 0; i < n && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, i ? ", %lld" : "%lld", (long long)shape[i]);
	if (at < len)
		snprintf(buf + at, len - at, "]");
}

/* Source i must be n_dims-D of shape (d0[, d1]) and of a weight dtype. */
static int check_src(tn_build *b, int32_t i, int32_t n_dims, int64_t d0, int64_t d1, bool allow_f64)
{
	const tc_tensor *t = &b->t[i];
	if (!tc_dtype_is_float(t->dtype) || (t->dtype == PKL_DT_F64 && !allow_f64)) {
		aah_errf(b->err, b->err_len, "tensor '%s' is %s: weights must be float32, float16 or bfloat16%s",
		         src_name(b, i), pkl_dtype_name(t->dtype),
		         t->dtype == PKL_DT_F64 ? " (pass --dtype to convert float64)" : "");
		return -1;
	}
	int64_t want[2] = { d0, d1 };
	bool ok = t->n_dims == n_dims;
	for (int32_t k = 0; ok && k < n_dims; k++)
		ok = t->shape[k] == want[k];
	if (!ok) {
		char got_s[128], want_s[64];
		shape_str(got_s, sizeof got_s, t->n_dims, t->shape);
		shape_str(want_s, sizeof want_s, n_dims, want);
		aah_errf(b->err, b->err_len, "tensor '%s' has shape %s; the config wants %s", src_name(b, i), got_s, want_s);
		return -1;
	}
	return 0;
}

static int add_out(tn_plan *p, int32_t cap, const char *name, int32_t src, int64_t row0, int64_t rows,
                   int32_t n_dims, int64_t d1)
{
	if (p->n_out >= cap)
		return -1;
	tn_output *o = &p->out[p->n_out++];
	snprintf(o->name, sizeof o->name, "%s", name);
	o->src = src;
	o->row0 = row0;
	o->rows = rows;
	o->n_dims = n_dims;
	o->shape[0] = rows;
	o->shape[1] = n_dims > 1 ? d1 : 0;
	o->perm_block = 0;
	return 0;
}

/* Whether tensors a and b hold the same values (same dtype and shape, equal element for element). */
static bool same_values(const tc_tensor *a, const tc_tensor *b)
{
	if (a->dtype != b->dtype || a->n_dims != b->n_dims || a->numel != b->numel)
		return false;
	for (int32_t k = 0; k < a->n_dims; k++)
		if (a->shape[k] != b->shape[k])
			return false;
	enum { CHUNK = 1 << 14 };
	static __thread float x[CHUNK], y[CHUNK];
	st_dtype as = tc_dtype_to_st(a->dtype);
	size_t es = as == ST_F32 ? 4 : 2;
	for (int64_t at = 0; at < a->numel; at += CHUNK) {
		int64_t n = a->numel - at < CHUNK ? a->numel - at : CHUNK;
		tc_tensor_read(a, as, x, at, n);
		tc_tensor_read(b, as, y, at, n);
		if (memcmp(x, y, (size_t)n * es))
			return false;
	}
	return true;
}

static int cmp_out(const void *a, const void *b)
{
	return strcmp(((const tn_output *)a)->name, ((const tn_output *)b)->name);
}

/* Layer l's outputs: every slot the config needs, each source checked against the config's shape. */
static int plan_layer(tn_build *b, tn_plan *p, int32_t cap, int32_t l, bool allow_f64)
{
	const model_config *c = b->c;
	int32_t *s = b->layer[l];
	int64_t h = c->hidden_size, q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
	int64_t ff = c->intermediate_size, hd = c->head_dim;
	char name[128];
	const char *pre = b->style == 2 ? "transformer.h" : "model.layers";
	/* nanoGPT: c_attn → q, k, v rows; c_fc/c_fc1/c_fc2 → gate, up */
	if (b->style == 2) {
		if (s[L_C_ATTN] >= 0) {
			if (check_src(b, s[L_C_ATTN], 2, q + 2 * kv, h, allow_f64))
				return -1;
			s[L_Q] = s[L_K] = s[L_V] = s[L_C_ATTN];
		}
		bool fc = s[L_C_FC] >= 0, fc1 = s[L_C_FC1] >= 0, fc2 = s[L_C_FC2] >= 0;
		if (fc && fc1) {
			aah_errf(b->err, b->err_len, "layer %d has both mlp.c_fc and mlp.c_fc1: which is the gate is ambiguous",
			         (int)l);
			return -1;
		}
		if ((fc || fc1) && !fc2) {
			aah_errf(b->err, b->err_len, "layer %d has %s.%d.mlp.%s without mlp.c_fc2: an ungated (GELU) MLP, as in "
			         "GPT-2, which aahd's SwiGLU model family cannot run", (int)l, pre, (int)l,
			         fc ? "c_fc.weight" : "c_fc1.weight");
			return -1;
		}
		if (fc) {            /* llm.c's Llama 3: silu(c_fc2(x)) * c_fc(x) */
			s[L_UP] = s[L_C_FC];
			s[L_GATE] = s[L_C_FC2];
		} else if (fc1) {    /* lit-llama style: silu(c_fc1(x)) * c_fc2(x) */
			s[L_GATE] = s[L_C_FC1];
			s[L_UP] = s[L_C_FC2];
		}
	}
	static const char *const nano_need[L_N] = {
		[L_Q] = "attn.c_attn.weight", [L_K] = "attn.c_attn.weight", [L_V] = "attn.c_attn.weight",
		[L_GATE] = "mlp.c_fc2.weight", [L_UP] = "mlp.c_fc.weight (or mlp.c_fc1.weight)",
	};
	for (int k = 0; k <= L_DOWN; k++) {
		bool norm_qk = k == L_Q_NORM || k == L_K_NORM;
		if (norm_qk && !c->qk_norm) {
			if (s[k] >= 0) {
				aah_errf(b->err, b->err_len, "tensor '%s' is a q/k norm, which the config's architecture (Llama "
				         "family) does not have", src_name(b, s[k]));
				return -1;
			}
			continue;
		}
		if (s[k] < 0) {
			const char *what = b->style == 2 ? (nano_layer[k] ? nano_layer[k] : nano_need[k]) : hf_layer[k];
			aah_errf(b->err, b->err_len, "tensor '%s.%d.%s' is missing (the config has %d layers)", pre, (int)l, what,
			         (int)c->n_layers);
			return -1;
		}
	}
	struct { int k; int32_t n_dims; int64_t d0, d1, row0; } rows[] = {
		{ L_ATTN_NORM, 1, h, 0, 0 }, { L_Q, 2, q, h, 0 }, { L_K, 2, kv, h, q }, { L_V, 2, kv, h, q + kv },
		{ L_O, 2, h, q, 0 }, { L_FFN_NORM, 1, h, 0, 0 }, { L_GATE, 2, ff, h, 0 }, { L_UP, 2, ff, h, 0 },
		{ L_DOWN, 2, h, ff, 0 }, { L_Q_NORM, 1, hd, 0, 0 }, { L_K_NORM, 1, hd, 0, 0 },
	};
	size_t n_rows = sizeof rows / sizeof rows[0] - (c->qk_norm ? 0 : 2);
	for (size_t r = 0; r < n_rows; r++) {
		int k = rows[r].k;
		bool split = b->style == 2 && (k == L_Q || k == L_K || k == L_V);
		if (!split && check_src(b, s[k], rows[r].n_dims, rows[r].d0, rows[r].d1, allow_f64))
			return -1;
		snprintf(name, sizeof name, "model.layers.%d.%s", (int)l, hf_layer[k]);
		if (add_out(p, cap, name, s[k], split ? rows[r].row0 : 0, rows[r].d0, rows[r].n_dims, rows[r].d1))
			return -1;
		/* q and k meet RoPE (their norms act on the same head dimensions first); v, o and the rest do not */
		if (b->rope_interleaved && (k == L_Q || k == L_K || k == L_Q_NORM || k == L_K_NORM))
			p->out[p->n_out - 1].perm_block = c->head_dim;
	}
	return 0;
}

static int plan_head(tn_build *b, tn_plan *p, int32_t cap, bool allow_f64)
{
	const model_config *c = b->c;
	int32_t e = b->global[G_EMBED], hd = b->global[G_HEAD];
	if (hd < 0) {
		if (!c->tie_word_embeddings) {
			aah_errf(b->err, b->err_len, "lm_head.weight is missing and the config does not tie the embeddings "
			         "(tie_word_embeddings false)");
			return -1;
		}
		p->tied = true;
		return 0;
	}
	if (check_src(b, hd, 2, c->vocab_size, c->hidden_size, allow_f64))
		return -1;
	const tc_tensor *x = &b->t[e], *y = &b->t[hd];
	bool same_view = x->storage_id == y->storage_id && x->storage == y->storage && x->offset == y->offset &&
	                 x->dtype == y->dtype && !memcmp(x->stride, y->stride, sizeof x->stride) &&
	                 !memcmp(x->shape, y->shape, sizeof x->shape);
	if (same_view || (c->tie_word_embeddings && same_values(x, y))) {
		p->tied = true;
		return 0;
	}
	if (c->tie_word_embeddings) {
		aah_errf(b->err, b->err_len, "the config ties the embeddings (tie_word_embeddings true) but '%s' differs from "
		         "'%s'", src_name(b, hd), src_name(b, e));
		return -1;
	}
	return add_out(p, cap, "lm_head.weight", hd, 0, c->vocab_size, 2, c->hidden_size);
}

int tn_plan_build(tn_plan *p, const char *const *names, const tc_tensor *tensors, int32_t n, const model_config *c,
                  bool allow_f64, bool rope_interleaved, char *err, size_t err_len)
{
	memset(p, 0, sizeof *p);
	/* model_config_parse refuses an odd head_dim already; a config made elsewhere is checked here */
	if (rope_interleaved && c->head_dim % 2) {
		aah_errf(err, err_len, "--rope interleaved: head_dim %d is odd, and interleaved RoPE rotates pairs "
		         "(2i, 2i+1) of an even head_dim", (int)c->head_dim);
		return -1;
	}
	tn_build b = { .names = names, .t = tensors, .n = n, .c = c, .rope_interleaved = rope_interleaved, .err = err,
		       .err_len = err_len };
	b.strip = common_prefix(names, n);
	for (int k = 0; k < G_N; k++)
		b.global[k] = -1;
	b.layer = malloc(sizeof(*b.layer) * (size_t)c->n_layers);
	int32_t cap = 3 + 11 * c->n_layers;
	p->out = calloc((size_t)cap, sizeof *p->out);
	if (!b.layer || !p->out) {
		aah_errf(err, err_len, "out of memory");
		goto fail;
	}
	for (int32_t l = 0; l < c->n_layers; l++)
		for (int k = 0; k < L_N; k++)
			b.layer[l][k] = -1;
	for (int32_t i = 0; i < n; i++)
		if (classify(&b, i))
			goto fail;
	if (b.n_unknown) {
		char list[1024];
		size_t at = 0;
		list[0] = 0;
		for (int32_t i = 0; i < b.n_unknown && i < MAX_UNKNOWN && at < sizeof list; i++)
			at += (size_t)snprintf(list + at, sizeof list - at, "%s'%s'", i ? ", " : "", b.unknown[i]);
		aah_errf(err, err_len, "%d tensor name%s that map%s to nothing in aahd's model family (Hugging Face Qwen3/Llama "
		         "names or nanoGPT names): %s%s", (int)b.n_unknown, b.n_unknown == 1 ? "" : "s",
		         b.n_unknown == 1 ? "s" : "", list, b.n_unknown > MAX_UNKNOWN ? ", …" : "");
		goto fail;
	}
	p->style = b.style == 2 ? "nanogpt" : "hugging face";
	p->n_dropped = b.n_dropped;
	const char *const *g = b.style == 2 ? nano_global : hf_global;
	for (int k = 0; k < G_HEAD; k++)
		if (b.global[k] < 0) {
			aah_errf(err, err_len, "tensor '%s' is missing", g[k]);
			goto fail;
		}
	if (check_src(&b, b.global[G_EMBED], 2, c->vocab_size, c->hidden_size, allow_f64) ||
	    check_src(&b, b.global[G_NORM], 1, c->hidden_size, 0, allow_f64))
		goto fail;
	add_out(p, cap, "model.embed_tokens.weight", b.global[G_EMBED], 0, c->vocab_size, 2, c->hidden_size);
	add_out(p, cap, "model.norm.weight", b.global[G_NORM], 0, c->hidden_size, 1, 0);
	for (int32_t l = 0; l < c->n_layers; l++)
		if (plan_layer(&b, p, cap, l, allow_f64))
			goto fail;
	if (plan_head(&b, p, cap, allow_f64))
		goto fail;
	qsort(p->out, (size_t)p->n_out, sizeof *p->out, cmp_out);
	free(b.layer);
	return 0;
fail:
	free(b.layer);
	tn_plan_free(p);
	return -1;
}

int64_t tn_output_src_row(const tn_output *o, int64_t r)
{
	if (o->perm_block <= 0)
		return r;
	int64_t d = o->perm_block, half = d / 2, head = r / d, j = r % d;
	return head * d + (j < half ? 2 * j : 2 * (j - half) + 1);
}

void tn_plan_free(tn_plan *p)
{
	if (!p)
		return;
	free(p->out);
	memset(p, 0, sizeof *p);
}
