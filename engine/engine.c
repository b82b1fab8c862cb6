/* engine/engine.c — the Qwen3 / Llama forward pass, written against kernels/backend.h so that any backend runs it.
 * Per layer: x += Wo·attn(rope(norm_q(Wq·n(x))), rope(norm_k(Wk·n(x))), Wv·n(x));  x += Wd·(silu(Wg·n(x)) ⊙ Wu·n(x)). */
#include "engine/engine.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/aah_policy.h"
#include "engine/kv_cache.h"
#include "engine/prefix_cache.h"
#include "kernels/argmax.h"
#include "kernels/quant.h"
#include "models/aah_config.h"
#include "models/model.h"
#include "models/weights.h"

/* The pages a prompt item's windowed rings drop before the item ends (a ring shorter than the item), written to pages
 * of the prefix cache's own instead of being lost: engine_prefix_insert hands them to their blocks, and whatever it
 * does not take returns to the pool (docs/prefix_cache.md). */
typedef struct seq_spill {
	int32_t lp0, n_lp;             /* logical pages [lp0, lp0 + n_lp) */
	int32_t *pages;                /* (n_lp, n_layers · n_kv) a page of the spill's own, or -1 */
	int64_t cap;                   /* entries allocated */
	uint64_t tick;                 /* the prefix cache's tick when its prompt last restored or inserted: what it may
	                                * evict for a spill was used before that */
} seq_spill;

/* What engine_seq_truncate may take back of a sequence: the positions from `floor` on, all written by decode steps and
 * generated items. A prompt chunk, a probe (it moved the windows) and a measured item (the caller's sums took it) move
 * the floor to their end, as does a restored prefix. Between the floor and the length no probe ran, so every position
 * there attended with the windows head_window holds now, and counted one decode step: what a truncation subtracts. */
typedef struct seq_rollback {
	bool allowed;                  /* engine_seq_allow_rollback */
	int32_t floor;
	int32_t n_usage_floor;         /* the policy's usage entries at the floor (aah_seq_uncount drops newer ones at 0) */
} seq_rollback;

/* A sequence's attention measurement (engine_seq_measure). */
typedef struct seq_measure {
	engine_measure *m;             /* the caller's, or NULL: not measured */
	int32_t edges[ENGINE_MEASURE_MAX_BANDS];
	float *band;                   /* (n_layers, n_heads, n_bands) one chunk's band mass, as the backend adds it */
} seq_measure;

struct engine {
	model_files mf;
	model_config cfg;
	engine_params p;
	weight_mix mix;                /* engine_params.quantize parsed, when has_mix */
	bool has_mix;
	aah_backend *be;
	char desc[128];

	model_tensors w;               /* the weights, imported into the backend (models/weights.h) */
	float *inv_freq;               /* head_dim / 2, host */

	/* per-sequence state */
	kv_cache kv;
	int32_t *seq_len;              /* max_seqs */
	bool *seq_used;                /* max_seqs */
	engine_seq_stats *seq_stats;   /* max_seqs */
	aah_config aah;                /* aah.json, when the model has one */
	bool has_aah;
	aah_regimes regimes;           /* full_attention + aah.json's */
	aah_seq_state *policy;         /* max_seqs: each sequence's window selection and usage */
	float *probe_mass;             /* (max_seqs, n_layers, n_heads, n_windows) probe output */
	float *probe_kv;               /* (n_layers, n_kv, n_windows) the same summed per KV head */
	bool *span_probe;              /* rows: the span is a probe step */
	seq_measure *measure;          /* max_seqs */
	seq_rollback *rb;              /* max_seqs */
	int32_t *seq_written;          /* max_seqs: positions [0, seq_written) have been written; above seq_len after a
	                                * truncation, and its rings still hold the pages of those positions */
	bool *span_decode;             /* rows: the span's tokens are decode steps (a one-token step, a generated item) */
	bool *item_floor;              /* (max_seqs) per item of a step: it moves its sequence's rollback floor */

	/* per-step scratch in backend memory: rows = max_batch_tokens */
	float *x;                      /* (rows, hidden) residual stream */
	float *xn;                     /* (rows, hidden) normalised / projected */
	float *q, *att;                /* (rows, n_heads · head_dim) */
	float *k, *v;                  /* (rows, n_kv · head_dim) */
	float *gate, *up;              /* (rows, intermediate) */
	float *xs;                     /* (logit_rows, hidden) rows that need logits */
	float *logits;                 /* (logit_rows, vocab); after engine_forward without host logits, its rows */
	int32_t logit_rows;
	int32_t kept_rows;             /* rows of logits the last engine_forward kept (engine_logits_top); 0: none */

	/* per-step scratch on the host */
	int32_t *ids, *pos;            /* rows */
	int32_t *lrow;                 /* rows: chunk rows that need logits */
	int64_t *ldst;                 /* rows: their row in the caller's logits */
	aah_attn_seq *aseqs;           /* rows (a chunk has at most one span per token) */
	int32_t *span_seq;             /* rows: the sequence of each span */
	uint64_t *span_work;           /* rows: attention products of each span in this chunk */

	uint64_t attn_work;
	/* the prefix cache (engine_params.prefix_cache) */
	bool prefix_on;
	prefix_cache prefix;
	prefix_block **prefix_chain;   /* (ctx_len / AAH_PAGE_LEN + 1) a lookup's blocks */
	int32_t *prefix_run;           /* (ctx_len / AAH_PAGE_LEN + 1) prefix_usable's scratch */
	seq_spill *spill;              /* max_seqs */
	int32_t *spill_rings;          /* forward_chunk's scratch: a spilling span's pages of one layer, as a ring */
	int64_t spill_rings_cap;
	aah_attn_seq *spill_seqs;      /* rows: the spilling spans, as kv_store reads them */
	int32_t *spill_span;           /* rows: their index among the chunk's spans */
	uint64_t prefix_queries, prefix_hits, prefix_hit_tokens;
	bool fuse;                     /* fused QKV and gate/up projections where a layer's layout allows */
	float *fused;                  /* (rows, max(qd + 2·kvd, 2·intermediate)) a fused projection's output; NULL unless
	                                * fuse */
};

static int alloc_scratch(engine *e, char *err, size_t err_len)
{
	const model_config *c = &e->cfg;
	const size_t rows = (size_t)e->p.max_batch_tokens;
	const size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
	int64_t lr = (64 << 20) / ((int64_t)c->vocab_size * 4);   /* ≈ 64 MiB of logits per pass */
	e->logit_rows = lr < 1 ? 1 : lr > (int64_t)rows ? (int32_t)rows : (int32_t)lr;
	struct { float **p; size_t n; } bufs[] = {
		{ &e->x, rows * c->hidden_size }, { &e->xn, rows * c->hidden_size }, { &e->q, rows * qd },
		{ &e->att, rows * qd }, { &e->k, rows * kvd }, { &e->v, rows * kvd },
		{ &e->gate, rows * c->intermediate_size }, { &e->up, rows * c->intermediate_size },
		{ &e->xs, (size_t)e->logit_rows * c->hidden_size }, { &e->logits, (size_t)e->logit_rows * c->vocab_size },
	};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
		*bufs[i].p = e->be->iface.buf_alloc(e->be, bufs[i].n * sizeof(float));
		if (!*bufs[i].p) {
			snprintf(err, err_len, "out of backend memory for %zu scratch floats", bufs[i].n);
			return -1;
		}
	}
	if (e->fuse) {
		size_t w = qd + 2 * kvd > 2 * (size_t)c->intermediate_size ? qd + 2 * kvd : 2 * (size_t)c->intermediate_size;
		e->fused = e->be->iface.buf_alloc(e->be, rows * w * sizeof(float));
		if (!e->fused) {
			snprintf(err, err_len, "out of backend memory for %zu scratch floats", rows * w);
			return -1;
		}
	}
	e->ids = malloc(rows * sizeof *e->ids);
	e->pos = malloc(rows * sizeof *e->pos);
	e->lrow = malloc(rows * sizeof *e->lrow);
	e->ldst = malloc(rows * sizeof *e->ldst);
	e->aseqs = malloc(rows * sizeof *e->aseqs);
	e->span_seq = malloc(rows * sizeof *e->span_seq);
	e->span_work = malloc(rows * sizeof *e->span_work);
	if (!e->ids || !e->pos || !e->lrow || !e->ldst || !e->aseqs || !e->span_seq || !e->span_work) {
		snprintf(err, err_len, "out of memory");
		return -1;
	}
	return 0;
}

/* The backend p.backend names: "cuda" or fail; "cpu"; "auto" (or NULL) CUDA when the runtime sees a device, else the
 * CPU. e->desc says which, e.g. "cuda (NVIDIA H200, 132 SMs, bf16 tensor-core matmul)" or
 * "cpu (avx512; AMX-INT8 tiles for every packed type, bf16 exact)". */
