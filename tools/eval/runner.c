/* tools/eval/runner.c — the worker pool and the per-item requests (see runner.h). Requests follow
 * lm-evaluation-harness's local-completions model: token ids as prompts, echo + logprobs 1 for log-likelihoods
 * (max_tokens 0 on aahd, 1 elsewhere, the generated token ignored), greedy generation with the task's stop
 * sequences (the first four sent; the text cut at the earliest of all of them here). */
#include "tools/eval/runner.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "tools/eval/pytext.h"
#include "tools/eval/score.h"
#include "tools/eval/util.h"

#define ROLLING_BATCH 8   /* windows per request of a perplexity document */

void eval_tokens_free(eval_tokens *t)
{
	free(t->ctx);
	for (int32_t i = 0; i < t->n_choices; i++)
		free(t->cont[i]);
	free(t->cont);
	free(t->n_cont);
	memset(t, 0, sizeof *t);
}

void eval_unit_key(const eval_server *srv, const char *regime, const eval_task_run *run, const eval_item *it,
                   char out[33])
{
	strbuf b = {0};
	sb_addf(&b, "server=%s\x1fmodel=%s\x1fregime=%s\x1ftask=%s\x1fitem=%lld\x1f%s", srv->key, srv->model, regime,
	        run->task->name, (long long)it->index, it->hash);
	eval_hash_hex(b.s, b.len, out);
	sb_free(&b);
}

typedef struct pool pool;

typedef struct worker {
	pool *p;
	int32_t index;
	eval_client **clients;   /* (n_urls) one connection per server of the fleet */
	eval_client *client;     /* the one the current item goes to: unit i to server i mod n_urls */
	pthread_t thread;
} worker;

struct pool {
	const eval_runner_opts *o;
	const eval_server *srv;
	eval_cache *cache;
	const char *regime;
	eval_unit *units;
	int64_t n;
	atomic_llong next, done;
	atomic_int finished;            /* workers that have returned */
	pthread_mutex_t mu;
	double tokens;                  /* under mu */
	bool failed;                    /* under mu */
	char err[2048];
};

/* A program's output (cut anywhere, maybe mid-character) as a JSON string of at most 600 bytes. */
static json_t *json_output(const char *s, size_t n)
{
	char *copy = xstrndup(s, n < 600 ? n : 600);
	json_t *j = py_text_json(copy);
	free(copy);
	return j;
}

/* Per-item accumulation of the responses' usage and aah objects (token-weighted). */
typedef struct aah_acc {
	double tokens, acr, work, kv, weighted;   /* weighted: tokens of the responses that had an aah object */
	double seconds;
} aah_acc;

static void aah_add(aah_acc *a, const json_t *resp)
{
	const json_t *u = json_object_get(resp, "usage");
	double t = (double)json_integer_value(json_object_get(u, "prompt_tokens")) +
	           (double)json_integer_value(json_object_get(u, "completion_tokens"));
	a->tokens += t;
	const json_t *x = json_object_get(resp, "aah");
	if (json_is_object(x)) {
		a->acr += t * json_number_value(json_object_get(x, "acr"));
		a->work += t * json_number_value(json_object_get(x, "attention_work_ratio"));
		a->kv += t * json_number_value(json_object_get(x, "kv_memory_ratio"));
		a->weighted += t;
	}
}

static json_t *aah_json(const aah_acc *a)
{
	json_t *o = json_pack("{s:f,s:f}", "tokens", a->tokens, "seconds", a->seconds);
	if (a->weighted > 0) {
		json_object_set_new(o, "weighted_tokens", json_real(a->weighted));
		json_object_set_new(o, "acr", json_real(a->acr / a->weighted));
		json_object_set_new(o, "attention_work_ratio", json_real(a->work / a->weighted));
		json_object_set_new(o, "kv_memory_ratio", json_real(a->kv / a->weighted));
	}
	return o;
}

/* Where an item went wrong, for messages: "mmlu item 3 (tests/data/eval/mmlu.jsonl:4)". */
static void where(const eval_unit *u, char *buf, size_t n)
{
	snprintf(buf, n, "%s item %lld (%s:%lld)", u->run->task->name, (long long)u->item->doc_id, u->run->path,
	         (long long)u->item->line);
}

typedef enum { ITEM_OK, ITEM_STOPPED, ITEM_FAILED } item_rc;

