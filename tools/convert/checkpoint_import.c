/* tools/convert/checkpoint_import.c — aah-convert import (see checkpoint_import.h), the writing half: for each checkpoint
 * that checkpoint_source.c finds and reads, a Hugging Face folder (config.json, model.safetensors, the tokenizer files,
 * aah.json), loaded back as aahd loads it, in a temporary folder renamed into place whole. */
#include "tools/convert/checkpoint_import.h"

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
#include "tools/convert/checkpoint_source.h"
#include "tools/convert/safetensors_write.h"
#include "tools/convert/sha256.h"
#include "tools/convert/tensor_names.h"
#include "tools/convert/torch_checkpoint.h"

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
	char *p = ci_path_join(dir, name);
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
	char *path = ci_path_join(j->outdir, "model.safetensors");
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
		if (!ci_file_in(dirs[d], "tokenizer.json") && !ci_file_in(dirs[d], "tokenizer.model"))
			continue;
		for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
			if (!ci_file_in(dirs[d], files[f]))
				continue;
			char *from = ci_path_join(dirs[d], files[f]), *to = ci_path_join(j->outdir, files[f]);
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
	json_t *src = ci_pkl_to_json(aah, "aah", j->err, j->err_len);
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
	if (ci_checkpoint_read(j))
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
	ci_checkpoint_close(j);
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
	if (ci_sources_find(&list, src, err, err_len)) {
		ci_sources_free(&list);
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
			ci_sources_free(&list);
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
		ci_sources_free(&list);
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
	ci_sources_free(&list);
	return rc;
}
