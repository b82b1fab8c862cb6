/* server/chat_completions.c — POST /v1/chat/completions: parses the messages, renders them with the model's chat
 * template into one prompt, and runs that prompt as a completions job (completion_job.h: the same limits, queueing,
 * cancellation and choices); answers in OpenAI's chat shape, whole or as chat.completion.chunk deltas. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api.h"
#include "server/chat_request.h"
#include "server/chat_template.h"
#include "server/completion_job.h"
#include "server/completion_stream.h"
#include "server/log.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"

/* ---- logprobs in the chat shape ---- */

/* A token's bytes as an array of integers (a byte-level token may hold part of a character: its bytes say which). */
static json_t *token_bytes(const tokenizer *t, int32_t id)
{
	char small[256];
	int64_t n = tokenizer_token_bytes(t, id, small, sizeof small);
	json_t *a = json_array();
	if (n < 0 || !a)
		return a;
	char *b = small;
	if (n > (int64_t)sizeof small) {
		b = malloc((size_t)n);
		if (!b)
			return a;
		tokenizer_token_bytes(t, id, b, n);
	}
	for (int64_t i = 0; i < n; i++)
		json_array_append_new(a, json_integer((unsigned char)b[i]));
	if (b != small)
		free(b);
	return a;
}

static json_t *token_entry(const tokenizer *t, int32_t id, float lp)
{
	return json_pack("{s:o,s:o,s:o}", "token", cmpl_job_token_string(t, id), "logprob", cmpl_job_logprob_json(lp),
	                 "bytes", token_bytes(t, id));
}

/* {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}, …]}, …]} for the
 * generated tokens [from, to) of c: top_logprobs holds the request's top_logprobs likeliest, best first. */
static json_t *chat_logprobs(const cmpl_job *j, const cmpl_choice *c, int32_t from, int32_t to)
{
	if (j->req.logprobs < 0)
		return json_null();
	const tokenizer *t = j->srv->tok;
	const sched_logprob_rows *rows = sched_request_token_logprobs(c->r);
	const int32_t *ids = sched_request_tokens(c->r);
	json_t *content = json_array();
	for (int32_t i = from; i < to && rows; i++) {
		json_t *e = token_entry(t, ids[i], rows->logprob[i]);
		json_t *top = json_array();
		for (int32_t k = 0; k < rows->n_top && k < j->req.logprobs; k++)
			json_array_append_new(top, token_entry(t, rows->top_ids[(int64_t)i * rows->n_top + k],
			                                       rows->top_logprobs[(int64_t)i * rows->n_top + k]));
		json_object_set_new(e, "top_logprobs", top);
		json_array_append_new(content, e);
	}
	return json_pack("{s:o}", "content", content);
}

/* ---- reasoning (server/reasoning.h) ---- */

/* Of choice c's generated tokens, those of its reasoning, once split has seen all its text: the tokens of the text by
 * where they begin, then those past it (a stop string's, the stop token) when the block never ended. */
static int32_t choice_reasoning_tokens(const cmpl_choice *c, const reasoning_split *split)
{
	int32_t total = cmpl_job_completion_tokens(c), n_text = c->text.n_kept < total ? c->text.n_kept : total;
	return reasoning_count_tokens(split, c->text.v.tok_off, n_text, total - n_text);
}

/* cmpl_job_usage with OpenAI's completion_tokens_details.reasoning_tokens (the sum over the choices). */
static json_t *chat_usage_json(const cmpl_job *j, int64_t reasoning_tokens)
{
	json_t *u = cmpl_job_usage(j);
	if (u)
		json_object_set_new(u, "completion_tokens_details",
		                    json_pack("{s:I}", "reasoning_tokens", (json_int_t)reasoning_tokens));
	return u;
}

/* A delta or message member from split bytes; false when out of memory (the text is whole UTF-8: the split cuts only
 * beside a tag's ASCII bytes). */
static bool set_text(json_t *o, const char *key, const char *text, size_t len)
{
	return o && json_object_set_new(o, key, json_stringn(text, len)) == 0;
}

/* ---- tool calls (server/tool_calls.h): the content part of the split goes through a parser when j->tools ---- */

/* The special tokens each format's calls are written with. The text pipeline skips special tokens (a reply never shows
 * <|im_end|>), which would hide these from the parser; choice_text records where they were instead (its markers), and
 * split_feed puts them back into the one stream the parser reads. Hermes' tags are ordinary text in Qwen's
 * vocabularies, special in a few others. */
