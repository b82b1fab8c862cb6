/* server/completions.c — POST /v1/completions: starts the job, then either hands it to a stream
 * (completion_stream.c) or parks the request until every choice has ended (each notification of the engine wakes
 * it, and the handler is called again) and answers in one JSON body. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"
#include "server/completion_job.h"
#include "server/completion_stream.h"
#include "server/log.h"

/* A summary of the finished job for the request's log line. */
static void job_note(http_request *req, const cmpl_job *j)
{
	int64_t prompt, completion;
	cmpl_job_token_totals(j, &prompt, &completion);
	snprintf(req->note, sizeof req->note, "choices=%d prompt_tokens=%lld completion_tokens=%lld finish=%s regime=%s%s",
	         j->n_choices, (long long)prompt, (long long)completion,
	         j->n_choices ? (j->choices[0].finish_reason ? j->choices[0].finish_reason : "-") : "-",
	         cmpl_job_regime_name(j), j->req.stream ? " stream" : "");
}

static json_t *response_json(const cmpl_job *j)
{
	json_t *choices = json_array();
	for (int32_t i = 0; i < j->n_choices; i++) {
		const cmpl_choice *c = &j->choices[i];
		const cmpl_prompt *p = &j->prompts[c->prompt];
		/* echo puts the prompt's text first */
		size_t n = (j->req.echo ? p->echo_len : 0) + c->text.v.len;
		char *text = malloc(n + 1);
		if (!text) {
			json_decref(choices);
			return NULL;
		}
		size_t at = 0;
		if (j->req.echo) {
			memcpy(text, p->echo, p->echo_len);
			at = p->echo_len;
		}
		memcpy(text + at, c->text.v.text, c->text.v.len);
		json_t *lp = j->req.logprobs >= 0 ? cmpl_job_logprobs(j, c, j->req.echo, 0, c->text.n_kept) : json_null();
		json_array_append_new(choices, json_pack("{s:i,s:s%,s:o,s:s}", "index", c->index, "text", text, n, "logprobs",
		                                         lp, "finish_reason", c->finish_reason));
		free(text);
	}
	return json_pack("{s:s,s:s,s:I,s:s,s:o,s:o,s:o}", "id", j->id, "object", "text_completion", "created",
	                 (json_int_t)j->created, "model", j->srv->model_name, "choices", choices, "usage",
	                 cmpl_job_usage(j), "aah", cmpl_job_aah(j, NULL));
}

/* A non-streaming request's job lives in its state across libmicrohttpd's calls (cmpl_job_of / attach / await). */
enum MHD_Result api_completions(http_request *req)
{
	cmpl_job *j = cmpl_job_of(req);
	if (!j) {   /* the first call: validate, tokenize, submit */
		enum MHD_Result rc = cmpl_job_start(req, &j);
		if (!j)
			return rc;
		if (j->req.stream)
			return completion_stream_start(req, j);
		cmpl_job_attach(j, req);
	}
	const int done = cmpl_job_await(j, req);
	if (done <= 0)
		return done == 0 ? MHD_YES : MHD_NO;
	job_note(req, j);
	if (j->failed && j->fail_status == 400)
		return http_reply_error(req, 400, "invalid_request_error", j->req.constraint.field, "grammar_failed", "%s",
		                        j->err);
	if (j->failed)
		return http_reply_error(req, 500, "server_error", NULL, NULL, "%s", j->err);
	return http_reply_json(req, 200, response_json(j));
}
