/* engine/sched_request.c — the scheduler's requests and every call another thread makes (scheduler.h): a request is
 * validated and made whole on the submitting thread (so that the engine thread does not allocate; the one exception is
 * a text past 8 bytes a token, whose buffer doubles: engine/gen_text.h), queued under s->mu,
 * and read back through its own mutex-guarded publication (pub, result) that the engine thread (scheduler.c) writes.
 * Also drain, busy, cancel-all and the metrics snapshot, which take the same locks. */
#include "engine/sched_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bits.h"
#include "base/clock.h"

/* Worst-case pages of a sequence of len positions under a regime (its windows keep less than full attention).
 * engine_regime_kv_pages reads only what engine_init fixed, so any thread may call it. */
static int64_t pages_max(const sched *s, int32_t regime, int64_t len)
{
	if (len > s->ctx_len)
		len = s->ctx_len;
	return engine_regime_kv_pages(s->e, s->regimes[regime], len);
}

/* A request's worst case: its sequence, and the draft sequence of a regime draft, which lives in the same page pool.
 * A verify pass never writes past prompt + max_tokens − 1 (sched_spec.c's draft_room), nor a draft sequence. */
static int64_t request_pages(const sched *s, int32_t regime, sched_draft draft, int32_t draft_regime, int64_t len)
{
	int64_t n = pages_max(s, regime, len);
	return draft == SCHED_DRAFT_REGIME ? n + pages_max(s, draft_regime, len) : n;
}

/* ---- requests ---- */

static void request_free(sched_request *r)
{
	sampler_free(&r->smp);
	grammar_matcher_free(r->gm);
	free(r->mask);
	free(r->prompt);
	free(r->tenant);
	free(r->tokens);
	gen_text_free(&r->text);
	free(r->gen_lp.logprob);
	free(r->gen_lp.top_ids);
	free(r->gen_lp.top_logprobs);
	free(r->prompt_lp_rows.logprob);
	free(r->prompt_lp_rows.top_ids);
	free(r->prompt_lp_rows.top_logprobs);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r);
}

static int lp_rows_alloc(sched_logprob_rows *rows, int64_t n, int32_t n_top)
{
	rows->n_top = n_top;
	size_t nn = (size_t)(n > 0 ? n : 1);
	rows->logprob = malloc(nn * sizeof *rows->logprob);
	rows->top_ids = malloc(nn * (size_t)(n_top > 0 ? n_top : 1) * sizeof *rows->top_ids);
	rows->top_logprobs = malloc(nn * (size_t)(n_top > 0 ? n_top : 1) * sizeof *rows->top_logprobs);
	return rows->logprob && rows->top_ids && rows->top_logprobs ? 0 : -1;
}

/* Made on the submitting thread, so that the engine thread does not allocate (but for gen_text's rare growth). Returns
 * NULL when out of memory. */
/* A request's speculative decoding as it will run (sched_request's fields of the same names). */
typedef struct spec_choice {
	sched_draft draft;
	int32_t spec_k;
	bool spec_adaptive;
	int32_t draft_regime;
} spec_choice;

static sched_request *request_new(sched *s, const sched_request_params *p, int32_t regime, const spec_choice *spec)
{
	sched_request *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->s = s;
	atomic_init(&r->refs, 2);   /* the caller's and the engine thread's */
	atomic_init(&r->cancel, false);
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	r->n_prompt = p->n_prompt;
	r->max_tokens = p->max_tokens;
	r->regime = regime;
	r->logprobs = p->logprobs;
	r->prompt_lp = p->prompt_logprobs;
	r->n_stop_ids = p->n_stop_ids;
	if (p->n_stop_ids > 0)
		memcpy(r->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof *r->stop_ids);
	r->notify = p->notify;
	r->notify_ctx = p->notify_ctx;
	r->draft = spec->draft;
	r->spec_k = spec->spec_k;
	r->spec_adaptive = spec->spec_adaptive;
	r->draft_regime = spec->draft_regime;
	r->result.draft = r->draft;
	r->pages_max = request_pages(s, regime, r->draft, r->draft_regime, (int64_t)p->n_prompt + p->max_tokens);
	r->result.stop_id = -1;
	r->result.stop_string = -1;
	r->result.ttft_s = -1;
	int32_t n_top = p->logprobs > 0 ? (p->logprobs < s->vocab ? p->logprobs : s->vocab) : 0;
	r->prompt = malloc((size_t)p->n_prompt * sizeof *r->prompt);
	r->tokens = malloc((size_t)(p->max_tokens > 0 ? p->max_tokens : 1) * sizeof *r->tokens);
	if (p->cache_tenant && *p->cache_tenant)
		r->tenant = strdup(p->cache_tenant);
	int bad = !r->prompt || !r->tokens || (p->cache_tenant && *p->cache_tenant && !r->tenant) ||
	          sampler_init(&r->smp, &p->sampling, s->vocab) != 0 ||
	          gen_text_init(&r->text, s->p.tok, p->stop, p->stop_len, p->n_stop, p->max_tokens, s->text_room) != 0;
	if (!bad && p->grammar) {
		r->gm = grammar_matcher_new(p->grammar);
		r->mask = malloc((size_t)bits_words(s->vocab) * sizeof *r->mask);
		bad = !r->gm || !r->mask;
	}
	if (!bad && p->logprobs >= 0)
		bad = lp_rows_alloc(&r->gen_lp, p->max_tokens, n_top);
	if (!bad && p->prompt_logprobs)
		bad = lp_rows_alloc(&r->prompt_lp_rows, p->n_prompt, n_top);
	if (bad) {
		request_free(r);
		return NULL;
	}
	memcpy(r->prompt, p->prompt, (size_t)p->n_prompt * sizeof *r->prompt);
	sampler_prompt(&r->smp, r->prompt, r->n_prompt);   /* the repetition penalty counts the prompt's tokens */
	gen_text_min_tokens(&r->text, p->sampling.min_tokens);
	if (p->prompt_logprobs)
		r->prompt_lp_rows.logprob[0] = NAN;   /* the first token has no context */
	return r;
}