static int backend_open(engine *e, char *err, size_t err_len)
{
	/* NULL is the CPU: a library caller (a test, a tool) gets the exact reference unless it asks; the daemon passes
	 * its `backend` setting, "auto" by default. */
	const char *want = e->p.backend && *e->p.backend ? e->p.backend : "cpu";
	aah_backend_params bp = { .n_threads = e->p.n_threads };
	if (strcmp(want, "cpu") != 0 && strcmp(want, "cuda") != 0 && strcmp(want, "auto") != 0) {
		snprintf(err, err_len, "unknown backend '%s' (cpu, cuda, auto)", want);
		return -1;
	}
	if (!strcmp(want, "cuda") || (!strcmp(want, "auto") && aah_backend_cuda_available())) {
		char berr[512] = "";
		e->be = aah_backend_cuda_init(&bp, berr, sizeof berr);
		if (e->be) {
			snprintf(e->desc, sizeof e->desc, "cuda (%s)", aah_backend_cuda_device(e->be));
			return 0;
		}
		if (!strcmp(want, "cuda")) {
			snprintf(err, err_len, "backend cuda: %s", berr);
			return -1;
		}
		fprintf(stderr, "engine: backend auto: a CUDA device is present but unusable (%s); using the CPU\n", berr);
	}
	e->be = aah_backend_cpu_init(&bp);
	if (!e->be) {
		snprintf(err, err_len, "cannot start the CPU backend");
		return -1;
	}
	snprintf(e->desc, sizeof e->desc, "cpu (%s; %s)", aah_backend_cpu_isa(e->be), aah_backend_cpu_paths(e->be));
	return 0;
}

int engine_init(engine **out, const char *model_dir, const engine_params *p, char *err, size_t err_len)
{
	*out = NULL;
	engine *e = calloc(1, sizeof *e);
	if (!e) {
		snprintf(err, err_len, "out of memory");
		return -1;
	}
	char dir[4096];
	if (aah_resolve_model_dir(model_dir, p->checkpoint_step > 0 ? p->checkpoint_step : -1, dir, sizeof dir, err,
	                          err_len) != 0 ||
	    model_files_load(&e->mf, dir, err, err_len) != 0) {
		free(e);
		return -1;
	}
	e->cfg = e->mf.config;
	const model_config *c = &e->cfg;
	e->p = *p;
	if (e->p.rollback < 0 || e->p.rollback > ENGINE_MAX_ROLLBACK) {
		snprintf(err, err_len, "rollback %d is out of range: 0 (none) to %d positions", e->p.rollback,
		         ENGINE_MAX_ROLLBACK);
		goto fail;
	}
	if (e->p.max_seqs <= 0)
		e->p.max_seqs = 8;
	if (e->p.max_batch_tokens <= 0)
		e->p.max_batch_tokens = 512;
	if (e->p.ctx_len <= 0)
		e->p.ctx_len = c->max_position_embeddings < 4096 ? c->max_position_embeddings : 4096;
	if (c->head_dim > 1024 || c->n_heads / c->n_kv_heads > 64) {
		snprintf(err, err_len, "head_dim %d or %d query heads per KV head is beyond what the kernels support (1024, 64)",
		         c->head_dim, c->n_heads / c->n_kv_heads);
		goto fail;
	}
	if (e->p.ctx_len > c->max_position_embeddings) {
		snprintf(err, err_len, "context length %d exceeds the model's max_position_embeddings %d", e->p.ctx_len,
		         c->max_position_embeddings);
		goto fail;
	}
	if (e->p.quantize && *e->p.quantize) {
		if (weight_mix_parse(e->p.quantize, &e->mix) != 0) {
			snprintf(err, err_len, "unknown weight type '%s' (q8_0, q4_0, q4_k_m, q5_k_m, q4_k, q5_k or q6_k)",
			         e->p.quantize);
			goto fail;
		}
		e->has_mix = true;
	}
	if (backend_open(e, err, err_len) != 0)
		goto fail;
	{
		/* fused projections: the backend's wish, unless the caller or AAH_FUSE=1|0 (the tests) says otherwise */
		int32_t fz = e->p.fuse_projections;
		const char *env = getenv("AAH_FUSE");
		if (fz == 0 && env && *env)
			fz = strcmp(env, "0") != 0 ? 1 : -1;
		e->fuse = fz > 0 || (fz == 0 && e->be->iface.fuse_projections && e->be->iface.split_cols);
		if (e->fuse && !e->be->iface.split_cols) {
			snprintf(err, err_len, "backend %s cannot fuse projections (no split_cols)", e->be->iface.name);
			goto fail;
		}
	}
	const model_import_params ip = { .mix = e->has_mix ? &e->mix : NULL, .n_threads = e->p.n_threads, .fuse = e->fuse };
	if (model_tensors_import(&e->w, &e->mf, e->be, &ip, err, err_len) != 0)
		goto fail;
	e->inv_freq = malloc((size_t)c->head_dim / 2 * sizeof(float));
	e->seq_len = calloc((size_t)e->p.max_seqs, sizeof *e->seq_len);
	e->seq_used = calloc((size_t)e->p.max_seqs, sizeof *e->seq_used);
	e->seq_stats = calloc((size_t)e->p.max_seqs, sizeof *e->seq_stats);
	size_t heads = (size_t)c->n_layers * c->n_kv_heads;
	if (!e->inv_freq || !e->seq_len || !e->seq_used || !e->seq_stats) {
		snprintf(err, err_len, "out of memory");
		goto fail;
	}
	model_config_rope_freqs(c, e->inv_freq);
	int arc = !e->p.aah_path ? aah_config_load(&e->aah, e->mf.dir, c, err, err_len)
	          : *e->p.aah_path ? aah_config_load_file(&e->aah, e->p.aah_path, c, err, err_len)
	                           : 1;
	if (arc < 0 || (arc == 1 && e->p.aah_path && *e->p.aah_path))
		goto fail;
	e->has_aah = arc == 0;
	if (aah_regimes_init(&e->regimes, e->has_aah ? &e->aah : NULL, c->n_layers, c->n_kv_heads,
	                     c->n_heads / c->n_kv_heads, e->p.ctx_len) != 0) {
		snprintf(err, err_len, "out of memory");
		goto fail;
	}
	e->policy = calloc((size_t)e->p.max_seqs, sizeof *e->policy);
	size_t nw = e->regimes.n_windows > 0 ? (size_t)e->regimes.n_windows : 1;
	e->probe_mass = calloc((size_t)e->p.max_seqs * (size_t)c->n_layers * (size_t)c->n_heads * nw, sizeof(float));
	e->probe_kv = calloc(heads * nw, sizeof(float));
	e->span_probe = calloc((size_t)e->p.max_batch_tokens, sizeof *e->span_probe);
	e->measure = calloc((size_t)e->p.max_seqs, sizeof *e->measure);
	e->rb = calloc((size_t)e->p.max_seqs, sizeof *e->rb);
	e->seq_written = calloc((size_t)e->p.max_seqs, sizeof *e->seq_written);
	e->span_decode = calloc((size_t)e->p.max_batch_tokens, sizeof *e->span_decode);
	e->item_floor = calloc((size_t)e->p.max_seqs, sizeof *e->item_floor);   /* a batch has one item a sequence */
	if (!e->policy || !e->probe_mass || !e->probe_kv || !e->span_probe || !e->measure || !e->rb || !e->seq_written ||
	    !e->span_decode || !e->item_floor) {
		snprintf(err, err_len, "out of memory");
		goto fail;
	}
	for (int32_t i = 0; i < e->p.max_seqs; i++)
		if (aah_seq_state_init(&e->policy[i], &e->regimes) != 0) {
			snprintf(err, err_len, "out of memory");
			goto fail;
		}
	/* The default pool holds max_seqs sequences of the full context under full attention. */
	size_t page_bytes = (size_t)2 * AAH_PAGE_LEN * (size_t)c->head_dim * aah_dtype_size(e->p.kv_dtype);
	int64_t per_seq_pages = (int64_t)heads * ((e->p.ctx_len + AAH_PAGE_LEN - 1) / AAH_PAGE_LEN + 1);
	int64_t n_pages = e->p.kv_budget_bytes > 0 ? e->p.kv_budget_bytes / (int64_t)page_bytes
	                                           : per_seq_pages * e->p.max_seqs;
	if (kv_cache_init(&e->kv, e->be, c->n_layers, c->n_kv_heads, c->head_dim, e->p.kv_dtype, e->p.ctx_len,
	                  e->p.max_seqs, n_pages, err, err_len) != 0)
		goto fail;
	if (alloc_scratch(e, err, err_len) != 0)
		goto fail;
	if (e->p.prefix_cache > 0) {
		const size_t nb = (size_t)e->p.ctx_len / AAH_PAGE_LEN + 1;
		e->prefix_chain = malloc(nb * sizeof *e->prefix_chain);
		e->prefix_run = malloc(nb * sizeof *e->prefix_run);
		e->spill = calloc((size_t)e->p.max_seqs, sizeof *e->spill);
		e->spill_seqs = calloc((size_t)e->p.max_batch_tokens, sizeof *e->spill_seqs);
		e->spill_span = calloc((size_t)e->p.max_batch_tokens, sizeof *e->spill_span);
		if (!e->prefix_chain || !e->prefix_run || !e->spill || !e->spill_seqs || !e->spill_span ||
		    prefix_cache_init(&e->prefix, &e->kv, e->p.prefix_cache_bytes) != 0) {
			snprintf(err, err_len, "out of memory for the prefix cache");
			goto fail;
		}
		e->prefix_on = true;
	}
	*out = e;
	return 0;
fail:
	engine_free(e);
	return -1;
}

