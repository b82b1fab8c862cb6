/* tools/convert/checkpoint_source.c — the reading half of aah-convert import (see checkpoint_source.h): what a source
 * holds (one torch file, a sharded pytorch_model.bin, a run directory of checkpoints), and each checkpoint's state
 * dict, step, seed and config, read through torch_checkpoint (nothing but the state dict's storages is touched). */
#include "tools/convert/checkpoint_source.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "models/aah_config.h"
#include "models/errf.h"

#define CI_MAX_SHARDS 4096
#define CI_MAX_TENSORS (1 << 20)
#define CI_JSON_BUDGET (1 << 20)

void ci_err_prefix(char *err, size_t err_len, const char *prefix)
{
	if (!err || !err_len)
		return;
	char *old = strdup(err);
	if (!old)
		return;
	snprintf(err, err_len, "%s: %s", prefix, old);
	free(old);
}

char *ci_path_join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 2);
	if (!p)
		return NULL;
	memcpy(p, a, la);
	p[la] = '/';
	memcpy(p + la + 1, b, lb + 1);
	return p;
}

bool ci_file_in(const char *dir, const char *name)
{
	char *p = ci_path_join(dir, name);
	bool r = p && aah_is_file(p);
	free(p);
	return r;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static char *dir_name(const char *p)
{
	const char *s = strrchr(p, '/');
	if (!s)
		return strdup(".");
	if (s == p)
		return strdup("/");
	return strndup(p, (size_t)(s - p));
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

static const char *const pt_suffixes[] = { ".pt", ".pth" };

/* checkpoint-STEP.pt / step_STEP.pt (and .pth) */
static int64_t file_step(const char *name)
{
	int64_t s = aah_parse_step(name, "checkpoint-", pt_suffixes, 2);
	return s >= 0 ? s : aah_parse_step(name, "step_", pt_suffixes, 2);
}

static int64_t dir_step(const char *name)
{
	return aah_parse_step(name, "checkpoint-", NULL, 0);
}

/* ---- pickle values → JSON (config, AAH state) ---- */

static json_t *pkl_json(const pkl_value *v, const char *path, int64_t *budget, char *err, size_t err_len)
{
	if (--*budget < 0) {
		aah_errf(err, err_len, "'%s': more than %d values", path, CI_JSON_BUDGET);
		return NULL;
	}
	char sub[512];
	json_t *j = NULL;
	switch (v->type) {
	case PKL_NONE: return json_null();
	case PKL_BOOL: return json_boolean(v->u.b);
	case PKL_INT: return json_integer(v->u.i);
	case PKL_FLOAT:
		if (!isfinite(v->u.f)) {
			aah_errf(err, err_len, "'%s' is %g, which JSON cannot hold", path, v->u.f);
			return NULL;
		}
		return json_real(v->u.f);
	case PKL_STR:
		if (strlen(v->u.str.s) != v->u.str.len) {
			aah_errf(err, err_len, "'%s' is a string with a NUL inside", path);
			return NULL;
		}
		return json_stringn(v->u.str.s, v->u.str.len);
	case PKL_TUPLE:
	case PKL_LIST:
		j = json_array();
		for (size_t i = 0; j && i < v->u.seq.n; i++) {
			snprintf(sub, sizeof sub, "%s[%zu]", path, i);
			json_t *x = pkl_json(v->u.seq.v[i], sub, budget, err, err_len);
			if (!x || json_array_append_new(j, x)) {
				json_decref(j);
				return NULL;
			}
		}
		return j;
	case PKL_DICT:
		j = json_object();
		for (size_t i = 0; j && i < v->u.seq.n / 2; i++) {
			const pkl_value *k = v->u.seq.v[2 * i];
			char num[32];
			const char *key;
			if (k->type == PKL_STR && strlen(k->u.str.s) == k->u.str.len)
				key = k->u.str.s;
			else if (k->type == PKL_INT) {
				snprintf(num, sizeof num, "%lld", (long long)k->u.i);
				key = num;
			} else {
				aah_errf(err, err_len, "'%s' has a %s key, which JSON cannot hold", path, pkl_type_name(k));
				json_decref(j);
				return NULL;
			}
			snprintf(sub, sizeof sub, "%s.%s", path, key);
			json_t *x = pkl_json(v->u.seq.v[2 * i + 1], sub, budget, err, err_len);
			if (!x || json_object_set_new(j, key, x)) {
				json_decref(j);
				return NULL;
			}
		}
		return j;
	default:
		aah_errf(err, err_len, "'%s' is a %s, which has no JSON form here", path, pkl_type_name(v));
		return NULL;
	}
}

json_t *ci_pkl_to_json(const pkl_value *v, const char *path, char *err, size_t err_len)
{
	int64_t budget = CI_JSON_BUDGET;
	json_t *j = pkl_json(v, path, &budget, err, err_len);
	if (!j && err && err_len && !err[0])
		aah_errf(err, err_len, "'%s': out of memory", path);
	return j;
}

/* ---- the state dict ---- */

static void tensors_free(ci_tensors *ts)
{
	free(ts->names);
	free(ts->t);
	free(ts->file);
	memset(ts, 0, sizeof *ts);
}

static bool all_tensors(const pkl_value *d)
{
	if (d->type != PKL_DICT || d->u.seq.n == 0)
		return false;
	for (size_t i = 0; i < d->u.seq.n / 2; i++)
		if (d->u.seq.v[2 * i + 1]->type != PKL_TENSOR)
			return false;
	return true;
}

static void list_keys(const pkl_value *d, char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = 0;
	size_t n = d->u.seq.n / 2;
	for (size_t i = 0; i < n && i < 12 && at < len; i++) {
		const pkl_value *k = d->u.seq.v[2 * i];
		at += (size_t)snprintf(buf + at, len - at, "%s'%.60s'", i ? ", " : "",
		                       k->type == PKL_STR ? k->u.str.s : pkl_type_name(k));
	}
	if (n > 12 && at < len)
		snprintf(buf + at, len - at, ", … (%zu keys)", n);
}

/* The state dict of a checkpoint's top-level object: itself when it is a dict of tensors, else the dict of tensors
 * under "model", "state_dict" or "module" (exactly one of them). *wrapped says which. */
static int find_state_dict(const tc_file *f, const pkl_value **sd, bool *wrapped, char *err, size_t err_len)
{
	const pkl_value *root = f->doc.root;
	if (root->type != PKL_DICT) {
		aah_errf(err, err_len, "%s: the checkpoint holds a %s, not a dict (a state dict, or a dict holding one)",
		         f->path, pkl_type_name(root));
		return -1;
	}
	static const char *const keys[] = { "model", "state_dict", "module" };
	const pkl_value *found = NULL;
	const char *found_key = NULL;
	for (size_t k = 0; k < 3; k++) {
		const pkl_value *v = pkl_dict_get(root, keys[k]);
		if (!v || v->type != PKL_DICT)
			continue;
		for (size_t i = 0; i < v->u.seq.n / 2; i++) {
			const pkl_value *val = v->u.seq.v[2 * i + 1], *key = v->u.seq.v[2 * i];
			if (val->type != PKL_TENSOR) {
				aah_errf(err, err_len, "%s: '%s' holds a %s under '%.80s' where a state dict has tensors", f->path,
				         keys[k], pkl_type_name(val), key->type == PKL_STR ? key->u.str.s : pkl_type_name(key));
				return -1;
			}
		}
		if (v->u.seq.n == 0)
			continue;
		if (found) {
			aah_errf(err, err_len, "%s: both '%s' and '%s' hold a state dict: which one to import is ambiguous",
			         f->path, found_key, keys[k]);
			return -1;
		}
		found = v;
		found_key = keys[k];
	}
	if (found) {
		*sd = found;
		*wrapped = true;
		return 0;
	}
	if (all_tensors(root)) {
		*sd = root;
		*wrapped = false;
		return 0;
	}
	char keys_seen[1024];
	list_keys(root, keys_seen, sizeof keys_seen);
	aah_errf(err, err_len, "%s: no state dict: the top-level dict is not a dict of tensors and holds none under "
	         "'model', 'state_dict' or 'module'; its keys: %s", f->path, keys_seen[0] ? keys_seen : "none");
	return -1;
}

static int add_state_dict(ci_tensors *ts, tc_file *f, int32_t fi, const pkl_value *sd, char *err, size_t err_len)
{
	for (size_t i = 0; i < sd->u.seq.n / 2; i++) {
		const pkl_value *k = sd->u.seq.v[2 * i], *v = sd->u.seq.v[2 * i + 1];
		if (k->type != PKL_STR || strlen(k->u.str.s) != k->u.str.len || k->u.str.len == 0 || k->u.str.len > 120) {
			aah_errf(err, err_len, "%s: a state dict key that is a %s, not a name of 1 to 120 characters", f->path,
			         pkl_type_name(k));
			return -1;
		}
		if (ts->n >= CI_MAX_TENSORS) {
			aah_errf(err, err_len, "%s: more than %d tensors", f->path, CI_MAX_TENSORS);
			return -1;
		}
		if (ts->n == ts->cap) {
			int32_t cap = ts->cap ? 2 * ts->cap : 64;
			const char **nn = realloc(ts->names, sizeof(*nn) * (size_t)cap);
			if (nn)
				ts->names = nn;
			tc_tensor *nt = realloc(ts->t, sizeof(*nt) * (size_t)cap);
			if (nt)
				ts->t = nt;
			int32_t *nf = realloc(ts->file, sizeof(*nf) * (size_t)cap);
			if (nf)
				ts->file = nf;
			if (!nn || !nt || !nf) {
				aah_errf(err, err_len, "out of memory");
				return -1;
			}
			ts->cap = cap;
		}
		char berr[768];
		if (tc_tensor_bind(f, v, &ts->t[ts->n], berr, sizeof berr)) {
			aah_errf(err, err_len, "tensor '%s': %s", k->u.str.s, berr);
			return -1;
		}
		ts->names[ts->n] = k->u.str.s;
		ts->file[ts->n] = fi;
		ts->n++;
	}
	return 0;
}

/* ---- the sources ---- */

void ci_sources_free(ci_list *l)
{
	for (int32_t i = 0; i < l->n; i++) {
		free(l->v[i].path);
		free(l->v[i].dir);
		free(l->v[i].rel);
	}
	free(l->v);
	free(l->root);
	memset(l, 0, sizeof *l);
}

/* Adds a source; path, dir and rel are copied. */
static int list_add(ci_list *l, int64_t step, const char *path, bool sharded, const char *dir, const char *rel)
{
	if (l->n == l->cap) {
		int32_t cap = l->cap ? 2 * l->cap : 8;
		ci_source *v = realloc(l->v, sizeof(*v) * (size_t)cap);
		if (!v)
			return -1;
		l->v = v;
		l->cap = cap;
	}
	ci_source *s = &l->v[l->n];
	s->step = step;
	s->sharded = sharded;
	s->path = strdup(path);
	s->dir = strdup(dir);
	s->rel = strdup(rel);
	l->n++;
	return s->path && s->dir && s->rel ? 0 : -1;
}

static int cmp_step(const void *a, const void *b)
{
	int64_t x = ((const ci_source *)a)->step, y = ((const ci_source *)b)->step;
	return x < y ? -1 : x > y;
}

/* A Hugging Face model folder: pytorch_model.bin.index.json or pytorch_model.bin. */
static int add_model_folder(ci_list *l, const char *dir, int64_t step, const char *rel_prefix)
{
	const char *name = ci_file_in(dir, "pytorch_model.bin.index.json") ? "pytorch_model.bin.index.json"
	                                                                 : "pytorch_model.bin";
	char *path = ci_path_join(dir, name);
	char rel[1024];
	snprintf(rel, sizeof rel, "%s%s", rel_prefix, name);
	int rc = path ? list_add(l, step, path, ends_with(name, ".index.json"), dir, rel) : -1;
	free(path);
	return rc;
}

static int scan_run(ci_list *l, const char *src, char *err, size_t err_len)
{
	DIR *d = opendir(src);
	if (!d) {
		aah_errf(err, err_len, "%s: %s", src, strerror(errno));
		return -1;
	}
	struct dirent *de;
	int rc = 0;
	while (!rc && (de = readdir(d))) {
		const char *n = de->d_name;
		if (n[0] == '.')
			continue;
		char *p = ci_path_join(src, n);
		if (!p) {
			rc = -1;
			aah_errf(err, err_len, "out of memory");
			break;
		}
		int64_t s;
		if (aah_is_dir(p) && (s = dir_step(n)) >= 0) {
			if (ci_file_in(p, "pytorch_model.bin") || ci_file_in(p, "pytorch_model.bin.index.json")) {
				char prefix[512];
				snprintf(prefix, sizeof prefix, "%s/", n);
				rc = add_model_folder(l, p, s, prefix);
			} else {
				aah_errf(err, err_len, "%s: holds no pytorch_model.bin (nor its shard index)%s", p,
				         ci_file_in(p, "model.safetensors") || ci_file_in(p, "model.safetensors.index.json")
				                 ? ": it is a safetensors folder already, which aahd loads as it is"
				                 : "");
				rc = -1;
			}
		} else if (aah_is_file(p) && (s = file_step(n)) >= 0) {
			rc = list_add(l, s, p, false, src, n);
		}
		if (rc && err && !err[0])
			aah_errf(err, err_len, "out of memory");
		free(p);
	}
	closedir(d);
	if (rc)
		return -1;
	if (l->n == 0) {
		bool st = ci_file_in(src, "model.safetensors") || ci_file_in(src, "model.safetensors.index.json");
		aah_errf(err, err_len, "%s: neither a checkpoint file, a model folder (pytorch_model.bin) nor a run directory "
		         "(checkpoint-STEP/ folders, checkpoint-STEP.pt or step_STEP.pt files)%s", src,
		         st ? ": it holds model.safetensors, a Hugging Face folder that aahd loads as it is" : "");
		return -1;
	}
	qsort(l->v, (size_t)l->n, sizeof *l->v, cmp_step);
	for (int32_t i = 1; i < l->n; i++)
		if (l->v[i].step == l->v[i - 1].step) {
			aah_errf(err, err_len, "%s: step %lld twice: '%s' and '%s'", src, (long long)l->v[i].step, l->v[i - 1].rel,
			         l->v[i].rel);
			return -1;
		}
	return 0;
}

int ci_sources_find(ci_list *l, const char *src, char *err, size_t err_len)
{
	memset(l, 0, sizeof *l);
	struct stat st;
	if (stat(src, &st) != 0) {
		aah_errf(err, err_len, "%s: %s", src, strerror(errno));
		return -1;
	}
	int rc;
	if (S_ISREG(st.st_mode)) {
		char *dir = dir_name(src);
		const char *b = base_name(src);
		l->root = dir;
		rc = dir ? list_add(l, file_step(b), src, ends_with(b, ".index.json"), dir, b) : -1;
	} else if (S_ISDIR(st.st_mode)) {
		l->root = strdup(src);
		if (!l->root)
			rc = -1;
		else if (ci_file_in(src, "pytorch_model.bin") || ci_file_in(src, "pytorch_model.bin.index.json"))
			rc = add_model_folder(l, src, dir_step(base_name(src)), "");
		else {
			l->run = true;
			return scan_run(l, src, err, err_len);
		}
	} else {
		aah_errf(err, err_len, "%s: neither a file nor a folder", src);
		return -1;
	}
	if (rc)
		aah_errf(err, err_len, "out of memory");
	return rc;
}

/* ---- one checkpoint ---- */

/* Opens the shards the index names (file names in the index's folder only). */
static int open_sharded(ci_job *j)
{
	json_error_t je;
	j->index = json_load_file(j->s->path, JSON_REJECT_DUPLICATES, &je);
	if (!j->index) {
		aah_errf(j->err, j->err_len, "%s: line %d: %s", j->s->path, je.line, je.text);
		return -1;
	}
	json_t *map = json_object_get(j->index, "weight_map");
	if (!json_is_object(map) || json_object_size(map) == 0) {
		aah_errf(j->err, j->err_len, "%s: no 'weight_map' object", j->s->path);
		return -1;
	}
	const char **shards = calloc(CI_MAX_SHARDS, sizeof *shards);
	json_t *seen = json_object();   /* the shard names so far, as a hash set */
	if (!shards || !seen) {
		free(shards);
		json_decref(seen);
		aah_errf(j->err, j->err_len, "out of memory");
		return -1;
	}
	int32_t n = 0;
	const char *key;
	json_t *v;
	int rc = 0;
	json_object_foreach(map, key, v) {
		const char *f = json_string_value(v);
		if (!f || !*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, "..")) {
			aah_errf(j->err, j->err_len, "%s: tensor '%s' maps to %s, not a file name in the index's folder",
			         j->s->path, key, f ? f : "a non-string");
			rc = -1;
			break;
		}
		if (json_object_get(seen, f))
			continue;
		if (n == CI_MAX_SHARDS) {
			aah_errf(j->err, j->err_len, "%s: more than %d shards", j->s->path, CI_MAX_SHARDS);
			rc = -1;
			break;
		}
		json_object_set_new(seen, f, json_true());
		shards[n++] = f;
	}
	if (!rc) {
		j->files = calloc((size_t)n, sizeof *j->files);
		if (!j->files) {
			aah_errf(j->err, j->err_len, "out of memory");
			rc = -1;
		}
	}
	for (int32_t i = 0; !rc && i < n; i++) {
		char *p = ci_path_join(j->s->dir, shards[i]);
		rc = p ? tc_open(&j->files[i], p, j->err, j->err_len) : -1;
		free(p);
		j->n_files = i + 1;
	}
	free(shards);
	json_decref(seen);
	return rc;
}

/* Every tensor of the shards sits in the shard the index says, and every tensor the index names is there. */
static int check_weight_map(ci_job *j)
{
	json_t *map = json_object_get(j->index, "weight_map");
	for (int32_t i = 0; i < j->ts.n; i++) {
		const char *want = json_string_value(json_object_get(map, j->ts.names[i]));
		const char *have = base_name(j->files[j->ts.file[i]].path);
		if (!want || strcmp(want, have)) {
			aah_errf(j->err, j->err_len, "%s: tensor '%s' is in %s, but the index says %s", j->s->path,
			         j->ts.names[i], have, want ? want : "nothing of it");
			return -1;
		}
	}
	if ((size_t)j->ts.n != json_object_size(map)) {
		aah_errf(j->err, j->err_len, "%s: the index names %zu tensors, the shards hold %d", j->s->path,
		         json_object_size(map), (int)j->ts.n);
		return -1;
	}
	return 0;
}

static int load_tensors(ci_job *j)
{
	if (j->s->sharded) {
		if (open_sharded(j))
			return -1;
	} else {
		j->files = calloc(1, sizeof *j->files);
		if (!j->files) {
			aah_errf(j->err, j->err_len, "out of memory");
			return -1;
		}
		j->n_files = 1;
		if (tc_open(&j->files[0], j->s->path, j->err, j->err_len))
			return -1;
	}
	for (int32_t i = 0; i < j->n_files; i++) {
		const pkl_value *sd;
		bool wrapped;
		if (find_state_dict(&j->files[i], &sd, &wrapped, j->err, j->err_len) ||
		    add_state_dict(&j->ts, &j->files[i], i, sd, j->err, j->err_len))
			return -1;
	}
	return j->s->sharded ? check_weight_map(j) : 0;
}

/* step and seed: the name's step, checked against the checkpoint's "step" when it has one. */
static int read_meta(ci_job *j)
{
	j->step = j->s->step;
	j->seed = -1;
	if (j->s->sharded)
		return 0;
	const pkl_value *root = j->files[0].doc.root;
	const pkl_value *step = pkl_dict_get(root, "step"), *seed = pkl_dict_get(root, "seed");
	if (step && step->type == PKL_INT) {
		if (j->step >= 0 && step->u.i != j->step) {
			aah_errf(j->err, j->err_len, "%s: its 'step' is %lld but its name says %lld", j->s->path,
			         (long long)step->u.i, (long long)j->step);
			return -1;
		}
		j->step = step->u.i;
	}
	if (seed && seed->type == PKL_INT)
		j->seed = seed->u.i;
	return 0;
}

/* The config: --config, else config.json in the checkpoint's folder, else in the source folder, else the
 * checkpoint's own "config" dict. */
static int load_config(ci_job *j)
{
	const char *file = NULL;
	char *cand = NULL;
	if (j->o->config_path)
		file = j->o->config_path;
	else if ((cand = ci_path_join(j->s->dir, "config.json")) && aah_is_file(cand))
		file = cand;
	else {
		free(cand);
		cand = ci_path_join(j->list->root, "config.json");
		if (cand && aah_is_file(cand))
			file = cand;
	}
	if (file) {
		json_error_t je;
		snprintf(j->cfg_label, sizeof j->cfg_label, "%s", file);
		j->cfg = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
		free(cand);
		if (!j->cfg) {
			aah_errf(j->err, j->err_len, "%s: line %d: %s", j->cfg_label, je.line, je.text);
			return -1;
		}
	} else {
		free(cand);
		const pkl_value *c = j->s->sharded ? NULL : pkl_dict_get(j->files[0].doc.root, "config");
		if (!c || c->type != PKL_DICT) {
			bool other = strcmp(j->s->dir, j->list->root) != 0;
			aah_errf(j->err, j->err_len, "%s: no config.json beside it%s%s%s and no 'config' dict in the checkpoint: "
			         "pass --config FILE", j->s->path, other ? " (nor in " : "", other ? j->list->root : "",
			         other ? ")" : "");
			return -1;
		}
		snprintf(j->cfg_label, sizeof j->cfg_label, "%s: 'config'", j->s->path);
		if (!(j->cfg = ci_pkl_to_json(c, "config", j->err, j->err_len))) {
			ci_err_prefix(j->err, j->err_len, j->s->path);
			return -1;
		}
	}
	if (!json_is_object(j->cfg)) {
		aah_errf(j->err, j->err_len, "%s: not a JSON object", j->cfg_label);
		return -1;
	}
	char *text = json_dumps(j->cfg, JSON_COMPACT);
	int rc = text ? model_config_parse(&j->mc, text, strlen(text), j->err, j->err_len) : -1;
	free(text);
	if (rc) {
		/* the parser names its input "config.json"; name the real one */
		if (j->err && !strncmp(j->err, "config.json: ", 13))
			memmove(j->err, j->err + 13, strlen(j->err + 13) + 1);
		ci_err_prefix(j->err, j->err_len, j->cfg_label);
		return -1;
	}
	return 0;
}

int ci_checkpoint_read(ci_job *j)
{
	return load_tensors(j) || read_meta(j) || load_config(j) ? -1 : 0;
}

void ci_checkpoint_close(ci_job *j)
{
	json_decref(j->cfg);
	json_decref(j->index);
	tensors_free(&j->ts);
	for (int32_t i = 0; i < j->n_files; i++)
		tc_close(&j->files[i]);
	free(j->files);
	j->cfg = j->index = NULL;
	j->files = NULL;
	j->n_files = 0;
}
