/* tools/convert/calib_assign.c — from measured attention to groups and windows (see calib_assign.h): coverage
 * windows, the wide joint scorer, feature trees of KV heads, and the four regimes of table 3 written as an aah_config. */
#include "tools/convert/calib_assign.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COVER_EPS 1e-12

static const char *const kind_names[CALIB_N_KINDS] = { "grouping_off", "shallow_freeze", "full_adaptive",
	                                                   "deep_reuse" };

const char *calib_kind_name(calib_kind k) { return k >= 0 && k < CALIB_N_KINDS ? kind_names[k] : "?"; }

double calib_kept(const calib_meas *m, const double *mass, int32_t w)
{
	double in = 0, all = 0;
	for (int32_t b = 0; b < m->n_bands; b++) {
		all += mass[b];
		if (m->band_hi[b] <= w)
			in += mass[b];
	}
	return all > 0 ? in / all : 0;
}

static double total(const calib_meas *m, const double *mass)
{
	double s = 0;
	for (int32_t b = 0; b < m->n_bands; b++)
		s += mass[b];
	return s;
}

int32_t calib_window_alone(const calib_meas *m, const calib_params *p, const double *mass)
{
	for (int32_t i = 0; i < p->n_windows; i++)
		if (calib_kept(m, mass, p->windows[i]) >= p->coverage - COVER_EPS)
			return p->windows[i];
	return p->windows[p->n_windows - 1];
}

void calib_windows_joint(const calib_meas *m, const calib_params *p, const double *ma, int32_t na, const double *mb,
                         int32_t nb, int32_t *wa, int32_t *wb)
{
	const int32_t k = p->n_windows;
	const double Ma = total(m, ma), Mb = total(m, mb), floor_share = 2 * p->coverage - 1;
	double ka[AAH_MAX_WINDOWS], kb[AAH_MAX_WINDOWS];
	for (int32_t i = 0; i < k; i++) {
		ka[i] = calib_kept(m, ma, p->windows[i]);
		kb[i] = calib_kept(m, mb, p->windows[i]);
	}
	*wa = calib_window_alone(m, p, ma);
	*wb = calib_window_alone(m, p, mb);
	if (!(Ma + Mb > 0))
		return;
	double best_cost = INFINITY, best_kept = -1;
	for (int32_t i = 0; i < k; i++)
		for (int32_t j = 0; j < k; j++) {
			if (ka[i] < floor_share - COVER_EPS || kb[j] < floor_share - COVER_EPS)
				continue;
			double pooled = (ka[i] * Ma + kb[j] * Mb) / (Ma + Mb);
			if (pooled < p->coverage - COVER_EPS)
				continue;
			double cost = (double)na * p->windows[i] + (double)nb * p->windows[j];
			/* i ascends, so on equal cost and share the smaller W_a is already held */
			if (cost < best_cost || (cost == best_cost && pooled > best_kept)) {
				best_cost = cost;
				best_kept = pooled;
				*wa = p->windows[i];
				*wb = p->windows[j];
			}
		}
}

void calib_features(const calib_meas *m, int32_t layer, int32_t kv, double *f)
{
	const double *mass = m->mass + ((int64_t)layer * m->n_kv + kv) * m->n_bands;
	const double all = total(m, mass);
	double cum = 0;
	for (int32_t b = 0; b + 1 < m->n_bands; b++) {
		cum += mass[b];
		f[b] = all > 0 ? cum / all : 0;
	}
	double ent = 0;
	if (m->entropy && m->uniform_entropy > 0)
		ent = m->entropy[(int64_t)layer * m->n_kv + kv] / (m->q_per_kv * m->uniform_entropy);
	f[m->n_bands - 1] = ent;
}

double calib_reach(const calib_meas *m, const double *f)
{
	if (m->n_bands < 2)
		return 0;
	double s = 0;
	for (int32_t b = 0; b + 1 < m->n_bands; b++)
		s += 1 - f[b];
	return s / (m->n_bands - 1);
}

/* ---- trees ---- */

static const double *sort_reach;   /* the comparator's key (single-threaded tool) */
static int by_reach(const void *x, const void *y)
{
	int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
	if (sort_reach[a] != sort_reach[b])
		return sort_reach[a] < sort_reach[b] ? -1 : 1;
	return a - b;
}

