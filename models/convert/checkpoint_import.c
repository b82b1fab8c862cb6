/* models/convert/checkpoint_import.c — aah-convert import (see checkpoint_import.h): finds the checkpoints of a source, reads
 * each through torch_checkpoint (nothing but the state dict's storages is read), writes a Hugging Face folder. */
#include "models/convert/checkpoint_import.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "models/aah_config.h"
#include "models/errf.h"
#include "models/model.h"
#include "models/convert/safetensors_write.h"
#include "models/convert/sha256.h"
#include "models/convert/tensor_names.h"
#include "models/convert/torch_checkpoint.h"

#define CI_MAX_SHARDS 4096
#define CI_MAX_TENSORS (1 << 20)
#define CI_JSON_BUDGET (1 << 20)

/* err = "prefix: err" */
static void ci_err_prefix(char *err, size_t err_len, const char *prefix)
{
	if (!err || !err_len)
		return;
	char *old = strdup(err);
	if (!old)
		return;
	snprintf(err, err_len, "%s: %s", prefix, old);
	free(old);
}

/* "a/b", malloc'd; NULL when out of memory. */
static char *path_join(const char *a, const char *b)
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

static bool is_file(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static bool file_in(const char *dir, const char *name)
{
	char *p = path_join(dir, name);
	bool r = p && is_file(p);
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

static json_t *pkl_to_json(const pkl_value *v, const char *path, char *err, size_t err_len)
{
	int64_t budget = CI_JSON_BUDGET;
	json_t *j = pkl_json(v, path, &budget, err, err_len);
	if (!j && err && err_len && !err[0])
		aah_errf(err, err_len, "'%s': out of memory", path);
	return j;
}

/* ---- the state dict ---- */

typedef struct ci_tensors {
	const char **names;          /* the pickle's strings */
	tc_tensor *t;
	int32_t *file;               /* which of the checkpoint's files */
	int32_t n, cap;
} ci_tensors;

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

typedef struct ci_source {
	int64_t step;                /* -1 when neither the name nor the checkpoint says */
	char *path;                  /* the torch file, or the shard index */
	bool sharded;
	char *dir;                   /* the checkpoint's folder: config.json and tokenizer files are looked for here */
	char *rel;                   /* its name relative to the source, for provenance and messages */
} ci_source;

typedef struct ci_list {
	ci_source *v;
	int32_t n, cap;
	bool run;                    /* out is a run directory */
	char *root;                  /* the source folder (the run directory), the fallback for config and tokenizer */
} ci_list;

static void list_free(ci_list *l)
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
	const char *name = file_in(dir, "pytorch_model.bin.index.json") ? "pytorch_model.bin.index.json"
	                                                                 : "pytorch_model.bin";
	char *path = path_join(dir, name);
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
		char *p = path_join(src, n);
		if (!p) {
			rc = -1;
			aah_errf(err, err_len, "out of memory");
			break;
		}
		int64_t s;
		if (aah_is_dir(p) && (s = dir_step(n)) >= 0) {
			if (file_in(p, "pytorch_model.bin") || file_in(p, "pytorch_model.bin.index.json")) {
				char prefix[512];
				snprintf(prefix, sizeof prefix, "%s/", n);
				rc = add_model_folder(l, p, s, prefix);
			} else {
				aah_errf(err, err_len, "%s: holds no pytorch_model.bin (nor its shard index)%s", p,
				         file_in(p, "model.safetensors") || file_in(p, "model.safetensors.index.json")
				                 ? ": it is a safetensors folder already, which aahd loads as it is"
				                 : "");
				rc = -1;
			}
		} else if (is_file(p) && (s = file_step(n)) >= 0) {
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
		bool st = file_in(src, "model.safetensors") || file_in(src, "model.safetensors.index.json");
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

static int classify_source(ci_list *l, const char *src, char *err, size_t err_len)
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
		else if (file_in(src, "pytorch_model.bin") || file_in(src, "pytorch_model.bin.index.json"))
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

typedef struct ci_job {
	const ckpt_import_opts *o;
	const ci_list *list;
	const ci_source *s;
	const char *outdir;          /* where to write (inside the temporary folder) */
	const char *final_dir;       /* where it will be, for the log */
	char *err;
	size_t err_len;
	/* state */
	tc_file *files;
	int32_t n_files;
	ci_tensors ts;
	json_t *index;               /* sharded: the index */
	json_t *cfg;
	char cfg_label[1100];
	model_config mc;
	tn_plan plan;
	int64_t step, seed;
	int n_regimes;
	const char *tokenizer_from;
} ci_job;

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
		char *p = path_join(j->s->dir, shards[i]);
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
	else if ((cand = path_join(j->s->dir, "config.json")) && is_file(cand))
		file = cand;
	else {
		free(cand);
		cand = path_join(j->list->root, "config.json");
		if (cand && is_file(cand))
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
		if (!(j->cfg = pkl_to_json(c, "config", j->err, j->err_len))) {
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

static const char *torch_dtype_name(st_dtype d)
{
	return d == ST_F16 ? "float16" : d == ST_BF16 ? "bfloat16" : "float32";
}

static st_dtype out_dtype(const ci_job *j, const tn_output *o)
{
	return j->o->dtype >= 0 ? (st_dtype)j->o->dtype : tc_dtype_to_st(j->ts.t[o->src].dtype);
}

static int write_json(const char *dir, const char *name, json_t *v, size_t flags, char *err, size_t err_len)
{
	char *p = path_join(dir, name);
	int rc = p ? json_dump_file(v, p, flags) : -1;
	if (rc)
		aah_errf(err, err_len, "%s/%s: cannot write", dir, name);
	free(p);
	return rc ? -1 : 0;
}

static int write_config(ci_job *j)
{
	json_t *c = json_deep_copy(j->cfg);
	if (!c) {
		aah_errf(j->err, j->err_len, "out of memory");
		return -1;
	}
	json_object_set_new(c, "tie_word_embeddings", json_boolean(j->plan.tied));
	bool uniform = true;
	for (int32_t i = 1; i < j->plan.n_out; i++)
		uniform &= out_dtype(j, &j->plan.out[i]) == out_dtype(j, &j->plan.out[0]);
	if (uniform && j->plan.n_out)
		json_object_set_new(c, "torch_dtype", json_string(torch_dtype_name(out_dtype(j, &j->plan.out[0]))));
	int rc = write_json(j->outdir, "config.json", c, JSON_INDENT(2) | JSON_SORT_KEYS, j->err, j->err_len);
	json_decref(c);
	return rc;
}

typedef struct fill_ctx {
	const tc_tensor *t;
	const tn_output *o;
	int64_t base;                /* first source element of the output (rows cut from a fused matrix) */
	int64_t cols;                /* elements per row: shape[1], or 1 of a vector */
	st_dtype as;
} fill_ctx;

static int fill_tensor(void *vctx, void *out, int64_t first, int64_t n, char *err, size_t err_len)
{
	const fill_ctx *c = vctx;
	if (c->o->perm_block <= 0) {
		tc_tensor_read(c->t, c->as, out, c->base + first, n);
		return 0;
	}
	/* rows permuted within each head (interleaved RoPE → rotate-half): a row, or the part of one in range, at a time */
	uint8_t *dst = out;
	size_t es = c->as == ST_F32 ? 4 : 2;
	while (n > 0) {
		int64_t r = first / c->cols, col = first % c->cols, len = c->cols - col < n ? c->cols - col : n;
		tc_tensor_read(c->t, c->as, dst, c->base + tn_output_src_row(c->o, r) * c->cols + col, len);
		dst += (size_t)len * es;
		first += len;
		n -= len;
	}
	return 0;
}

static int write_safetensors(ci_job *j)
{
	char *path = path_join(j->outdir, "model.safetensors");
	fill_ctx *ctx = calloc((size_t)j->plan.n_out + 1, sizeof *ctx);
	static __thread char werr[1024];
	werr[0] = 0;
	st_writer *w = path && ctx ? st_writer_open(path, werr, sizeof werr) : NULL;
	free(path);
	if (!w) {
		free(ctx);
		aah_errf(j->err, j->err_len, "%s: %s", j->outdir, werr[0] ? werr : "out of memory");
		return -1;
	}
	int rc = st_writer_set_metadata(w, "format", "pt");
	for (int32_t i = 0; !rc && i < j->plan.n_out; i++) {
		const tn_output *o = &j->plan.out[i];
		const tc_tensor *t = &j->ts.t[o->src];
		ctx[i].t = t;
		ctx[i].o = o;
		ctx[i].as = out_dtype(j, o);
		ctx[i].base = o->n_dims == 2 ? o->row0 * t->shape[1] : 0;
		ctx[i].cols = o->n_dims == 2 ? o->shape[1] : 1;
		rc = st_writer_add_fill(w, o->name, ctx[i].as, o->n_dims, o->shape, fill_tensor, &ctx[i]);
	}
	if (rc)
		st_writer_discard(w);
	else
		rc = st_writer_close(w);
	free(ctx);
	if (rc)
		aah_errf(j->err, j->err_len, "%s", werr[0] ? werr : "cannot write model.safetensors");
	return rc ? -1 : 0;
}

/* The tokenizer files of the first folder that has tokenizer.json or tokenizer.model: --tokenizer, else the
 * checkpoint's folder, else the source folder. */
static int copy_tokenizer(ci_job *j)
{
	static const char *const files[] = {
		"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
		"vocab.json", "merges.txt", "generation_config.json",
	};
	const char *dirs[3] = { NULL };
	int nd = 0;
	if (j->o->tokenizer_dir)
		dirs[nd++] = j->o->tokenizer_dir;
	else {
		dirs[nd++] = j->s->dir;
		if (strcmp(j->s->dir, j->list->root))
			dirs[nd++] = j->list->root;
	}
	for (int d = 0; d < nd; d++) {
		if (!file_in(dirs[d], "tokenizer.json") && !file_in(dirs[d], "tokenizer.model"))
			continue;
		for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
			if (!file_in(dirs[d], files[f]))
				continue;
			char *from = path_join(dirs[d], files[f]), *to = path_join(j->outdir, files[f]);
			int rc = from && to ? aah_copy_file(from, to, j->err, j->err_len) : -1;
			free(from);
			free(to);
			if (rc)
				return -1;
		}
		j->tokenizer_from = dirs[d];
		return 0;
	}
	if (j->o->tokenizer_dir) {
		aah_errf(j->err, j->err_len, "%s: holds neither tokenizer.json nor tokenizer.model", j->o->tokenizer_dir);
		return -1;
	}
	return 0;
}

/* aah.json from the checkpoint's "aah" dict (CHECKPOINT.md's layout), validated against the config. */
static int write_aah(ci_job *j)
{
	if (j->s->sharded)
		return 0;
	const tc_file *f = &j->files[0];
	const pkl_value *aah = pkl_dict_get(f->doc.root, "aah");
	if (!aah || aah->type == PKL_NONE)
		return 0;
	if (aah->type != PKL_DICT) {
		aah_errf(j->err, j->err_len, "%s: 'aah' is a %s, not a dict (or None for a full-attention run)", f->path,
		         pkl_type_name(aah));
		return -1;
	}
	json_t *src = pkl_to_json(aah, "aah", j->err, j->err_len);
	if (!src) {
		ci_err_prefix(j->err, j->err_len, f->path);
		return -1;
	}
	json_t *out = json_object(), *prov = json_object();
	json_object_set_new(out, "version", json_integer(1));
	static const char *const keep[] = { "context_length", "candidate_windows", "regimes", "default_regime" };
	const char *key;
	json_t *v;
	json_object_foreach(src, key, v) {
		bool known = !strcmp(key, "branch_usage");
		for (size_t k = 0; k < 4; k++)
			if (!strcmp(key, keep[k])) {
				json_object_set(out, key, v);
				known = true;
			}
		if (!known && j->o->log)
			fprintf(j->o->log, "%s: aah.%s is not part of aah.json: left out\n", j->s->rel, key);
	}
	json_t *regimes = json_object_get(out, "regimes");
	if (json_is_object(regimes) && json_object_get(regimes, AAH_FULL_ATTENTION)) {
		json_object_del(regimes, AAH_FULL_ATTENTION);
		if (j->o->log)
			fprintf(j->o->log, "%s: regime '%s' is built in: left out of aah.json\n", j->s->rel, AAH_FULL_ATTENTION);
	}
	j->n_regimes = json_is_object(regimes) ? (int)json_object_size(regimes) : 0;
	if (j->step >= 0)
		json_object_set_new(prov, "step", json_integer(j->step));
	if (j->seed >= 0)
		json_object_set_new(prov, "seed", json_integer(j->seed));
	json_object_set_new(prov, "source", json_string(j->s->rel));
	char hex[65];
	sha256_hex(f->zip.data, (size_t)f->zip.size, hex);
	json_object_set_new(prov, "sha256", json_string(hex));
	if (json_object_get(src, "branch_usage"))
		json_object_set(prov, "branch_usage", json_object_get(src, "branch_usage"));
	/* how the source's q/k rows were read: "interleaved" ones were permuted into the rotate-half order aahd runs */
	json_object_set_new(prov, "rope", json_string(j->o->rope == CKPT_ROPE_INTERLEAVED ? "interleaved" : "neox"));
	json_object_set_new(out, "provenance", prov);
	json_decref(src);
	char *text = json_dumps(out, JSON_COMPACT);
	aah_config a;
	memset(&a, 0, sizeof a);
	int rc = text ? aah_config_parse(&a, text, strlen(text), &j->mc, j->err, j->err_len) : -1;
	free(text);
	aah_config_free(&a);
	if (rc) {
		char where[1200];
		snprintf(where, sizeof where, "%s: the AAH state ('aah')", f->path);
		ci_err_prefix(j->err, j->err_len, where);
	} else
		rc = write_json(j->outdir, "aah.json", out, JSON_INDENT(1) | JSON_SORT_KEYS, j->err, j->err_len);
	json_decref(out);
	return rc;
}

/* The folder must load as aahd loads it. */
static int verify_output(ci_job *j)
{
	model_files m;
	if (model_files_load(&m, j->outdir, j->err, j->err_len)) {
		ci_err_prefix(j->err, j->err_len, "the imported folder does not load");
		return -1;
	}
	aah_config a;
	int rc = aah_config_load(&a, j->outdir, &m.config, j->err, j->err_len);
	aah_config_free(&a);
	model_files_free(&m);
	if (rc < 0) {
		ci_err_prefix(j->err, j->err_len, "the imported aah.json does not load");
		return -1;
	}
	return 0;
}

static void log_done(const ci_job *j)
{
	if (!j->o->log)
		return;
	const char *dt = j->plan.n_out ? torch_dtype_name(out_dtype(j, &j->plan.out[0])) : "-";
	fprintf(j->o->log, "%s -> %s: %d tensors (%s names, %s%s)%s%s%s", j->s->rel, j->final_dir, (int)j->plan.n_out,
	        j->plan.style, dt, j->o->dtype >= 0 ? ", converted" : "", j->plan.tied ? ", tied embeddings" : "",
	        j->plan.n_dropped ? ", derived buffers left out" : "",
	        j->o->rope == CKPT_ROPE_INTERLEAVED ? ", q/k rows permuted from interleaved RoPE" : "");
	if (j->n_regimes)
		fprintf(j->o->log, ", aah.json with %d regime%s", j->n_regimes, j->n_regimes == 1 ? "" : "s");
	if (!j->tokenizer_from)
		fprintf(j->o->log, "; no tokenizer found beside it (pass --tokenizer DIR: aahd needs one to serve text)");
	fprintf(j->o->log, "\n");
}

static int import_one(ci_job *j)
{
	int rc = -1;
	if (load_tensors(j) || read_meta(j) || load_config(j))
		goto done;
	if (tn_plan_build(&j->plan, j->ts.names, j->ts.t, j->ts.n, &j->mc, j->o->dtype >= 0,
	                  j->o->rope == CKPT_ROPE_INTERLEAVED, j->err, j->err_len)) {
		ci_err_prefix(j->err, j->err_len, j->s->path);
		goto done;
	}
	if (write_config(j) || write_safetensors(j) || copy_tokenizer(j) || write_aah(j) || verify_output(j))
		goto done;
	log_done(j);
	rc = 0;
done:
	tn_plan_free(&j->plan);
	json_decref(j->cfg);
	json_decref(j->index);
	tensors_free(&j->ts);
	for (int32_t i = 0; i < j->n_files; i++)
		tc_close(&j->files[i]);
	free(j->files);
	return rc;
}

/* ---- the whole import ---- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void remove_tree(const char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int ckpt_import(const char *src, const char *out, const ckpt_import_opts *o, char *err, size_t err_len)
{
	static const ckpt_import_opts defaults = CKPT_IMPORT_OPTS_INIT;
	if (!o)
		o = &defaults;
	if (err && err_len)
		err[0] = 0;
	char outp[4096];
	size_t ol = strlen(out);
	while (ol > 1 && out[ol - 1] == '/')
		ol--;
	if (ol == 0 || ol >= sizeof outp - 32) {
		aah_errf(err, err_len, "'%s': not a usable output path", out);
		return -1;
	}
	memcpy(outp, out, ol);
	outp[ol] = 0;
	struct stat st;
	if (lstat(outp, &st) == 0) {
		aah_errf(err, err_len, "%s: exists already: refusing to overwrite it", outp);
		return -1;
	}
	ci_list list;
	if (classify_source(&list, src, err, err_len)) {
		list_free(&list);
		return -1;
	}
	if (o->step >= 0) {
		int32_t keep = -1;
		for (int32_t i = 0; i < list.n; i++)
			if (list.v[i].step == o->step)
				keep = i;
		if (!list.run || keep < 0) {
			aah_errf(err, err_len, "%s: %s", src, list.run ? "no checkpoint of that step" :
			         "--step selects a checkpoint of a run directory, and this is a single checkpoint");
			list_free(&list);
			return -1;
		}
		ci_source chosen = list.v[keep];
		for (int32_t i = 0; i < list.n; i++)
			if (i != keep) {
				free(list.v[i].path);
				free(list.v[i].dir);
				free(list.v[i].rel);
			}
		list.v[0] = chosen;
		list.n = 1;
	}
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s.partial-XXXXXX", outp);
	if (!mkdtemp(tmp)) {
		aah_errf(err, err_len, "%s: cannot make a temporary folder beside it: %s", outp, strerror(errno));
		list_free(&list);
		return -1;
	}
	int rc = 0;
	for (int32_t i = 0; !rc && i < list.n; i++) {
		char sub[4300], fin[4300];
		snprintf(sub, sizeof sub, "%s", tmp);
		snprintf(fin, sizeof fin, "%s", outp);
		if (list.run) {
			snprintf(sub, sizeof sub, "%s/checkpoint-%lld", tmp, (long long)list.v[i].step);
			snprintf(fin, sizeof fin, "%s/checkpoint-%lld", outp, (long long)list.v[i].step);
			if (mkdir(sub, 0777)) {
				aah_errf(err, err_len, "%s: %s", sub, strerror(errno));
				rc = -1;
				break;
			}
		}
		ci_job j = { .o = o, .list = &list, .s = &list.v[i], .outdir = sub, .final_dir = fin, .err = err,
			     .err_len = err_len };
		rc = import_one(&j);
	}
	if (!rc) {
		mode_t um = umask(0);
		umask(um);
		int r = chmod(tmp, 0777 & ~um);
		/* never onto something that appeared meanwhile; plain rename where the filesystem lacks the flag */
		if (!r && (r = renameat2(AT_FDCWD, tmp, AT_FDCWD, outp, RENAME_NOREPLACE)) && (errno == EINVAL ||
		    errno == ENOSYS)) {
			if (lstat(outp, &st) != 0)
				r = rename(tmp, outp);
			else
				errno = EEXIST;   /* it appeared meanwhile: say so, not the flag's EINVAL */
		}
		if (r) {
			aah_errf(err, err_len, "%s: cannot rename %s into place: %s", outp, tmp, strerror(errno));
			rc = -1;
		}
	}
	if (rc)
		remove_tree(tmp);
	list_free(&list);
	return rc;
}