void engine_free(engine *e)
{
	if (!e)
		return;
	if (e->be) {
		float **bufs[] = { &e->x, &e->xn, &e->q, &e->att, &e->k, &e->v, &e->gate, &e->up, &e->xs, &e->logits,
		                   &e->fused };
		for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
			if (*bufs[i])
				e->be->iface.buf_free(e->be, *bufs[i]);
		for (int32_t i = 0; e->spill && i < e->p.max_seqs; i++)
			free(e->spill[i].pages);   /* their pages go with the pool */
		if (e->prefix_on)
			prefix_cache_free(&e->prefix);
		if (e->kv.pool.data)
			kv_cache_free(&e->kv, e->be);
		model_tensors_release(&e->w, e->be);   /* a device holds copies */
		e->be->iface.free(e->be);
	}
	free(e->inv_freq);
	free(e->seq_len);
	free(e->seq_used);
	free(e->seq_stats);
	for (int32_t i = 0; e->policy && i < e->p.max_seqs; i++)
		aah_seq_state_free(&e->policy[i]);
	free(e->policy);
	free(e->probe_mass);
	free(e->probe_kv);
	free(e->span_probe);
	for (int32_t i = 0; e->measure && i < e->p.max_seqs; i++)
		free(e->measure[i].band);
	free(e->measure);
	free(e->rb);
	free(e->seq_written);
	free(e->span_decode);
	free(e->item_floor);
	aah_regimes_free(&e->regimes);
	aah_config_free(&e->aah);
	free(e->span_work);
	free(e->ids);
	free(e->pos);
	free(e->lrow);
	free(e->ldst);
	free(e->aseqs);
	free(e->span_seq);
	free(e->prefix_chain);
	free(e->prefix_run);
	free(e->spill);
	free(e->spill_rings);
	free(e->spill_seqs);
	free(e->spill_span);
	model_files_free(&e->mf);
	free(e);
}

const model_config *engine_config(const engine *e) { return &e->cfg; }
const char *engine_chat_template(const engine *e) { return e->mf.chat_template; }
int32_t engine_ctx_len(const engine *e) { return e->p.ctx_len; }
int64_t engine_kv_pool_pages(const engine *e) { return e->kv.pool.n_pages; }
int64_t engine_kv_page_bytes(const engine *e) { return (int64_t)e->kv.page_bytes; }
int64_t engine_kv_pages_used(const engine *e) { return e->kv.pool.n_pages - e->kv.n_free; }
int64_t engine_kv_pages_in_sequences(const engine *e) { return e->kv.pages_in_rings; }
aah_backend *engine_backend(engine *e) { return e->be; }
const char *engine_backend_desc(const engine *e) { return e->desc; }
bool engine_projections_fused(const engine *e) { return model_tensors_fused(&e->w); }
uint64_t engine_attention_work(const engine *e) { return e->attn_work; }

int64_t engine_weight_bytes_per_token(const engine *e) { return model_tensors_bytes_per_token(&e->w); }

aah_dtype engine_matrix_type(const engine *e, int32_t layer, int32_t which)
{
	if (which == 7)
		return e->w.lm_head.type;
	if (which < 0 || which > 6 || layer < 0 || layer >= e->cfg.n_layers)
		return (aah_dtype)-1;
	const model_layer_tensors *t = &e->w.layers[layer];
	const aah_tensor *m[] = { &t->wq, &t->wk, &t->wv, &t->wo, &t->w_gate, &t->w_up, &t->w_down };
	if (which <= 2 && t->wqkv.data)
		return t->wqkv.type;
	if ((which == 4 || which == 5) && t->w_gate_up.data)
		return t->w_gate_up.type;
	return m[which]->type;
}

int32_t engine_regime_count(const engine *e) { return e->regimes.n; }
const char *engine_regime_name(const engine *e, int32_t i) { return i >= 0 && i < e->regimes.n ? e->regimes.r[i].name : NULL; }
const char *engine_default_regime(const engine *e) { return e->regimes.r[e->regimes.default_index].name; }

int engine_regime_layout_get(const engine *e, int32_t i, engine_regime_layout *out)
{
	if (i < 0 || i >= e->regimes.n)
		return -1;
	const aah_regime_rt *r = &e->regimes.r[i];
	memset(out, 0, sizeof *out);
	out->name = r->name;
	out->full = r->full;
	out->adaptive = r->policy.kind == AAH_POLICY_ADAPTIVE;
	out->n_layers = e->regimes.n_layers;
	out->n_kv_heads = e->regimes.n_kv;
	out->n_groups = r->n_groups;
	out->group_layer = r->group_layer;
	out->group_kv_heads = r->group_heads;
	out->group_window = r->group_window0;
	out->group_capacity = r->group_capacity;
	out->head_group = r->head_group;
	out->context_length = e->regimes.context_length;
	out->n_usage_windows = aah_regime_usage_windows(&e->regimes, i, out->usage_windows,
	                                                (int32_t)(sizeof out->usage_windows / sizeof *out->usage_windows));
	return 0;
}

int32_t engine_seq_open(engine *e, const char *regime, char *err, size_t err_len)
{
	int32_t ri = regime ? aah_regimes_find(&e->regimes, regime) : e->regimes.default_index;
	if (ri < 0) {
		int n = snprintf(err, err_len, "unknown regime '%s' (this model has:", regime);
		for (int32_t i = 0; i < e->regimes.n && n > 0 && (size_t)n < err_len; i++)
			n += snprintf(err + n, err_len - (size_t)n, " %s", e->regimes.r[i].name);
		if (n > 0 && (size_t)n < err_len)
			snprintf(err + n, err_len - (size_t)n, ")");
		return -1;
	}
	for (int32_t i = 0; i < e->p.max_seqs; i++)
		if (!e->seq_used[i]) {
			e->seq_used[i] = true;
			e->seq_len[i] = 0;
			e->seq_written[i] = 0;
			e->rb[i] = (seq_rollback){ 0 };
			memset(&e->seq_stats[i], 0, sizeof e->seq_stats[i]);
			e->seq_stats[i].regime = e->regimes.r[ri].name;
			kv_cache_seq_setup(&e->kv, i, e->regimes.r[ri].head_capacity);
			aah_seq_state_reset(&e->policy[i], &e->regimes, ri);
			if (e->prefix_on)
				e->spill[i].tick = e->prefix.tick;
			return i;
		}
	snprintf(err, err_len, "all %d sequences are in use", e->p.max_seqs);
	return -1;
}

int32_t engine_seq_fork(engine *e, int32_t src, char *err, size_t err_len)
{
	if (src < 0 || src >= e->p.max_seqs || !e->seq_used[src]) {
		snprintf(err, err_len, "sequence %d is not open", src);
		return -1;
	}
	int32_t dst = 0;
	while (dst < e->p.max_seqs && e->seq_used[dst])
		dst++;
	if (dst == e->p.max_seqs) {
		snprintf(err, err_len, "all %d sequences are in use", e->p.max_seqs);
		return -1;
	}
	kv_cache_fork(&e->kv, e->be, dst, src);   /* shares src's pages: copies come with the first writes */
	e->seq_used[dst] = true;
	e->seq_len[dst] = e->seq_len[src];
	e->seq_written[dst] = e->seq_written[src];   /* its rings are src's, stale pages too */
	e->rb[dst] = e->rb[src];                     /* and so is what it may take back */
	e->seq_stats[dst] = e->seq_stats[src];
	aah_seq_state_copy(&e->policy[dst], &e->policy[src], &e->regimes);
	return dst;
}

int64_t engine_regime_kv_pages(const engine *e, const char *regime, int64_t len)
{
	int32_t ri = regime ? aah_regimes_find(&e->regimes, regime) : e->regimes.default_index;
	return ri < 0 ? -1 : kv_cache_pages_for(&e->kv, e->regimes.r[ri].head_capacity, len);
}

int engine_seq_stats_get(const engine *e, int32_t seq, engine_seq_stats *out)
{
	if (seq < 0 || seq >= e->p.max_seqs || !e->seq_used[seq])
		return -1;
	*out = e->seq_stats[seq];
	out->n_positions = e->seq_len[seq];
	out->kv_bytes = engine_seq_kv_bytes(e, seq);
	const aah_seq_state *ps = &e->policy[seq];
	out->branch_usage_weighted = out->branch_usage_total = 0;
	out->n_usage = ps->n_usage;
	for (int32_t i = 0; i < ps->n_usage; i++) {
		out->usage_window[i] = ps->usage_window[i];
		out->usage[i] = ps->usage[i];
		out->branch_usage_weighted += ps->usage[i] * ps->usage_window[i];
		out->branch_usage_total += ps->usage[i];
	}
	out->context_length = e->regimes.context_length;
	/* full attention: ACR 1 by definition (the paper's table 2) */
	out->acr = aah_seq_acr(ps, &e->regimes);
	return 0;
}

int32_t engine_seq_steps_to_probe(const engine *e, int32_t seq)
{
	if (seq < 0 || seq >= e->p.max_seqs || !e->seq_used[seq])
		return -1;
	return aah_seq_steps_to_probe(&e->policy[seq], &e->regimes);
}