/* Σ over heads order[first, first + n) of the squared distance of their feature vectors to their mean. */
static double run_sse(const int32_t *order, int32_t first, int32_t n, const double *feat, int32_t n_feat)
{
	double sse = 0;
	for (int32_t j = 0; j < n_feat; j++) {
		double s = 0, s2 = 0;
		for (int32_t i = first; i < first + n; i++) {
			double x = feat[(int64_t)order[i] * n_feat + j];
			s += x;
			s2 += x * x;
		}
		double v = s2 - s * s / n;
		sse += v > 0 ? v : 0;
	}
	return sse;
}

int calib_tree_build(calib_tree *t, const double *feat, const double *reach, int32_t n_heads, int32_t n_feat,
                     int32_t levels)
{
	memset(t, 0, sizeof *t);
	if (levels > CALIB_MAX_LEVELS)
		levels = CALIB_MAX_LEVELS;
	t->n_heads = n_heads;
	t->order = malloc((size_t)n_heads * sizeof *t->order);
	t->nodes = malloc((size_t)(2 * n_heads) * sizeof *t->nodes);
	t->leaves = malloc((size_t)n_heads * sizeof *t->leaves);
	if (!t->order || !t->nodes || !t->leaves) {
		calib_tree_free(t);
		return -1;
	}
	for (int32_t h = 0; h < n_heads; h++)
		t->order[h] = h;
	sort_reach = reach;
	qsort(t->order, (size_t)n_heads, sizeof *t->order, by_reach);
	t->nodes[0] = (calib_node){ .first = 0, .n = n_heads, .child = { -1, -1 }, .parent = -1 };
	t->n_nodes = 1;
	int32_t level_begin = 0, level_end = 1;   /* the nodes made by the previous level */
	for (int32_t lv = 0; lv < levels; lv++) {
		for (int32_t i = level_begin; i < level_end; i++) {
			calib_node *nd = &t->nodes[i];
			if (nd->n < 2)
				continue;
			int32_t best = -1;
			double best_sse = INFINITY, best_off = INFINITY;
			for (int32_t cut = 1; cut < nd->n; cut++) {
				double sse = run_sse(t->order, nd->first, cut, feat, n_feat) +
				             run_sse(t->order, nd->first + cut, nd->n - cut, feat, n_feat);
				double off = fabs(cut - nd->n / 2.0);
				/* equal up to rounding counts as equal: the nearer-the-middle cut wins */
				if (sse < best_sse - 1e-12 * (1 + best_sse) ||
				    (fabs(sse - best_sse) <= 1e-12 * (1 + best_sse) && off < best_off)) {
					best = cut;
					best_sse = sse < best_sse ? sse : best_sse;
					best_off = off;
				}
			}
			for (int c = 0; c < 2; c++) {
				int32_t ci = t->n_nodes++;
				t->nodes[ci] = (calib_node){ .first = c ? nd->first + best : nd->first, .n = c ? nd->n - best : best,
					                         .child = { -1, -1 }, .parent = i };
				t->nodes[i].child[c] = ci;
				nd = &t->nodes[i];
			}
		}
		level_begin = level_end;
		level_end = t->n_nodes;
		if (level_begin == level_end)
			break;
	}
	/* leaves left to right: a depth-first walk (children hold contiguous runs in order) */
	int32_t stack[2 * CALIB_MAX_LEVELS + 2], sp = 0;
	stack[sp++] = 0;
	while (sp > 0) {
		int32_t i = stack[--sp];
		if (t->nodes[i].child[0] < 0) {
			t->leaves[t->n_leaves++] = i;
			continue;
		}
		stack[sp++] = t->nodes[i].child[1];
		stack[sp++] = t->nodes[i].child[0];
	}
	return 0;
}

void calib_tree_free(calib_tree *t)
{
	free(t->order);
	free(t->nodes);
	free(t->leaves);
	memset(t, 0, sizeof *t);
}

int32_t calib_tree_sibling_leaf(const calib_tree *t, int32_t node)
{
	int32_t p = t->nodes[node].parent;
	if (p < 0)
		return -1;
	int32_t s = t->nodes[p].child[0] == node ? t->nodes[p].child[1] : t->nodes[p].child[0];
	return t->nodes[s].child[0] < 0 ? s : -1;
}