static int32_t regime_index(const sched *s, const char *name)
{
	if (!name)
		return s->default_regime;
	for (int32_t i = 0; i < s->n_regimes; i++)
		if (!strcmp(s->regimes[i], name))
			return i;
	return -1;
}

/* The request's speculative decoding, its defaults taken from the server's: into spec's draft fields. */
static sched_status spec_resolve(const sched *s, const sched_request_params *p, int32_t regime, spec_choice *spec,
                                 char *err, size_t err_len)
{
	const sched_spec *q = &p->spec;
	spec->draft = q->draft == SCHED_DRAFT_DEFAULT ? s->p.spec.draft : q->draft;
	if (spec->draft < SCHED_DRAFT_OFF || spec->draft > SCHED_DRAFT_MODEL || q->k < 0 || q->k > SCHED_MAX_SPEC_K) {
		snprintf(err, err_len, "speculation: no such draft kind, or k outside 1 … %d", SCHED_MAX_SPEC_K);
		return SCHED_ERR_SPEC;
	}
	spec->spec_k = q->k > 0 ? q->k : s->p.spec.k;
	spec->spec_adaptive = q->adaptive < 0 ? s->p.spec.adaptive != 0 : q->adaptive != 0;
	spec->draft_regime = -1;
	if (spec->draft == SCHED_DRAFT_OFF)
		return SCHED_OK;
	if (engine_rollback_max(s->e) < spec->spec_k + 1) {
		snprintf(err, err_len, "speculation: this engine takes back %d positions at most, and k %d needs %d",
		         engine_rollback_max(s->e), spec->spec_k, spec->spec_k + 1);
		return SCHED_ERR_SPEC;
	}
	if (spec->draft == SCHED_DRAFT_MODEL && !s->p.draft) {
		snprintf(err, err_len, "speculation: model drafts need a draft model, and this server has none "
		         "(aahd --model-draft DIR)");
		return SCHED_ERR_SPEC;
	}
	if (spec->draft == SCHED_DRAFT_REGIME) {
		if (!s->regime_drafts) {
			snprintf(err, err_len, "speculation: regime drafts are off on this server (aahd --draft-regime NAME "
			         "opens the draft sequences they need)");
			return SCHED_ERR_SPEC;
		}
		const char *name = q->regime ? q->regime : s->p.spec.regime;
		spec->draft_regime = name ? regime_index(s, name) : -1;
		if (spec->draft_regime < 0) {
			snprintf(err, err_len, "speculation: unknown draft regime '%s'", name ? name : "");
			return SCHED_ERR_SPEC;
		}
		if (spec->draft_regime == regime) {
			snprintf(err, err_len, "speculation: the draft regime '%s' is the request's own regime: it would "
			         "propose what the request computes anyway", name);
			return SCHED_ERR_SPEC;
		}
	}
	return SCHED_OK;
}