/* Why a windowed ring needs no page more to take positions back. A sequence wrote positions up to P1 (its highest,
 * seq_written − 1) and a truncation leaves len ≥ P1 + 1 − R, R ≤ ENGINE_MAX_ROLLBACK = 16 (counted from P1, so chained
 * truncations cannot add up). A ring of capacity C has S = ceil(C/16) + 1 slots, and kv_store writes rows, not pages:
 * a write at y ≤ P1 overwrites only the row of y − 16·S ≤ y − C − 16 in its slot. The next query, at len, reads keys
 * back to len − W + 1 ≥ len − C + 1 ≥ y + 2 − R − C (W ≤ C its window), which is above every overwritten row for any
 * R ≤ 17: what the kept positions read is all still there. (A page of the ring may then hold rows older than its
 * window next to newer ones; nothing reads a page whole but a copy-on-write copy, which copies every row.) The pages
 * above len keep the taken-back rows until they are written again, and nothing reads them first: attention reads a
 * position below its step's first from the ring and every other from the step's own new rows
 * (kernels/cpu/cpu_attention.c kv_run; the CUDA backend's page lists end at pos0 − 1 too), kv_store then overwrites
 * them, and engine_prefix_insert finds the ring's pages from seq_written, not from the length. So a sequence that
 * speculates holds exactly the pages one that does not holds at the most it wrote. */
int engine_seq_allow_rollback(engine *e, int32_t seq, char *err, size_t err_len)
{
	if (seq < 0 || seq >= e->p.max_seqs || !e->seq_used[seq]) {
		snprintf(err, err_len, "sequence %d is not open", seq);
		return -1;
	}
	if (e->p.rollback == 0) {
		snprintf(err, err_len, "this engine takes nothing back (rollback 0)");
		return -1;
	}
	if (e->seq_len[seq] != 0 || e->kv.seq_pages[seq] != 0) {
		snprintf(err, err_len, "sequence %d is not empty: its rings are sized before its first position", seq);
		return -1;
	}
	e->rb[seq].allowed = true;
	return 0;
}

int32_t engine_rollback_max(const engine *e) { return e->p.rollback; }

int engine_seq_truncate(engine *e, int32_t seq, int32_t len, char *err, size_t err_len)
{
	if (seq < 0 || seq >= e->p.max_seqs || !e->seq_used[seq]) {
		snprintf(err, err_len, "sequence %d is not open", seq);
		return -1;
	}
	const int32_t cur = e->seq_len[seq];
	if (len < 0 || len > cur) {
		snprintf(err, err_len, "sequence %d holds %d positions: it cannot be truncated to %d", seq, cur, len);
		return -1;
	}
	if (len == cur)   /* nothing to take back */
		return 0;
	const seq_rollback *rb = &e->rb[seq];
	if (!rb->allowed) {
		snprintf(err, err_len, "sequence %d does not allow rollback (engine_seq_allow_rollback)", seq);
		return -1;
	}
	if (len < rb->floor) {
		snprintf(err, err_len, "positions of sequence %d before %d are a prompt chunk's, a probe's or a measured "
		         "item's: %d is not taken back to", seq, rb->floor, len);
		return -1;
	}
	/* from the highest position written, not from the length: the overwritten rows are that far back (above) */
	if (e->seq_written[seq] - len > e->p.rollback) {
		snprintf(err, err_len, "truncating sequence %d to %d takes back %d positions from the %d it wrote; this "
		         "engine takes back %d at most", seq, len, e->seq_written[seq] - len, e->seq_written[seq],
		         e->p.rollback);
		return -1;
	}
	/* The counters of positions [len, cur), as the forwards added them: the backend's min(p + 1, W) products per query
	 * head of each KV head and layer at the windows they attended with (above the floor: head_window now), full
	 * attention's p + 1 per query head and layer, a decode step each, and the branch usage of those windows. The
	 * engine's own work counter keeps them: the products were done. */
	const model_config *c = &e->cfg;
	aah_seq_state *ps = &e->policy[seq];
	const int64_t G = c->n_heads / c->n_kv_heads, heads = (int64_t)c->n_layers * c->n_kv_heads;
	uint64_t work = 0, full = 0;
	for (int64_t p = len; p < cur; p++) {
		for (int64_t h = 0; h < heads; h++)
			work += (uint64_t)((p + 1 < ps->head_window[h] ? p + 1 : ps->head_window[h]) * G);
		full += (uint64_t)(p + 1) * (uint64_t)c->n_heads * (uint64_t)c->n_layers;
	}
	engine_seq_stats *st = &e->seq_stats[seq];
	st->attn_products -= work;
	st->attn_products_full -= full;
	aah_seq_uncount(ps, &e->regimes, cur - len, rb->n_usage_floor);
	ps->decode_steps -= cur - len;
	/* full attention's KV at the new length; kv_bytes_peak keeps what was held (the pages stay) */
	st->kv_bytes_full_peak = heads * ((len + AAH_PAGE_LEN - 1) / AAH_PAGE_LEN) * (int64_t)e->kv.page_bytes;
	e->seq_len[seq] = len;
	return 0;
}

/* After a chunk: the sequence's measured work and what full causal attention would have done, its KV peak, its
 * branch usage; after a probe, the policy's re-selection. */
static void seq_stats_update(engine *e, int32_t seq, const aah_attn_seq *span, uint64_t work, bool probe, bool decode)
{
	aah_seq_state *ps = &e->policy[seq];
	aah_seq_count(ps, &e->regimes, span->n_new, probe);
	if (probe) {
		const int32_t nw = e->regimes.n_windows, nh = e->cfg.n_heads, nkv = e->cfg.n_kv_heads, q = nh / nkv;
		float *mass = e->probe_mass + (int64_t)seq * e->cfg.n_layers * nh * nw;
		memset(e->probe_kv, 0, (size_t)e->cfg.n_layers * (size_t)nkv * (size_t)nw * sizeof(float));
		for (int64_t l = 0; l < e->cfg.n_layers; l++)
			for (int64_t h = 0; h < nh; h++)
				for (int32_t b = 0; b < nw; b++)
					e->probe_kv[(l * nkv + h / q) * nw + b] += mass[(l * nh + h) * nw + b];
		aah_seq_control(ps, &e->regimes, e->probe_kv);
	}
	/* by the item, not the span: a prompt item's one-token tail in a new chunk is no decode step */
	if (decode)
		ps->decode_steps += span->n_new;
	engine_seq_stats *st = &e->seq_stats[seq];
	const model_config *c = &e->cfg;
	/* full causal: the query at position p reads p + 1 keys, per query head and layer */
	int64_t p0 = span->pos0, p1 = (int64_t)span->pos0 + span->n_new;   /* positions [p0, p1) */
	uint64_t keys = (uint64_t)((p1 * (p1 + 1) - p0 * (p0 + 1)) / 2);
	st->attn_products += work;
	st->attn_products_full += keys * (uint64_t)c->n_heads * (uint64_t)c->n_layers;
	int64_t bytes = engine_seq_kv_bytes(e, seq);
	if (bytes > st->kv_bytes_peak)
		st->kv_bytes_peak = bytes;
	/* full attention keeps every position of every KV head, in whole pages: its peak is at the current length */
	int64_t pages = (int64_t)c->n_layers * c->n_kv_heads * ((p1 + AAH_PAGE_LEN - 1) / AAH_PAGE_LEN);
	st->kv_bytes_full_peak = pages * (int64_t)e->kv.page_bytes;
}

/* Returns the pages of seq's spill that no block took to the pool. */
static void spill_release(engine *e, int32_t seq)
{
	seq_spill *sp = &e->spill[seq];
	const int64_t n = (int64_t)sp->n_lp * e->cfg.n_layers * e->cfg.n_kv_heads;
	for (int64_t i = 0; i < n; i++)
		if (sp->pages[i] >= 0)
			kv_cache_page_unref(&e->kv, sp->pages[i]);
	sp->n_lp = 0;
}

void engine_seq_close(engine *e, int32_t seq)
{
	if (seq < 0 || seq >= e->p.max_seqs || !e->seq_used[seq])
		return;
	if (e->prefix_on)
		spill_release(e, seq);
	kv_cache_release(&e->kv, seq);
	e->seq_used[seq] = false;
	e->seq_len[seq] = 0;
	e->seq_written[seq] = 0;
	e->rb[seq] = (seq_rollback){ 0 };
	e->measure[seq].m = NULL;
}

int engine_seq_measure(engine *e, int32_t seq, engine_measure *m, char *err, size_t err_len)
{
	if (seq < 0 || seq >= e->p.max_seqs || !e->seq_used[seq]) {
		snprintf(err, err_len, "sequence %d is not open", seq);
		return -1;
	}
	seq_measure *ms = &e->measure[seq];
	if (!m) {
		ms->m = NULL;
		return 0;
	}
	const aah_regime_rt *r = &e->regimes.r[e->policy[seq].regime];
	if (r->policy.kind == AAH_POLICY_ADAPTIVE) {
		snprintf(err, err_len, "regime %s is adaptive: its probe steps measure for the policy; measure under "
		         "full_attention or a static regime", r->name);
		return -1;
	}
	if (m->n_bands < 1 || m->n_bands > ENGINE_MEASURE_MAX_BANDS) {
		snprintf(err, err_len, "%d bands: a measurement has 1 to %d", m->n_bands, ENGINE_MEASURE_MAX_BANDS);
		return -1;
	}
	if (!m->band_mass && !m->entropy) {
		snprintf(err, err_len, "nothing to measure: neither band_mass nor entropy");
		return -1;
	}
	for (int32_t b = 0; b + 1 < m->n_bands; b++)
		if (!m->band_edges || m->band_edges[b] < 1 || (b > 0 && m->band_edges[b] <= m->band_edges[b - 1])) {
			snprintf(err, err_len, "band edges must be %d strictly ascending distances of at least 1", m->n_bands - 1);
			return -1;
		}
	const model_config *c = &e->cfg;
	if (m->band_mass) {   /* the backend's (float) band sums of one chunk: grown, never shrunk */
		float *band = realloc(ms->band, (size_t)c->n_layers * c->n_heads * ENGINE_MEASURE_MAX_BANDS * sizeof *band);
		if (!band) {
			snprintf(err, err_len, "out of memory");
			return -1;
		}
		ms->band = band;
	}
	for (int32_t b = 0; b + 1 < m->n_bands; b++)
		ms->edges[b] = m->band_edges[b];
	ms->m = m;
	return 0;
}

