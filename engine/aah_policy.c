/* engine/aah_policy.c — regimes, per-sequence window selection (static and adaptive) and branch usage; the rule
 * of the adaptive controller is written out in aah_policy.h. */
#include "engine/aah_policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_COVERAGE 0.95f

static void regime_free(aah_regime_rt *r)
{
	free(r->group_layer);
	free(r->group_heads);
	free(r->group_window0);
	free(r->group_capacity);
	free(r->head_group);
	free(r->head_capacity);
}

/* Allocates the arrays of a regime with n_groups groups. */
static int regime_alloc(aah_regime_rt *r, int32_t n_groups, int32_t n_heads_total)
{
	r->n_groups = n_groups;
	r->group_layer = calloc((size_t)n_groups, sizeof(int32_t));
	r->group_heads = calloc((size_t)n_groups, sizeof(int32_t));
	r->group_window0 = calloc((size_t)n_groups, sizeof(int32_t));
	r->group_capacity = calloc((size_t)n_groups, sizeof(int32_t));
	r->head_group = calloc((size_t)n_heads_total, sizeof(int32_t));
	r->head_capacity = calloc((size_t)n_heads_total, sizeof(int32_t));
	return r->group_layer && r->group_heads && r->group_window0 && r->group_capacity && r->head_group &&
	               r->head_capacity
	               ? 0
	               : -1;
}

int aah_regimes_init(aah_regimes *rs, const aah_config *a, int32_t n_layers, int32_t n_kv, int32_t q_per_kv,
                     int32_t ctx_len)
{
	memset(rs, 0, sizeof *rs);
	rs->n_layers = n_layers;
	rs->n_kv = n_kv;
	rs->q_per_kv = q_per_kv;
	rs->context_length = a ? a->context_length : ctx_len;
	if (a) {
		rs->n_windows = a->n_windows;
		memcpy(rs->windows, a->windows, sizeof rs->windows);
	}
	int32_t n = 1 + (a ? a->n_regimes : 0);
	rs->r = calloc((size_t)n, sizeof *rs->r);
	if (!rs->r)
		return -1;
	rs->n = n;
	const int32_t heads = n_layers * n_kv;

	/* full attention: one group per layer holding every KV head, the whole context */
	aah_regime_rt *f = &rs->r[0];
	f->name = AAH_FULL_ATTENTION;
	f->full = true;
	f->policy.kind = AAH_POLICY_STATIC;
	if (regime_alloc(f, n_layers, heads) != 0)
		goto oom;
	for (int32_t l = 0; l < n_layers; l++) {
		f->group_layer[l] = l;
		f->group_heads[l] = n_kv;
		f->group_window0[l] = f->group_capacity[l] = ctx_len;
		for (int32_t h = 0; h < n_kv; h++) {
			f->head_group[l * n_kv + h] = l;
			f->head_capacity[l * n_kv + h] = ctx_len;
		}
	}
	rs->max_groups = n_layers;

	for (int32_t i = 0; a && i < a->n_regimes; i++) {
		const aah_regime *src = &a->regimes[i];
		aah_regime_rt *r = &rs->r[1 + i];
		r->name = src->name;
		r->policy = src->policy;
		r->coverage = src->policy.coverage > 0 ? src->policy.coverage : DEFAULT_COVERAGE;
		int32_t g_total = 0;
		for (int32_t l = 0; l < n_layers; l++)
			g_total += src->layers[l].n_groups;
		if (regime_alloc(r, g_total, heads) != 0)
			goto oom;
		int32_t g = 0;
		for (int32_t l = 0; l < n_layers; l++)
			for (int32_t gi = 0; gi < src->layers[l].n_groups; gi++, g++) {
				const aah_group *sg = &src->layers[l].groups[gi];
				r->group_layer[g] = l;
				r->group_heads[g] = sg->n_kv_heads;
				/* a window above the engine's context is the whole context */
				r->group_window0[g] = sg->window < ctx_len ? sg->window : ctx_len;
				r->group_capacity[g] = sg->capacity < ctx_len ? sg->capacity : ctx_len;
				for (int32_t k = 0; k < sg->n_kv_heads; k++) {
					r->head_group[l * n_kv + sg->kv_heads[k]] = g;
					r->head_capacity[l * n_kv + sg->kv_heads[k]] = r->group_capacity[g];
				}
			}
		if (g_total > rs->max_groups)
			rs->max_groups = g_total;
	}
	rs->default_index = 0;
	if (a && a->default_regime) {
		int32_t d = aah_regimes_find(rs, a->default_regime);
		rs->default_index = d >= 0 ? d : 0;
	}
	return 0;
oom:
	aah_regimes_free(rs);
	return -1;
}

void aah_regimes_free(aah_regimes *rs)
{
	for (int32_t i = 0; rs->r && i < rs->n; i++)
		regime_free(&rs->r[i]);
	free(rs->r);
	memset(rs, 0, sizeof *rs);
}