static sched_status validate(const sched *s, const sched_request_params *p, int32_t *regime, spec_choice *spec,
                             char *err, size_t err_len)
{
	if (p->n_prompt < 1 || !p->prompt) {
		snprintf(err, err_len, "the prompt is empty");
		return SCHED_ERR_INVALID;
	}
	for (int32_t i = 0; i < p->n_prompt; i++)
		if (p->prompt[i] < 0 || p->prompt[i] >= s->vocab) {
			snprintf(err, err_len, "token id %d is out of range [0, %d)", p->prompt[i], s->vocab);
			return SCHED_ERR_INVALID;
		}
	if (p->max_tokens < 0 || p->logprobs < -1 || p->logprobs > SCHED_MAX_LOGPROBS || p->n_stop_ids < 0 ||
	    p->n_stop_ids > SCHED_MAX_STOP_IDS || (p->n_stop_ids > 0 && !p->stop_ids)) {
		snprintf(err, err_len, "max_tokens, logprobs or the stop ids are out of range");
		return SCHED_ERR_INVALID;
	}
	for (int32_t i = 0; i < p->n_stop_ids; i++)
		if (p->stop_ids[i] < 0 || p->stop_ids[i] >= s->vocab) {
			snprintf(err, err_len, "stop token id %d is out of range [0, %d)", p->stop_ids[i], s->vocab);
			return SCHED_ERR_INVALID;
		}
	if (sampler_params_check(&p->sampling, s->vocab, err, err_len) != 0)
		return SCHED_ERR_INVALID;
	if (p->grammar && grammar_vocab_size(grammar_of_vocab(p->grammar)) != s->vocab) {
		snprintf(err, err_len, "the grammar was compiled for %d logits columns, the model has %d",
		         grammar_vocab_size(grammar_of_vocab(p->grammar)), s->vocab);
		return SCHED_ERR_INVALID;
	}
	/* stop strings: each within the engine matcher's limits, and none without the scheduler's tokenizer */
	if (stop_text_check(s->p.tok, p->stop, p->stop_len, p->n_stop, err, err_len) != 0)
		return SCHED_ERR_INVALID;
	if (p->cache_tenant && strlen(p->cache_tenant) > SCHED_MAX_TENANT) {
		snprintf(err, err_len, "the cache tenant has more than %d bytes", SCHED_MAX_TENANT);
		return SCHED_ERR_INVALID;
	}
	if (p->n_prompt > s->ctx_len) {
		snprintf(err, err_len, "the prompt has %d tokens; the context holds %d", p->n_prompt, s->ctx_len);
		return SCHED_ERR_TOO_LONG;
	}
	*regime = regime_index(s, p->regime);
	if (*regime < 0) {
		snprintf(err, err_len, "unknown regime '%s'", p->regime);
		return SCHED_ERR_REGIME;
	}
	sched_status st = spec_resolve(s, p, *regime, spec, err, err_len);
	if (st != SCHED_OK)
		return st;
	int64_t need = request_pages(s, *regime, spec->draft, spec->draft_regime, (int64_t)p->n_prompt + p->max_tokens);
	if (need > s->pool_pages) {
		snprintf(err, err_len, "%d prompt + %d new tokens need %lld KV bytes; the cache holds %lld", p->n_prompt,
		         p->max_tokens, (long long)(need * s->page_bytes), (long long)(s->pool_pages * s->page_bytes));
		return SCHED_ERR_TOO_LONG;
	}
	return SCHED_OK;
}

/* The first of rs[0 … i-1] whose prefill rs[i] can fork: the same regime and prompt, and the prompt log-probabilities
 * rs[i] wants (the fork copies them). -1: none. */
static int32_t prompt_leader(sched_request *const *rs, int32_t i)
{
	const sched_request *r = rs[i];
	for (int32_t j = 0; j < i; j++) {
		const sched_request *l = rs[j];
		/* a fork takes its leader's rings: both speculate (a windowed ring's rollback page) or neither */
		if (l->regime == r->regime && l->n_prompt == r->n_prompt && sched_same_tenant(l, r) &&
		    (l->draft == SCHED_DRAFT_OFF) == (r->draft == SCHED_DRAFT_OFF) &&
		    (!r->prompt_lp || (l->prompt_lp && l->prompt_lp_rows.n_top == r->prompt_lp_rows.n_top)) &&
		    !memcmp(l->prompt, r->prompt, (size_t)r->n_prompt * sizeof *r->prompt))
			return j;
	}
	return -1;
}