int32_t engine_seq_len(const engine *e, int32_t seq)
{
	return seq >= 0 && seq < e->p.max_seqs ? e->seq_len[seq] : 0;
}

int64_t engine_seq_kv_bytes(const engine *e, int32_t seq)
{
	return seq >= 0 && seq < e->p.max_seqs ? e->kv.seq_pages[seq] * (int64_t)e->kv.page_bytes : 0;
}

/* ---- spilled pages: a prompt's positions that its windowed rings drop, kept for the prefix cache ---- */

/* Gives seq's item of n positions from pos0, whose reservation is made, a page of its own for every full logical page
 * that a ring of seq drops before the item's end (logical pages below hi − n_slots + 1, hi the item's last): the
 * spill. A page written partly before the item (pos0 not at a page start) starts as a copy of the ring's page. Takes
 * only free pages, evicting for them only cached blocks last used before seq's prompt last restored or inserted (so
 * never its own chain nor a newer prompt's; never anything a running sequence holds: those pages are not free); what
 * it cannot get is not spilled. */
static void spill_prepare(engine *e, int32_t seq, int64_t pos0, int64_t n)
{
	seq_spill *sp = &e->spill[seq];
	spill_release(e, seq);
	const int32_t nkv = e->cfg.n_kv_heads;
	const int64_t heads = (int64_t)e->cfg.n_layers * nkv;
	const int64_t lo = pos0 / AAH_PAGE_LEN, hi = (pos0 + n - 1) / AAH_PAGE_LEN;
	int64_t min_slots = INT64_MAX;
	for (int32_t l = 0; l < e->cfg.n_layers; l++)
		for (int32_t h = 0; h < nkv; h++)
			if (kv_cache_slots(&e->kv, seq, l)[h] < min_slots)
				min_slots = kv_cache_slots(&e->kv, seq, l)[h];
	const int64_t n_lp = hi - min_slots + 1 - lo;   /* [lo, hi − min_slots]: what the shortest ring drops */
	if (n_lp <= 0)
		return;
	if (n_lp * heads > sp->cap) {
		int32_t *p = realloc(sp->pages, (size_t)(n_lp * heads) * sizeof *p);
		if (!p)
			return;
		sp->pages = p;
		sp->cap = n_lp * heads;
	}
	sp->lp0 = (int32_t)lo;
	sp->n_lp = (int32_t)n_lp;
	for (int64_t i = 0; i < n_lp * heads; i++)
		sp->pages[i] = -1;
	char *data = e->kv.pool.data;
	for (int32_t l = 0; l < e->cfg.n_layers; l++) {
		const int32_t *slots = kv_cache_slots(&e->kv, seq, l), *rings = kv_cache_rings(&e->kv, seq, l);
		for (int32_t h = 0; h < nkv; h++)
			for (int64_t lp = lo; lp <= hi - slots[h]; lp++) {
				int32_t page = kv_cache_page_alloc(&e->kv);
				while (page < 0 && prefix_cache_evict_before(&e->prefix, sp->tick))
					page = kv_cache_page_alloc(&e->kv);
				if (page < 0)
					return;
				if (lp == lo && pos0 % AAH_PAGE_LEN != 0) {
					/* its first rows are in the ring's page (the slot the item reuses keeps them until kv_store) */
					const int32_t from = rings[(int64_t)h * e->kv.ring_stride + lp % slots[h]];
					if (from < 0) {   /* cannot happen: a sequence holds the page it is writing */
						kv_cache_page_unref(&e->kv, page);
						continue;
					}
					e->be->iface.buf_copy(e->be, data + (size_t)page * e->kv.page_bytes,
					                      data + (size_t)from * e->kv.page_bytes, e->kv.page_bytes);
				}
				sp->pages[(lp - lo) * heads + (int64_t)l * nkv + h] = page;
			}
	}
}

/* The chunk's spans whose sequence has a spill over their positions, listed in e->spill_span. Returns how many. */
static int32_t spill_spans(engine *e, int32_t n_spans)
{
	if (!e->prefix_on)
		return 0;
	int32_t n = 0;
	for (int32_t s = 0; s < n_spans; s++) {
		const seq_spill *sp = &e->spill[e->span_seq[s]];
		const aah_attn_seq *a = &e->aseqs[s];
		if (sp->n_lp == 0 || a->n_new <= 0 || a->pos0 / AAH_PAGE_LEN >= sp->lp0 + sp->n_lp ||
		    (a->pos0 + a->n_new - 1) / AAH_PAGE_LEN < sp->lp0)
			continue;
		e->spill_span[n++] = s;
	}
	return n;
}

/* Writes layer l's new keys and values of the spilling spans into their spill pages too: kv_store over rings that
 * hold each span's spilled pages, one slot per logical page of the span and one more (so none wraps), and -1 (which
 * kv_store skips) for the pages the real ring keeps. */
static void spill_store(engine *e, int32_t l, int32_t n_spill)
{
	const int32_t nkv = e->cfg.n_kv_heads;
	const int64_t heads = (int64_t)e->cfg.n_layers * nkv;
	int64_t need = 0;
	for (int32_t i = 0; i < n_spill; i++) {
		const aah_attn_seq *a = &e->aseqs[e->spill_span[i]];
		need += ((int64_t)(a->pos0 + a->n_new - 1) / AAH_PAGE_LEN - a->pos0 / AAH_PAGE_LEN + 3) * nkv;
	}
	if (need > e->spill_rings_cap) {
		int32_t *p = realloc(e->spill_rings, (size_t)need * sizeof *p);
		if (!p) {
			/* out of memory: nothing spills from this chunk on, so engine_prefix_insert takes no unwritten page */
			for (int32_t i = 0; i < n_spill; i++)
				spill_release(e, e->span_seq[e->spill_span[i]]);
			return;
		}
		e->spill_rings = p;
		e->spill_rings_cap = need;
	}
	int32_t *at = e->spill_rings;
	for (int32_t i = 0; i < n_spill; i++) {
		const aah_attn_seq *a = &e->aseqs[e->spill_span[i]];
		const seq_spill *sp = &e->spill[e->span_seq[e->spill_span[i]]];
		const int64_t lo = a->pos0 / AAH_PAGE_LEN, hi = (a->pos0 + a->n_new - 1) / AAH_PAGE_LEN;
		const int32_t T = (int32_t)(hi - lo + 2);
		int32_t *slots = at, *rings = at + nkv;
		at += (int64_t)nkv * (T + 1);
		for (int32_t h = 0; h < nkv; h++) {
			slots[h] = T;
			for (int64_t lp = lo; lp <= hi; lp++) {
				const int64_t j = lp - sp->lp0;
				rings[(int64_t)h * T + lp % T] =
					j >= 0 && j < sp->n_lp ? sp->pages[j * heads + (int64_t)l * nkv + h] : -1;
			}
		}
		e->spill_seqs[i] = (aah_attn_seq){ .row0 = a->row0, .n_new = a->n_new, .pos0 = a->pos0, .ring_stride = T,
		                                   .rings = rings, .n_slots = slots };
	}
	e->be->iface.kv_store(e->be, &e->kv.pool, e->k, e->v, e->spill_seqs, n_spill, nkv);
}

/* One chunk of at most max_batch_tokens rows: e->ids, e->pos filled; spans in e->aseqs; n_logit rows of
 * e->lrow to be written to the caller's rows e->ldst. */