static item_rc client_fail(const eval_client_error *e, const eval_unit *u, char *err, size_t errlen)
{
	if (e->status == EVAL_CLIENT_STOPPED)
		return ITEM_STOPPED;
	char w[512];
	where(u, w, sizeof w);
	snprintf(err, errlen, "%s: %s", w, e->message);
	return ITEM_FAILED;
}

static item_rc tokenize(worker *w, const eval_unit *u, const char *text, size_t len, int32_t **ids, int64_t *n,
                        char *err, size_t errlen)
{
	eval_client_error e;
	if (eval_client_tokenize(w->client, text, len, w->p->o->add_special, ids, n, &e) != EVAL_CLIENT_OK)
		return client_fail(&e, u, err, errlen);
	return ITEM_OK;
}

/* The item's token ids, asked once. */
static item_rc ensure_tokens(worker *w, const eval_unit *u, char *err, size_t errlen)
{
	eval_tokens *t = u->tok;
	if (t->ready)
		return ITEM_OK;
	const eval_item *it = u->item;
	const eval_task *task = u->run->task;
	item_rc rc;
	if (task->output == EVAL_MULTIPLE_CHOICE) {
		/* _encode_pair: the context's trailing whitespace moves to the continuation; context_enc = tok(context),
		 * whole = tok(context + continuation), continuation_enc = whole[len(context_enc):] */
		size_t cl = eval_pair_context_len(it->context);
		if (cl == 0 && it->context[0] == 0) {
			t->ctx = xmalloc(sizeof *t->ctx);   /* context == "": [prefix_token] */
			t->ctx[0] = w->p->srv->prefix_token;
			t->n_ctx = 1;
		} else if ((rc = tokenize(w, u, it->context, cl, &t->ctx, &t->n_ctx, err, errlen)) != ITEM_OK) {
			return rc;
		}
		t->n_choices = it->n_choices;
		t->cont = xcalloc((size_t)it->n_choices, sizeof *t->cont);
		t->n_cont = xcalloc((size_t)it->n_choices, sizeof *t->n_cont);
		for (int32_t c = 0; c < it->n_choices; c++) {
			char *whole = xasprintf("%s%s", it->context, it->continuation[c]);
			int32_t *ids;
			int64_t n;
			bool empty_ctx = it->context[0] == 0;
			rc = tokenize(w, u, empty_ctx ? it->continuation[c] : whole, strlen(empty_ctx ? it->continuation[c] : whole),
			              &ids, &n, err, errlen);
			free(whole);
			if (rc != ITEM_OK)
				return rc;
			int64_t skip = empty_ctx ? 0 : t->n_ctx;
			int64_t m = n > skip ? n - skip : 0;
			t->cont[c] = xmalloc((size_t)(m ? m : 1) * sizeof **t->cont);
			memcpy(t->cont[c], ids + (n > skip ? skip : n), (size_t)m * sizeof **t->cont);
			t->n_cont[c] = m;
			free(ids);
		}
	} else if ((rc = tokenize(w, u, it->context, strlen(it->context), &t->ctx, &t->n_ctx, err, errlen)) != ITEM_OK) {
		return rc;
	}
	t->ready = true;
	return ITEM_OK;
}

static json_t *ids_json(const int32_t *a, int64_t n, const int32_t *b, int64_t m)
{
	json_t *arr = json_array();
	for (int64_t i = 0; i < n; i++)
		json_array_append_new(arr, json_integer(a[i]));
	for (int64_t i = 0; i < m; i++)
		json_array_append_new(arr, json_integer(b[i]));
	return arr;
}

static json_t *base_request(const worker *w, json_t *prompt)
{
	json_t *r = json_pack("{s:s,s:o,s:f,s:i}", "model", w->p->srv->model, "prompt", prompt, "temperature", 0.0, "seed",
	                      1234);
	if (strcmp(w->p->regime, "default") || w->p->srv->n_regimes > 0)
		json_object_set_new(r, "aah_regime", json_string(w->p->regime));
	return r;
}

/* The choices of a response in index order (borrowed), or NULL when it does not have n. */
static const json_t *choice_at(const json_t *resp, int64_t i)
{
	const json_t *cs = json_object_get(resp, "choices");
	for (size_t k = 0; k < json_array_size(cs); k++) {
		const json_t *c = json_array_get(cs, k);
		const json_t *idx = json_object_get(c, "index");
		if ((json_is_integer(idx) ? json_integer_value(idx) : (json_int_t)k) == i)
			return c;
	}
	return NULL;
}

