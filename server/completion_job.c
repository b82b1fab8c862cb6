/* server/completion_job.c — a completions request from validation to its choices' text (see completion_job.h).
 * The engine thread only bumps the job's version and signals; all text work happens on the HTTP thread. */
#include "server/completion_job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "server/log.h"

/* ---- life cycle ---- */

static void job_free(cmpl_job *j)
{
	for (int32_t i = 0; i < j->n_choices; i++) {
		sched_request_release(j->choices[i].r);
		choice_text_free(&j->choices[i].text);
		tool_parser_free(j->choices[i].tools);
	}
	for (int32_t i = 0; j->prompts && i < j->req.n_prompts; i++) {
		free(j->prompts[i].ids);
		free(j->prompts[i].echo);
		free(j->prompts[i].tok_chars);
	}
	free(j->prompts);
	free(j->choices);
	free(j->owned_text);
	completion_request_free(&j->req);
	grammar_unref(j->grammar);
	pthread_mutex_destroy(&j->mu);
	free(j);
}

static void job_unref(cmpl_job *j)
{
	if (atomic_fetch_sub(&j->refs, 1) == 1)
		job_free(j);
}

/* The engine thread's notification: a bump and a wake (a resume of the parked connection), nothing that could
 * block it. The waiter is read under mu, which cmpl_job_release takes to clear it: a request is never woken after
 * it has let go of its job; the resume itself comes after mu (see http_request_wake). */
static void job_notify(void *ctx, bool last)
{
	cmpl_job *j = ctx;
	pthread_mutex_lock(&j->mu);
	j->version++;
	http_wake w = { NULL, NULL };
	if (j->waiter)
		w = http_request_wake(j->waiter);
	pthread_mutex_unlock(&j->mu);
	http_resume(w);   /* (still suspended until this: the request cannot have gone meanwhile) */
	if (last)
		job_unref(j);
}

void cmpl_job_cancel(cmpl_job *j)
{
	for (int32_t i = 0; i < j->n_choices; i++)
		if (!j->choices[i].ended && j->choices[i].r)
			sched_request_cancel(j->choices[i].r);
}

void cmpl_job_release(cmpl_job *j)
{
	if (!j)
		return;
	cmpl_job_watch(j, NULL);
	cmpl_job_cancel(j);
	job_unref(j);
}

void cmpl_job_watch(cmpl_job *j, http_request *req)
{
	pthread_mutex_lock(&j->mu);
	j->waiter = req;
	pthread_mutex_unlock(&j->mu);
}

static void job_state_abort(void *state) { cmpl_job_cancel(state); }
static void job_state_free(void *state) { cmpl_job_release(state); }

cmpl_job *cmpl_job_of(http_request *req)
{
	return req->state_free == job_state_free ? req->state : NULL;
}

void cmpl_job_attach(cmpl_job *j, http_request *req)
{
	req->state = j;
	req->state_abort = job_state_abort;
	req->state_free = job_state_free;
	cmpl_job_watch(j, req);
}

int cmpl_job_await(cmpl_job *j, http_request *req)
{
	while (!cmpl_job_poll(j)) {
		int w = cmpl_job_wait(j, req);
		if (w > 0)
			return 0;   /* parked: libmicrohttpd calls again once the engine has news */
		if (w < 0) {
			/* nobody to answer: free the pages now rather than after the whole generation */
			log_msg(LOG_INFO, req->id, "client went away: cancelling %d choices", j->n_choices);
			snprintf(req->note, sizeof req->note, "cancelled: client went away");
			cmpl_job_cancel(j);
			return -1;
		}
	}
	return 1;
}

int cmpl_job_wait(cmpl_job *j, http_request *req)
{
	(void)j;   /* the job's notifications wake req (cmpl_job_watch); a wake since the last poll makes park say 0 */
	if (http_client_gone(req) || http_request_stopping(req))
		return -1;
	return http_request_park(req) ? 1 : 0;
}

/* ---- text ---- */