static void forward_chunk(engine *e, int32_t n, int32_t n_spans, int32_t n_logit, float *logits_out)
{
	aah_backend *b = e->be;
	const aah_backend_iface *f = &b->iface;
	const model_config *c = &e->cfg;
	const int32_t hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
	const float scale = model_config_score_scale(c) / sqrtf((float)hd);   /* YaRN's attention factor, squared */

	/* A decode step (every span one new token, none a probe) is one launch sequence per batch size n, which a backend
	 * may record once and replay (CUDA graphs: backend.h's step_begin and step_end around the layers). When step_end
	 * says that nothing ran (a buffer had to grow first), the same layers run again, unrecorded. */
	bool recorded = n_spans == n && f->step_begin && f->step_end;
	for (int32_t s = 0; s < n_spans && recorded; s++)
		recorded = !e->span_probe[s] && !e->measure[e->span_seq[s]].m;
	for (int32_t s = 0; s < n_spans; s++) {   /* a measured span's band sums of this chunk start at zero */
		const seq_measure *ms = &e->measure[e->span_seq[s]];
		if (ms->m && ms->m->band_mass)
			memset(ms->band, 0, (size_t)c->n_layers * nh * ms->m->n_bands * sizeof *ms->band);
	}
	const int32_t n_spill = spill_spans(e, n_spans);
	recorded = recorded && n_spill == 0 && f->step_begin(b, (uint64_t)n);
	uint64_t work;
layers:
	work = 0;
	f->get_rows(b, e->x, &e->w.embed, e->ids, n);
	memset(e->span_work, 0, (size_t)n_spans * sizeof *e->span_work);
	for (int32_t l = 0; l < c->n_layers; l++) {
		const model_layer_tensors *t = &e->w.layers[l];
		f->rmsnorm(b, e->xn, e->x, &t->attn_norm, n, c->rms_norm_eps);
		if (t->wqkv.data) {   /* one product, then its columns [q | k | v] into their buffers */
			float *const parts[3] = { e->q, e->k, e->v };
			const int32_t widths[3] = { nh * hd, nkv * hd, nkv * hd };
			f->matmul(b, e->fused, e->xn, n, &t->wqkv);
			f->split_cols(b, parts, widths, 3, e->fused, n);
		} else {
			f->matmul(b, e->q, e->xn, n, &t->wq);
			f->matmul(b, e->k, e->xn, n, &t->wk);
			f->matmul(b, e->v, e->xn, n, &t->wv);
		}
		if (c->qk_norm) {
			f->rmsnorm(b, e->q, e->q, &t->q_norm, n * nh, c->rms_norm_eps);
			f->rmsnorm(b, e->k, e->k, &t->k_norm, n * nkv, c->rms_norm_eps);
		}
		f->rope(b, e->q, n, nh, hd, e->pos, e->inv_freq);
		f->rope(b, e->k, n, nkv, hd, e->pos, e->inv_freq);
		for (int32_t s = 0; s < n_spans; s++) {
			e->aseqs[s].rings = kv_cache_rings(&e->kv, e->span_seq[s], l);
			e->aseqs[s].ring_stride = e->kv.ring_stride;
			e->aseqs[s].n_slots = kv_cache_slots(&e->kv, e->span_seq[s], l);
			{
			const aah_seq_state *ps = &e->policy[e->span_seq[s]];
			/* a probe attends over each head's whole capacity and reports where the mass fell */
			e->aseqs[s].windows = e->span_probe[s] ? e->regimes.r[ps->regime].head_capacity + (int64_t)l * nkv
			                                       : ps->head_window + (int64_t)l * nkv;
			e->aseqs[s].band_mass = e->span_probe[s] ? e->probe_mass + ((int64_t)e->span_seq[s] * c->n_layers + l) *
			                                                                   nh * e->regimes.n_windows
			                                         : NULL;
			e->aseqs[s].band_edges = e->regimes.windows;
			e->aseqs[s].n_bands = e->regimes.n_windows;
			e->aseqs[s].entropy = NULL;
			const seq_measure *ms = &e->measure[e->span_seq[s]];
			if (ms->m) {   /* never a probe: engine_seq_measure refuses adaptive regimes */
				const engine_measure *m = ms->m;
				e->aseqs[s].band_mass = m->band_mass ? ms->band + (int64_t)l * nh * m->n_bands : NULL;
				e->aseqs[s].band_edges = ms->edges;
				e->aseqs[s].n_bands = m->n_bands;
				e->aseqs[s].entropy = m->entropy ? m->entropy + (int64_t)l * nh : NULL;
			}
		}
		}
		work += f->attention(b, e->att, e->q, e->k, e->v, &e->kv.pool, e->aseqs, n_spans, nh, nkv, scale,
		                     e->span_work);
		f->kv_store(b, &e->kv.pool, e->k, e->v, e->aseqs, n_spans, nkv);
		if (n_spill > 0)
			spill_store(e, l, n_spill);
		f->matmul(b, e->xn, e->att, n, &t->wo);
		f->add(b, e->x, e->xn, (int64_t)n * c->hidden_size);
		f->rmsnorm(b, e->xn, e->x, &t->ffn_norm, n, c->rms_norm_eps);
		if (t->w_gate_up.data) {
			float *const parts[2] = { e->gate, e->up };
			const int32_t widths[2] = { c->intermediate_size, c->intermediate_size };
			f->matmul(b, e->fused, e->xn, n, &t->w_gate_up);
			f->split_cols(b, parts, widths, 2, e->fused, n);
		} else {
			f->matmul(b, e->gate, e->xn, n, &t->w_gate);
			f->matmul(b, e->up, e->xn, n, &t->w_up);
		}
		f->swiglu(b, e->gate, e->gate, e->up, (int64_t)n * c->intermediate_size);
		f->matmul(b, e->xn, e->gate, n, &t->w_down);
		f->add(b, e->x, e->xn, (int64_t)n * c->hidden_size);
	}
	if (recorded) {
		recorded = false;
		if (f->step_end(b) != 0)
			goto layers;
	}
	e->attn_work += work;
	for (int32_t s = 0; s < n_spans; s++) {
		seq_stats_update(e, e->span_seq[s], &e->aseqs[s], e->span_work[s], e->span_probe[s], e->span_decode[s]);
		const seq_measure *ms = &e->measure[e->span_seq[s]];
		if (ms->m) {
			engine_measure *m = ms->m;
			for (int64_t i = 0; m->band_mass && i < (int64_t)c->n_layers * nh * m->n_bands; i++)
				m->band_mass[i] += ms->band[i];
			m->rows += e->aseqs[s].n_new;
		}
	}
	/* Logits only for the rows that asked, a pass of logit_rows at a time. */
	aah_tensor xt = { e->x, AAH_DTYPE_F32, e->p.max_batch_tokens, c->hidden_size, 0 };
	for (int32_t r = 0; r < n_logit; r += e->logit_rows) {
		int32_t nr = n_logit - r < e->logit_rows ? n_logit - r : e->logit_rows;
		f->get_rows(b, e->xs, &xt, e->lrow + r, nr);
		f->rmsnorm(b, e->xs, e->xs, &e->w.norm, nr, c->rms_norm_eps);
		/* The caller's rows of a pass are consecutive; with host buffers the product goes straight into them, which
		 * spares a copy of every logits row (16 decode rows of a 152k vocabulary: 10 MB per step). Without host logits
		 * (logits_out NULL) the rows stay in e->logits at their item-order row, which engine_forward has checked
		 * fits. */
		bool direct = e->be->iface.host_memory || !logits_out;
		for (int32_t i = 1; i < nr && direct; i++)
			direct = e->ldst[r + i] == e->ldst[r] + i;
		if (direct) {
			float *base = logits_out ? logits_out : e->logits;
			f->matmul(b, base + e->ldst[r] * c->vocab_size, e->xs, nr, &e->w.lm_head);
			continue;
		}
		assert(logits_out);   /* dst counts up along the rows: a kept pass is always consecutive */
		f->matmul(b, e->logits, e->xs, nr, &e->w.lm_head);
		for (int32_t i = 0; i < nr; i++)
			f->buf_read(b, logits_out + e->ldst[r + i] * c->vocab_size, e->logits + (int64_t)i * c->vocab_size,
			            (size_t)c->vocab_size * sizeof(float));
	}
}

/* Free pages the items' reservations take, one after another as engine_forward makes them. */
static int64_t items_pages_needed(engine *e, const engine_item *items, int32_t n_items)
{
	int64_t n = 0;
	for (int32_t i = 0; i < n_items; i++)
		n += kv_cache_need_mark(&e->kv, items[i].seq, e->seq_len[items[i].seq], items[i].n_tokens);
	for (int32_t i = 0; i < n_items; i++)
		kv_cache_need_clear(&e->kv, items[i].seq, e->seq_len[items[i].seq], items[i].n_tokens);
	return n;
}

static int validate_items(engine *e, const engine_item *items, int32_t n_items, char *err, size_t err_len)
{
	int64_t pages_needed = 0;
	for (int32_t i = 0; i < n_items; i++) {
		const engine_item *it = &items[i];
		if (it->seq < 0 || it->seq >= e->p.max_seqs || !e->seq_used[it->seq]) {
			snprintf(err, err_len, "sequence %d is not open", it->seq);
			return -1;
		}
		for (int32_t j = 0; j < i; j++)
			if (items[j].seq == it->seq) {
				snprintf(err, err_len, "sequence %d appears twice in one batch", it->seq);
				return -1;
			}
		if (it->n_tokens < 1) {
			snprintf(err, err_len, "an item needs at least one token");
			return -1;
		}
		if ((int64_t)e->seq_len[it->seq] + it->n_tokens > e->p.ctx_len) {
			snprintf(err, err_len, "%d + %d tokens exceed the context length %d", e->seq_len[it->seq], it->n_tokens,
			         e->p.ctx_len);
			return -1;
		}
		for (int32_t j = 0; j < it->n_tokens; j++)
			if (it->tokens[j] < 0 || it->tokens[j] >= e->cfg.vocab_size) {
				snprintf(err, err_len, "token id %d is out of range [0, %d)", it->tokens[j], e->cfg.vocab_size);
				return -1;
			}
		if (it->generated && e->seq_len[it->seq] == 0) {
			snprintf(err, err_len, "sequence %d has no prompt: a generated item follows one", it->seq);
			return -1;
		}
		if (it->generated && it->cache) {
			snprintf(err, err_len, "a generated item is no prompt: the prefix cache does not take it (cache)");
			return -1;
		}
		/* a one-token item is the decode step it always was (a probe when one is due); a longer generated one counts
		 * as that many decode steps, none of which may be a probe */
		if (it->generated && it->n_tokens >= 2) {
			const int32_t room = aah_seq_steps_to_probe(&e->policy[it->seq], &e->regimes);
			if (it->n_tokens > room) {
				snprintf(err, err_len, "%d generated tokens reach sequence %d's probe, %d decode steps away (feed the "
				         "probe step alone)", it->n_tokens, it->seq, room);
				return -1;
			}
		}
	}
	/* fresh pages for empty ring slots and for copies of shared pages (when two items share one, the first copy leaves
	 * the second its sole holder). Cached blocks yield before anything is refused: an eviction returns pages to the
	 * pool, or makes a page this step would copy its writer's alone. */
	pages_needed = items_pages_needed(e, items, n_items);
	while (e->prefix_on && pages_needed > e->kv.n_free && prefix_cache_evict_one(&e->prefix))
		pages_needed = items_pages_needed(e, items, n_items);
	if (pages_needed > e->kv.n_free) {
		snprintf(err, err_len, "KV cache full: %lld pages needed, %d free", (long long)pages_needed, e->kv.n_free);
		return -1;
	}
	return 0;
}

