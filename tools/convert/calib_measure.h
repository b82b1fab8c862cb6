/* tools/convert/calib_measure.h — the engine work of aah-convert calibrate: the calibration chunks prefilled under full
 * attention with the attention measured (engine_seq_measure), and the held-out loss of each regime. */
#ifndef AAH_CALIB_MEASURE_H
#define AAH_CALIB_MEASURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct calib_engine_opts {
	const char *backend;          /* "cpu", "cuda", "auto" */
	int32_t threads;              /* 0: every core */
	int32_t context_length;       /* T: the chunk length and the engine's context */
	bool quiet;                   /* no progress lines on stderr */
	bool time_plain;              /* also prefill each chunk unmeasured, to time the two side by side */
} calib_engine_opts;

/* What the measurement gives, summed over every chunk's rows. The caller allocates the arrays. */
typedef struct calib_measured {
	int32_t n_bands;
	const int32_t *band_edges;    /* (n_bands − 1) the band edges below T */
	double *q_mass;               /* (n_layers, n_heads, n_bands) per query head */
	double *q_entropy;            /* (n_layers, n_heads) */
	double *chunk_kv_mass;        /* (n_chunks, n_layers, n_kv, n_bands) per chunk and KV head (its query heads summed) */
	int64_t rows;                 /* query rows measured per head */
	double seconds;               /* the measured prefills' wall time */
	double plain_seconds;         /* the unmeasured prefills' (time_plain), else 0 */
} calib_measured;

/* Prefills ids[c·T, (c+1)·T) for c < n_chunks, each as a fresh sequence under full attention (the model dir's aah.json
 * is not read), measured. Progress on stderr. Returns 0, or -1 with a message. */
int calib_measure_run(const char *model_dir, const calib_engine_opts *o, const int32_t *ids, int64_t n_chunks,
                      calib_measured *out, char *err, size_t err_len);

typedef struct calib_eval_row {
	const char *regime;
	double nll;                   /* Σ −log p(next token) */
	int64_t n_predicted;
	double acr_engine;            /* Σ_W usage·W / Σ usage / T over every chunk, as the engine counted it */
	double work_ratio;            /* attention products done / full causal */
	double kv_ratio_engine;       /* peak KV bytes / full attention's, over the chunks (the most of any chunk) */
} calib_eval_row;

/* Mean next-token loss of each regime over consecutive windows of T + 1 tokens of ids (overlapping by one, so every
 * token after the first is predicted once, at positions 0 … T−1; a shorter tail too), at most max_predicted
 * predictions, the regimes loaded from aah_path. rows[i].regime names the regime. Returns 0, or -1 with a message. */
int calib_eval_run(const char *model_dir, const char *aah_path, const calib_engine_opts *o, const int32_t *ids,
                   int64_t n_ids, int64_t max_predicted, calib_eval_row *rows, int32_t n_rows, char *err,
                   size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