/* Log-likelihoods of n (context, continuation) pairs in one request: ll[i], greedy[i]. */
static item_rc loglikelihoods(worker *w, const eval_unit *u, int64_t n, const int32_t *const *ctx,
                              const int64_t *n_ctx, const int32_t *const *cont, const int64_t *n_cont, double *ll,
                              bool *greedy, aah_acc *acc, char *err, size_t errlen)
{
	int64_t max_len = w->p->o->max_length - 1;   /* the harness keeps one position for the generated token */
	json_t *prompts = json_array();
	int64_t *ctxlen = xmalloc((size_t)n * sizeof *ctxlen), *plen = xmalloc((size_t)n * sizeof *plen);
	for (int64_t i = 0; i < n; i++) {
		int32_t *inp = xmalloc((size_t)(n_ctx[i] + n_cont[i] + 1) * sizeof *inp);
		eval_ll_request(ctx[i], n_ctx[i], cont[i], n_cont[i], max_len, inp, &plen[i], &ctxlen[i]);
		json_array_append_new(prompts, ids_json(inp, plen[i], NULL, 0));
		free(inp);
	}
	json_t *req = base_request(w, prompts);
	json_object_set_new(req, "max_tokens", json_integer(w->p->srv->aahd ? 0 : 1));
	json_object_set_new(req, "echo", json_true());
	json_object_set_new(req, "logprobs", json_integer(1));
	json_t *resp;
	eval_client_error e;
	double t0 = aah_now_s();
	eval_client_status st = eval_client_post(w->client, "/v1/completions", req, &resp, &e);
	acc->seconds += aah_now_s() - t0;
	json_decref(req);
	item_rc rc = ITEM_OK;
	if (st != EVAL_CLIENT_OK) {
		rc = client_fail(&e, u, err, errlen);
		goto out;
	}
	aah_add(acc, resp);
	for (int64_t i = 0; i < n; i++) {
		const json_t *c = choice_at(resp, i);
		char why[512];
		if (!c || eval_ll_parse(json_object_get(c, "logprobs"), ctxlen[i], plen[i], &ll[i], &greedy[i], why,
		                        sizeof why) != 0) {
			char wh[512];
			where(u, wh, sizeof wh);
			snprintf(err, errlen, "%s: %s/v1/completions: %s", wh, eval_client_url(w->client),
			         c ? why : "the response lacks a choice for each prompt");
			rc = ITEM_FAILED;
			break;
		}
	}
	json_decref(resp);
out:
	free(ctxlen);
	free(plen);
	return rc;
}

static item_rc run_mc(worker *w, const eval_unit *u, json_t **result, char *err, size_t errlen)
{
	const eval_item *it = u->item;
	const eval_task *task = u->run->task;
	const eval_tokens *t = u->tok;
	int32_t n = it->n_choices;
	const int32_t **ctx = xmalloc((size_t)n * sizeof *ctx);
	int64_t *n_ctx = xmalloc((size_t)n * sizeof *n_ctx);
	for (int32_t c = 0; c < n; c++) {
		ctx[c] = t->ctx;
		n_ctx[c] = t->n_ctx;
	}
	double *ll = xcalloc((size_t)n, sizeof *ll);
	bool *greedy = xcalloc((size_t)n, sizeof *greedy);
	aah_acc acc = {0};
	item_rc rc = loglikelihoods(w, u, n, (const int32_t *const *)ctx, n_ctx, (const int32_t *const *)t->cont,
	                            t->n_cont, ll, greedy, &acc, err, errlen);
	if (rc == ITEM_OK) {
		eval_mc_score s;
		eval_score_mc(ll, it->choice, n, it->gold, &s);
		json_t *metrics = json_pack("{s:f}", "acc,none", s.acc);
		if (task->acc_norm)
			json_object_set_new(metrics, "acc_norm,none", json_real(s.acc_norm));
		json_t *resps = json_array(), *filtered = json_array();
		for (int32_t c = 0; c < n; c++) {
			json_array_append_new(resps, json_pack("[[f,b]]", ll[c], greedy[c]));
			json_array_append_new(filtered, json_pack("[f,b]", ll[c], greedy[c]));
		}
		*result = json_pack("{s:o,s:o,s:o,s:i,s:i,s:o}", "metrics", metrics, "resps", resps, "filtered_resps",
		                    filtered, "pred", s.pred, "pred_norm", s.pred_norm, "aah", aah_json(&acc));
	}
	free(ctx);
	free(n_ctx);
	free(ll);
	free(greedy);
	return rc;
}

