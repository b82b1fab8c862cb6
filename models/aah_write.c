/* models/aah_write.c — aah.json for generated models (aah-mkmodel --aah): every principal regime of table 3,
 * windows drawn deterministically by seed and nudged until the regime's ACR reaches its target. */
#include "models/aah_write.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct regime_spec {
	const char *name;
	const char *grouping;
	int hierarchy[4], n_hierarchy;
	const char *policy;
	double table6_acr;           /* the paper's inference ACR for this regime (table 6) */
	int one_group_per_layer;
	int capacity_mult;
} regime_spec;

static const regime_spec specs[] = {
	{ "grouping_off", "off", { 0 }, 0, "static", 0.5793, 1, 1 },
	{ "full_adaptive", "feature", { 2, 2, 2, 2 }, 4, "adaptive", 0.2484, 0, 2 },
	{ "shallow_freeze", "feature", { 2 }, 1, "static", 0.3400, 0, 1 },
	{ "deep_reuse", "cached-level-0", { 2, 2, 2, 2 }, 4, "static", 0.3616, 0, 1 },
};

static uint64_t next_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Window index per group: all start at the smallest; random groups move up one candidate at a time while the mean
 * of W/T stays within the target, so the ACR (equal query heads per group) lands just at or below it. */
static void draw_windows(int32_t *idx, int32_t n, const int32_t *w, int32_t nw, int32_t T, double target,
                         uint64_t *rng)
{
	double sum = 0;
	for (int32_t g = 0; g < n; g++) {
		idx[g] = 0;
		sum += (double)w[0] / T;
	}
	for (int tries = 0; tries < 64 * n; tries++) {
		int32_t g = (int32_t)(next_rand(rng) % (uint64_t)n);
		if (idx[g] + 1 >= nw)
			continue;
		double next = sum + (double)(w[idx[g] + 1] - w[idx[g]]) / T;
		if (next / n > target + 1e-12)
			continue;
		idx[g]++;
		sum = next;
	}
}

int aah_write_file(const char *dir, const aah_write_params *p, char *err, size_t err_len)
{
	const int32_t T = p->context_length > 0 ? p->context_length : 4096;
	int32_t def_w[4] = { 512, 1024, 2048, 4096 }, nw = p->n_windows > 0 ? p->n_windows : 4;
	const int32_t *w = p->n_windows > 0 ? p->windows : def_w;
	const int32_t gs = p->group_size > 0 ? p->group_size : 1;
	if (p->n_kv_heads % gs != 0) {
		snprintf(err, err_len, "aah: group size %d does not divide %d KV heads", gs, p->n_kv_heads);
		return -1;
	}
	for (int32_t i = 0; i < nw; i++)
		if (w[i] > T || (i > 0 && w[i] <= w[i - 1])) {
			snprintf(err, err_len, "aah: candidate windows must ascend and not exceed the context length %d", T);
			return -1;
		}
	uint64_t rng = p->seed ^ 0xaa11aa11ull;
	json_t *root = json_object(), *regimes = json_object(), *cw = json_array();
	json_object_set_new(root, "version", json_integer(1));
	json_object_set_new(root, "context_length", json_integer(T));
	for (int32_t i = 0; i < nw; i++)
		json_array_append_new(cw, json_integer(w[i]));
	json_object_set_new(root, "candidate_windows", cw);
	int32_t *idx = malloc(sizeof(int32_t) * (size_t)p->n_layers * (size_t)p->n_kv_heads);
	for (size_t r = 0; r < sizeof specs / sizeof specs[0]; r++) {
		const regime_spec *sp = &specs[r];
		int32_t per_layer = sp->one_group_per_layer ? 1 : p->n_kv_heads / gs;
		int32_t heads_per_group = p->n_kv_heads / per_layer;
		int32_t n_groups = per_layer * p->n_layers;
		draw_windows(idx, n_groups, w, nw, T, p->acr > 0 ? p->acr : sp->table6_acr, &rng);
		json_t *jr = json_object(), *pol = json_object(), *layers = json_array(), *hier = json_array();
		json_object_set_new(jr, "grouping", json_string(sp->grouping));
		for (int i = 0; i < sp->n_hierarchy; i++)
			json_array_append_new(hier, json_integer(sp->hierarchy[i]));
		json_object_set_new(jr, "hierarchy", hier);
		json_object_set_new(jr, "scorer", json_string(sp->one_group_per_layer ? "off" : "joint"));
		json_object_set_new(pol, "kind", json_string(sp->policy));
		if (!strcmp(sp->policy, "adaptive")) {
			json_object_set_new(pol, "control_interval", json_integer(5));
			json_object_set_new(pol, "feature_ema", json_real(0.9));
			json_object_set_new(pol, "resolution_ema", json_real(0.15));
		}
		json_object_set_new(jr, "policy", pol);
		for (int32_t l = 0; l < p->n_layers; l++) {
			json_t *jl = json_object(), *groups = json_array();
			for (int32_t g = 0; g < per_layer; g++) {
				json_t *jg = json_object(), *heads = json_array();
				for (int32_t h = 0; h < heads_per_group; h++)
					json_array_append_new(heads, json_integer(g * heads_per_group + h));
				int32_t win = p->layer_windows ? p->layer_windows[l] : w[idx[l * per_layer + g]];
				int32_t cap = win * sp->capacity_mult < T ? win * sp->capacity_mult : T;
				json_object_set_new(jg, "kv_heads", heads);
				json_object_set_new(jg, "window", json_integer(win));
				json_object_set_new(jg, "capacity", json_integer(cap));
				json_array_append_new(groups, jg);
			}
			json_object_set_new(jl, "groups", groups);
			json_array_append_new(layers, jl);
		}
		json_object_set_new(jr, "layers", layers);
		json_object_set_new(regimes, sp->name, jr);
	}
	free(idx);
	json_object_set_new(root, "regimes", regimes);
	json_object_set_new(root, "default_regime", json_string(p->default_regime ? p->default_regime : "shallow_freeze"));
	json_t *prov = json_object();
	json_object_set_new(prov, "step", json_integer(10000));
	json_object_set_new(prov, "seed", json_integer((json_int_t)p->seed));
	json_object_set_new(prov, "source", json_string("aah-mkmodel: random windows, not a trained policy"));
	json_object_set_new(root, "provenance", prov);

	char path[4096], tmp[4200];
	snprintf(path, sizeof path, "%s/aah.json", dir);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	int rc = json_dump_file(root, tmp, JSON_INDENT(1) | JSON_SORT_KEYS);
	json_decref(root);
	if (rc != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		snprintf(err, err_len, "%s: cannot write", path);
		return -1;
	}
	return 0;
}