int32_t aah_regimes_find(const aah_regimes *rs, const char *name)
{
	for (int32_t i = 0; i < rs->n; i++)
		if (!strcmp(rs->r[i].name, name))
			return i;
	return -1;
}

int aah_seq_state_init(aah_seq_state *s, const aah_regimes *rs)
{
	memset(s, 0, sizeof *s);
	size_t g = (size_t)rs->max_groups, nw = rs->n_windows > 0 ? (size_t)rs->n_windows : 1;
	s->feature = calloc(g * nw, sizeof *s->feature);
	s->resolution = calloc(g, sizeof *s->resolution);
	s->have_feature = calloc(g, sizeof *s->have_feature);
	s->group_window = calloc(g, sizeof *s->group_window);
	s->head_window = calloc((size_t)rs->n_layers * (size_t)rs->n_kv, sizeof *s->head_window);
	if (!s->feature || !s->resolution || !s->have_feature || !s->group_window || !s->head_window) {
		aah_seq_state_free(s);
		return -1;
	}
	return 0;
}

void aah_seq_state_free(aah_seq_state *s)
{
	free(s->feature);
	free(s->resolution);
	free(s->have_feature);
	free(s->group_window);
	free(s->head_window);
	memset(s, 0, sizeof *s);
}

static void heads_from_groups(aah_seq_state *s, const aah_regimes *rs)
{
	const aah_regime_rt *r = &rs->r[s->regime];
	for (int32_t h = 0; h < rs->n_layers * rs->n_kv; h++)
		s->head_window[h] = s->group_window[r->head_group[h]];
}

void aah_seq_state_reset(aah_seq_state *s, const aah_regimes *rs, int32_t ri)
{
	const aah_regime_rt *r = &rs->r[ri];
	s->regime = ri;
	s->decode_steps = 0;
	s->n_usage = 0;
	memset(s->usage, 0, sizeof s->usage);
	for (int32_t g = 0; g < r->n_groups; g++) {
		s->group_window[g] = r->group_window0[g];
		s->resolution[g] = log2((double)r->group_window0[g]);
		s->have_feature[g] = false;
	}
	heads_from_groups(s, rs);
}

void aah_seq_state_copy(aah_seq_state *dst, const aah_seq_state *src, const aah_regimes *rs)
{
	size_t g = (size_t)rs->max_groups, nw = rs->n_windows > 0 ? (size_t)rs->n_windows : 1;
	size_t heads = (size_t)rs->n_layers * (size_t)rs->n_kv;
	dst->regime = src->regime;
	dst->decode_steps = src->decode_steps;
	memcpy(dst->feature, src->feature, g * nw * sizeof *dst->feature);
	memcpy(dst->resolution, src->resolution, g * sizeof *dst->resolution);
	memcpy(dst->have_feature, src->have_feature, g * sizeof *dst->have_feature);
	memcpy(dst->group_window, src->group_window, g * sizeof *dst->group_window);
	memcpy(dst->head_window, src->head_window, heads * sizeof *dst->head_window);
	memcpy(dst->usage_window, src->usage_window, sizeof dst->usage_window);
	memcpy(dst->usage, src->usage, sizeof dst->usage);
	dst->n_usage = src->n_usage;
}

bool aah_seq_probe_due(const aah_seq_state *s, const aah_regimes *rs)
{
	const aah_regime_rt *r = &rs->r[s->regime];
	return r->policy.kind == AAH_POLICY_ADAPTIVE && rs->n_windows > 0 &&
	       s->decode_steps % r->policy.control_interval == 0;
}

int32_t aah_seq_steps_to_probe(const aah_seq_state *s, const aah_regimes *rs)
{
	const aah_regime_rt *r = &rs->r[s->regime];
	if (r->policy.kind != AAH_POLICY_ADAPTIVE || rs->n_windows == 0)
		return INT32_MAX;
	/* step d is a probe when d % interval == 0: from decode_steps, the next such d is interval − rem steps on */
	const int64_t rem = s->decode_steps % r->policy.control_interval;
	return rem == 0 ? 0 : (int32_t)(r->policy.control_interval - rem);
}

static void usage_add(aah_seq_state *s, int32_t window, double n)
{
	for (int32_t i = 0; i < s->n_usage; i++)
		if (s->usage_window[i] == window) {
			s->usage[i] += n;
			return;
		}
	if (s->n_usage < AAH_MAX_USAGE) {
		s->usage_window[s->n_usage] = window;
		s->usage[s->n_usage++] = n;
	}
}