static size_t utf8_chars(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

bool cmpl_job_poll(cmpl_job *j)
{
	bool all = true;
	for (int32_t i = 0; i < j->n_choices; i++) {
		cmpl_choice *c = &j->choices[i];
		if (c->ended)
			continue;
		sched_view v;
		sched_request_view(c->r, &v);
		/* the text is the engine thread's (sched_view.text): it decoded the tokens and ended the request at the token
		 * that completes a stop string; here only the markers are read from the new tokens */
		if (choice_text_sync(&c->text, sched_request_tokens(c->r), &v.text) != 0) {
			j->failed = true;
			snprintf(j->err, sizeof j->err, "out of memory for the text of choice %d", c->index);
			sched_request_cancel(c->r);
		}
		/* ended once the engine has closed the sequence: its stats are final and its text is whole */
		if (v.finish == SCHED_FINISH_NONE) {
			all = false;
			continue;
		}
		sched_request_result(c->r, &c->result);
		c->ended = true;
		if (c->result.finish == SCHED_FINISH_STOP)
			c->finish_reason = "stop";
		else if (c->result.finish == SCHED_FINISH_LENGTH)
			c->finish_reason = "length";
		else
			c->finish_reason = "abort";   /* shutdown grace passed, or the client went away */
		if (c->result.finish == SCHED_FINISH_ERROR) {
			j->failed = true;
			if (c->result.grammar_failed) {   /* the request's grammar, not the server: a 400 naming its field */
				j->fail_status = 400;
				snprintf(j->err, sizeof j->err, "'%s': %s", j->req.constraint.field, c->result.err);
			} else {
				snprintf(j->err, sizeof j->err, "the engine failed: %s", c->result.err);
			}
		}
	}
	return all;
}

int32_t cmpl_job_completion_tokens(const cmpl_choice *c)
{
	return c->text.v.n_tokens + (c->result.stop_id >= 0 ? 1 : 0);
}

/* ---- JSON pieces ---- */

/* A log-probability as JSON, which has no -inf (a token the model gives no probability at all): -9999, as vLLM
 * sends; json_real would refuse it, and the member would silently go missing. */
json_t *cmpl_job_logprob_json(float lp)
{
	return json_real(isfinite(lp) ? (double)lp : -9999.0);
}

/* A token's own text (special tokens spelled out, an id of the model's padded vocabulary that the tokenizer lacks
 * empty; a partial character becomes U+FFFD). */
json_t *cmpl_job_token_string(const tokenizer *t, int32_t id)
{
	char small[256];
	int64_t n = tokenizer_decode(t, &id, 1, false, small, sizeof small);
	if (n < 0)
		return json_string("");
	if (n < (int64_t)sizeof small)
		return json_stringn(small, (size_t)n);
	char *big = malloc((size_t)n + 1);
	if (!big)
		return json_string("");
	tokenizer_decode(t, &id, 1, false, big, n + 1);
	json_t *s = json_stringn(big, (size_t)n);
	free(big);
	return s;
}

/* {token text: logprob} for the top-N of a row, plus the actual token when it is not among them (so that the
 * harness's "is greedy" test, token_logprob == max(top), holds exactly when it is the argmax). */
static json_t *top_object(const tokenizer *t, const sched_logprob_rows *rows, int64_t row, int32_t actual)
{
	json_t *o = json_object();
	bool has_actual = false;
	for (int32_t k = 0; k < rows->n_top; k++) {
		int32_t id = rows->top_ids[row * rows->n_top + k];
		has_actual |= id == actual;
		json_t *key = cmpl_job_token_string(t, id);
		if (!json_object_get(o, json_string_value(key)))   /* two ids may share a text: keep the likelier */
			json_object_set_new(o, json_string_value(key), cmpl_job_logprob_json(rows->top_logprobs[row * rows->n_top + k]));
		json_decref(key);
	}
	if (!has_actual) {
		json_t *key = cmpl_job_token_string(t, actual);
		if (!json_object_get(o, json_string_value(key)))
			json_object_set_new(o, json_string_value(key), cmpl_job_logprob_json(rows->logprob[row]));
		json_decref(key);
	}
	return o;
}

json_t *cmpl_job_logprobs(const cmpl_job *j, const cmpl_choice *c, bool with_echo, int32_t from, int32_t to)
{
	const tokenizer *t = j->srv->tok;
	const cmpl_prompt *p = &j->prompts[c->prompt];
	json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
	if (with_echo) {
		sched_request *lr = j->choices[p->lp_choice].r;
		const sched_logprob_rows *pl = sched_request_prompt_logprobs(lr);
		sched_view v;
		sched_request_view(lr, &v);
		if (!v.prompt_done)   /* cancelled before its prompt was through: no numbers to give */
			pl = NULL;
		for (int32_t i = 0; i < p->n_ids; i++) {
			json_array_append_new(tokens, cmpl_job_token_string(t, p->ids[i]));
			bool have = i > 0 && pl;   /* the first token has no context: null, as the legacy API */
			json_array_append_new(lps, have ? cmpl_job_logprob_json(pl->logprob[i]) : json_null());
			json_array_append_new(tops, have ? top_object(t, pl, i, p->ids[i]) : json_null());
			json_array_append_new(offs, json_integer(p->tok_chars ? p->tok_chars[i] : 0));
		}
	}
	const sched_logprob_rows *gl = sched_request_token_logprobs(c->r);
	const int32_t *ids = sched_request_tokens(c->r);
	size_t base = j->req.echo ? p->echo_chars : 0;
	size_t chars = base + utf8_chars(c->text.v.text, from < c->text.v.n_tokens ? c->text.v.tok_off[from] : c->text.v.len);
	size_t at = from < c->text.v.n_tokens ? c->text.v.tok_off[from] : c->text.v.len;
	for (int32_t i = from; i < to && gl; i++) {
		json_array_append_new(tokens, cmpl_job_token_string(t, ids[i]));
		json_array_append_new(lps, cmpl_job_logprob_json(gl->logprob[i]));
		json_array_append_new(tops, top_object(t, gl, i, ids[i]));
		size_t off = c->text.v.tok_off[i] < c->text.v.len ? c->text.v.tok_off[i] : c->text.v.len;
		chars += utf8_chars(c->text.v.text + at, off - at);
		at = off;
		json_array_append_new(offs, json_integer((json_int_t)chars));
	}
	return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
	                 "text_offset", offs);
}