void engine_argmax_rows(engine *e, int32_t *ids, const float *const *rows, int32_t n_rows, int32_t n_cols)
{
	if (e->be->iface.host_memory && e->be->iface.argmax_rows) {
		e->be->iface.argmax_rows(e->be, ids, rows, n_rows, n_cols);
		return;
	}
	for (int32_t r = 0; r < n_rows; r++)
		ids[r] = aah_argmax(rows[r], n_cols);
}

int32_t engine_logits_rows_max(const engine *e) { return e->logit_rows; }

int engine_forward(engine *e, const engine_item *items, int32_t n_items, float *logits, char *err, size_t err_len)
{
	for (int32_t i = 0; e->prefix_on && i < e->p.max_seqs; i++)
		if (e->spill[i].n_lp > 0)   /* an earlier step's that engine_prefix_insert did not take */
			spill_release(e, i);
	if (validate_items(e, items, n_items, err, err_len) != 0)
		return -1;
	int64_t n_rows = 0;
	for (int32_t i = 0; i < n_items; i++)
		n_rows += items[i].all_logits ? items[i].n_tokens : 1;
	if (!logits && n_rows > e->logit_rows) {
		snprintf(err, err_len, "%lld logits rows exceed the %d the engine keeps", (long long)n_rows, e->logit_rows);
		return -1;
	}
	e->kept_rows = 0;
	for (int32_t i = 0; i < n_items; i++)
		if (kv_cache_reserve(&e->kv, items[i].seq, e->seq_len[items[i].seq], items[i].n_tokens) != 0) {
			snprintf(err, err_len, "KV cache full");   /* cannot happen after validate_items */
			return -1;
		}
	for (int32_t i = 0; e->prefix_on && i < n_items; i++)   /* after every reservation: a spill takes what is left */
		if (items[i].cache)
			spill_prepare(e, items[i].seq, e->seq_len[items[i].seq], items[i].n_tokens);
	const model_config *c = &e->cfg;
	const int32_t cap = e->p.max_batch_tokens;
	int32_t n = 0, n_spans = 0, n_logit = 0;
	int64_t dst = 0;
	for (int32_t i = 0; i < n_items; i++) {
		const engine_item *it = &items[i];
		const int32_t pos0 = e->seq_len[it->seq];
		/* decode steps: a one-token item after the prompt, and every token of a generated one */
		const bool decode = pos0 > 0 && (it->n_tokens == 1 || it->generated);
		e->item_floor[i] = !decode || e->measure[it->seq].m ||
		                   (it->n_tokens == 1 && aah_seq_probe_due(&e->policy[it->seq], &e->regimes));
		if (pos0 + it->n_tokens > e->seq_written[it->seq])
			e->seq_written[it->seq] = pos0 + it->n_tokens;
		for (int32_t j = 0; j < it->n_tokens; j++) {
			if (j == 0 || n == 0) {   /* a new span: a new item, or the item continues into a new chunk */
				aah_attn_seq *s = &e->aseqs[n_spans];
				s->row0 = n;
				s->n_new = 0;
				s->pos0 = e->seq_len[it->seq];
				/* a decode step of an adaptive sequence may be a probe (aah_policy.h) */
				e->span_probe[n_spans] = it->n_tokens == 1 && s->pos0 > 0 &&
				                         aah_seq_probe_due(&e->policy[it->seq], &e->regimes);
				e->span_decode[n_spans] = decode;
				if (e->span_probe[n_spans])
					memset(e->probe_mass + (int64_t)it->seq * c->n_layers * c->n_heads * e->regimes.n_windows, 0,
					       (size_t)c->n_layers * (size_t)c->n_heads * (size_t)e->regimes.n_windows * sizeof(float));
				e->span_seq[n_spans++] = it->seq;
			}
			e->ids[n] = it->tokens[j];
			e->pos[n] = e->seq_len[it->seq]++;
			e->aseqs[n_spans - 1].n_new++;
			if (it->all_logits || j == it->n_tokens - 1) {
				e->lrow[n_logit] = n;
				e->ldst[n_logit++] = dst++;
			}
			if (++n == cap) {
				forward_chunk(e, n, n_spans, n_logit, logits);
				n = n_spans = n_logit = 0;
			}
		}
	}
	if (n > 0)
		forward_chunk(e, n, n_spans, n_logit, logits);
	for (int32_t i = 0; i < n_items; i++)
		if (e->item_floor[i]) {
			seq_rollback *rb = &e->rb[items[i].seq];
			rb->floor = e->seq_len[items[i].seq];
			rb->n_usage_floor = e->policy[items[i].seq].n_usage;
		}
	/* a backend that can fail (a device) says so here; its results are then undefined */
	const char *be_err = e->be->iface.last_error ? e->be->iface.last_error(e->be) : NULL;
	if (be_err) {
		snprintf(err, err_len, "backend %s: %s", e->be->iface.name, be_err);
		return -1;
	}
	e->kept_rows = logits ? 0 : (int32_t)n_rows;
	return 0;
}

bool engine_logits_top_available(const engine *e) { return e->be->iface.logits_top != NULL; }

int engine_logits_top(engine *e, aah_logits_stats *stats, int32_t *top_ids, float *top_logits, int32_t row0,
                      int32_t n_rows, int32_t n_cols, const float *temperature, int32_t n_top)
{
	const aah_backend_iface *f = &e->be->iface;
	if (!f->logits_top || row0 < 0 || n_rows < 1 || row0 + (int64_t)n_rows > e->kept_rows || n_cols < 1 ||
	    n_cols > e->cfg.vocab_size || n_top < 1 || n_top > n_cols || n_top > AAH_LOGITS_TOP_MAX)
		return -1;
	f->logits_top(e->be, stats, top_ids, top_logits, e->logits + (int64_t)row0 * e->cfg.vocab_size,
	              e->cfg.vocab_size, n_rows, n_cols, temperature, n_top);
	return f->last_error && f->last_error(e->be) ? -1 : 0;
}

int engine_logits_row(engine *e, int32_t row, float *host)
{
	if (row < 0 || row >= e->kept_rows)
		return -1;
	const aah_backend_iface *f = &e->be->iface;
	f->buf_read(e->be, host, e->logits + (int64_t)row * e->cfg.vocab_size, (size_t)e->cfg.vocab_size * sizeof(float));
	return f->last_error && f->last_error(e->be) ? -1 : 0;
}

/* ---- the prefix cache (engine.h; docs/prefix_cache.md) ---- */

/* The longest k ≤ n_chain whose blocks give every head of the regime what a sequence resumed at 16·k − 1 reads:
 * blocks [k − ceil(capacity / 16), k) of a windowed head (its ring minus a page), all k of a full one — the
 * intersection over heads, as vLLM's over its groups. Per head one pass: run[j] is the length of the run of blocks
 * ending at j that hold its page, and a boundary k is good for it when that run covers what it needs. */
static int32_t prefix_usable(const engine *e, int32_t regime, prefix_block *const *chain, int32_t n_chain)
{
	const int32_t *cap = e->regimes.r[regime].head_capacity;
	const int64_t heads = (int64_t)e->cfg.n_layers * e->cfg.n_kv_heads;
	int32_t *good = e->prefix_run;   /* good[j]: boundary j + 1 is good for every head so far */
	for (int32_t j = 0; j < n_chain; j++)
		good[j] = 1;
	for (int64_t h = 0; h < heads; h++) {
		const int32_t keep = cap[h] < e->p.ctx_len ? (cap[h] + AAH_PAGE_LEN - 1) / AAH_PAGE_LEN : INT32_MAX;
		int32_t r = 0;
		for (int32_t j = 0; j < n_chain; j++) {
			r = chain[j]->pages[h] >= 0 ? r + 1 : 0;
			if (r < keep && r < j + 1)   /* neither its window's blocks nor all of them from 0 */
				good[j] = 0;
		}
	}
	int32_t k = n_chain;
	while (k > 0 && !good[k - 1])
		k--;
	return k;
}

/* Blocks of tokens (n) the cache can give a sequence of this regime now, in e->prefix_chain. */
static int32_t prefix_match(const engine *e, int32_t regime, const char *tenant, const int32_t *tokens, int32_t n,
                            int32_t lp_top)
{
	if (!e->prefix_on || n < 2)
		return 0;
	int32_t max_blocks = (n - 1) / AAH_PAGE_LEN;   /* P = 16·k ≤ n − 1: positions P − 1 … n − 1 are fed, ≥ 2 */
	int32_t k = prefix_cache_lookup(&e->prefix, regime, tenant, tokens, max_blocks, e->prefix_chain);
	if (lp_top >= 0) {
		int32_t j = 0;
		while (j < k && e->prefix_chain[j]->lp_top >= lp_top)
			j++;
		k = j;
	}
	return prefix_usable(e, regime, e->prefix_chain, k);
}

