/* tools/eval/prompt.c — few-shot contexts and item requests (see prompt.h). The context of an item is
 * lm-evaluation-harness's fewshot_context: description, then for each selected example doc_to_text +
 * target_delimiter + target + fewshot_delimiter ("\n\n"; nothing when the target is empty), then doc_to_text of the
 * item. Examples come from the task's sampler: random.Random(1234).sample over the few-shot file, one stream per
 * task consumed item by item (k + 1 drawn, the item itself dropped, where the harness's splits coincide); the first
 * k (of the item's subject); or fixed ids. A task whose items are the first rows of the split it draws from (GPQA)
 * takes the whole split from DIR/TASK.full.jsonl when it is there: its process_docs runs once over the split in its
 * order, the items are its first rows, and the item drawn among the k + 1 is the one dropped. */
#include "tools/eval/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "tools/eval/pyrandom.h"
#include "tools/eval/util.h"

static const char FEWSHOT_DELIMITER[] = "\n\n";

/* The few-shot examples' target text: the task's own, or the gold choice of a multiple-choice doc. */
static char *fewshot_target(const eval_task *t, const json_t *doc)
{
	if (t->fewshot_target)
		return t->fewshot_target(doc);
	char **choices;
	int32_t n = t->doc_to_choices(doc, &choices);
	int32_t gold = t->doc_to_gold(doc);
	char *out = xstrdup(gold >= 0 && gold < n ? choices[gold] : "");
	for (int32_t i = 0; i < n; i++)
		free(choices[i]);
	free(choices);
	return out;
}

/* Few-shot doc indices for one item into sel (at most k); returns their count, or -1 with err. */
static int32_t select_fewshot(const eval_task_run *run, const json_t *doc, py_random *rng, int32_t *sel, char *err,
                              size_t errlen)
{
	const eval_task *t = run->task;
	const eval_docs *fs = &run->fewshot;
	int32_t k = run->k;
	int32_t want = k + (t->fewshot_same_split ? 1 : 0);
	int32_t *cand = xmalloc((size_t)(want > 0 ? want : 1) * sizeof *cand);
	int32_t n_cand = 0;
	if (t->sampler == EVAL_SAMPLER_RANDOM) {
		if (py_random_sample(rng, (int32_t)fs->n, want, cand) != 0) {
			snprintf(err, errlen, "%s: the harness draws %d few-shot examples but the file has %lld", t->name, want,
			         (long long)fs->n);
			free(cand);
			return -1;
		}
		n_cand = want;
	} else if (t->sampler == EVAL_SAMPLER_FIRST_N) {
		const json_t *key = t->fewshot_key ? json_object_get(doc, t->fewshot_key) : NULL;
		for (int64_t i = 0; i < fs->n && n_cand < want; i++)
			if (!key || json_equal(json_object_get(fs->doc[i], t->fewshot_key), key))
				cand[n_cand++] = (int32_t)i;
		if (n_cand < want) {
			snprintf(err, errlen, "%s: %d-shot needs %d few-shot examples%s%s%s%s%s, the few-shot file has %d", t->name,
			         k, want, key ? " with " : "", key ? t->fewshot_key : "", key ? " \"" : "",
			         key ? (json_is_string(key) ? json_string_value(key) : "?") : "", key ? "\"" : "", n_cand);
			free(cand);
			return -1;
		}
	} else {
		if (want > t->n_fixed) {
			snprintf(err, errlen, "%s: the harness's few-shot examples are %d fixed rows; %d-shot asked", t->name,
			         t->n_fixed, k);
			free(cand);
			return -1;
		}
		for (int32_t j = 0; j < want; j++) {
			int32_t found = -1;
			for (int64_t i = 0; i < fs->n && found < 0; i++)
				if (json_integer_value(json_object_get(fs->doc[i], t->fixed_field)) == t->fixed_ids[j])
					found = (int32_t)i;
			if (found < 0) {
				snprintf(err, errlen, "%s: the few-shot file has no row with %s %lld (the harness's examples are %s "
				         "%lld, %lld, %lld)", t->name, t->fixed_field, (long long)t->fixed_ids[j], t->fixed_field,
				         (long long)t->fixed_ids[0], (long long)t->fixed_ids[1], (long long)t->fixed_ids[2]);
				free(cand);
				return -1;
			}
			cand[n_cand++] = found;
		}
	}
	/* selected_docs = [x for x in fewshotex if x != doc][:num_fewshot] */
	int32_t n = 0;
	for (int32_t i = 0; i < n_cand && n < k; i++)
		if (!json_equal(fs->doc[cand[i]], doc))
			sel[n++] = cand[i];
	free(cand);
	return n;
}