void cmpl_job_token_totals(const cmpl_job *j, int64_t *prompt, int64_t *completion)
{
	*prompt = *completion = 0;
	for (int32_t i = 0; j->prompts && i < j->req.n_prompts; i++)
		*prompt += j->prompts[i].n_ids;
	for (int32_t i = 0; i < j->n_choices; i++)
		*completion += cmpl_job_completion_tokens(&j->choices[i]);
}

const char *cmpl_job_regime_name(const cmpl_job *j)
{
	return j->srv->regimes[j->regime];
}

json_t *cmpl_job_usage(const cmpl_job *j)
{
	int64_t prompt, completion;
	cmpl_job_token_totals(j, &prompt, &completion);
	/* OpenAI's prompt_tokens_details.cached_tokens: per prompt, the tokens its prefill took from the prefix cache (the
	 * choice that ran it; the others forked it and took none) */
	int64_t cached = 0;
	for (int32_t i = 0; i < j->req.n_prompts; i++) {
		int32_t most = 0;
		for (int32_t c = 0; c < j->n_choices; c++)
			if (j->choices[c].prompt == i && j->choices[c].ended && j->choices[c].result.cached_tokens > most)
				most = j->choices[c].result.cached_tokens;
		cached += most;
	}
	return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
	                 (json_int_t)completion, "total_tokens", (json_int_t)(prompt + completion), "prompt_tokens_details",
	                 "cached_tokens", (json_int_t)cached);
}