void calib_tree_path(const calib_tree *t, int32_t node, char *out)
{
	char rev[CALIB_MAX_LEVELS + 1];
	int32_t n = 0;
	for (int32_t i = node; t->nodes[i].parent >= 0 && n < CALIB_MAX_LEVELS; i = t->nodes[i].parent)
		rev[n++] = t->nodes[t->nodes[i].parent].child[0] == i ? '0' : '1';
	for (int32_t i = 0; i < n; i++)
		out[i] = rev[n - 1 - i];
	out[n] = 0;
}

/* ---- regimes ---- */

/* The summed mass (n_bands) of the heads order[first, first + n) of layer l: from the totals, or chunk c's. */
static void group_mass(const calib_meas *m, const double *src, int32_t l, const int32_t *heads, int32_t n,
                       double *out)
{
	for (int32_t b = 0; b < m->n_bands; b++)
		out[b] = 0;
	for (int32_t i = 0; i < n; i++) {
		const double *x = src + ((int64_t)l * m->n_kv + heads[i]) * m->n_bands;
		for (int32_t b = 0; b < m->n_bands; b++)
			out[b] += x[b];
	}
}

/* Builds layer l's groups from tree t (the leaves, left to right), windows by the joint scorer for sibling leaves and
 * alone otherwise; capacities per the regime. */
static int layer_from_tree(aah_layer *L, calib_group_info *gi, const calib_meas *m, const calib_params *p,
                           const calib_tree *t, int32_t l, int adaptive, double *scratch)
{
	const int32_t nb = m->n_bands;
	double *ma = scratch, *mb = scratch + nb;
	L->n_groups = t->n_leaves;
	L->groups = calloc((size_t)t->n_leaves, sizeof *L->groups);
	if (!L->groups)
		return -1;
	for (int32_t g = 0; g < t->n_leaves; g++) {
		const calib_node *nd = &t->nodes[t->leaves[g]];
		aah_group *G = &L->groups[g];
		G->kv_heads = malloc((size_t)nd->n * sizeof *G->kv_heads);
		if (!G->kv_heads)
			return -1;
		G->n_kv_heads = nd->n;
		memcpy(G->kv_heads, t->order + nd->first, (size_t)nd->n * sizeof *G->kv_heads);
		/* heads in ascending index order within a group: the tree's order is by reach */
		for (int32_t i = 1; i < G->n_kv_heads; i++)
			for (int32_t j = i; j > 0 && G->kv_heads[j - 1] > G->kv_heads[j]; j--) {
				int32_t x = G->kv_heads[j];
				G->kv_heads[j] = G->kv_heads[j - 1];
				G->kv_heads[j - 1] = x;
			}
		calib_tree_path(t, t->leaves[g], gi[g].path);
		gi[g].sibling = -1;
	}
	for (int32_t g = 0; g < t->n_leaves; g++) {
		aah_group *G = &L->groups[g];
		group_mass(m, m->mass, l, G->kv_heads, G->n_kv_heads, ma);
		gi[g].window_alone = calib_window_alone(m, p, ma);
		if (gi[g].sibling >= 0)
			continue;   /* set with its left sibling */
		int32_t s = calib_tree_sibling_leaf(t, t->leaves[g]);
		int32_t sg = -1;
		for (int32_t k = g + 1; s >= 0 && k < t->n_leaves; k++)
			if (t->leaves[k] == s)
				sg = k;
		if (sg < 0) {
			G->window = gi[g].window_alone;
			continue;
		}
		aah_group *S = &L->groups[sg];
		group_mass(m, m->mass, l, S->kv_heads, S->n_kv_heads, mb);
		calib_windows_joint(m, p, ma, G->n_kv_heads * m->q_per_kv, mb, S->n_kv_heads * m->q_per_kv, &G->window,
		                    &S->window);
		gi[g].sibling = sg;
		gi[sg].sibling = g;
	}
	for (int32_t g = 0; g < t->n_leaves; g++) {
		aah_group *G = &L->groups[g];
		group_mass(m, m->mass, l, G->kv_heads, G->n_kv_heads, ma);
		gi[g].kept = calib_kept(m, ma, G->window);
		G->capacity = G->window;
		for (int32_t c = 0; adaptive && c < m->n_chunks; c++) {
			group_mass(m, m->chunk_mass + (int64_t)c * m->n_layers * m->n_kv * nb, l, G->kv_heads, G->n_kv_heads,
			           ma);
			int32_t w = calib_window_alone(m, p, ma);
			G->capacity = w > G->capacity ? w : G->capacity;
		}
	}
	return 0;
}

