/* tools/convert/aah_write.c — aah.json from an aah_config (aah-convert calibrate, aah-mkmodel --aah), written atomically;
 * and the random regimes of generated models: windows drawn deterministically by seed and nudged until each
 * regime's ACR reaches its target. */
#include "tools/convert/aah_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

json_t *aah_group_to_json(const aah_group *g)
{
	json_t *jg = json_object(), *heads = json_array();
	if (!jg || !heads) {
		json_decref(jg);
		json_decref(heads);
		return NULL;
	}
	for (int32_t h = 0; h < g->n_kv_heads; h++)
		json_array_append_new(heads, json_integer(g->kv_heads[h]));
	json_object_set_new(jg, "kv_heads", heads);
	json_object_set_new(jg, "window", json_integer(g->window));
	json_object_set_new(jg, "capacity", json_integer(g->capacity));
	return jg;
}

json_t *aah_config_to_json(const aah_config *a, json_t *provenance)
{
	json_t *root = json_object(), *regimes = json_object(), *cw = json_array();
	if (!root || !regimes || !cw) {
		json_decref(root);
		json_decref(regimes);
		json_decref(cw);
		json_decref(provenance);
		return NULL;
	}
	json_object_set_new(root, "version", json_integer(1));
	json_object_set_new(root, "context_length", json_integer(a->context_length));
	for (int32_t i = 0; i < a->n_windows; i++)
		json_array_append_new(cw, json_integer(a->windows[i]));
	json_object_set_new(root, "candidate_windows", cw);
	for (int32_t r = 0; r < a->n_regimes; r++) {
		const aah_regime *g = &a->regimes[r];
		json_t *jr = json_object(), *pol = json_object(), *layers = json_array(), *hier = json_array();
		json_object_set_new(jr, "grouping", json_string(g->grouping));
		for (int32_t i = 0; i < g->n_hierarchy; i++)
			json_array_append_new(hier, json_integer(g->hierarchy[i]));
		json_object_set_new(jr, "hierarchy", hier);
		json_object_set_new(jr, "scorer", json_string(g->scorer));
		if (g->policy.kind == AAH_POLICY_ADAPTIVE) {
			json_object_set_new(pol, "kind", json_string("adaptive"));
			json_object_set_new(pol, "control_interval", json_integer(g->policy.control_interval));
			json_object_set_new(pol, "feature_ema", json_real(g->policy.feature_ema));
			json_object_set_new(pol, "resolution_ema", json_real(g->policy.resolution_ema));
			if (g->policy.coverage > 0)
				json_object_set_new(pol, "coverage", json_real(g->policy.coverage));
		} else {
			json_object_set_new(pol, "kind", json_string("static"));
		}
		json_object_set_new(jr, "policy", pol);
		for (int32_t l = 0; l < a->n_layers; l++) {
			json_t *jl = json_object(), *groups = json_array();
			for (int32_t gi = 0; gi < g->layers[l].n_groups; gi++) {
				json_array_append_new(groups, aah_group_to_json(&g->layers[l].groups[gi]));
			}
			json_object_set_new(jl, "groups", groups);
			json_array_append_new(layers, jl);
		}
		json_object_set_new(jr, "layers", layers);
		json_object_set_new(regimes, g->name, jr);
	}
	json_object_set_new(root, "regimes", regimes);
	if (a->default_regime)
		json_object_set_new(root, "default_regime", json_string(a->default_regime));
	if (provenance)
		json_object_set_new(root, "provenance", provenance);
	return root;
}

/* mkstemp makes the file 0600; a written aah.json gets what the umask gives any new file. */
static int fchmod_default(const char *path)
{
	mode_t mask = umask(0);
	umask(mask);
	return chmod(path, 0666 & ~mask);
}

int aah_json_write_tmp(const json_t *root, const char *path, char *tmp, size_t tmp_len, char *err, size_t err_len)
{
	if (snprintf(tmp, tmp_len, "%s.tmp-XXXXXX", path) >= (int)tmp_len) {
		snprintf(err, err_len, "%s: path too long", path);
		return -1;
	}
	int fd = mkstemp(tmp);
	if (fd < 0) {
		snprintf(err, err_len, "%s: cannot write (%s)", path, strerror(errno));
		return -1;
	}
	FILE *f = fdopen(fd, "w");
	if (!f) {
		snprintf(err, err_len, "%s: cannot write (%s)", path, strerror(errno));
		close(fd);
		unlink(tmp);
		return -1;
	}
	/* reals with 10 significant digits: 0.9 is written 0.9, not 0.90000000000000002 */
	errno = 0;
	int bad = json_dumpf(root, f, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10)) != 0;
	bad |= fputc('\n', f) == EOF;
	bad |= fflush(f) != 0;
	bad |= fsync(fileno(f)) != 0;
	int saved = errno;
	bad |= fclose(f) != 0;
	if (!bad && fchmod_default(tmp) == 0)
		return 0;
	saved = saved ? saved : errno;
	snprintf(err, err_len, "%s: cannot write (%s)", path, saved ? strerror(saved) : "write failed");
	unlink(tmp);
	return -1;
}

