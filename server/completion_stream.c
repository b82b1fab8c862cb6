/* server/completion_stream.c — SSE for /v1/completions (see completion_stream.h). MHD calls the reader on one of
 * its epoll threads; with nothing to send it parks the request (its connection suspended, 0 bytes returned) until
 * the engine's next notification wakes it, and notices a client that went away both by a failed write (MHD ends the
 * request) and, when woken by the front, by the closed socketpair. */
#include "server/completion_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/log.h"

typedef struct stream {
	http_request *req;
	cmpl_job *job;
	const cmpl_stream_shape *shape;
	char *out;                        /* events formatted, not yet handed to MHD: out[pos, len) */
	size_t len, pos, cap;
	bool done;                        /* [DONE] is in out */
} stream;

static int out_append(stream *s, const char *p, size_t n)
{
	if (s->pos == s->len)
		s->pos = s->len = 0;
	if (s->len + n > s->cap) {
		size_t cap = s->cap ? s->cap : 4096;
		while (cap < s->len + n)
			cap *= 2;
		char *grown = realloc(s->out, cap);
		if (!grown)
			return -1;
		s->out = grown;
		s->cap = cap;
	}
	memcpy(s->out + s->len, p, n);
	s->len += n;
	return 0;
}

/* `data: <json>\n\n`; steals the reference. */
static int event(stream *s, json_t *j)
{
	char *text = j ? json_dumps(j, HTTP_JSON_FLAGS) : NULL;
	json_decref(j);
	if (!text)
		return -1;
	int rc = out_append(s, "data: ", 6) | out_append(s, text, strlen(text)) | out_append(s, "\n\n", 2);
	free(text);
	return rc;
}

static json_t *chunk(const cmpl_job *j, json_t *choice)
{
	return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", j->id, "object", "text_completion", "created",
	                 (json_int_t)j->created, "model", j->srv->model_name, "choices", choice);
}

/* /v1/completions' shape: {"text", "logprobs" (the legacy object), "finish_reason"}, the aah object in the last. */
static json_t *text_piece(const cmpl_job *j, cmpl_choice *c, const char *text, size_t len, int32_t from, int32_t to,
                          const char *finish, bool *held)
{
	json_t *choice = json_pack("{s:i,s:s%,s:o,s:s?}", "index", c->index, "text", text, len, "logprobs",
	                           j->req.logprobs >= 0 ? cmpl_job_logprobs(j, c, false, from, to) : json_null(),
	                           "finish_reason", finish);
	if (choice && finish)
		json_object_set_new(choice, "aah", cmpl_job_aah(j, c));
	return chunk(j, choice);
}

static json_t *text_usage(const cmpl_job *j)
{
	return json_pack("{s:s,s:s,s:I,s:s,s:[],s:o,s:o}", "id", j->id, "object", "text_completion", "created",
	                 (json_int_t)j->created, "model", j->srv->model_name, "choices", "usage", cmpl_job_usage(j), "aah",
	                 cmpl_job_aah(j, NULL));
}

static const cmpl_stream_shape text_shape = { .head = NULL, .piece = text_piece, .usage = text_usage };

/* Formats what choice c can send now: the echo first, then text that is safe, with the log-probabilities of the
 * tokens it completes; after its end, the rest and a finish_reason. */