static item_rc run_generate(worker *w, const eval_unit *u, json_t **result, char *err, size_t errlen)
{
	const eval_item *it = u->item;
	const eval_task_run *run = u->run;
	const eval_task *task = run->task;
	const eval_tokens *t = u->tok;
	int64_t max_ctx = (w->p->o->max_length - 1) - run->max_gen_toks;   /* max_length - max_gen_toks, left-truncated */
	int64_t from = t->n_ctx > max_ctx ? t->n_ctx - max_ctx : 0;
	json_t *req = base_request(w, ids_json(t->ctx + from, t->n_ctx - from, NULL, 0));
	json_object_set_new(req, "max_tokens", json_integer(run->max_gen_toks));
	json_t *stop = json_array();
	for (int32_t i = 0; task->until[i] && i < 4; i++)
		json_array_append_new(stop, json_string(task->until[i]));
	json_object_set_new(req, "stop", stop);
	aah_acc acc = {0};
	json_t *resp;
	eval_client_error e;
	double t0 = aah_now_s();
	eval_client_status st = eval_client_post(w->client, "/v1/completions", req, &resp, &e);
	acc.seconds = aah_now_s() - t0;
	json_decref(req);
	if (st != EVAL_CLIENT_OK)
		return client_fail(&e, u, err, errlen);
	aah_add(&acc, resp);
	const json_t *c = choice_at(resp, 0);
	const json_t *jtext = json_object_get(c, "text");
	if (!json_is_string(jtext)) {
		char wh[512];
		where(u, wh, sizeof wh);
		snprintf(err, errlen, "%s: %s/v1/completions: the response has no choices[0].text", wh,
		         eval_client_url(w->client));
		json_decref(resp);
		return ITEM_FAILED;
	}
	char *text = py_text_from_json(json_string_value(jtext), json_string_length(jtext));
	char *gen = eval_cut_at_stops(text, task->until, w->p->srv->eos_text);
	free(text);
	const char *finish = json_string_value(json_object_get(c, "finish_reason"));
	json_t *metrics = json_object(), *filtered = json_object();
	json_t *sandbox = NULL;
	char *primary_filtered = NULL;
	item_rc rc = ITEM_OK;
	for (int32_t f = 0; f < task->n_filters && rc == ITEM_OK; f++) {
		const eval_filter *flt = &task->filters[f];
		char *out = eval_filter_apply(flt, gen);
		char key[96];
		snprintf(key, sizeof key, "%s,%s", task->metric, flt->name);
		double v = 0;
		if (task->scorer == EVAL_SCORE_EXACT_MATCH) {
			v = eval_exact_match(&task->match, out, it->target);
		} else {
			char *program = task->program(it->doc, out);
			eval_sandbox_result r;
			char why[1024];
			if (py_text_has_nul(program)) {
				/* Python refuses source with a NUL character before running any of it */
				v = 0;
				sandbox = json_pack("{s:s,s:i,s:s}", "status", "failed", "exit_code", 1, "output",
				                    "SyntaxError: source code cannot contain null bytes");
			} else if (eval_sandbox_run(&w->p->o->sandbox, w->index, program, &r, why, sizeof why) != 0) {
				char wh[512];
				where(u, wh, sizeof wh);
				snprintf(err, errlen, "%s: %s", wh, why);
				rc = ITEM_FAILED;
			} else {
				v = r.status == EVAL_SANDBOX_PASSED ? 1.0 : 0.0;
				sandbox = json_pack("{s:s,s:i,s:o}", "status", eval_sandbox_status_name(r.status), "exit_code",
				                    r.exit_code, "output", json_output(r.output, r.output_len));
			}
			free(program);
		}
		json_object_set_new(metrics, key, json_real(v));
		json_object_set_new(filtered, flt->name, py_text_json(out));
		if (f == 0)
			primary_filtered = xstrdup(out);
		free(out);
	}
	if (rc == ITEM_OK) {
		*result = json_pack("{s:o,s:[[o]],s:[o],s:o,s:s,s:o}", "metrics", metrics, "resps", py_text_json(gen),
		                    "filtered_resps", py_text_json(primary_filtered ? primary_filtered : gen), "filtered",
		                    filtered, "finish_reason", finish ? finish : "", "aah", aah_json(&acc));
		if (sandbox)
			json_object_set_new(*result, "sandbox", sandbox);
	} else {
		json_decref(metrics);
		json_decref(filtered);
		json_decref(sandbox);
	}
	free(primary_filtered);
	free(gen);
	json_decref(resp);
	return rc;
}

