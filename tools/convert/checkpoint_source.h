/* tools/convert/checkpoint_source.h — the reading half of aah-convert import, shared with its writing half
 * (checkpoint_import.c) and with nothing else: the sources a path names, one checkpoint's tensors, step, seed and
 * config, and the small path and message helpers both halves use. Arrows run one way: checkpoint_import.c →
 * checkpoint_source.c → torch_checkpoint.c. */
#ifndef AAH_CHECKPOINT_SOURCE_H
#define AAH_CHECKPOINT_SOURCE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/convert/checkpoint_import.h"
#include "tools/convert/tensor_names.h"
#include "tools/convert/torch_checkpoint.h"
#include "models/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ci_tensors {
	const char **names;          /* the pickle's strings */
	tc_tensor *t;
	int32_t *file;               /* which of the checkpoint's files */
	int32_t n, cap;
} ci_tensors;

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

/* What src holds, into l (zeroed first): one source for a file or a model folder, one per checkpoint for a run
 * directory (l->run), sorted by step. Returns 0, or -1 with err; free l with ci_sources_free either way. */
int ci_sources_find(ci_list *l, const char *src, char *err, size_t err_len);
void ci_sources_free(ci_list *l);
/* Opens j->s and reads its state dict (j->ts), step and seed, and config (j->cfg, j->mc). Returns 0, or -1 with
 * j->err; release what it opened with ci_checkpoint_close either way. */
int ci_checkpoint_read(ci_job *j);
void ci_checkpoint_close(ci_job *j);
/* A pickled value (the checkpoint's config or AAH state) as JSON, path naming it in messages; NULL with err on a
 * value JSON cannot hold or past a size budget. The caller owns the result. */
json_t *ci_pkl_to_json(const pkl_value *v, const char *path, char *err, size_t err_len);

/* err = "prefix: err" */
void ci_err_prefix(char *err, size_t err_len, const char *prefix);
/* "a/b", malloc'd (the caller frees); NULL when out of memory. */
char *ci_path_join(const char *a, const char *b);
/* True when dir/name is a regular file. */
bool ci_file_in(const char *dir, const char *name);

#ifdef __cplusplus
}
#endif
#endif
