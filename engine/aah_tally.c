/* engine/aah_tally.c — see aah_tally.h. */
#include "engine/aah_tally.h"

#include <string.h>

int32_t aah_tally_window(aah_tally *t, int32_t w)
{
	int32_t k = 0;
	while (k < t->n_windows && t->windows[k] < w)
		k++;
	if (k < t->n_windows && t->windows[k] == w)
		return k;
	if (t->n_windows == AAH_TALLY_MAX_WINDOWS)
		return -1;
	memmove(t->windows + k + 1, t->windows + k, (size_t)(t->n_windows - k) * sizeof *t->windows);
	memmove(t->window_usage + k + 1, t->window_usage + k, (size_t)(t->n_windows - k) * sizeof *t->window_usage);
	t->windows[k] = w;
	t->window_usage[k] = 0;
	t->n_windows++;
	return k;
}

void aah_tally_add(aah_tally *t, const engine_seq_stats *st)
{
	t->sequences++;
	t->usage_total += st->branch_usage_total;
	t->acr_weighted += st->acr * st->branch_usage_total;
	t->acr_sum += st->acr;
	t->attn_products += (double)st->attn_products;
	t->attn_products_full += (double)st->attn_products_full;
	t->kv_bytes_peak += (double)st->kv_bytes_peak;
	t->kv_bytes_full_peak += (double)st->kv_bytes_full_peak;
	for (int32_t u = 0; u < st->n_usage; u++) {
		int32_t k = aah_tally_window(t, st->usage_window[u]);
		if (k >= 0)
			t->window_usage[k] += st->usage[u];
	}
}

double aah_tally_acr(const aah_tally *t)
{
	return t->usage_total > 0 ? t->acr_weighted / t->usage_total : t->sequences ? t->acr_sum / (double)t->sequences : 1.0;
}

double aah_tally_work_ratio(const aah_tally *t)
{
	return t->attn_products_full > 0 ? t->attn_products / t->attn_products_full : 1.0;
}

double aah_tally_kv_ratio(const aah_tally *t)
{
	return t->kv_bytes_full_peak > 0 ? t->kv_bytes_peak / t->kv_bytes_full_peak : 1.0;
}

double aah_tally_usage_weighted(const aah_tally *t)
{
	double s = 0;
	for (int32_t k = 0; k < t->n_windows; k++)
		s += t->window_usage[k] * t->windows[k];
	return s;
}
