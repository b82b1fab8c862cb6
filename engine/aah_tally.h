/* engine/aah_tally.h — the AAH figures of several sequences added up, in one place: the scheduler's totals per regime
 * (/metrics, /stats) and a response's `aah` object (its choices) are both aah_tally sums of engine_seq_stats, and read
 * their ratios through the functions here. ACR over sequences is weighted by branch usage: Σ acr·usage / Σ usage,
 * which is ACR of all their selections together (the rectangular accounting). */
#ifndef AAH_ENGINE_AAH_TALLY_H
#define AAH_ENGINE_AAH_TALLY_H

#include <stdint.h>

#include "engine/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AAH_TALLY_MAX_WINDOWS 16   /* windows kept apart (one regime has at most 9: engine_seq_stats) */

typedef struct aah_tally {
	uint64_t sequences;
	double usage_total;                  /* Σ branch usage */
	double acr_weighted;                 /* Σ acr · branch usage */
	double acr_sum;                      /* Σ acr: the mean where no sequence has usage (a prompt of one token) */
	double attn_products, attn_products_full;
	double kv_bytes_peak, kv_bytes_full_peak;
	int32_t n_windows;
	int32_t windows[AAH_TALLY_MAX_WINDOWS];        /* ascending */
	double window_usage[AAH_TALLY_MAX_WINDOWS];    /* query-head selections of each */
} aah_tally;

/* The index of window w, added (at 0 usage, in order) when new; -1 when AAH_TALLY_MAX_WINDOWS are there already. */
int32_t aah_tally_window(aah_tally *t, int32_t w);
void aah_tally_add(aah_tally *t, const engine_seq_stats *st);
/* Usage-weighted ACR; the plain mean where nothing has usage; 1 (full attention's, by definition) for no sequence. */
double aah_tally_acr(const aah_tally *t);
/* Attention products / those of full attention, and KV peak / full attention's; 1 where nothing was counted. */
double aah_tally_work_ratio(const aah_tally *t);
double aah_tally_kv_ratio(const aah_tally *t);
/* Σ W · usage(W) over the windows. */
double aah_tally_usage_weighted(const aah_tally *t);

#ifdef __cplusplus
}
#endif
#endif