static char *build_context(const eval_task_run *run, const json_t *doc, py_random *rng, char *err, size_t errlen)
{
	const eval_task *t = run->task;
	strbuf b = {0};
	sb_add(&b, "", 0);
	char *desc = t->description ? t->description(doc, run->k) : NULL;
	if (desc)
		sb_adds(&b, desc);
	free(desc);
	if (run->k > 0) {
		int32_t *sel = xmalloc((size_t)run->k * sizeof *sel);
		int32_t n = select_fewshot(run, doc, rng, sel, err, errlen);
		if (n < 0) {
			free(sel);
			sb_free(&b);
			return NULL;
		}
		for (int32_t i = 0; i < n; i++) {
			const json_t *ex = run->fewshot.doc[sel[i]];
			char *text = (t->fewshot_text ? t->fewshot_text : t->doc_to_text)(ex, run->k);
			char *target = fewshot_target(t, ex);
			sb_adds(&b, text);
			if (*target) {
				sb_adds(&b, t->target_delimiter);
				sb_adds(&b, target);
				sb_adds(&b, FEWSHOT_DELIMITER);
			}
			free(text);
			free(target);
		}
		free(sel);
	}
	char *text = t->doc_to_text(doc, run->k);
	sb_adds(&b, text);
	free(text);
	return sb_take(&b);
}