static item_rc run_rolling(worker *w, const eval_unit *u, json_t **result, char *err, size_t errlen)
{
	const eval_tokens *t = u->tok;
	if (w->p->srv->prefix_token < 0) {
		char wh[512];
		where(u, wh, sizeof wh);
		snprintf(err, errlen, "%s: perplexity needs the tokenizer's BOS or EOS id (the server has no "
		         "/tokenizer_info; --prefix-token ID gives it)", wh);
		return ITEM_FAILED;
	}
	eval_window *win;
	int64_t nw = eval_rolling_windows(t->n_ctx, w->p->o->max_length - 2, &win);   /* max_seq_len = max_length - 1 - 1 */
	double total = 0;
	int64_t predicted = 0;
	aah_acc acc = {0};
	int32_t prefix = w->p->srv->prefix_token;
	item_rc rc = ITEM_OK;
	for (int64_t b = 0; b < nw && rc == ITEM_OK; b += ROLLING_BATCH) {
		int64_t m = nw - b < ROLLING_BATCH ? nw - b : ROLLING_BATCH;
		const int32_t *ctx[ROLLING_BATCH], *cont[ROLLING_BATCH];
		int64_t n_ctx[ROLLING_BATCH], n_cont[ROLLING_BATCH];
		for (int64_t i = 0; i < m; i++) {
			const eval_window *x = &win[b + i];
			ctx[i] = x->prefix ? &prefix : t->ctx + x->ctx_from;
			n_ctx[i] = x->prefix ? 1 : x->ctx_to - x->ctx_from;
			cont[i] = t->ctx + x->pred_from;
			n_cont[i] = x->pred_to - x->pred_from;
			predicted += n_cont[i];
		}
		double ll[ROLLING_BATCH];
		bool greedy[ROLLING_BATCH];
		rc = loglikelihoods(w, u, m, ctx, n_ctx, cont, n_cont, ll, greedy, &acc, err, errlen);
		for (int64_t i = 0; i < m && rc == ITEM_OK; i++)
			total += ll[i];
	}
	free(win);
	if (rc != ITEM_OK)
		return rc;
	const char *text = u->item->context;
	json_t *metrics = json_pack("{s:f,s:I,s:I,s:I}", "loglikelihood", total, "tokens", (json_int_t)predicted, "bytes",
	                            (json_int_t)strlen(text), "words", (json_int_t)eval_count_words(text));
	*result = json_pack("{s:o,s:[[f]],s:[f],s:I,s:o}", "metrics", metrics, "resps", total, "filtered_resps", total,
	                    "windows", (json_int_t)nw, "aah", aah_json(&acc));
	return ITEM_OK;
}

static item_rc run_item(worker *w, const eval_unit *u, json_t **result, char *err, size_t errlen)
{
	item_rc rc = ensure_tokens(w, u, err, errlen);
	if (rc != ITEM_OK)
		return rc;
	switch (u->run->task->output) {
	case EVAL_MULTIPLE_CHOICE: return run_mc(w, u, result, err, errlen);
	case EVAL_GENERATE_UNTIL: return run_generate(w, u, result, err, errlen);
	default: return run_rolling(w, u, result, err, errlen);
	}
}

static void fail(pool *p, const char *msg)
{
	pthread_mutex_lock(&p->mu);
	if (!p->failed) {
		p->failed = true;
		snprintf(p->err, sizeof p->err, "%s", msg);
	}
	pthread_mutex_unlock(&p->mu);
	atomic_store(p->o->stop, 2);
}

static void *worker_main(void *arg)
{
	worker *w = arg;
	pool *p = w->p;
	char err[2048];
	while (!atomic_load(p->o->stop)) {
		int64_t i = atomic_fetch_add(&p->next, 1);
		if (i >= p->n)
			break;
		eval_unit *u = &p->units[i];
		w->client = w->clients[i % p->o->n_urls];
		json_t *result = NULL;
		item_rc rc = run_item(w, u, &result, err, sizeof err);
		if (rc == ITEM_STOPPED)
			break;
		if (rc == ITEM_FAILED) {
			fail(p, err);
			break;
		}
		double tokens = json_number_value(json_object_get(json_object_get(result, "aah"), "tokens"));
		json_t *rec = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:o}", "type", "item", "key", u->key, "server",
		                        p->srv->key, "model", p->srv->model, "regime", p->regime, "task", u->run->task->name,
		                        "item", (json_int_t)u->item->index, "doc_id", (json_int_t)u->item->doc_id, "result",
		                        result);
		if (eval_cache_put(p->cache, rec, err, sizeof err) != 0) {
			fail(p, err);
			break;
		}
		pthread_mutex_lock(&p->mu);
		p->tokens += tokens;
		pthread_mutex_unlock(&p->mu);
		atomic_fetch_add(&p->done, 1);
	}
	atomic_fetch_add(&p->finished, 1);
	return NULL;
}