int32_t engine_prefix_peek(const engine *e, const char *regime, const char *tenant, const int32_t *tokens, int32_t n,
                           int32_t lp_top)
{
	int32_t ri = regime ? aah_regimes_find(&e->regimes, regime) : e->regimes.default_index;
	if (ri < 0)
		return 0;
	int32_t k = prefix_match(e, ri, tenant, tokens, n, lp_top);
	return k > 0 ? k * AAH_PAGE_LEN - 1 : 0;
}

int32_t engine_prefix_restore(engine *e, int32_t seq, const char *tenant, const int32_t *tokens, int32_t n,
                              const engine_prefix_lp *lp)
{
	if (!e->prefix_on || seq < 0 || seq >= e->p.max_seqs || !e->seq_used[seq] || e->seq_len[seq] != 0 ||
	    e->kv.seq_pages[seq] != 0)
		return 0;
	e->prefix_queries++;
	e->spill[seq].tick = e->prefix.tick;   /* a miss too: its spills evict only what was used before it began */
	const int32_t ri = e->policy[seq].regime;
	const int32_t k = prefix_match(e, ri, tenant, tokens, n, lp ? lp->n_top : -1);
	if (k == 0)
		return 0;
	prefix_block **chain = e->prefix_chain;
	const int32_t nkv = e->cfg.n_kv_heads;
	for (int32_t l = 0; l < e->cfg.n_layers; l++) {
		const int32_t *slots = kv_cache_slots(&e->kv, seq, l);
		for (int32_t h = 0; h < nkv; h++) {
			/* what the sequence's own ring would hold at this point: the newest n_slots pages (the oldest of them
			 * only where the cache kept it; nothing reads it, it only keeps kv_bytes as without the cache) */
			const int64_t hi = (int64_t)l * nkv + h;
			for (int32_t b = k - slots[h] > 0 ? k - slots[h] : 0; b < k; b++)
				if (chain[b]->pages[hi] >= 0)
					kv_cache_seq_adopt(&e->kv, seq, l, h, b % slots[h], chain[b]->pages[hi]);
		}
	}
	const int32_t pos = k * AAH_PAGE_LEN - 1;
	e->seq_len[seq] = pos;
	e->seq_written[seq] = pos;
	/* the policy counts the restored positions as the prompt chunk it would have fed (usage adds up per token, and a
	 * prompt never moves an adaptive regime's windows), so its windows and ACR go on as without the cache */
	aah_seq_count(&e->policy[seq], &e->regimes, pos, false);
	e->rb[seq].floor = pos;   /* a prompt: nothing of it is taken back */
	e->rb[seq].n_usage_floor = e->policy[seq].n_usage;
	/* and the sequence's work counters what those positions cost when they were computed: the backend counts
	 * min(p + 1, W) products per query head and row, W a prompt's window (the regime's first), so the response's aah
	 * object is the same with the cache or without; the engine's own counter (engine_attention_work) counts only what
	 * runs */
	{
		const int64_t P = pos, G = e->cfg.n_heads / nkv;
		const int32_t *w = e->policy[seq].head_window;
		uint64_t work = 0;
		for (int64_t h = 0; h < (int64_t)e->cfg.n_layers * nkv; h++) {
			const int64_t W = w[h];
			work += (uint64_t)(G * (P <= W ? P * (P + 1) / 2 : W * (W + 1) / 2 + (P - W) * W));
		}
		e->seq_stats[seq].attn_products += work;
		e->seq_stats[seq].attn_products_full += (uint64_t)(P * (P + 1) / 2) * (uint64_t)e->cfg.n_heads *
		                                        (uint64_t)e->cfg.n_layers;
	}
	int64_t bytes = engine_seq_kv_bytes(e, seq);
	if (bytes > e->seq_stats[seq].kv_bytes_peak)
		e->seq_stats[seq].kv_bytes_peak = bytes;
	if (lp)
		for (int32_t t = 1; t <= pos; t++) {   /* token P − 1 too: its row is not computed again */
			const prefix_block *b = chain[t / AAH_PAGE_LEN];
			const int32_t j = t % AAH_PAGE_LEN, nt = lp->n_top;
			lp->logprob[t] = b->lp[j];
			if (nt > 0) {
				memcpy(lp->top_ids + (int64_t)t * nt, b->lp_ids + (int64_t)j * b->lp_top, (size_t)nt * sizeof(int32_t));
				memcpy(lp->top_logprobs + (int64_t)t * nt, b->lp_vals + (int64_t)j * b->lp_top,
				       (size_t)nt * sizeof(float));
			}
		}
	prefix_cache_touch(&e->prefix, chain, k);
	e->spill[seq].tick = e->prefix.tick;
	e->prefix_hits++;
	e->prefix_hit_tokens += (uint64_t)pos;
	return pos;
}

/* Keeps the prompt log-probabilities of block b (tokens [16·depth, +16)) from lp, unless it has as many already. */
static void prefix_block_lp(prefix_block *b, const engine_prefix_lp *lp)
{
	if (b->lp_top >= lp->n_top)
		return;
	const size_t nt = (size_t)(lp->n_top > 0 ? lp->n_top : 1);
	float *v = malloc(AAH_PAGE_LEN * sizeof *v), *vals = malloc(AAH_PAGE_LEN * nt * sizeof *vals);
	int32_t *ids = malloc(AAH_PAGE_LEN * nt * sizeof *ids);
	if (!v || !vals || !ids) {   /* out of memory: the block goes on without them */
		free(v);
		free(vals);
		free(ids);
		return;
	}
	const int64_t t0 = (int64_t)b->depth * AAH_PAGE_LEN;
	memcpy(v, lp->logprob + t0, AAH_PAGE_LEN * sizeof *v);
	if (lp->n_top > 0) {
		memcpy(ids, lp->top_ids + t0 * lp->n_top, AAH_PAGE_LEN * nt * sizeof *ids);
		memcpy(vals, lp->top_logprobs + t0 * lp->n_top, AAH_PAGE_LEN * nt * sizeof *vals);
	}
	free(b->lp);
	free(b->lp_ids);
	free(b->lp_vals);
	b->lp = v;
	b->lp_ids = ids;
	b->lp_vals = vals;
	b->lp_top = lp->n_top;
}

void engine_prefix_insert(engine *e, int32_t seq, const char *tenant, const int32_t *tokens,
                          const engine_prefix_lp *lp)
{
	if (!e->prefix_on || seq < 0 || seq >= e->p.max_seqs || !e->seq_used[seq])
		return;
	const int32_t ri = e->policy[seq].regime, len = e->seq_len[seq], nkv = e->cfg.n_kv_heads;
	/* the rings hold the newest pages of what was written, which a truncation may have left above len */
	const int32_t n_blocks = len / AAH_PAGE_LEN, live = (e->seq_written[seq] + AAH_PAGE_LEN - 1) / AAH_PAGE_LEN;
	const int64_t heads = (int64_t)e->cfg.n_layers * nkv;
	const seq_spill *sp = &e->spill[seq];
	prefix_block *parent = NULL;
	int32_t k = 0;
	for (; k < n_blocks; k++) {
		prefix_block *b = prefix_cache_child(&e->prefix, parent, ri, tenant, tokens + (int64_t)k * AAH_PAGE_LEN);
		if (!b)
			break;
		e->prefix_chain[k] = b;
		const int64_t sj = k - sp->lp0;   /* this block in the last item's spill */
		for (int32_t l = 0; l < e->cfg.n_layers; l++) {
			const int32_t *slots = kv_cache_slots(&e->kv, seq, l);
			const int32_t *rings = kv_cache_rings(&e->kv, seq, l);
			for (int32_t h = 0; h < nkv; h++) {
				const int64_t hi = (int64_t)l * nkv + h;
				if (b->pages[hi] >= 0)
					continue;
				/* the ring holds logical pages [live − n_slots, live); an older one the last item dropped is in its
				 * spill, unless the pool had no page for it */
				int32_t page = k >= live - slots[h] ? rings[(int64_t)h * e->kv.ring_stride + k % slots[h]]
				               : sj >= 0 && sj < sp->n_lp ? sp->pages[sj * heads + hi]
				                                           : -1;
				if (page >= 0)
					prefix_cache_block_hold(&e->prefix, b, (int32_t)hi, page);
			}
		}
		if (lp)
			prefix_block_lp(b, lp);
		parent = b;
	}
	spill_release(e, seq);   /* the blocks hold what they took */
	prefix_cache_touch(&e->prefix, e->prefix_chain, k);
	e->spill[seq].tick = e->prefix.tick;   /* its chain's: a later spill of this prompt never evicts it */
	prefix_cache_trim(&e->prefix);
}

void engine_prefix_stats_get(const engine *e, engine_prefix_stats *out)
{
	memset(out, 0, sizeof *out);
	out->enabled = e->prefix_on;
	if (!e->prefix_on)
		return;
	out->queries = e->prefix_queries;
	out->hits = e->prefix_hits;
	out->hit_tokens = e->prefix_hit_tokens;
	out->evictions = e->prefix.evictions;
	out->bytes = e->prefix.pages * (int64_t)e->kv.page_bytes;
	out->blocks = e->prefix.n_blocks;
	out->max_bytes = e->prefix.max_pages * (int64_t)e->kv.page_bytes;
}

void engine_prefix_clear(engine *e)
{
	while (e->prefix_on && prefix_cache_evict_one(&e->prefix))
		;
}