/* The choices' AAH figures added up (engine/aah_tally.h): ACR weighted by branch usage; the work and memory ratios as
 * sums over the choices; kv_bytes the sum of their peaks (a bound on what they held at once). */
json_t *cmpl_job_aah(const cmpl_job *j, const cmpl_choice *only)
{
	aah_tally t = { 0 };
	for (int32_t i = 0; i < j->n_choices; i++) {
		const cmpl_choice *c = &j->choices[i];
		if ((only && c != only) || !c->ended || !c->result.has_stats)
			continue;
		aah_tally_add(&t, &c->result.stats);
	}
	json_t *by_window = json_object();
	for (int32_t k = 0; k < t.n_windows; k++) {
		char w[16];
		snprintf(w, sizeof w, "%d", t.windows[k]);
		json_object_set_new(by_window, w, json_integer((json_int_t)t.window_usage[k]));   /* query-head selections */
	}
	/* four decimals, as the paper reports ACR */
	json_t *o = json_pack("{s:s,s:f,s:f,s:I,s:f,s:o}", "regime", cmpl_job_regime_name(j), "acr",
	                      round(aah_tally_acr(&t) * 1e4) / 1e4, "attention_work_ratio", aah_tally_work_ratio(&t),
	                      "kv_bytes", (json_int_t)t.kv_bytes_peak, "kv_memory_ratio", aah_tally_kv_ratio(&t),
	                      "branch_usage", by_window);
	/* speculative decoding, when the choices speculated: how much of their output the drafts gave */
	int64_t drafted = 0, accepted = 0, passes = 0;
	sched_draft draft = SCHED_DRAFT_OFF;
	for (int32_t i = 0; i < j->n_choices; i++) {
		const cmpl_choice *c = &j->choices[i];
		if ((only && c != only) || !c->ended || c->result.draft == SCHED_DRAFT_OFF)
			continue;
		draft = c->result.draft;
		drafted += c->result.spec_drafted;
		accepted += c->result.spec_accepted;
		passes += c->result.spec_passes;
	}
	if (draft != SCHED_DRAFT_OFF)
		json_object_set_new(o, "speculation", json_pack("{s:s,s:I,s:I,s:I}", "draft", sched_draft_name(draft),
		                                                "drafted_tokens", (json_int_t)drafted, "accepted_tokens",
		                                                (json_int_t)accepted, "verify_passes", (json_int_t)passes));
	return o;
}

/* ---- start ---- */

