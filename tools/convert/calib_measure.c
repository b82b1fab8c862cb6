/* tools/convert/calib_measure.c — aah-convert calibrate's engine work (calib_measure.h): measured prefills of the
 * calibration chunks under full attention, and each regime's held-out loss, with progress lines on stderr. */
#include "tools/convert/calib_measure.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "models/aah_config.h"

#define PIECE_MEASURE 512   /* tokens per engine_forward while measuring: a progress line can come after each */
#define PIECE_EVAL 256      /* rows of logits per engine_forward while scoring (PIECE_EVAL × vocab floats of host memory) */

/* One progress line on stderr at most every 2 seconds, and always the last: what, tokens done, rate, time left. */
typedef struct progress {
	const char *what;
	int64_t total;
	double t0, last;
	bool quiet;
} progress;

static void progress_show(progress *p, int64_t done)
{
	double t = aah_now_s();
	if (p->quiet || (done < p->total && t - p->last < 2.0))
		return;
	p->last = t;
	double rate = done / (t - p->t0 > 1e-9 ? t - p->t0 : 1e-9), left = rate > 0 ? (p->total - done) / rate : 0;
	fprintf(stderr, "aah-convert calibrate: %s %lld/%lld tokens (%.0f%%), %.1f tokens/s, %.0f s left\n", p->what,
	        (long long)done, (long long)p->total, 100.0 * done / p->total, rate, left);
}

static int open_engine(engine **e, const char *model_dir, const char *aah_path, const calib_engine_opts *o, char *err,
                       size_t err_len)
{
	engine_params ep = { .n_threads = o->threads, .max_seqs = 1, .ctx_len = o->context_length,
		                 .max_batch_tokens = PIECE_MEASURE, .kv_dtype = AAH_DTYPE_F32, .backend = o->backend,
		                 .aah_path = aah_path };
	return engine_init(e, model_dir, &ep, err, err_len);
}

/* Prefills n tokens into seq in pieces of at most `piece` (never a one-token piece after the first, which the
 * adaptive policy would take for a decode step); all_logits rows into logits when it is scoring (cb), else the last
 * row only. cb(ctx, row0, n_rows) sees each piece's rows. */
typedef void (*rows_fn)(void *ctx, const float *logits, int64_t row0, int32_t n_rows);
static int prefill(engine *e, int32_t seq, const int32_t *ids, int64_t n, int32_t piece, float *logits, rows_fn cb,
                   void *ctx, progress *pr, int64_t *done, char *err, size_t err_len)
{
	for (int64_t at = 0; at < n;) {
		int64_t k = n - at < piece ? n - at : piece;
		if (n - at - k == 1)
			k--;   /* leave two tokens for the last piece */
		engine_item it = { seq, ids + at, (int32_t)k, cb != NULL, false, false };
		if (engine_forward(e, &it, 1, logits, err, err_len) != 0)
			return -1;
		if (cb)
			cb(ctx, logits, at, (int32_t)k);
		at += k;
		if (pr) {
			*done += k;
			progress_show(pr, *done);
		}
	}
	return 0;
}

int calib_measure_run(const char *model_dir, const calib_engine_opts *o, const int32_t *ids, int64_t n_chunks,
                      calib_measured *out, char *err, size_t err_len)
{
	engine *e;
	if (open_engine(&e, model_dir, "", o, err, err_len) != 0)
		return -1;
	const model_config *c = engine_config(e);
	const int32_t T = o->context_length, nb = out->n_bands, L = c->n_layers, H = c->n_heads, nkv = c->n_kv_heads;
	const int32_t q = H / nkv;
	const size_t cells = (size_t)L * H * nb;
	double *chunk = calloc(cells, sizeof *chunk);
	float *logits = malloc((size_t)c->vocab_size * sizeof *logits);
	int rc = -1;
	if (!chunk || !logits) {
		snprintf(err, err_len, "out of memory");
		goto done;
	}
	memset(out->q_mass, 0, cells * sizeof *out->q_mass);
	memset(out->q_entropy, 0, (size_t)L * H * sizeof *out->q_entropy);
	out->rows = 0;
	out->seconds = out->plain_seconds = 0;
	progress pr = { .what = "measuring", .total = n_chunks * T, .quiet = o->quiet };
	pr.t0 = pr.last = aah_now_s();
	int64_t done = 0;
	for (int64_t ch = 0; ch < n_chunks; ch++) {
		const int32_t *x = ids + ch * T;
		int32_t seq = engine_seq_open(e, AAH_FULL_ATTENTION, err, err_len);
		if (seq < 0)
			goto done;
		memset(chunk, 0, cells * sizeof *chunk);
		engine_measure m = { .n_bands = nb, .band_edges = out->band_edges, .band_mass = chunk,
			                 .entropy = out->q_entropy };
		double t0 = aah_now_s();
		int frc = engine_seq_measure(e, seq, &m, err, err_len);
		if (frc == 0)
			frc = prefill(e, seq, x, T, PIECE_MEASURE, logits, NULL, NULL, &pr, &done, err, err_len);
		out->seconds += aah_now_s() - t0;
		engine_seq_close(e, seq);
		if (frc != 0)
			goto done;
		out->rows += m.rows;
		double *kv = out->chunk_kv_mass + ch * (int64_t)L * nkv * nb;
		memset(kv, 0, (size_t)L * nkv * nb * sizeof *kv);
		for (int32_t l = 0; l < L; l++)
			for (int32_t h = 0; h < H; h++)
				for (int32_t b = 0; b < nb; b++) {
					double v = chunk[((int64_t)l * H + h) * nb + b];
					out->q_mass[((int64_t)l * H + h) * nb + b] += v;
					kv[((int64_t)l * nkv + h / q) * nb + b] += v;
				}
		if (o->time_plain) {   /* the same chunk, unmeasured: the two meet the same moments of a shared machine */
			seq = engine_seq_open(e, AAH_FULL_ATTENTION, err, err_len);
			if (seq < 0)
				goto done;
			t0 = aah_now_s();
			frc = prefill(e, seq, x, T, PIECE_MEASURE, logits, NULL, NULL, NULL, NULL, err, err_len);
			out->plain_seconds += aah_now_s() - t0;
			pr.t0 += aah_now_s() - t0;   /* the progress rate is the measurement's */
			engine_seq_close(e, seq);
			if (frc != 0)
				goto done;
		}
	}
	if (out->rows != n_chunks * T) {
		snprintf(err, err_len, "measured %lld rows, expected %lld", (long long)out->rows, (long long)(n_chunks * T));
		goto done;
	}
	rc = 0;
done:
	free(chunk);
	free(logits);
	engine_free(e);
	return rc;
}