static void set_regime(aah_regime *r, calib_kind k, const calib_params *p)
{
	static const int32_t deep[4] = { 2, 2, 2, 2 };
	r->policy = (aah_policy){ .kind = AAH_POLICY_STATIC, .control_interval = 5, .feature_ema = 0.9f,
		                      .resolution_ema = 0.15f };
	switch (k) {
	case CALIB_GROUPING_OFF:
		snprintf(r->grouping, sizeof r->grouping, "off");
		snprintf(r->scorer, sizeof r->scorer, "off");
		r->n_hierarchy = 0;
		break;
	case CALIB_SHALLOW_FREEZE:
		snprintf(r->grouping, sizeof r->grouping, "feature-derived frozen");
		snprintf(r->scorer, sizeof r->scorer, "wide joint");
		r->hierarchy[0] = 2;
		r->n_hierarchy = 1;
		break;
	case CALIB_FULL_ADAPTIVE:
		snprintf(r->grouping, sizeof r->grouping, "feature-derived adaptive");
		snprintf(r->scorer, sizeof r->scorer, "wide joint");
		memcpy(r->hierarchy, deep, sizeof deep);
		r->n_hierarchy = 4;
		r->policy.kind = AAH_POLICY_ADAPTIVE;
		r->policy.coverage = (float)p->coverage;
		break;
	default:
		snprintf(r->grouping, sizeof r->grouping, "cached level-0");
		snprintf(r->scorer, sizeof r->scorer, "wide joint");
		memcpy(r->hierarchy, deep, sizeof deep);
		r->n_hierarchy = 4;
		break;
	}
}

void calib_info_free(calib_info *info)
{
	if (!info)
		return;
	for (int k = 0; k < CALIB_N_KINDS; k++)
		free(info->group[k]);
	memset(info, 0, sizeof *info);
}

