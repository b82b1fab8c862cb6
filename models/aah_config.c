/* models/aah_config.c — parses and validates aah.json (see aah_config.h) and resolves run directories to their
 * checkpoint. Nothing from the file is trusted until checked against the model's layer and head counts. */
#include "models/aah_config.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "models/errf.h"
#include "models/gguf_model.h"

static int get_int(json_t *v, int64_t lo, int64_t hi, int64_t *out)
{
	if (!json_is_integer(v))
		return -1;
	int64_t x = json_integer_value(v);
	if (x < lo || x > hi)
		return -1;
	*out = x;
	return 0;
}

static int get_real(json_t *v, double lo, double hi, double *out)
{
	if (!json_is_number(v))
		return -1;
	double x = json_number_value(v);
	if (!(x >= lo && x <= hi))
		return -1;
	*out = x;
	return 0;
}

static bool is_candidate(const aah_config *a, int64_t w)
{
	for (int32_t i = 0; i < a->n_windows; i++)
		if (a->windows[i] == w)
			return true;
	return false;
}

static int parse_policy(aah_regime *g, json_t *p, char *err, size_t err_len)
{
	g->policy.kind = AAH_POLICY_STATIC;
	g->policy.control_interval = 5;
	g->policy.feature_ema = 0.9f;
	g->policy.resolution_ema = 0.15f;
	g->policy.coverage = 0.95f;
	if (!p)
		return 0;
	if (!json_is_object(p)) {
		aah_errf(err, err_len, "aah.json: regime '%s': 'policy' must be an object", g->name);
		return -1;
	}
	json_t *kind = json_object_get(p, "kind");
	if (kind) {
		const char *k = json_string_value(kind);
		if (k && !strcmp(k, "static"))
			g->policy.kind = AAH_POLICY_STATIC;
		else if (k && !strcmp(k, "adaptive"))
			g->policy.kind = AAH_POLICY_ADAPTIVE;
		else {
			aah_errf(err, err_len, "aah.json: regime '%s': policy kind must be \"static\" or \"adaptive\"", g->name);
			return -1;
		}
	}
	json_t *v;
	int64_t iv;
	double dv;
	if ((v = json_object_get(p, "control_interval"))) {
		if (get_int(v, 1, 1 << 20, &iv)) {
			aah_errf(err, err_len, "aah.json: regime '%s': control_interval must be an integer ≥ 1", g->name);
			return -1;
		}
		g->policy.control_interval = (int32_t)iv;
	}
	if ((v = json_object_get(p, "feature_ema"))) {
		if (get_real(v, 0, 1, &dv)) {
			aah_errf(err, err_len, "aah.json: regime '%s': feature_ema must be a number in [0, 1]", g->name);
			return -1;
		}
		g->policy.feature_ema = (float)dv;
	}
	if ((v = json_object_get(p, "resolution_ema"))) {
		if (get_real(v, 0, 1, &dv)) {
			aah_errf(err, err_len, "aah.json: regime '%s': resolution_ema must be a number in [0, 1]", g->name);
			return -1;
		}
		g->policy.resolution_ema = (float)dv;
	}
	if ((v = json_object_get(p, "coverage"))) {
		if (get_real(v, 0.5, 1, &dv)) {
			aah_errf(err, err_len, "aah.json: regime '%s': coverage must be a number in [0.5, 1]", g->name);
			return -1;
		}
		g->policy.coverage = (float)dv;
	}
	return 0;
}

static void copy_str(char *dst, size_t n, json_t *v)
{
	const char *s = json_string_value(v);
	snprintf(dst, n, "%s", s ? s : "");
}