static uint64_t random_seed(void)
{
	static atomic_uint_fast64_t counter;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t z = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (atomic_fetch_add(&counter, 1) << 48);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static enum MHD_Result bad(http_request *req, const char *param, const char *code, const char *msg)
{
	return http_reply_error(req, 400, "invalid_request_error", param, code, "%s", msg);
}

/* Tokenizes (or takes) prompt i, checks its ids and length, keeps its echo text. 0, or -1 with an answer sent. */
static int prompt_prepare(http_request *req, cmpl_job *j, int32_t i, enum MHD_Result *answered)
{
	const server_ctx *s = j->srv;
	const completion_prompt *in = &j->req.prompts[i];
	cmpl_prompt *p = &j->prompts[i];
	char msg[512];
	if (in->text) {
		char err[256];
		int64_t cap = (int64_t)in->text_len + 8;
		p->ids = malloc((size_t)cap * sizeof *p->ids);
		/* a rendered chat template has its special tokens (a BOS among them) in its text already: none added, as
		 * transformers' apply_chat_template tokenizes */
		int64_t n = p->ids ? tokenizer_encode(s->tok, in->text, in->text_len, !j->chat, p->ids, cap, err, sizeof err)
		                   : -1;
		if (n < 0 || n > cap) {
			snprintf(msg, sizeof msg, "cannot tokenize prompt %d: %s", i, p->ids ? err : "out of memory");
			*answered = bad(req, "prompt", NULL, msg);
			return -1;
		}
		p->n_ids = (int32_t)n;
		p->echo = malloc(in->text_len + 1);
		if (p->echo) {
			memcpy(p->echo, in->text, in->text_len);
			p->echo_len = in->text_len;
		}
	} else {
		p->n_ids = in->n_ids;
		p->ids = malloc((size_t)(in->n_ids > 0 ? in->n_ids : 1) * sizeof *p->ids);
		if (p->ids)
			memcpy(p->ids, in->ids, (size_t)in->n_ids * sizeof *p->ids);
		for (int32_t k = 0; p->ids && k < p->n_ids; k++)
			if (p->ids[k] >= s->vocab) {
				snprintf(msg, sizeof msg, "prompt token %d (id %d) is out of the vocabulary [0, %d)", k, p->ids[k],
				         s->vocab);
				*answered = bad(req, "prompt", "invalid_token", msg);
				return -1;
			}
	}
	if (!p->ids) {
		*answered = http_reply_error(req, 503, "server_error", NULL, NULL, "out of memory");
		return -1;
	}
	if (p->n_ids == 0) {
		*answered = bad(req, "prompt", NULL, "the prompt is empty");
		return -1;
	}
	if (p->n_ids > s->max_prompt_tokens || p->n_ids > s->ctx_len ||
	    (j->req.max_tokens >= 0 && (int64_t)p->n_ids + j->req.max_tokens > s->ctx_len)) {
		snprintf(msg, sizeof msg,
		         "This model's maximum context length is %d tokens (prompts at most %d). However, you requested %lld "
		         "tokens (%d in your prompt; %lld for the completion).",
		         s->ctx_len, s->max_prompt_tokens, (long long)p->n_ids + (j->req.max_tokens > 0 ? j->req.max_tokens : 0),
		         p->n_ids, (long long)(j->req.max_tokens > 0 ? j->req.max_tokens : 0));
		*answered = bad(req, p->n_ids > s->max_prompt_tokens || p->n_ids > s->ctx_len ? (j->chat ? "messages" : "prompt")
		                                                                            : "max_tokens",
		                "context_length_exceeded", msg);
		return -1;
	}
	if (!in->text)   /* echo of ids: their text, special tokens spelled out, padding ids none */
		choice_text_decode(s->tok, p->ids, p->n_ids, &p->echo, &p->echo_len);
	if (!p->echo) {
		*answered = http_reply_error(req, 503, "server_error", NULL, NULL, "out of memory");
		return -1;
	}
	p->echo_chars = utf8_chars(p->echo, p->echo_len);
	if (j->req.echo && j->req.logprobs >= 0) {
		/* each prompt token's offset: the streamed decode of the ids; a BOS we added has no text in the echo */
		p->tok_chars = calloc((size_t)p->n_ids, sizeof *p->tok_chars);
		if (p->tok_chars) {
			tokenizer_stream ts;
			tokenizer_stream_init(&ts, s->tok, false);
			int32_t k0 = in->text && tokenizer_add_bos(s->tok) && p->ids[0] == tokenizer_bos(s->tok) ? 1 : 0;
			size_t chars = 0;
			char buf[4096];
			for (int32_t k = k0; k < p->n_ids; k++) {
				p->tok_chars[k] = (int32_t)chars;
				int64_t n = tokenizer_stream_push(&ts, p->ids[k], buf, sizeof buf);
				if (n > 0)
					chars += utf8_chars(buf, (size_t)n);
			}
		}
	}
	return 0;
}

cmpl_job *cmpl_job_new(http_request *req, const char *id_prefix)
{
	cmpl_job *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	atomic_init(&j->refs, 1);
	pthread_mutex_init(&j->mu, NULL);
	j->srv = req->srv;
	j->created = time(NULL);
	snprintf(j->id, sizeof j->id, "%s%s", id_prefix, req->id);
	return j;
}

void cmpl_job_discard(cmpl_job *j)
{
	if (j)
		job_free(j);
}

/* Adds id to the set ids[0 … *n) (room for SCHED_MAX_STOP_IDS) unless it is there. false: no room for it. */
static bool ids_add(int32_t *ids, int32_t *n, int32_t id)
{
	for (int32_t k = 0; k < *n; k++)
		if (ids[k] == id)
			return true;
	if (*n == SCHED_MAX_STOP_IDS)
		return false;
	ids[(*n)++] = id;
	return true;
}

completion_limits cmpl_job_limits(const server_ctx *s)
{
	/* logit_bias and stop_token_ids name ids the sampler may draw: the model's rows the tokenizer can spell */
	int32_t known = tokenizer_vocab_size(s->tok);
	return (completion_limits){ (int32_t)s->cfg->max_n, s->max_tokens, known < s->vocab ? known : s->vocab };
}

enum MHD_Result cmpl_job_start(http_request *req, cmpl_job **out)
{
	*out = NULL;
	cmpl_job *j = cmpl_job_new(req, "cmpl-");
	if (!j)
		return http_reply_error(req, 503, "server_error", NULL, NULL, "out of memory");
	char err[512];
	const char *param;
	completion_limits lim = cmpl_job_limits(req->srv);
	if (completion_request_parse(&j->req, req->body, req->body_len, &lim, err, sizeof err, &param) != 0) {
		enum MHD_Result answered = http_reply_error(req, 400, "invalid_request_error", param,
		                                            param ? "invalid_value" : "invalid_json", "%s", err);
		job_free(j);
		return answered;
	}
	return cmpl_job_submit(req, j, out);
}

enum MHD_Result cmpl_job_submit(http_request *req, cmpl_job *j, cmpl_job **out)
{
	*out = NULL;
	server_ctx *s = req->srv;
	enum MHD_Result answered = MHD_NO;
	char err[512];
	const completion_request *cr = &j->req;
	if (cr->model && strcmp(cr->model, s->model_name) != 0) {
		answered = http_reply_error(req, 404, "invalid_request_error", "model", "model_not_found",
		                            "The model '%s' does not exist (this server has '%s')", cr->model, s->model_name);
		goto fail;
	}
	j->regime = cr->regime ? server_regime_index(s, cr->regime) : server_regime_index(s, s->default_regime);
	if (j->regime < 0) {
		char names[512] = "";
		for (int32_t i = 0; i < s->n_regimes; i++)
			snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", s->regimes[i]);
		answered = http_reply_error(req, 400, "invalid_request_error", "aah_regime", "regime_not_found",
		                            "unknown aah_regime '%s' (this model has: %s)", cr->regime, names);
		goto fail;
	}
	if ((int64_t)cr->n_prompts * cr->n > s->cfg->queue_length) {   /* would wait for room that never comes */
		answered = http_reply_error(req, 400, "invalid_request_error", "n", "invalid_value",
		                            "n × prompts = %d exceeds the server's queue_length %lld", cr->n_prompts * cr->n,
		                            (long long)s->cfg->queue_length);
		goto fail;
	}
	j->prompts = calloc((size_t)cr->n_prompts, sizeof *j->prompts);
	j->n_choices = cr->n_prompts * cr->n;
	j->choices = calloc((size_t)j->n_choices, sizeof *j->choices);
	sched_request_params *rp = calloc((size_t)j->n_choices, sizeof *rp);
	sched_request **rs = calloc((size_t)j->n_choices, sizeof *rs);
	if (!j->prompts || !j->choices || !rp || !rs) {
		free(rp);
		free(rs);
		answered = http_reply_error(req, 503, "server_error", NULL, NULL, "out of memory");
		goto fail;
	}
	int32_t longest = 0;
	for (int32_t i = 0; i < cr->n_prompts; i++) {
		if (prompt_prepare(req, j, i, &answered) != 0) {
			free(rp);
			free(rs);
			goto fail;
		}
		if (j->prompts[i].n_ids > longest)
			longest = j->prompts[i].n_ids;
	}
	/* OpenAI's default of 16 (chat: none), within the cap and the room the longest prompt leaves */
	if (cr->max_tokens >= 0)
		j->max_tokens = (int32_t)cr->max_tokens;
	else if (j->chat)   /* a chat turn has no legacy default: up to the cap, as OpenAI's and vLLM's chat */
		j->max_tokens = s->max_tokens;
	else
		j->max_tokens = 16 < s->max_tokens ? 16 : s->max_tokens;
	if (cr->max_tokens < 0 && j->max_tokens > s->ctx_len - longest)
		j->max_tokens = s->ctx_len - longest;
	if (cr->min_tokens > j->max_tokens) {   /* as vLLM, against max_tokens given or defaulted */
		free(rp);
		free(rs);
		answered = http_reply_error(req, 400, "invalid_request_error", "min_tokens", "invalid_value",
		                            "'min_tokens' (%lld) must not exceed max_tokens (%d)", (long long)cr->min_tokens,
		                            j->max_tokens);
		goto fail;
	}
	/* The ids that end a choice: the model's EOS ids (unless ignore_eos) and stop_token_ids; min_tokens holds back
	 * both kinds, EOS under ignore_eos too (vLLM's all_stop_token_ids). The first set is in the second. */
	int32_t stop_ids[SCHED_MAX_STOP_IDS], held_ids[SCHED_MAX_STOP_IDS], n_stop_ids = 0, n_held = 0;
	bool fits = true;
	for (int32_t i = 0; i < s->n_eos + cr->n_stop_token_ids && fits; i++) {
		const bool eos = i < s->n_eos;
		const int32_t id = eos ? s->eos_ids[i] : cr->stop_token_ids[i - s->n_eos];
		fits = ids_add(held_ids, &n_held, id);
		if (fits && !(eos && cr->ignore_eos))
			ids_add(stop_ids, &n_stop_ids, id);
	}
	if (!fits) {
		free(rp);
		free(rs);
		answered = http_reply_error(req, 400, "invalid_request_error", "stop_token_ids", "invalid_value",
		                            "at most %d stop_token_ids besides the model's %d EOS ids",
		                            SCHED_MAX_STOP_IDS - s->n_eos, s->n_eos);
		goto fail;
	}
	/* the constraint, compiled against the model's vocabulary (or found in the cache): a refusal names its field */
	if (cr->constraint.gbnf) {
		bool hit;
		double t0 = aah_now_s();
		j->grammar = grammar_cache_get(s->grammars, cr->constraint.gbnf, cr->constraint.gbnf_len, &hit, err,
		                               sizeof err);
		server_metrics_grammar(&s->metrics, cr->constraint.kind, hit, j->grammar != NULL, aah_now_s() - t0);
		if (!j->grammar) {
			free(rp);
			free(rs);
			answered = http_reply_error(req, 400, "invalid_request_error", cr->constraint.field, "invalid_value",
			                            "'%s': %s", cr->constraint.field, err);
			goto fail;
		}
	}
	uint64_t seed = cr->seed_set ? cr->seed : random_seed();
	j->seed = seed;
	/* the prefix cache's tenant (docs/prefix_cache.md): the key's name unless the scope is global, then the salt; the
	 * tags keep "key a, salt b" and "salt a\nb" apart (a name has no newline) */
	char tenant[API_KEY_NAME_MAX + COMPLETION_MAX_SALT + 8];
	snprintf(tenant, sizeof tenant, "%s%s%s%s%s", s->cache_per_key && req->key_name ? "k:" : "",
	         s->cache_per_key && req->key_name ? req->key_name : "", s->cache_per_key && req->key_name ? "\n" : "",
	         cr->cache_salt ? "s:" : "", cr->cache_salt ? cr->cache_salt : "");
	for (int32_t i = 0; i < cr->n_prompts; i++)
		for (int32_t k = 0; k < cr->n; k++) {
			int32_t ci = i * cr->n + k;
			cmpl_choice *c = &j->choices[ci];
			c->index = ci;
			c->prompt = i;
			choice_text_init(&c->text, s->tok);
			choice_text_markers(&c->text, j->markers, j->n_markers);
			sched_request_params *p = &rp[ci];
			p->prompt = j->prompts[i].ids;
			p->n_prompt = j->prompts[i].n_ids;
			p->max_tokens = j->max_tokens;
			p->sampling.temperature = (float)cr->temperature;
			p->sampling.top_p = (float)cr->top_p;
			p->sampling.top_k = cr->top_k;
			p->sampling.min_p = (float)cr->min_p;
			p->sampling.presence_penalty = (float)cr->presence_penalty;
			p->sampling.frequency_penalty = (float)cr->frequency_penalty;
			p->sampling.seed = seed + (uint64_t)k;   /* choice k of every prompt: seed + k, as if sent alone */
			/* a model's vocabulary is often padded past its tokenizer's: never draw an id with no text */
			p->sampling.vocab_limit = tokenizer_vocab_size(s->tok);
			p->sampling.repetition_penalty = (float)cr->repetition_penalty;
			p->sampling.bias = cr->bias;
			p->sampling.n_bias = cr->n_bias;
			p->sampling.min_tokens = (int32_t)cr->min_tokens;
			p->sampling.min_tokens_ids = held_ids;
			p->sampling.n_min_tokens_ids = n_held;
			p->regime = s->regimes[j->regime];
			p->cache_tenant = tenant;
			p->logprobs = cr->logprobs;
			p->prompt_logprobs = k == 0 && cr->echo && cr->logprobs >= 0;   /* one per prompt; its choices share it */
			p->stop_ids = stop_ids;
			p->n_stop_ids = n_stop_ids;
			p->stop = cr->stop;
			p->stop_len = cr->stop_len;
			p->n_stop = cr->n_stop;
			p->grammar = j->grammar;
			p->spec = (sched_spec){ (sched_draft)cr->spec_draft, cr->spec_k, cr->spec_adaptive, cr->spec_regime };
			p->notify = job_notify;
			p->notify_ctx = j;
			if (k == 0)
				j->prompts[i].lp_choice = ci;
		}
	/* each choice's last notification drops one reference; taken before the engine can send it */
	atomic_fetch_add(&j->refs, j->n_choices);
	sched_status st = sched_submit(s->sch, rp, j->n_choices, rs, err, sizeof err);
	free(rp);
	if (st != SCHED_OK) {
		atomic_fetch_sub(&j->refs, j->n_choices);   /* nothing was queued: no notification will come */
		free(rs);
		switch (st) {
		case SCHED_ERR_QUEUE_FULL:
			answered = http_reply_error_header(req, 429, "rate_limit_error", NULL, "queue_full", "Retry-After", "1",
			                                   "the server is busy: %s; retry later", err);
			break;
		case SCHED_ERR_SHUTDOWN:
			answered = http_reply_error_header(req, 503, "server_error", NULL, "shutting_down", "Retry-After", "5",
			                                   "the server is shutting down");
			break;
		case SCHED_ERR_NOMEM:
			answered = http_reply_error(req, 503, "server_error", NULL, NULL, "%s", err);
			break;
		case SCHED_ERR_REGIME:
			answered = bad(req, "aah_regime", "regime_not_found", err);
			break;
		case SCHED_ERR_SPEC:
			answered = bad(req, "aah_speculation", "speculation_unavailable", err);
			break;
		case SCHED_ERR_TOO_LONG:
			answered = bad(req, "max_tokens", "context_length_exceeded", err);
			break;
		default:
			answered = bad(req, NULL, NULL, err);
		}
		goto fail;
	}
	for (int32_t i = 0; i < j->n_choices; i++)
		j->choices[i].r = rs[i];
	free(rs);
	*out = j;
	return MHD_YES;
fail:
	/* nothing was submitted: no notification will come */
	for (int32_t i = 0; j->choices && i < j->n_choices; i++)
		j->choices[i].r = NULL;
	job_free(j);
	return answered;
}