static const char *const hermes_markers[] = { "<tool_call>", "</tool_call>" };
static const char *const llama3_markers[] = { "<|python_tag|>" };
static const char *const mistral_markers[] = { "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]" };

static const char *const *format_markers(tool_format fmt, int32_t *n)
{
	switch (fmt) {
	case TOOL_FORMAT_HERMES:
		*n = 2;
		return hermes_markers;
	case TOOL_FORMAT_LLAMA3_JSON:
		*n = 1;
		return llama3_markers;
	case TOOL_FORMAT_MISTRAL:
		*n = 3;
		return mistral_markers;
	default:
		*n = 0;
		return NULL;
	}
}

/* The bytes every marker of c's text spells, at most: the room split_feed may add beyond the text. */
static size_t markers_room(const cmpl_job *j, const cmpl_choice *c)
{
	size_t n = 0;
	for (int32_t i = 0; i < c->text.n_markers; i++)
		n += strlen(j->markers[c->text.markers[i].which]);
	return n;
}

/* Feeds c's text [from, to) into split, each marker there back before the byte it preceded (with last, also those
 * after the text's end: a piece leaves a marker at its end to the next piece, so pieces and the whole agree). A
 * marker inside the reasoning block is dropped: only content is parsed for calls, and a special token's text has no
 * place in reasoning_content. Outside it the marker is fed as text, so that a marker that opens the answer ends the
 * split's wait for <think> (the answer did not begin with a block) just as its text would. */
static void split_feed(const cmpl_job *j, const cmpl_choice *c, reasoning_split *split, size_t from, size_t to,
                       bool last, reasoning_out *o)
{
	const char *text = c->text.v.text;
	size_t at = from;
	for (int32_t i = 0; i < c->text.n_markers; i++) {
		const choice_marker *m = &c->text.markers[i];
		if (m->at < from)
			continue;
		if (m->at > to || (m->at == to && !last))
			break;
		reasoning_feed(split, text + at, m->at - at, o);
		at = m->at;
		if (split->state != REASONING_STATE_THINK)
			reasoning_feed(split, j->markers[m->which], strlen(j->markers[m->which]), o);
	}
	reasoning_feed(split, text + at, to - at, o);
}

/* Choice c's parser. Its call ids are drawn from the request's seed and the choice's index, so that a seeded request
 * gets the same ids streamed or not. NULL when out of memory. */
static tool_parser *choice_tool_parser(const cmpl_job *j, const cmpl_choice *c)
{
	return tool_parser_new(j->tools, j->seed ^ ((uint64_t)(c->index + 1) * 0x9e3779b97f4a7c15ull));
}

/* Whether call i is returned: all are, or only the first without parallel_tool_calls (in auto mode the model may write
 * more; the grammar of required and named allows one). */
static bool tool_call_returned(const cmpl_job *j, int32_t i)
{
	return j->tool_parallel || i == 0;
}

/* At the end of choice c's text, p finished: counts the calls returned on /metrics, and gives the finish_reason —
 * "tool_calls" when a returned call is complete and the model stopped by itself (not at max_tokens), else c's own. */
static const char *tool_calls_end(const cmpl_job *j, const cmpl_choice *c, const tool_parser *p)
{
	int64_t n = 0, invalid = 0;
	bool complete = false;
	for (int32_t i = 0; i < tool_parser_n_calls(p) && tool_call_returned(j, i); i++) {
		const tool_call *call = tool_parser_call(p, i);
		n++;
		invalid += !call->arguments_valid;
		complete = complete || call->complete;
	}
	server_metrics_tool_calls(&j->srv->metrics, n, invalid);
	return complete && c->finish_reason && !strcmp(c->finish_reason, "stop") ? "tool_calls" : c->finish_reason;
}

/* message.tool_calls: [{id, type, function: {name, arguments}}], arguments as the model wrote them. NULL when out of
 * memory. */