int aah_json_write_atomic(const json_t *root, const char *path, char *err, size_t err_len)
{
	char tmp[4200];
	if (aah_json_write_tmp(root, path, tmp, sizeof tmp, err, err_len) != 0)
		return -1;
	if (rename(tmp, path) != 0) {
		snprintf(err, err_len, "%s: cannot write (%s)", path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

typedef struct regime_spec {
	const char *name;
	const char *grouping;
	int hierarchy[4], n_hierarchy;
	aah_policy_kind policy;
	double table6_acr;           /* the paper's inference ACR for this regime (table 6) */
	int one_group_per_layer;
	int capacity_mult;
} regime_spec;

static const regime_spec specs[] = {
	{ "grouping_off", "off", { 0 }, 0, AAH_POLICY_STATIC, 0.5793, 1, 1 },
	{ "full_adaptive", "feature", { 2, 2, 2, 2 }, 4, AAH_POLICY_ADAPTIVE, 0.2484, 0, 2 },
	{ "shallow_freeze", "feature", { 2 }, 1, AAH_POLICY_STATIC, 0.3400, 0, 1 },
	{ "deep_reuse", "cached-level-0", { 2, 2, 2, 2 }, 4, AAH_POLICY_STATIC, 0.3616, 0, 1 },
};
#define N_SPECS (sizeof specs / sizeof specs[0])

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
	aah_config a = { .context_length = T, .n_windows = nw, .n_layers = p->n_layers, .provenance_step = 10000 };
	memcpy(a.windows, w, (size_t)nw * sizeof *w);
	a.regimes = calloc(N_SPECS, sizeof *a.regimes);
	a.default_regime = strdup(p->default_regime ? p->default_regime : "shallow_freeze");
	int32_t *idx = malloc(sizeof(int32_t) * (size_t)p->n_layers * (size_t)p->n_kv_heads);
	int rc = -1;
	if (!a.regimes || !a.default_regime || !idx)
		goto oom;
	uint64_t rng = p->seed ^ 0xaa11aa11ull;
	for (size_t r = 0; r < N_SPECS; r++) {
		const regime_spec *sp = &specs[r];
		aah_regime *g = &a.regimes[a.n_regimes++];
		int32_t per_layer = sp->one_group_per_layer ? 1 : p->n_kv_heads / gs;
		int32_t heads_per_group = p->n_kv_heads / per_layer;
		draw_windows(idx, per_layer * p->n_layers, w, nw, T, p->acr > 0 ? p->acr : sp->table6_acr, &rng);
		g->name = strdup(sp->name);
		snprintf(g->grouping, sizeof g->grouping, "%s", sp->grouping);
		snprintf(g->scorer, sizeof g->scorer, "%s", sp->one_group_per_layer ? "off" : "joint");
		g->n_hierarchy = sp->n_hierarchy;
		memcpy(g->hierarchy, sp->hierarchy, sizeof sp->hierarchy);
		g->policy = (aah_policy){ .kind = sp->policy, .control_interval = 5, .feature_ema = 0.9f,
		                          .resolution_ema = 0.15f };
		g->layers = calloc((size_t)p->n_layers, sizeof *g->layers);
		if (!g->name || !g->layers)
			goto oom;
		for (int32_t l = 0; l < p->n_layers; l++) {
			aah_layer *L = &g->layers[l];
			L->groups = calloc((size_t)per_layer, sizeof *L->groups);
			if (!L->groups)
				goto oom;
			L->n_groups = per_layer;
			for (int32_t gi = 0; gi < per_layer; gi++) {
				aah_group *G = &L->groups[gi];
				G->kv_heads = malloc((size_t)heads_per_group * sizeof *G->kv_heads);
				if (!G->kv_heads)
					goto oom;
				G->n_kv_heads = heads_per_group;
				for (int32_t h = 0; h < heads_per_group; h++)
					G->kv_heads[h] = gi * heads_per_group + h;
				G->window = p->layer_windows ? p->layer_windows[l] : w[idx[l * per_layer + gi]];
				G->capacity = G->window * sp->capacity_mult < T ? G->window * sp->capacity_mult : T;
			}
		}
	}
	json_t *prov = json_object();
	if (!prov)
		goto oom;
	json_object_set_new(prov, "step", json_integer(10000));
	json_object_set_new(prov, "seed", json_integer((json_int_t)p->seed));
	json_object_set_new(prov, "source", json_string("aah-mkmodel: random windows, not a trained policy"));
	json_t *root = aah_config_to_json(&a, prov);
	if (!root)
		goto oom;
	char path[4096];
	snprintf(path, sizeof path, "%s/aah.json", dir);
	rc = aah_json_write_atomic(root, path, err, err_len);
	json_decref(root);
	goto done;
oom:
	snprintf(err, err_len, "aah: out of memory");
done:
	free(idx);
	aah_config_free(&a);
	return rc;
}