int calib_assign(aah_config *a, calib_info *info, const calib_meas *m, const calib_params *p, char *err,
                 size_t err_len)
{
	memset(a, 0, sizeof *a);
	calib_info own;
	if (!info)
		info = &own;
	memset(info, 0, sizeof *info);
	info->n_layers = m->n_layers;
	if (p->n_windows < 1 || p->n_windows > AAH_MAX_WINDOWS || m->n_bands < 1 ||
	    m->band_hi[m->n_bands - 1] != p->context_length) {
		snprintf(err, err_len, "calibration: bad candidate windows or bands");
		return -1;
	}
	for (int32_t i = 0; i < p->n_windows; i++) {
		bool edge = p->windows[i] >= p->context_length;
		for (int32_t b = 0; b < m->n_bands && !edge; b++)
			edge = m->band_hi[b] == p->windows[i];
		if (!edge || p->windows[i] > p->context_length || (i > 0 && p->windows[i] <= p->windows[i - 1])) {
			snprintf(err, err_len, "calibration: candidate window %d is not a band edge below the context %d",
			         p->windows[i], p->context_length);
			return -1;
		}
	}
	const int32_t L = m->n_layers, nkv = m->n_kv, nf = m->n_bands;
	a->context_length = p->context_length;
	a->n_windows = p->n_windows;
	memcpy(a->windows, p->windows, (size_t)p->n_windows * sizeof *p->windows);
	a->n_layers = L;
	a->provenance_step = -1;
	a->default_regime = strdup(p->default_regime ? p->default_regime : "shallow_freeze");
	a->regimes = calloc(CALIB_N_KINDS, sizeof *a->regimes);
	double *feat = malloc((size_t)nkv * nf * sizeof *feat), *reach = malloc((size_t)nkv * sizeof *reach);
	double *scratch = malloc((size_t)2 * nf * sizeof *scratch);
	calib_tree deep = { 0 }, t = { 0 };
	int rc = -1;
	if (!a->default_regime || !a->regimes || !feat || !reach || !scratch)
		goto oom;
	for (int k = 0; k < CALIB_N_KINDS; k++) {
		info->group[k] = calloc((size_t)L * nkv, sizeof *info->group[k]);
		if (!info->group[k])
			goto oom;
	}
	/* deep_reuse's one tree: layer 0's features */
	for (int32_t h = 0; h < nkv; h++) {
		calib_features(m, 0, h, feat + (int64_t)h * nf);
		reach[h] = calib_reach(m, feat + (int64_t)h * nf);
	}
	if (calib_tree_build(&deep, feat, reach, nkv, nf, 4) != 0)
		goto oom;
	for (int k = 0; k < CALIB_N_KINDS; k++) {
		aah_regime *r = &a->regimes[a->n_regimes++];
		r->name = strdup(kind_names[k]);
		r->layers = calloc((size_t)L, sizeof *r->layers);
		if (!r->name || !r->layers)
			goto oom;
		set_regime(r, (calib_kind)k, p);
		for (int32_t l = 0; l < L; l++) {
			aah_layer *Ly = &r->layers[l];
			calib_group_info *gi = info->group[k] + (int64_t)l * nkv;
			if (k == CALIB_GROUPING_OFF) {
				Ly->n_groups = nkv;
				Ly->groups = calloc((size_t)nkv, sizeof *Ly->groups);
				if (!Ly->groups)
					goto oom;
				for (int32_t h = 0; h < nkv; h++) {
					aah_group *G = &Ly->groups[h];
					G->kv_heads = malloc(sizeof *G->kv_heads);
					if (!G->kv_heads)
						goto oom;
					G->kv_heads[0] = h;
					G->n_kv_heads = 1;
					const double *mh = m->mass + ((int64_t)l * nkv + h) * nf;
					G->window = G->capacity = gi[h].window_alone = calib_window_alone(m, p, mh);
					gi[h].kept = calib_kept(m, mh, G->window);
					gi[h].sibling = -1;
				}
				continue;
			}
			const calib_tree *use = &deep;
			if (k != CALIB_DEEP_REUSE) {
				for (int32_t h = 0; h < nkv; h++) {
					calib_features(m, l, h, feat + (int64_t)h * nf);
					reach[h] = calib_reach(m, feat + (int64_t)h * nf);
				}
				if (calib_tree_build(&t, feat, reach, nkv, nf, k == CALIB_SHALLOW_FREEZE ? 1 : 4) != 0)
					goto oom;
				use = &t;
			}
			int lrc = layer_from_tree(Ly, gi, m, p, use, l, k == CALIB_FULL_ADAPTIVE, scratch);
			calib_tree_free(&t);
			if (lrc != 0)
				goto oom;
		}
	}
	rc = 0;
	goto done;
oom:
	snprintf(err, err_len, "calibration: out of memory");
done:
	calib_tree_free(&deep);
	calib_tree_free(&t);
	free(feat);
	free(reach);
	free(scratch);
	if (rc != 0) {
		aah_config_free(a);
		calib_info_free(info);
	} else if (info == &own) {
		calib_info_free(&own);
	}
	return rc;
}

double calib_regime_acr(const aah_regime *r, int32_t n_layers, int32_t n_kv, int32_t q_per_kv, int32_t T,
                        int capacity_based)
{
	double num = 0;
	for (int32_t l = 0; l < n_layers; l++)
		for (int32_t g = 0; g < r->layers[l].n_groups; g++) {
			const aah_group *G = &r->layers[l].groups[g];
			int32_t w = capacity_based ? G->capacity : G->window;
			num += (double)G->n_kv_heads * q_per_kv * (w < T ? w : T);
		}
	return num / ((double)n_layers * n_kv * q_per_kv * T);
}

double calib_regime_kv_ratio(const aah_regime *r, int32_t n_layers, int32_t n_kv, int32_t T)
{
	double num = 0;
	for (int32_t l = 0; l < n_layers; l++)
		for (int32_t g = 0; g < r->layers[l].n_groups; g++) {
			const aah_group *G = &r->layers[l].groups[g];
			num += (double)G->n_kv_heads * (G->capacity < T ? G->capacity : T);
		}
	return num / ((double)n_layers * n_kv * T);
}