static int parse_layers(const aah_config *a, aah_regime *g, json_t *layers, const model_config *mc, char *err,
                        size_t err_len)
{
	if (!json_is_array(layers) || (int64_t)json_array_size(layers) != mc->n_layers) {
		aah_errf(err, err_len, "aah.json: regime '%s': 'layers' must be an array of %d layers (the model's), got %s",
		         g->name, mc->n_layers, json_is_array(layers) ? "another count" : "no array");
		return -1;
	}
	g->layers = calloc((size_t)mc->n_layers, sizeof *g->layers);
	int32_t *owner = malloc((size_t)mc->n_kv_heads * sizeof *owner);
	if (!g->layers || !owner) {
		free(owner);
		aah_errf(err, err_len, "aah.json: out of memory");
		return -1;
	}
	for (int32_t l = 0; l < mc->n_layers; l++) {
		json_t *jl = json_array_get(layers, (size_t)l), *groups = json_object_get(jl, "groups");
		if (!json_is_array(groups) || json_array_size(groups) == 0 ||
		    json_array_size(groups) > (size_t)mc->n_kv_heads) {
			aah_errf(err, err_len, "aah.json: regime '%s' layer %d: 'groups' must be an array of 1..%d groups", g->name,
			         l, mc->n_kv_heads);
			goto fail;
		}
		aah_layer *L = &g->layers[l];
		L->n_groups = (int32_t)json_array_size(groups);
		L->groups = calloc((size_t)L->n_groups, sizeof *L->groups);
		if (!L->groups) {
			aah_errf(err, err_len, "aah.json: out of memory");
			goto fail;
		}
		for (int32_t h = 0; h < mc->n_kv_heads; h++)
			owner[h] = -1;
		for (int32_t gi = 0; gi < L->n_groups; gi++) {
			json_t *jg = json_array_get(groups, (size_t)gi), *heads = json_object_get(jg, "kv_heads");
			aah_group *G = &L->groups[gi];
			if (!json_is_array(heads) || json_array_size(heads) == 0) {
				aah_errf(err, err_len, "aah.json: regime '%s' layer %d group %d: 'kv_heads' must be a non-empty array",
				         g->name, l, gi);
				goto fail;
			}
			G->n_kv_heads = (int32_t)json_array_size(heads);
			if (G->n_kv_heads > mc->n_kv_heads) {
				aah_errf(err, err_len, "aah.json: regime '%s' layer %d group %d: %d KV heads, the model has %d", g->name,
				         l, gi, G->n_kv_heads, mc->n_kv_heads);
				goto fail;
			}
			G->kv_heads = malloc((size_t)G->n_kv_heads * sizeof *G->kv_heads);
			if (!G->kv_heads) {
				aah_errf(err, err_len, "aah.json: out of memory");
				goto fail;
			}
			for (int32_t i = 0; i < G->n_kv_heads; i++) {
				int64_t h;
				if (get_int(json_array_get(heads, (size_t)i), 0, mc->n_kv_heads - 1, &h)) {
					aah_errf(err, err_len,
					         "aah.json: regime '%s' layer %d group %d: kv_heads[%d] is not a KV head index in [0, %d)",
					        g->name, l, gi, i, mc->n_kv_heads);
					goto fail;
				}
				if (owner[h] >= 0) {
					aah_errf(err, err_len, "aah.json: regime '%s' layer %d: KV head %lld is in group %d and group %d",
					         g->name, l, (long long)h, owner[h], gi);
					goto fail;
				}
				owner[h] = gi;
				G->kv_heads[i] = (int32_t)h;
			}
			int64_t w, cap;
			if (get_int(json_object_get(jg, "window"), 1, 1 << 24, &w) || !is_candidate(a, w)) {
				aah_errf(err, err_len,
				         "aah.json: regime '%s' layer %d group %d: 'window' must be one of the candidate windows", g->name,
				         l, gi);
				goto fail;
			}
			json_t *jc = json_object_get(jg, "capacity");
			cap = w;
			if (jc && get_int(jc, 1, 1 << 24, &cap)) {
				aah_errf(err, err_len, "aah.json: regime '%s' layer %d group %d: 'capacity' must be a positive integer",
				         g->name, l, gi);
				goto fail;
			}
			if (cap < w) {
				aah_errf(err, err_len, "aah.json: regime '%s' layer %d group %d: capacity %lld is below window %lld",
				         g->name, l, gi, (long long)cap, (long long)w);
				goto fail;
			}
			if (cap > a->context_length) {
				aah_errf(err, err_len,
				         "aah.json: regime '%s' layer %d group %d: capacity %lld exceeds context_length %d", g->name, l,
				         gi, (long long)cap, a->context_length);
				goto fail;
			}
			G->window = (int32_t)w;
			G->capacity = (int32_t)cap;
		}
		for (int32_t h = 0; h < mc->n_kv_heads; h++)
			if (owner[h] < 0) {
				aah_errf(err, err_len, "aah.json: regime '%s' layer %d: KV head %d is in no group", g->name, l, h);
				goto fail;
			}
	}
	free(owner);
	return 0;
fail:
	free(owner);
	return -1;
}

static void regime_free(aah_regime *g, int32_t n_layers)
{
	if (g->layers)
		for (int32_t l = 0; l < n_layers; l++) {
			for (int32_t gi = 0; gi < g->layers[l].n_groups; gi++)
				free(g->layers[l].groups[gi].kv_heads);
			free(g->layers[l].groups);
		}
	free(g->layers);
	free(g->name);
	memset(g, 0, sizeof *g);
}