static void format_duration(double s, char *buf, size_t n)
{
	if (!isfinite(s) || s < 0)
		snprintf(buf, n, "?");
	else if (s >= 3600)
		snprintf(buf, n, "%d:%02d:%02d", (int)(s / 3600), (int)fmod(s / 60, 60), (int)fmod(s, 60));
	else
		snprintf(buf, n, "%d:%02d", (int)(s / 60), (int)fmod(s, 60));
}

static void progress(const pool *p, int32_t ri, int32_t nr, double t0, bool tty, bool last)
{
	int64_t done = atomic_load(&p->done);
	double el = aah_now_s() - t0;
	double rate = el > 0 ? (double)done / el : 0;
	char left[32];
	format_duration(rate > 0 ? (double)(p->n - done) / rate : NAN, left, sizeof left);
	char line[512];
	snprintf(line, sizeof line, "aah-eval: regime %d/%d %s: %lld/%lld items, %.2f items/s, %s left", ri + 1, nr,
	         p->regime, (long long)done, (long long)p->n, rate, last ? "0:00" : left);
	if (tty)
		fprintf(stderr, "\r\033[K%s%s", line, last ? "\n" : "");
	else
		fprintf(stderr, "%s\n", line);
	fflush(stderr);
}

int eval_runner_regime(const eval_runner_opts *o, const eval_server *srv, eval_cache *cache, const char *regime,
                       int32_t regime_index, int32_t n_regimes, eval_unit *units, int64_t n, double *tokens,
                       double *seconds, char *err, size_t errlen)
{
	*tokens = *seconds = 0;
	if (n == 0)
		return 0;
	pool p = {.o = o, .srv = srv, .cache = cache, .regime = regime, .units = units, .n = n};
	atomic_init(&p.next, 0);
	atomic_init(&p.done, 0);
	atomic_init(&p.finished, 0);
	pthread_mutex_init(&p.mu, NULL);
	int32_t nw = o->concurrency < n ? o->concurrency : (int32_t)n;
	if (nw < 1)
		nw = 1;
	worker *ws = xcalloc((size_t)nw, sizeof *ws);
	double t0 = aah_now_s();
	int32_t started = 0;
	for (int32_t i = 0; i < nw; i++) {
		ws[i].p = &p;
		ws[i].index = i;
		ws[i].clients = xcalloc((size_t)o->n_urls, sizeof *ws[i].clients);
		bool ok = true;
		for (int32_t s = 0; s < o->n_urls; s++)
			ok &= (ws[i].clients[s] = eval_client_init(o->urls[s], o->api_key, o->timeout_s, o->stop, o->stats)) != NULL;
		if (!ok || pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]) != 0) {
			for (int32_t s = 0; s < o->n_urls; s++)
				eval_client_free(ws[i].clients[s]);
			free(ws[i].clients);
			break;
		}
		started++;
	}
	if (started == 0) {
		snprintf(err, errlen, "cannot start the workers");
		free(ws);
		pthread_mutex_destroy(&p.mu);
		return -1;
	}
	double last = aah_now_s();
	while (atomic_load(&p.finished) < started) {
		struct timespec ts = {0, 200 * 1000 * 1000};
		nanosleep(&ts, NULL);
		double now = aah_now_s();
		if (o->tty || now - last >= 15) {
			progress(&p, regime_index, n_regimes, t0, o->tty, false);
			last = now;
		}
	}
	for (int32_t i = 0; i < started; i++) {
		pthread_join(ws[i].thread, NULL);
		for (int32_t s = 0; s < o->n_urls; s++)
			eval_client_free(ws[i].clients[s]);
		free(ws[i].clients);
	}
	free(ws);
	*seconds = aah_now_s() - t0;
	*tokens = p.tokens;
	int rc = 0;
	if (p.failed) {
		if (o->tty)
			fputc('\n', stderr);
		snprintf(err, errlen, "%s", p.err);
		rc = -1;
	} else if (atomic_load(&p.done) < n) {
		if (o->tty)
			fputc('\n', stderr);
		rc = 1;
	} else {
		progress(&p, regime_index, n_regimes, t0, o->tty, true);
	}
	pthread_mutex_destroy(&p.mu);
	return rc;
}