static int choice_events(stream *s, cmpl_choice *c)
{
	cmpl_job *j = s->job;
	const bool lp = j->req.logprobs >= 0;
	if (j->req.echo && !c->echo_sent) {
		/* with logprobs the echo waits for the prompt's log-probabilities */
		sched_view v;
		sched_request_view(j->choices[j->prompts[c->prompt].lp_choice].r, &v);
		if (lp && !v.prompt_done && !c->ended && !j->choices[j->prompts[c->prompt].lp_choice].ended)
			return 0;
		const cmpl_prompt *p = &j->prompts[c->prompt];
		json_t *choice = json_pack("{s:i,s:s%,s:o,s:n}", "index", c->index, "text", p->echo, p->echo_len, "logprobs",
		                           lp ? cmpl_job_logprobs(j, c, true, 0, 0) : json_null(), "finish_reason");
		c->echo_sent = true;
		if (event(s, chunk(j, choice)) != 0)
			return -1;
	}
	if (c->final_sent)
		return 0;
	if (s->shape->head && !c->head_sent) {
		c->head_sent = true;
		if (event(s, s->shape->head(j, c)) != 0)
			return -1;
	}
	/* a chunk per token whose text lies wholly in the safe part, as OpenAI streams (a token that completes no
	 * character joins the next one's chunk) */
	int32_t from = c->lp_sent;
	for (int32_t i = c->lp_sent; i < c->text.n_kept; i++) {
		size_t end = gen_text_token_end(&c->text.v, i);
		if (end > c->text.v.safe)
			break;
		/* a token that completes no character, or whose text a held piece already took (lp_sent stays behind
		 * sent then, so that those tokens' log-probabilities go with the next event) */
		if (end <= c->sent)
			continue;
		bool held = false;
		json_t *e = s->shape->piece(j, c, c->text.v.text + c->sent, end - c->sent, from, i + 1, NULL, &held);
		c->sent = end;
		if (held)
			continue;   /* nothing to show yet: these tokens' log-probabilities ride the next event */
		c->lp_sent = from = i + 1;
		if (event(s, e) != 0)
			return -1;
	}
	if (!c->ended)
		return 0;
	/* the end: whatever is left, and why it ended */
	bool held = false;
	json_t *e = s->shape->piece(j, c, c->text.v.text + c->sent, c->text.v.len - c->sent, c->lp_sent, c->text.n_kept,
	                            c->finish_reason, &held);
	c->sent = c->text.v.len;
	c->lp_sent = c->text.n_kept;
	c->final_sent = true;
	return event(s, e);
}

/* Polls the job and formats what is new. Returns -1 when out of memory. */
static int stream_fill(stream *s)
{
	cmpl_job *j = s->job;
	bool all = cmpl_job_poll(j);
	for (int32_t i = 0; i < j->n_choices; i++)
		if (choice_events(s, &j->choices[i]) != 0)
			return -1;
	if (!all)
		return 0;
	if (j->failed) {   /* the 200 is gone already: the error travels as an event */
		json_t *e = json_pack("{s:{s:s,s:s}}", "error", "message", j->err, "type", "server_error");
		if (event(s, e) != 0)
			return -1;
	}
	if (j->req.include_usage) {
		if (event(s, s->shape->usage(j)) != 0)
			return -1;
	}
	s->done = true;
	return out_append(s, "data: [DONE]\n\n", 14);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	stream *s = cls;
	while (s->pos == s->len) {
		if (s->done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (stream_fill(s) != 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (s->pos < s->len)
			break;
		int w = cmpl_job_wait(s->job, s->req);
		if (w > 0)
			return 0;   /* parked: called again once the engine has news */
		if (w < 0) {
			log_msg(LOG_INFO, s->req->id, "client went away mid-stream: cancelling");
			cmpl_job_cancel(s->job);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
	size_t n = s->len - s->pos < max ? s->len - s->pos : max;
	memcpy(buf, s->out + s->pos, n);
	s->pos += n;
	return (ssize_t)n;
}

static void stream_abort(void *state)
{
	stream *s = state;
	cmpl_job_cancel(s->job);
}

static void stream_free(void *state)
{
	stream *s = state;
	cmpl_job *j = s->job;
	if (j->n_choices > 0 && j->choices[0].finish_reason) {
		int64_t prompt, completion;
		cmpl_job_token_totals(j, &prompt, &completion);
		snprintf(s->req->note, sizeof s->req->note, "stream choices=%d completion_tokens=%lld finish=%s regime=%s",
		         j->n_choices, (long long)completion, j->choices[0].finish_reason, cmpl_job_regime_name(j));
	}
	cmpl_job_release(j);
	free(s->out);
	free(s);
}

enum MHD_Result completion_stream_start(http_request *req, cmpl_job *j)
{
	return completion_stream_start_shaped(req, j, &text_shape);
}

enum MHD_Result completion_stream_start_shaped(http_request *req, cmpl_job *j, const cmpl_stream_shape *shape)
{
	stream *s = calloc(1, sizeof *s);
	if (!s) {
		cmpl_job_release(j);
		return http_reply_error(req, 503, "server_error", NULL, NULL, "out of memory");
	}
	s->req = req;
	s->job = j;
	s->shape = shape;
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, s, NULL);
	if (!resp) {
		free(s);
		cmpl_job_release(j);
		return MHD_NO;
	}
	req->state = s;
	req->state_abort = stream_abort;
	req->state_free = stream_free;
	cmpl_job_watch(j, req);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	return http_reply_response(req, 200, resp);
}