void aah_seq_count(aah_seq_state *s, const aah_regimes *rs, int64_t n_tokens, bool probe)
{
	const aah_regime_rt *r = &rs->r[s->regime];
	/* every (layer, group, query token) selection of W adds the group's query-head count to usage[W]; full attention
	 * selects the whole of T (the paper's definition, ACR 1), whatever context the engine runs at, so that the
	 * counters give its ACR as Σ W·usage / (T·Σ usage) like every other regime's */
	for (int32_t g = 0; g < r->n_groups; g++)
		usage_add(s, r->full ? rs->context_length : probe ? r->group_capacity[g] : s->group_window[g],
		          (double)n_tokens * r->group_heads[g] * rs->q_per_kv);
}

void aah_seq_uncount(aah_seq_state *s, const aah_regimes *rs, int64_t n_tokens, int32_t n_usage0)
{
	/* the counts are whole numbers (tokens × query heads) far below 2^53: adding and subtracting them in double is
	 * exact, so a taken-back count leaves usage bit for bit as it was */
	aah_seq_count(s, rs, -n_tokens, false);
	while (s->n_usage > n_usage0 && s->usage[s->n_usage - 1] == 0)
		s->n_usage--;
}

void aah_seq_control(aah_seq_state *s, const aah_regimes *rs, const float *band_mass)
{
	const aah_regime_rt *r = &rs->r[s->regime];
	const int32_t nw = rs->n_windows;
	const float ema = r->policy.feature_ema, res = r->policy.resolution_ema;
	float mass[AAH_MAX_WINDOWS];
	for (int32_t g = 0; g < r->n_groups; g++) {
		int32_t l = r->group_layer[g];
		for (int32_t b = 0; b < nw; b++)
			mass[b] = 0;
		for (int32_t h = 0; h < rs->n_kv; h++)
			if (r->head_group[l * rs->n_kv + h] == g)
				for (int32_t b = 0; b < nw; b++)
					mass[b] += band_mass[((int64_t)l * rs->n_kv + h) * nw + b];
		float total = 0;
		for (int32_t b = 0; b < nw; b++)
			total += mass[b];
		if (!(total > 0))
			continue;   /* nothing measured (e.g. a group with no query heads): keep the selection */
		float *f = s->feature + (int64_t)g * nw;
		for (int32_t b = 0; b < nw; b++) {
			float x = mass[b] / total;
			f[b] = s->have_feature[g] ? ema * f[b] + (1 - ema) * x : x;
		}
		s->have_feature[g] = true;
		/* the target: the smallest candidate within capacity that covers `coverage` of the mass */
		int32_t target = r->group_capacity[g];
		float cum = 0;
		for (int32_t b = 0; b < nw && rs->windows[b] <= r->group_capacity[g]; b++) {
			cum += f[b];
			if (cum >= r->coverage) {
				target = rs->windows[b];
				break;
			}
		}
		s->resolution[g] += res * (log2((double)target) - s->resolution[g]);
		double want = exp2(s->resolution[g]) * (1 - 1e-4);
		int32_t sel = r->group_capacity[g];
		for (int32_t b = 0; b < nw; b++)
			if ((double)rs->windows[b] >= want && rs->windows[b] <= r->group_capacity[g]) {
				sel = rs->windows[b];
				break;
			}
		s->group_window[g] = sel;
	}
	heads_from_groups(s, rs);
}

double aah_seq_acr(const aah_seq_state *s, const aah_regimes *rs)
{
	if (rs->r[s->regime].full)
		return 1.0;
	double num = 0, den = 0;
	for (int32_t i = 0; i < s->n_usage; i++) {
		num += s->usage[i] * s->usage_window[i];
		den += s->usage[i];
	}
	return den > 0 ? num / den / rs->context_length : 0.0;
}

static int32_t window_insert(int32_t *out, int32_t n, int32_t max, int32_t w)
{
	int32_t j = 0;
	while (j < n && out[j] < w)
		j++;
	if ((j < n && out[j] == w) || n == max)
		return n;
	memmove(out + j + 1, out + j, (size_t)(n - j) * sizeof *out);
	out[j] = w;
	return n + 1;
}

int32_t aah_regime_usage_windows(const aah_regimes *rs, int32_t ri, int32_t *out, int32_t max)
{
	const aah_regime_rt *r = &rs->r[ri];
	if (r->full)
		return max > 0 ? (out[0] = rs->context_length, 1) : 0;
	int32_t n = 0;
	for (int32_t g = 0; g < r->n_groups; g++) {
		n = window_insert(out, n, max, r->group_window0[g]);
		if (r->policy.kind != AAH_POLICY_ADAPTIVE || rs->n_windows == 0)
			continue;
		/* adaptive: any candidate within the capacity, and the capacity itself (probes count it; a selection is
		 * clamped to it) */
		n = window_insert(out, n, max, r->group_capacity[g]);
		for (int32_t w = 0; w < rs->n_windows && rs->windows[w] <= r->group_capacity[g]; w++)
			n = window_insert(out, n, max, rs->windows[w]);
	}
	return n;
}