static json_t *tool_calls_json(const cmpl_job *j, const tool_parser *p)
{
	json_t *a = json_array();
	for (int32_t i = 0; a && i < tool_parser_n_calls(p) && tool_call_returned(j, i); i++) {
		const tool_call *call = tool_parser_call(p, i);
		json_t *e = json_pack("{s:s,s:s,s:{s:s,s:s%}}", "id", call->id, "type", "function", "function", "name",
		                      call->name, "arguments", call->arguments, call->arguments_len);
		if (!e || json_array_append_new(a, e) != 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

/* ---- the whole answer ---- */

/* Choice c's message: content, and reasoning_content when the answer had a reasoning block; with tools, the calls in
 * the content as tool_calls and the text around them as content (null when there is none). Adds c's reasoning tokens
 * to *reasoning_tokens; *finish is c's finish_reason ("tool_calls" for a call). */
static json_t *message_json(const cmpl_job *j, const cmpl_choice *c, int64_t *reasoning_tokens, const char **finish)
{
	size_t len = c->text.v.len, room = len + markers_room(j, c) + REASONING_MAX_HELD;
	char *buf = malloc(2 * room + 1);
	json_t *m = json_pack("{s:s}", "role", "assistant");
	*finish = c->finish_reason;
	if (!buf || !m) {
		free(buf);
		json_decref(m);
		return NULL;
	}
	reasoning_split split;
	reasoning_out o = { buf, buf + room, 0, 0 };
	reasoning_init(&split, j->reasoning);
	split_feed(j, c, &split, 0, len, true, &o);
	reasoning_finish(&split, &o);
	bool ok;
	if (j->tools != TOOL_FORMAT_NONE) {
		tool_parser *p = choice_tool_parser(j, c);
		tool_events ev;
		tool_events_init(&ev);
		ok = p && tool_parser_push(p, o.content, o.content_len, &ev) == 0 && tool_parser_finish(p, &ev) == 0;
		tool_events_free(&ev);
		size_t clen = 0;
		const char *content = ok ? tool_parser_content(p, &clen) : NULL;
		json_t *calls = ok ? tool_calls_json(j, p) : NULL;
		ok = ok && calls &&
		     (clen ? set_text(m, "content", content, clen) : json_object_set_new(m, "content", json_null()) == 0) &&
		     (json_array_size(calls) == 0 || json_object_set(m, "tool_calls", calls) == 0);
		json_decref(calls);
		if (ok)
			*finish = tool_calls_end(j, c, p);
		tool_parser_free(p);
	} else {
		ok = set_text(m, "content", o.content, o.content_len);
	}
	ok = ok && (!split.block || set_text(m, "reasoning_content", o.reasoning, o.reasoning_len));
	free(buf);
	*reasoning_tokens += choice_reasoning_tokens(c, &split);
	if (!ok) {
		json_decref(m);
		return NULL;
	}
	return m;
}

static json_t *response_json(const cmpl_job *j)
{
	json_t *choices = json_array();
	int64_t reasoning_tokens = 0;
	for (int32_t i = 0; i < j->n_choices; i++) {
		const cmpl_choice *c = &j->choices[i];
		const char *finish;
		json_t *m = message_json(j, c, &reasoning_tokens, &finish);
		json_array_append_new(choices, json_pack("{s:i,s:o,s:o,s:s}", "index", c->index, "message", m, "logprobs",
		                                         chat_logprobs(j, c, 0, c->text.n_kept), "finish_reason", finish));
	}
	return json_pack("{s:s,s:s,s:I,s:s,s:o,s:o,s:o}", "id", j->id, "object", "chat.completion", "created",
	                 (json_int_t)j->created, "model", j->srv->model_name, "choices", choices, "usage",
	                 chat_usage_json(j, reasoning_tokens), "aah", cmpl_job_aah(j, NULL));
}

/* ---- the streamed answer: chat.completion.chunk events ---- */

static json_t *chunk(const cmpl_job *j, json_t *choice)
{
	json_t *e = json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", j->id, "object", "chat.completion.chunk", "created",
	                      (json_int_t)j->created, "model", j->srv->model_name, "choices", choice);
	if (e && j->req.include_usage)   /* OpenAI: every chunk says usage null but the last */
		json_object_set_new(e, "usage", json_null());
	return e;
}

/* The first chunk of a choice carries the role and no text; the choice's split starts here. */
static json_t *chat_head(const cmpl_job *j, cmpl_choice *c)
{
	reasoning_init(&c->split, j->reasoning);
	if (j->tools != TOOL_FORMAT_NONE && !c->tools)
		c->tools = choice_tool_parser(j, c);   /* NULL when out of memory: the first piece then fails the stream */
	return chunk(j, json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", c->index, "delta", "role", "assistant", "content",
	                          "", "logprobs", "finish_reason"));
}

/* The tool parser's events of one piece into delta: the content joined (one member), and OpenAI's tool_calls entries
 * in order — a call's first {index, id, type, function: {name, arguments: ""}}, then {index, function: {arguments}}
 * per fragment — so that a client joining the fragments by index gets the message's calls. False when out of memory. */
static bool tool_delta(const cmpl_job *j, const tool_events *ev, json_t *delta)
{
	size_t clen = 0;
	for (int32_t i = 0; i < ev->n; i++)
		if (ev->ev[i].kind == TOOL_EVENT_CONTENT)
			clen += ev->ev[i].len;
	if (clen) {
		char *content = malloc(clen);
		if (!content)
			return false;
		size_t at = 0;
		for (int32_t i = 0; i < ev->n; i++)
			if (ev->ev[i].kind == TOOL_EVENT_CONTENT) {
				memcpy(content + at, ev->ev[i].text, ev->ev[i].len);
				at += ev->ev[i].len;
			}
		bool ok = set_text(delta, "content", content, clen);
		free(content);
		if (!ok)
			return false;
	}
	json_t *calls = NULL;
	for (int32_t i = 0; i < ev->n; i++) {
		const tool_event *e = &ev->ev[i];
		if (e->kind == TOOL_EVENT_CONTENT || !tool_call_returned(j, e->index))
			continue;
		json_t *entry = e->kind == TOOL_EVENT_CALL_BEGIN
		                    ? json_pack("{s:i,s:s,s:s,s:{s:s%,s:s}}", "index", e->index, "id", e->id, "type",
		                                "function", "function", "name", e->text, e->len, "arguments", "")
		                    : json_pack("{s:i,s:{s:s%}}", "index", e->index, "function", "arguments", e->text, e->len);
		if (!calls)
			calls = json_array();
		if (!entry || !calls || json_array_append_new(calls, entry) != 0) {
			json_decref(calls);
			return false;
		}
	}
	return !calls || json_object_set_new(delta, "tool_calls", calls) == 0;
}

/* A piece of text as a delta — {"reasoning_content"}, {"content"}, or both (reasoning first) where the piece crosses
 * </think>; with tools, the content through the choice's tool parser, its calls as tool_calls — after the split; a
 * piece the split or the parser holds back entirely (a tag's first bytes) sends nothing yet. The last piece of a
 * choice (with finish) has its finish_reason ("tool_calls" for a call) and aah object, and an empty delta when no text
 * is left. */
static json_t *chat_piece(const cmpl_job *j, cmpl_choice *c, const char *text, size_t len, int32_t from, int32_t to,
                          const char *finish, bool *held)
{
	size_t room = len + markers_room(j, c) + REASONING_MAX_HELD;
	char *buf = malloc(2 * room + 1);
	if (!buf)
		return NULL;
	reasoning_out o = { buf, buf + room, 0, 0 };
	const size_t at = (size_t)(text - c->text.v.text);   /* completion_stream hands pieces of c's own text */
	split_feed(j, c, &c->split, at, at + len, finish != NULL, &o);
	if (finish)
		reasoning_finish(&c->split, &o);
	json_t *delta = json_object();
	bool ok = delta && (o.reasoning_len == 0 || set_text(delta, "reasoning_content", o.reasoning, o.reasoning_len));
	if (j->tools != TOOL_FORMAT_NONE) {
		tool_events ev;
		tool_events_init(&ev);
		ok = ok && c->tools && tool_parser_push(c->tools, o.content, o.content_len, &ev) == 0 &&
		     (!finish || tool_parser_finish(c->tools, &ev) == 0) && tool_delta(j, &ev, delta);
		tool_events_free(&ev);
		if (ok && finish)
			finish = tool_calls_end(j, c, c->tools);
	} else {
		ok = ok && (o.content_len == 0 || set_text(delta, "content", o.content, o.content_len));
	}
	free(buf);
	if (!ok) {
		json_decref(delta);
		return NULL;
	}
	if (!finish && json_object_size(delta) == 0) {
		json_decref(delta);
		*held = true;
		return NULL;
	}
	json_t *choice = json_pack("{s:i,s:o,s:o,s:s?}", "index", c->index, "delta", delta, "logprobs",
	                           to > from ? chat_logprobs(j, c, from, to) : json_null(), "finish_reason", finish);
	if (choice && finish)
		json_object_set_new(choice, "aah", cmpl_job_aah(j, c));
	return chunk(j, choice);
}

/* After every choice's last piece: each choice's split has seen all its text. */
static json_t *chat_usage(const cmpl_job *j)
{
	int64_t reasoning_tokens = 0;
	for (int32_t i = 0; i < j->n_choices; i++)
		reasoning_tokens += choice_reasoning_tokens(&j->choices[i], &j->choices[i].split);
	return json_pack("{s:s,s:s,s:I,s:s,s:[],s:o,s:o}", "id", j->id, "object", "chat.completion.chunk", "created",
	                 (json_int_t)j->created, "model", j->srv->model_name, "choices", "usage",
	                 chat_usage_json(j, reasoning_tokens), "aah", cmpl_job_aah(j, NULL));
}

static const cmpl_stream_shape chat_shape = { .head = chat_head, .piece = chat_piece, .usage = chat_usage };

/* ---- the handler ---- */

static void job_note(http_request *req, const cmpl_job *j, size_t rendered)
{
	int64_t prompt, completion;
	cmpl_job_token_totals(j, &prompt, &completion);
	snprintf(req->note, sizeof req->note, "chat choices=%d prompt_tokens=%d rendered_bytes=%zu completion_tokens=%lld "
	         "finish=%s regime=%s",
	         j->n_choices, (int)prompt, rendered, (long long)completion,
	         j->n_choices ? (j->choices[0].finish_reason ? j->choices[0].finish_reason : "-") : "-",
	         cmpl_job_regime_name(j));
}

/* The answer to a render that failed: the template's own refusal and its limits are the request's (400), as is a
 * runtime error the messages caused (a type the template did not expect); memory is the server's. */
static enum MHD_Result render_error(http_request *req, jinja_status st, const char *err)
{
	switch (st) {
	case JINJA_ERR_RAISE:
		return http_reply_error(req, 400, "invalid_request_error", "messages", "chat_template_error",
		                        "the chat template refused these messages: %s", err);
	case JINJA_ERR_LIMIT:
		return http_reply_error(req, 400, "invalid_request_error", "messages", "chat_template_limit",
		                        "rendering the chat template for these messages passed its limit: %s", err);
	case JINJA_ERR_MEMORY:
		return http_reply_error(req, 503, "server_error", NULL, NULL, "out of memory rendering the chat template");
	default:
		return http_reply_error(req, 400, "invalid_request_error", "messages", "chat_template_error",
		                        "the chat template cannot render these messages: %s", err);
	}
}

/* A render runs on one of libmicrohttpd's four epoll workers (docs/http-front.md), where every other connection of
 * that worker waits for it: chat requests get a fifth of the interpreter's default steps (2,000,000: 0.27 s of a
 * loop-only template against 0.91 s; Qwen3's template over CHAT_MAX_MESSAGES turns takes ~220,000, docs/chat.md). */
#define CHAT_RENDER_MAX_STEPS 2000000

/* The first call: parses, renders and submits. On success *out is the submitted job and the return value MHD_YES;
 * otherwise *out is NULL and the error was answered. */
static enum MHD_Result chat_start(http_request *req, cmpl_job **out)
{
	*out = NULL;
	server_ctx *s = req->srv;
	if (!s->chat)
		return http_reply_error(req, 400, "invalid_request_error", NULL, "chat_template_missing",
		                        "model '%s' has no chat template (its tokenizer_config.json has no chat_template), so "
		                        "it cannot take chat messages: start aahd with --chat-template FILE (or chat_template "
		                        "in aahd.conf), or send a plain prompt to /v1/completions",
		                        s->model_name);
	char err[1024];
	const char *param;
	chat_request cr;
	completion_limits lim = cmpl_job_limits(s);
	if (chat_request_parse(&cr, req->body, req->body_len, &lim, err, sizeof err, &param) != 0) {
		enum MHD_Result rc = http_reply_error(req, 400, "invalid_request_error", param,
		                                      param ? "invalid_value" : "invalid_json", "%s", err);
		chat_request_free(&cr);
		return rc;
	}
	/* tools: parsed out of the answers in s->tool_fmt; required and a named function constrain the output to calls */
	const bool forced = cr.tools && (cr.tool_choice == CHAT_TOOL_CHOICE_REQUIRED || cr.tool_choice == CHAT_TOOL_CHOICE_NAMED);
	if (forced && s->tool_fmt == TOOL_FORMAT_NONE) {
		chat_request_free(&cr);
		return http_reply_error(req, 400, "invalid_request_error", "tool_choice", "invalid_value",
		                        "'tool_choice' \"required\" or a named function needs a tool-call format, and this "
		                        "server has none (tool_call_parser = %s; auto takes the format from a chat template "
		                        "that writes <tool_call>, [TOOL_CALLS] or <|python_tag|>)",
		                        s->cfg->tool_call_parser);
	}
	if (forced) {
		char *gbnf = tool_calls_gbnf(s->tool_fmt, cr.tools,
		                             cr.tool_choice == CHAT_TOOL_CHOICE_NAMED ? cr.tool_name : NULL, cr.parallel_tools,
		                             err, sizeof err);
		if (!gbnf) {
			chat_request_free(&cr);
			return http_reply_error(req, 400, "invalid_request_error", "tools", "invalid_value", "'tools': %s", err);
		}
		cr.base.constraint = (constraint){ .gbnf = gbnf, .gbnf_len = strlen(gbnf), .field = "tool_choice",
		                                   .kind = "tool_call" };
	}
	if (!chat_template_knows_developer(s->chat))
		chat_request_developer_as_system(&cr);
	char *prompt;
	size_t prompt_len;
	/* a prompt longer than 64 bytes per token of the context can never fit it (real tokens average about 4): the
	 * render stops there rather than hand the tokenizer megabytes it would only refuse */
	jinja_limits limits = { .max_steps = CHAT_RENDER_MAX_STEPS, .max_output = (size_t)s->ctx_len * 64 + 65536 };
	jinja_status st = chat_template_render(s->chat, cr.vars, &limits, &prompt, &prompt_len, err, sizeof err);
	if (st != JINJA_OK) {
		chat_request_free(&cr);
		return render_error(req, st, err);
	}
	/* continue_final_message: the prompt ends with the final message's text, its turn left open */
	if (chat_request_continue_cut(&cr, prompt, prompt_len, &prompt_len) != 0) {
		free(prompt);
		chat_request_free(&cr);
		return http_reply_error(req, 400, "invalid_request_error", "continue_final_message", "chat_template_error",
		                        "continue_final_message: the chat template did not render the final message's text "
		                        "as it is, so there is no place to continue it from");
	}
	prompt[prompt_len] = '\0';
	json_decref(cr.vars);
	cr.vars = NULL;
	cmpl_job *j = cmpl_job_new(req, "chatcmpl-");
	completion_prompt *p = calloc(1, sizeof *p);
	if (!j || !p) {
		free(prompt);
		free(p);
		cmpl_job_discard(j);
		chat_request_free(&cr);
		return http_reply_error(req, 503, "server_error", NULL, NULL, "out of memory");
	}
	/* the job takes the shared fields and the rendered prompt; a chat request's own parts are no longer needed */
	j->req = cr.base;
	j->chat = true;
	/* reasoning_parser = none, or Qwen3's enable_thinking false: all content; else the prompt says how answers begin */
	j->reasoning = !strcmp(s->cfg->reasoning_parser, "none") || cr.thinking_off
	                   ? REASONING_START_OFF
	                   : reasoning_start_of_prompt(prompt, prompt_len);
	/* a forced call's grammar writes the call from the first byte: no think block, even where the prompt opened one */
	if (forced)
		j->reasoning = REASONING_START_OFF;
	j->tools = cr.tools && cr.tool_choice != CHAT_TOOL_CHOICE_NONE ? s->tool_fmt : TOOL_FORMAT_NONE;
	j->tool_parallel = cr.parallel_tools;
	j->markers = format_markers(j->tools, &j->n_markers);
	j->owned_text = prompt;
	p->text = prompt;
	p->text_len = prompt_len;
	j->req.prompts = p;
	j->req.n_prompts = 1;
	return cmpl_job_submit(req, j, out);   /* takes j: on failure it is freed and *out NULL */
}

/* Called again after each wake of a parked request (docs/http-front.md): the first call starts the job and keeps it
 * in req->state, later ones find it there; no call blocks. */
enum MHD_Result api_chat_completions(http_request *req)
{
	cmpl_job *j = cmpl_job_of(req);
	if (!j) {
		enum MHD_Result rc = chat_start(req, &j);
		if (!j)
			return rc;
		if (j->req.stream)
			return completion_stream_start_shaped(req, j, &chat_shape);
		cmpl_job_attach(j, req);
	}
	const int done = cmpl_job_await(j, req);
	if (done <= 0)
		return done == 0 ? MHD_YES : MHD_NO;
	job_note(req, j, j->req.prompts[0].text_len);
	if (j->failed && j->fail_status == 400)
		return http_reply_error(req, 400, "invalid_request_error", j->req.constraint.field, "grammar_failed", "%s",
		                        j->err);
	if (j->failed)
		return http_reply_error(req, 500, "server_error", NULL, NULL, "%s", j->err);
	return http_reply_json(req, 200, response_json(j));
}