sched_status sched_submit(sched *s, const sched_request_params *p, int32_t n, sched_request **out, char *err,
                          size_t err_len)
{
	if (n < 1) {
		snprintf(err, err_len, "nothing to submit");
		return SCHED_ERR_INVALID;
	}
	for (int32_t i = 0; i < n; i++)
		out[i] = NULL;
	for (int32_t i = 0; i < n; i++) {
		int32_t regime;
		spec_choice spec;
		sched_status st = validate(s, &p[i], &regime, &spec, err, err_len);
		if (st == SCHED_OK && !(out[i] = request_new(s, &p[i], regime, &spec))) {
			snprintf(err, err_len, "out of memory");
			st = SCHED_ERR_NOMEM;
		}
		if (st != SCHED_OK) {
			for (int32_t j = 0; j < i; j++)
				request_free(out[j]);
			for (int32_t j = 0; j < n; j++)
				out[j] = NULL;
			return st;
		}
	}
	sched_status st = SCHED_OK;
	double t = aah_now_s();
	pthread_mutex_lock(&s->mu);
	if (s->draining || s->stop) {
		snprintf(err, err_len, "the server is shutting down");
		st = SCHED_ERR_SHUTDOWN;
	} else if (s->q_len + n > s->p.queue_length) {
		snprintf(err, err_len, "%d requests are waiting already (queue_length %d)", s->q_len, s->p.queue_length);
		st = SCHED_ERR_QUEUE_FULL;
	} else {
		uint64_t epoch = atomic_load(&s->epoch);
		for (int32_t i = 0; i < n; i++) {
			out[i]->t_submit = t;
			out[i]->epoch = epoch;
			out[i]->id = ++s->next_id;
			int32_t l = prompt_leader(out, i);
			out[i]->leader_id = l >= 0 ? out[l]->id : 0;
			s->queue[(s->q_head + s->q_len++) % s->p.queue_length] = out[i];
		}
		pthread_cond_signal(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	if (st != SCHED_OK)
		for (int32_t i = 0; i < n; i++) {
			request_free(out[i]);
			out[i] = NULL;
		}
	return st;
}

void sched_request_cancel(sched_request *r)
{
	atomic_store(&r->cancel, true);
	pthread_mutex_lock(&r->s->mu);
	pthread_cond_signal(&r->s->cv);
	pthread_mutex_unlock(&r->s->mu);
}

void sched_request_release(sched_request *r)
{
	if (r && atomic_fetch_sub(&r->refs, 1) == 1)
		request_free(r);
}

void sched_request_view(sched_request *r, sched_view *v)
{
	pthread_mutex_lock(&r->mu);
	*v = r->pub;
	pthread_mutex_unlock(&r->mu);
}

bool sched_request_wait(sched_request *r, uint64_t seen, int32_t timeout_ms, sched_view *v)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	if (timeout_ms >= 0) {
		until.tv_sec += timeout_ms / 1000;
		until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&r->mu);
	while (r->pub.version == seen) {
		if (timeout_ms < 0)
			pthread_cond_wait(&r->cv, &r->mu);
		else if (pthread_cond_timedwait(&r->cv, &r->mu, &until) != 0)
			break;
	}
	*v = r->pub;
	pthread_mutex_unlock(&r->mu);
	return v->version != seen;
}

const int32_t *sched_request_prompt(const sched_request *r, int32_t *n_prompt)
{
	*n_prompt = r->n_prompt;
	return r->prompt;
}
const int32_t *sched_request_tokens(const sched_request *r) { return r->tokens; }
const sched_logprob_rows *sched_request_token_logprobs(const sched_request *r)
{
	return r->logprobs >= 0 ? &r->gen_lp : NULL;
}
const sched_logprob_rows *sched_request_prompt_logprobs(const sched_request *r)
{
	return r->prompt_lp ? &r->prompt_lp_rows : NULL;
}

bool sched_request_result(sched_request *r, sched_result *out)
{
	pthread_mutex_lock(&r->mu);
	bool done = r->pub.finish != SCHED_FINISH_NONE;
	if (done)
		*out = r->result;
	pthread_mutex_unlock(&r->mu);
	return done;
}

void sched_drain(sched *s)
{
	pthread_mutex_lock(&s->mu);
	s->draining = true;
	pthread_mutex_unlock(&s->mu);
}

int32_t sched_busy(sched *s)
{
	pthread_mutex_lock(&s->mu);
	int32_t n = s->q_len + s->n_running;
	pthread_mutex_unlock(&s->mu);
	return n;
}

void sched_cancel_all(sched *s)
{
	pthread_mutex_lock(&s->mu);
	atomic_fetch_add(&s->epoch, 1);
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void sched_metrics_get(sched *s, sched_metrics *out)
{
	pthread_mutex_lock(&s->mu);
	int32_t running = s->n_running, waiting = s->q_len;
	pthread_mutex_unlock(&s->mu);
	double t = aah_now_s();
	pthread_mutex_lock(&s->metrics_mu);
	*out = s->m;
	double prompt = 0, gen = 0;
	int64_t sec = (int64_t)t;
	for (int32_t i = 0; i < 10; i++)
		if (s->rate_sec[i] > sec - 10) {
			prompt += s->rate_prompt[i];
			gen += s->rate_gen[i];
		}
	pthread_mutex_unlock(&s->metrics_mu);
	out->running = running;
	out->waiting = waiting;
	out->prompt_tokens_per_s = prompt / 10.0;
	out->generation_tokens_per_s = gen / 10.0;
}
