/* models/weights.c — see weights.h. */
#include "models/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/quant.h"

/* What an import reads: the files, the backend, the parameters. */
typedef struct importer {
	const model_files *mf;
	aah_backend *be;
	const model_import_params *p;
} importer;

/* The type a weight is imported in: its own, or with load-time quantization (model_import_params.mix) the type the mix
 * gives a float matrix of that role (models/weight_quant.h); tensors already in a block type (GGUF) keep theirs. */
static aah_dtype import_type(const importer *e, const st_tensor *s, weight_role role, int32_t layer)
{
	const aah_dtype own = (aah_dtype)s->dtype;
	if (!e->p->mix || s->n_dims != 2 || s->shape[0] <= 1 || aah_dtype_is_quantized(own))
		return own;
	return weight_mix_type(e->p->mix, role, layer, e->mf->config.n_layers, s->shape[1], own);
}

/* Writes s's bytes in type t (its own, or quantized from it) at dst: aah_dtype_row_bytes(t, cols) per row. */
static int import_bytes(const importer *e, void *dst, const st_tensor *s, aah_dtype t, char *err, size_t err_len)
{
	if (t == (aah_dtype)s->dtype) {
		memcpy(dst, s->data, s->nbytes);
		return 0;
	}
	const int32_t threads = e->p->n_threads > 0 ? e->p->n_threads : (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
	if (weight_quantize_rows(dst, t, s->data, (aah_dtype)s->dtype, s->shape[0], s->shape[1], threads) != 0) {
		snprintf(err, err_len, "out of memory quantizing tensor '%s' to %s", s->name, aah_dtype_name(t));
		return -1;
	}
	return 0;
}

static int import_weight(const importer *e, aah_tensor *t, const st_tensor *s, weight_role role, int32_t layer,
                         char *err, size_t err_len)
{
	int64_t rows = s->n_dims >= 2 ? s->shape[0] : 1;
	int64_t cols = s->n_dims >= 2 ? s->shape[1] : s->shape[0];
	const aah_dtype type = import_type(e, s, role, layer);
	const void *host = s->data;
	void *tmp = NULL;
	if (type != (aah_dtype)s->dtype) {   /* quantized at load: through a host copy freed once imported */
		const size_t bytes = (size_t)rows * aah_dtype_row_bytes(type, cols);
		tmp = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
		if (!tmp) {
			snprintf(err, err_len, "out of memory for tensor '%s' in %s (%zu bytes)", s->name, aah_dtype_name(type),
			         bytes);
			return -1;
		}
		if (import_bytes(e, tmp, s, type, err, err_len) != 0) {
			free(tmp);
			return -1;
		}
		host = tmp;
	}
	if (e->be->iface.weight_import(e->be, t, host, type, rows, cols) != 0) {
		free(tmp);
		snprintf(err, err_len, "%s: backend %s cannot hold tensor '%s' (%s, %lld × %lld)", e->mf->dir,
		         e->be->iface.name, s->name, aah_dtype_name(type), (long long)rows, (long long)cols);
		return -1;
	}
	free(tmp);
	if (rows > 1)   /* a matrix: the backend holds its own copy (packed, or on the device), the mapped bytes go */
		st_tensor_drop_pages(s);
	return 0;
}

/* Imports the rows of parts[0..n) (one import type and in_features, checked by the caller) concatenated as one weight,
 * through a host copy freed once imported (weight_import copies a matrix). Block types concatenate as rows of whole
 * blocks. */
static int import_fused(const importer *e, aah_tensor *t, const st_tensor *const *parts, const weight_role *roles,
                        int n, int32_t layer, char *err, size_t err_len)
{
	const aah_dtype type = import_type(e, parts[0], roles[0], layer);
	const int64_t cols = parts[0]->shape[1];
	int64_t rows = 0;
	for (int i = 0; i < n; i++)
		rows += parts[i]->shape[0];
	const size_t row_bytes = aah_dtype_row_bytes(type, cols), bytes = (size_t)rows * row_bytes;
	uint8_t *host = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (!host) {
		snprintf(err, err_len, "out of memory for a fused weight of %zu bytes ('%s' …)", bytes, parts[0]->name);
		return -1;
	}
	size_t at = 0;
	for (int i = 0; i < n; i++) {
		if (import_bytes(e, host + at, parts[i], type, err, err_len) != 0) {
			free(host);
			return -1;
		}
		at += (size_t)parts[i]->shape[0] * row_bytes;
	}
	if (e->be->iface.weight_import(e->be, t, host, type, rows, cols) != 0) {
		free(host);
		snprintf(err, err_len, "%s: backend %s cannot hold the fused weight of '%s' …", e->mf->dir, e->be->iface.name,
		         parts[0]->name);
		return -1;
	}
	free(host);
	for (int i = 0; i < n; i++)
		st_tensor_drop_pages(parts[i]);
	return 0;
}

/* Whether parts can be one weight: all matrices of one import type and one in_features, each whole rows of that type
 * (block types: whole blocks per row, so the concatenated rows are rows of blocks as well). */
static bool fusable(const importer *e, const st_tensor *const *parts, const weight_role *roles, int n, int32_t layer)
{
	const aah_dtype t0 = import_type(e, parts[0], roles[0], layer);
	for (int i = 0; i < n; i++) {
		const aah_dtype own = (aah_dtype)parts[i]->dtype;
		if (parts[i]->n_dims != 2 || parts[i]->dtype != parts[0]->dtype || parts[i]->shape[1] != parts[0]->shape[1] ||
		    import_type(e, parts[i], roles[i], layer) != t0 || !aah_dtype_row_bytes(own, parts[i]->shape[1]) ||
		    parts[i]->nbytes != (size_t)parts[i]->shape[0] * aah_dtype_row_bytes(own, parts[i]->shape[1]))
			return false;
	}
	return true;
}

int model_tensors_import(model_tensors *out, const model_files *mf, aah_backend *be, const model_import_params *p,
                         char *err, size_t err_len)
{
	const importer imp = { mf, be, p }, *e = &imp;
	model_tensors *const w_out = out;
	const model_weights *w = &mf->w;
	const int32_t L = mf->config.n_layers;
	memset(out, 0, sizeof *out);
	out->layers = calloc((size_t)L, sizeof *out->layers);
	out->n_layers = L;
	if (!out->layers) {
		snprintf(err, err_len, "out of memory");
		return -1;
	}
	const bool tied = w->lm_head == w->embed;
	int rc = import_weight(e, &w_out->embed, w->embed, tied ? WEIGHT_OUTPUT : WEIGHT_EMBED, 0, err, err_len) |
	         import_weight(e, &w_out->norm, w->norm, WEIGHT_EMBED, 0, err, err_len);
	if (tied)   /* one copy serves both (the head of Qwen3-4B alone is 778 MB) */
		w_out->lm_head = w_out->embed;
	else
		rc |= import_weight(e, &w_out->lm_head, w->lm_head, WEIGHT_OUTPUT, 0, err, err_len);
	static const weight_role qkv_roles[3] = { WEIGHT_ATTN_Q, WEIGHT_ATTN_K, WEIGHT_ATTN_V },
	                         gu_roles[2] = { WEIGHT_FFN_GATE, WEIGHT_FFN_UP };
	for (int32_t l = 0; l < L && rc == 0; l++) {
		const model_layer_weights *s = &w->layers[l];
		model_layer_tensors *t = &w_out->layers[l];
		const st_tensor *qkv[3] = { s->wq, s->wk, s->wv }, *gu[2] = { s->w_gate, s->w_up };
		rc |= import_weight(e, &t->attn_norm, s->attn_norm, WEIGHT_EMBED, l, err, err_len);
		if (p->fuse && fusable(e, qkv, qkv_roles, 3, l))
			rc |= import_fused(e, &t->wqkv, qkv, qkv_roles, 3, l, err, err_len);
		else {
			rc |= import_weight(e, &t->wq, s->wq, WEIGHT_ATTN_Q, l, err, err_len);
			rc |= import_weight(e, &t->wk, s->wk, WEIGHT_ATTN_K, l, err, err_len);
			rc |= import_weight(e, &t->wv, s->wv, WEIGHT_ATTN_V, l, err, err_len);
		}
		rc |= import_weight(e, &t->wo, s->wo, WEIGHT_ATTN_O, l, err, err_len);
		rc |= import_weight(e, &t->ffn_norm, s->ffn_norm, WEIGHT_EMBED, l, err, err_len);
		if (p->fuse && fusable(e, gu, gu_roles, 2, l))
			rc |= import_fused(e, &t->w_gate_up, gu, gu_roles, 2, l, err, err_len);
		else {
			rc |= import_weight(e, &t->w_gate, s->w_gate, WEIGHT_FFN_GATE, l, err, err_len);
			rc |= import_weight(e, &t->w_up, s->w_up, WEIGHT_FFN_UP, l, err, err_len);
		}
		rc |= import_weight(e, &t->w_down, s->w_down, WEIGHT_FFN_DOWN, l, err, err_len);
		if (mf->config.qk_norm) {
			rc |= import_weight(e, &t->q_norm, s->q_norm, WEIGHT_EMBED, l, err, err_len);
			rc |= import_weight(e, &t->k_norm, s->k_norm, WEIGHT_EMBED, l, err, err_len);
		}
	}
	return rc ? -1 : 0;
}


void model_tensors_release(model_tensors *t, aah_backend *be)
{
	if (t->lm_head.data == t->embed.data)
		t->lm_head = (aah_tensor){ 0 };   /* tied: released as the embedding */
	aah_tensor *top[] = { &t->embed, &t->norm, &t->lm_head };
	for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
		be->iface.weight_release(be, top[i]);   /* an empty tensor is skipped */
	for (int32_t l = 0; t->layers && l < t->n_layers; l++) {
		model_layer_tensors *x = &t->layers[l];
		aah_tensor *all[] = { &x->attn_norm, &x->wq, &x->wk, &x->wv, &x->wo, &x->q_norm, &x->k_norm, &x->ffn_norm,
		                      &x->w_gate, &x->w_up, &x->w_down, &x->wqkv, &x->w_gate_up };
		for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
			be->iface.weight_release(be, all[i]);
	}
	free(t->layers);
	memset(t, 0, sizeof *t);
}

bool model_tensors_fused(const model_tensors *t)
{
	for (int32_t l = 0; l < t->n_layers; l++)
		if (t->layers[l].wqkv.data || t->layers[l].w_gate_up.data)
			return true;
	return false;
}

static int64_t tensor_bytes(const aah_tensor *t)
{
	return t->data ? t->rows * (int64_t)aah_dtype_row_bytes(t->type, t->cols) : 0;
}

int64_t model_tensors_bytes_per_token(const model_tensors *t)
{
	int64_t n = tensor_bytes(&t->norm) + tensor_bytes(&t->lm_head);
	for (int32_t l = 0; l < t->n_layers; l++) {
		const model_layer_tensors *x = &t->layers[l];
		const aah_tensor *all[] = { &x->attn_norm, &x->wq, &x->wk, &x->wv, &x->wo, &x->q_norm, &x->k_norm,
		                            &x->ffn_norm, &x->w_gate, &x->w_up, &x->w_down, &x->wqkv, &x->w_gate_up };
		for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
			n += tensor_bytes(all[i]);
	}
	return n;
}