typedef struct score_ctx {
	const int32_t *targets;       /* the window's tokens shifted by one: targets[r] follows input row r */
	int32_t vocab;
	double nll;
} score_ctx;

static void score_rows(void *p, const float *logits, int64_t row0, int32_t n_rows)
{
	score_ctx *s = p;
	for (int32_t r = 0; r < n_rows; r++) {
		float lp;
		sampler_logprobs(logits + (int64_t)r * s->vocab, s->vocab, s->targets[row0 + r], 0, &lp, NULL, NULL);
		s->nll -= lp;
	}
}

int calib_eval_run(const char *model_dir, const char *aah_path, const calib_engine_opts *o, const int32_t *ids,
                   int64_t n_ids, int64_t max_predicted, calib_eval_row *rows, int32_t n_rows, char *err,
                   size_t err_len)
{
	engine *e;
	if (open_engine(&e, model_dir, aah_path, o, err, err_len) != 0)
		return -1;
	const model_config *c = engine_config(e);
	const int32_t T = o->context_length;
	int64_t n_pred = n_ids - 1 < max_predicted ? n_ids - 1 : max_predicted;
	float *logits = malloc((size_t)PIECE_EVAL * c->vocab_size * sizeof *logits);
	int rc = -1;
	if (!logits) {
		snprintf(err, err_len, "out of memory for %d rows of logits", PIECE_EVAL);
		goto done;
	}
	if (n_pred < 1) {
		snprintf(err, err_len, "the held-out text has fewer than 2 tokens");
		goto done;
	}
	progress pr = { .what = "scoring held-out text:", .total = n_pred * n_rows, .quiet = o->quiet };
	pr.t0 = pr.last = aah_now_s();
	int64_t done = 0;
	for (int32_t r = 0; r < n_rows; r++) {
		calib_eval_row *row = &rows[r];
		double usage_w = 0, usage = 0;
		int32_t acr_T = T;
		uint64_t work = 0, work_full = 0;
		row->nll = 0;
		row->n_predicted = 0;
		row->kv_ratio_engine = 0;
		for (int64_t at = 0; at < n_pred; at += T) {
			int64_t n = n_pred - at < T ? n_pred - at : T;   /* inputs ids[at, at + n), targets one further */
			int32_t seq = engine_seq_open(e, row->regime, err, err_len);
			if (seq < 0)
				goto done;
			score_ctx sc = { .targets = ids + at + 1, .vocab = c->vocab_size };
			int frc = prefill(e, seq, ids + at, n, PIECE_EVAL, logits, score_rows, &sc, &pr, &done, err, err_len);
			engine_seq_stats st;
			if (frc == 0 && engine_seq_stats_get(e, seq, &st) == 0) {
				usage_w += st.branch_usage_weighted;
				usage += st.branch_usage_total;
				work += st.attn_products;
				work_full += st.attn_products_full;
				double kv = st.kv_bytes_full_peak ? (double)st.kv_bytes_peak / (double)st.kv_bytes_full_peak : 1;
				row->kv_ratio_engine = kv > row->kv_ratio_engine ? kv : row->kv_ratio_engine;
				acr_T = st.context_length;
			}
			engine_seq_close(e, seq);
			if (frc != 0)
				goto done;
			row->nll += sc.nll;
			row->n_predicted += n;
		}
		/* full attention: 1 by definition (docs/architecture.md) */
		row->acr_engine = !strcmp(row->regime, AAH_FULL_ATTENTION) ? 1 : usage > 0 ? usage_w / usage / acr_T : 0;
		row->work_ratio = work_full ? (double)work / (double)work_full : 1;
	}
	rc = 0;
done:
	free(logits);
	engine_free(e);
	return rc;
}