/* The item's hash covers what it asks of the server and every setting that changes its score. */
static void item_hash(const eval_task_run *run, const eval_prepare_opts *opts, eval_item *it)
{
	const eval_task *t = run->task;
	strbuf b = {0};
	sb_addf(&b, "task=%s\x1fversion=%s\x1fk=%d\x1fgen=%d\x1fsettings=%s\x1f", t->name, t->version, run->k,
	        run->max_gen_toks, opts->settings ? opts->settings : "");
	for (int32_t i = 0; t->until[i]; i++)
		sb_addf(&b, "until=%s\x1f", t->until[i]);
	sb_add(&b, it->context, strlen(it->context));
	for (int32_t i = 0; i < it->n_choices; i++) {
		sb_add(&b, "\x1e", 1);
		sb_adds(&b, it->continuation[i]);
		sb_add(&b, "\x1d", 1);
		sb_adds(&b, it->choice[i]);
	}
	char *target = it->target ? json_dumps(it->target, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
	if (target)
		sb_addf(&b, "\x1ctarget=%s", target);
	free(target);
	eval_hash_hex(b.s, b.len, it->hash);
	sb_free(&b);
}

static int read_items(eval_task_run *run, const char *dir, char *err, size_t errlen)
{
	const eval_task *t = run->task;
	char *jsonl = xasprintf("%s/%s.jsonl", dir, t->name);
	if (t->output == EVAL_LOGLIKELIHOOD_ROLLING && !aah_is_file(jsonl)) {
		/* perplexity also reads a plain text file as one document */
		char *txt = xasprintf("%s/%s.txt", dir, t->name);
		if (aah_is_file(txt)) {
			size_t len;
			char *data = eval_read_file(txt, &len, err, errlen);
			if (!data) {
				free(txt);
				free(jsonl);
				return -1;
			}
			json_t *doc = json_object();
			json_object_set_new(doc, "text", json_stringn(data, len));
			free(data);
			if (!json_string_value(json_object_get(doc, "text"))) {
				snprintf(err, errlen, "%s: not UTF-8 text", txt);
				json_decref(doc);
				free(txt);
				free(jsonl);
				return -1;
			}
			run->docs.doc = xmalloc(sizeof *run->docs.doc);
			run->docs.line = xmalloc(sizeof *run->docs.line);
			run->docs.doc[0] = doc;
			run->docs.line[0] = 1;
			run->docs.n = 1;
			run->path = txt;
			free(jsonl);
			return 0;
		}
		snprintf(err, errlen, "%s: no such file (the perplexity task reads %s.jsonl, one {\"text\": …} per line, or "
		         "%s.txt)", jsonl, t->name, t->name);
		free(txt);
		free(jsonl);
		return -1;
	}
	run->path = jsonl;
	if (!aah_is_file(jsonl)) {
		snprintf(err, errlen, "%s: no such file (task %s reads its items from DIR/%s.jsonl)", jsonl, t->name, t->name);
		return -1;
	}
	return eval_docs_read(&run->docs, jsonl, t->layout, t->check, err, errlen);
}

/* The few-shot pool of a run with shots: for a task whose items are the first rows of its few-shot split,
 * DIR/TASK.full.jsonl when it is there (the whole split; the items must then be its first rows, in order), else
 * DIR/TASK.fewshot.jsonl. A random draw over fewer rows than the harness's split holds is not the harness's draw:
 * the pool says so (pool.partial, pool.note), and the outputs carry it. */
static int read_fewshot(eval_task_run *run, const char *dir, char *err, size_t errlen)
{
	const eval_task *t = run->task;
	char *path = t->fewshot_full_split ? xasprintf("%s/%s.full.jsonl", dir, t->name) : NULL;
	if (path && aah_is_file(path)) {
		run->pool.full = true;
	} else {
		free(path);
		path = xasprintf("%s/%s.fewshot.jsonl", dir, t->name);
		if (!aah_is_file(path)) {
			snprintf(err, errlen, "%s: no such file (%s %d-shot takes its examples from it%s%s%s; --num-fewshot %s=0 "
			         "runs it zero-shot)", path, t->name, run->k, t->fewshot_full_split ? ", or from " : "",
			         t->fewshot_full_split ? t->name : "", t->fewshot_full_split ? ".full.jsonl, the whole split" : "",
			         t->name);
			free(path);
			return -1;
		}
	}
	if (eval_docs_read(&run->fewshot, path, t->layout, t->check, err, errlen) != 0) {
		free(path);
		return -1;
	}
	const char *slash = strrchr(path, '/');
	run->pool.file = xstrdup(slash ? slash + 1 : path);
	if (run->pool.full) {
		/* the harness evaluates the split itself: the items file must be its first rows, byte for byte as JSON */
		if (run->docs.n > run->fewshot.n) {
			snprintf(err, errlen, "%s has %lld items, more than the %lld rows of %s, the whole split they are the "
			         "first rows of", run->path, (long long)run->docs.n, (long long)run->fewshot.n, path);
			free(path);
			return -1;
		}
		for (int64_t i = 0; i < run->docs.n; i++)
			if (!json_equal(run->docs.doc[i], run->fewshot.doc[i])) {
				snprintf(err, errlen, "%s:%lld is not row %lld of %s: the items must be the first rows of the whole "
				         "split, in its order (or remove %s to draw from %s.fewshot.jsonl)", run->path,
				         (long long)run->docs.line[i], (long long)i + 1, path, run->pool.file, t->name);
				free(path);
				return -1;
			}
	}
	free(path);
	run->pool.rows = run->fewshot.n;
	run->pool.split_rows = t->fewshot_split_rows;
	run->pool.partial = t->sampler == EVAL_SAMPLER_RANDOM && t->fewshot_split_rows > 0 &&
	                    run->fewshot.n < t->fewshot_split_rows;
	if (run->pool.partial) {
		run->pool.note = xasprintf("%lld of %lld rows, not the harness's draw", (long long)run->pool.rows,
		                           (long long)run->pool.split_rows);
		bool absent = t->fewshot_full_split && !run->pool.full;
		run->pool.detail = xasprintf("the harness samples the %lld rows of its %s split%s%s%s",
		                             (long long)run->pool.split_rows, t->fewshot_split, absent ? "; " : "",
		                             absent ? t->name : "",
		                             absent ? ".full.jsonl, that whole split, is not in the data directory" : "");
	}
	return 0;
}

int eval_task_prepare(eval_task_run *run, const eval_task *task, const char *dir, const eval_prepare_opts *opts,
                      char *err, size_t errlen)
{
	memset(run, 0, sizeof *run);
	run->task = task;
	run->k = task->output == EVAL_LOGLIKELIHOOD_ROLLING ? 0 : opts->num_fewshot >= 0 ? opts->num_fewshot
	                                                                                : task->num_fewshot;
	run->max_gen_toks = task->output != EVAL_GENERATE_UNTIL ? 0
	                    : opts->max_gen_toks >= 0          ? opts->max_gen_toks
	                                                       : task->max_gen_toks;
	if (read_items(run, dir, err, errlen) != 0)
		goto fail;
	if (run->docs.n == 0) {
		snprintf(err, errlen, "%s: no items", run->path);
		goto fail;
	}
	if (run->k > 0 && read_fewshot(run, dir, err, errlen) != 0)
		goto fail;
	if (task->process) {
		/* the harness's process_docs, one generator over the docs in file order: the items, then the few-shot
		 * file's rows; over a full split, the split (items are its first rows: they share its processed docs) */
		py_random rng;
		py_random_seed(&rng, task->process_seed[run->k > 0]);
		if (!run->pool.full)
			for (int64_t i = 0; i < run->docs.n; i++)
				task->process(run->docs.doc[i], &rng, run->k);
		for (int64_t i = 0; i < run->fewshot.n; i++)
			task->process(run->fewshot.doc[i], &rng, run->k);
	}
	if (run->pool.full)
		for (int64_t i = 0; i < run->docs.n; i++) {
			json_decref(run->docs.doc[i]);
			run->docs.doc[i] = json_incref(run->fewshot.doc[i]);
		}
	run->n_file = run->docs.n;
	int64_t *sel;
	run->n_items = eval_subset_select(&opts->subset, task->name, run->docs.n, &sel);
	run->items = xcalloc((size_t)(run->n_items ? run->n_items : 1), sizeof *run->items);
	py_random fewshot_rng;
	py_random_seed(&fewshot_rng, 1234);   /* fewshot_random_seed */
	for (int64_t i = 0; i < run->n_items; i++) {
		eval_item *it = &run->items[i];
		it->doc_id = i;
		it->index = sel[i];
		it->line = run->docs.line[sel[i]];
		it->doc = run->docs.doc[sel[i]];
		if (task->output == EVAL_LOGLIKELIHOOD_ROLLING)
			it->context = task->doc_to_text(it->doc, 0);
		else if (!(it->context = build_context(run, it->doc, &fewshot_rng, err, errlen)))
			goto fail_sel;
		if (task->output == EVAL_MULTIPLE_CHOICE) {
			it->n_choices = task->doc_to_choices(it->doc, &it->choice);
			it->continuation = xmalloc((size_t)(it->n_choices ? it->n_choices : 1) * sizeof *it->continuation);
			for (int32_t c = 0; c < it->n_choices; c++)
				it->continuation[c] = xasprintf("%s%s", task->target_delimiter, it->choice[c]);
			it->gold = task->doc_to_gold(it->doc);
			if (it->gold < 0 || it->gold >= it->n_choices) {
				snprintf(err, errlen, "%s:%lld: the answer is not one of the %d choices", run->path,
				         (long long)it->line, it->n_choices);
				goto fail_sel;
			}
			it->target = json_integer(it->gold);
		} else if (task->doc_to_target) {
			it->target = task->doc_to_target(it->doc);
		}
		item_hash(run, opts, it);
	}
	free(sel);
	return 0;
fail_sel:
	free(sel);
fail:
	eval_task_run_free(run);
	return -1;
}

void eval_task_run_free(eval_task_run *run)
{
	for (int64_t i = 0; i < run->n_items; i++) {
		eval_item *it = &run->items[i];
		free(it->context);
		for (int32_t c = 0; c < it->n_choices; c++) {
			free(it->continuation[c]);
			free(it->choice[c]);
		}
		free(it->continuation);
		free(it->choice);
		json_decref(it->target);
	}
	free(run->items);
	eval_docs_free(&run->docs);
	eval_docs_free(&run->fewshot);
	free(run->pool.file);
	free(run->pool.note);
	free(run->pool.detail);
	free(run->path);
	memset(run, 0, sizeof *run);
}

json_t *eval_fewshot_pool_json(const eval_task_run *run)
{
	if (run->k <= 0 || !run->pool.file)
		return NULL;
	const eval_task *t = run->task;
	json_t *o = json_pack("{s:s,s:I,s:o,s:o,s:b,s:b}", "file", run->pool.file, "rows", (json_int_t)run->pool.rows,
	                      "split", t->fewshot_split ? json_string(t->fewshot_split) : json_null(), "split_rows",
	                      run->pool.split_rows > 0 ? json_integer(run->pool.split_rows) : json_null(), "whole_split",
	                      run->pool.full, "partial", run->pool.partial);
	if (run->pool.note) {
		json_object_set_new(o, "note", json_string(run->pool.note));
		json_object_set_new(o, "detail", json_string(run->pool.detail));
	}
	return o;
}