void aah_config_free(aah_config *a)
{
	if (!a)
		return;
	for (int32_t r = 0; r < a->n_regimes; r++)
		regime_free(&a->regimes[r], a->n_layers);
	free(a->regimes);
	free(a->default_regime);
	memset(a, 0, sizeof *a);
}

const aah_regime *aah_config_regime(const aah_config *a, const char *name)
{
	for (int32_t r = 0; r < a->n_regimes; r++)
		if (!strcmp(a->regimes[r].name, name))
			return &a->regimes[r];
	return NULL;
}

int aah_config_parse(aah_config *a, const char *json, size_t len, const model_config *mc, char *err, size_t err_len)
{
	memset(a, 0, sizeof *a);
	a->n_layers = mc->n_layers;
	a->provenance_step = -1;
	json_error_t je;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		aah_errf(err, err_len, "aah.json: not valid JSON (line %d: %s)", je.line, je.text);
		return -1;
	}
	int rc = -1;
	int64_t v;
	if (!json_is_object(root)) {
		aah_errf(err, err_len, "aah.json: must be a JSON object");
		goto done;
	}
	if (get_int(json_object_get(root, "version"), 1, 1, &v)) {
		aah_errf(err, err_len, "aah.json: 'version' must be 1");
		goto done;
	}
	if (get_int(json_object_get(root, "context_length"), 1, 1 << 24, &v)) {
		aah_errf(err, err_len, "aah.json: 'context_length' must be a positive integer");
		goto done;
	}
	a->context_length = (int32_t)v;
	json_t *wins = json_object_get(root, "candidate_windows");
	if (!json_is_array(wins) || json_array_size(wins) == 0 || json_array_size(wins) > AAH_MAX_WINDOWS) {
		aah_errf(err, err_len, "aah.json: 'candidate_windows' must be an array of 1..%d windows", AAH_MAX_WINDOWS);
		goto done;
	}
	a->n_windows = (int32_t)json_array_size(wins);
	for (int32_t i = 0; i < a->n_windows; i++) {
		if (get_int(json_array_get(wins, (size_t)i), 1, a->context_length, &v) ||
		    (i > 0 && v <= a->windows[i - 1])) {
			aah_errf(err, err_len,
			         "aah.json: candidate_windows[%d] must be an integer in [1, context_length], ascending", i);
			goto done;
		}
		a->windows[i] = (int32_t)v;
	}
	json_t *regimes = json_object_get(root, "regimes");
	if (!json_is_object(regimes) || json_object_size(regimes) == 0) {
		aah_errf(err, err_len, "aah.json: 'regimes' must be a non-empty object");
		goto done;
	}
	a->regimes = calloc(json_object_size(regimes), sizeof *a->regimes);
	if (!a->regimes) {
		aah_errf(err, err_len, "aah.json: out of memory");
		goto done;
	}
	const char *name;
	json_t *jr;
	json_object_foreach(regimes, name, jr) {
		aah_regime *g = &a->regimes[a->n_regimes++];
		g->name = strdup(name);
		if (!g->name) {
			aah_errf(err, err_len, "aah.json: out of memory");
			goto done;
		}
		if (!strcmp(name, AAH_FULL_ATTENTION) || !*name) {
			aah_errf(err, err_len, "aah.json: regime name '%s' is reserved (full_attention is built in)", name);
			goto done;
		}
		if (!json_is_object(jr)) {
			aah_errf(err, err_len, "aah.json: regime '%s' must be an object", name);
			goto done;
		}
		copy_str(g->grouping, sizeof g->grouping, json_object_get(jr, "grouping"));
		copy_str(g->scorer, sizeof g->scorer, json_object_get(jr, "scorer"));
		json_t *hier = json_object_get(jr, "hierarchy");
		if (json_is_array(hier))
			for (size_t i = 0; i < json_array_size(hier) && g->n_hierarchy < 8; i++)
				if (!get_int(json_array_get(hier, i), 0, 1 << 16, &v))
					g->hierarchy[g->n_hierarchy++] = (int32_t)v;
		if (parse_policy(g, json_object_get(jr, "policy"), err, err_len) ||
		    parse_layers(a, g, json_object_get(jr, "layers"), mc, err, err_len))
			goto done;
	}
	json_t *def = json_object_get(root, "default_regime");
	if (def) {
		const char *d = json_string_value(def);
		if (!d || (strcmp(d, AAH_FULL_ATTENTION) != 0 && !aah_config_regime(a, d))) {
			aah_errf(err, err_len, "aah.json: default_regime '%s' is not one of the regimes", d ? d : "(not a string)");
			goto done;
		}
		a->default_regime = strdup(d);
	} else {
		a->default_regime = strdup(a->regimes[0].name);
	}
	if (!a->default_regime) {
		aah_errf(err, err_len, "aah.json: out of memory");
		goto done;
	}
	json_t *prov = json_object_get(root, "provenance");
	if (json_is_object(prov) && !get_int(json_object_get(prov, "step"), 0, INT64_MAX, &v))
		a->provenance_step = v;
	rc = 0;
done:
	json_decref(root);
	if (rc != 0)
		aah_config_free(a);
	return rc;
}

int aah_config_load_file(aah_config *a, const char *path, const model_config *mc, char *err, size_t err_len)
{
	memset(a, 0, sizeof *a);
	FILE *f = fopen(path, "rb");
	if (!f) {
		int e = errno;
		aah_errf(err, err_len, "%s: %s", path, strerror(e));
		return e == ENOENT ? 1 : -1;
	}
	char *buf = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		if (n == cap) {
			if (cap >= (64u << 20)) {
				fclose(f);
				free(buf);
				aah_errf(err, err_len, "%s: larger than 64 MiB", path);
				return -1;
			}
			char *g = realloc(buf, cap = cap ? cap * 2 : 65536);
			if (!g) {
				fclose(f);
				free(buf);
				aah_errf(err, err_len, "%s: out of memory", path);
				return -1;
			}
			buf = g;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	int rc = aah_config_parse(a, buf, n, mc, err, err_len);
	free(buf);
	if (rc != 0) {
		/* the messages say "aah.json"; name the path */
		char inner[1024];
		snprintf(inner, sizeof inner, "%s", err);
		const char *rest = strncmp(inner, "aah.json", 8) == 0 ? inner + 8 : inner;
		aah_errf(err, err_len, "%s%s", path, rest);
	}
	return rc;
}

int aah_config_load(aah_config *a, const char *dir, const model_config *mc, char *err, size_t err_len)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/aah.json", dir);
	return aah_config_load_file(a, path, mc, err, err_len);
}

int64_t aah_parse_step(const char *name, const char *prefix, const char *const *suffixes, int n_suffixes)
{
	size_t lp = strlen(prefix);
	if (strncmp(name, prefix, lp))
		return -1;
	const char *d = name + lp;
	size_t k = 0;
	int64_t v = 0;
	for (; d[k] >= '0' && d[k] <= '9'; k++) {
		v = v * 10 + (d[k] - '0');
		if (v > (INT64_C(1) << 53))
			return -1;
	}
	if (k == 0 || (d[0] == '0' && k > 1))
		return -1;
	if (n_suffixes == 0)
		return d[k] ? -1 : v;
	for (int i = 0; i < n_suffixes; i++)
		if (!strcmp(d + k, suffixes[i]))
			return v;
	return -1;
}

int aah_resolve_model_dir(const char *dir, int64_t step, char *out, size_t out_len, char *err, size_t err_len)
{
	char probe[4096];
	/* a .gguf file, or a directory holding one: loaded as it is (a GGUF has no checkpoint-N steps) */
	int g = step < 0 ? gguf_model_path(dir, probe, sizeof probe, err, err_len) : 0;
	if (g < 0)
		return -1;
	if (g == 1) {
		snprintf(out, out_len, "%s", dir);
		return 0;
	}
	snprintf(probe, sizeof probe, "%s/config.json", dir);
	struct stat st;
	if (step < 0 && stat(probe, &st) == 0) {
		snprintf(out, out_len, "%s", dir);
		return 0;
	}
	DIR *d = opendir(dir);
	if (!d) {
		aah_errf(err, err_len, "%s: %s", dir, strerror(errno));
		return -1;
	}
	int64_t best = -1;
	bool found_named = false;
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *n = de->d_name;
		int64_t s = aah_parse_step(n, "checkpoint-", NULL, 0);   /* the name is then exactly checkpoint-<s> */
		if (s < 0)
			continue;
		char sub[4096];
		snprintf(sub, sizeof sub, "%s/%s", dir, n);
		if (!aah_is_dir(sub))
			continue;
		if (step >= 0 && s == step)
			found_named = true;
		if (s > best)
			best = s;
	}
	closedir(d);
	if (step >= 0) {
		if (!found_named) {
			aah_errf(err, err_len, "%s: no checkpoint-%lld folder", dir, (long long)step);
			return -1;
		}
		best = step;
	} else if (best < 0) {
		aah_errf(err, err_len, "%s: neither a model (no config.json) nor a run directory (no checkpoint-STEP folders)",
		         dir);
		return -1;
	}
	snprintf(out, out_len, "%s/checkpoint-%lld", dir, (long long)best);
	return 0;
}
