/* server/chat_request.c — parses and validates a /v1/chat/completions body (see chat_request.h). Absent and null
 * fields take their defaults; a present field of the wrong type or range is an error naming it; a field whose
 * meaning the server cannot honour (an image part, audio, a strict tool under tool_choice auto) is refused, never ignored. */
#include "server/chat_request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/request_fields.h"

typedef struct chat_ctx {
	chat_request *r;
	json_t *body;
	char *err;
	size_t err_len;
	const char **param;
} chat_ctx;

static int fail(chat_ctx *c, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(chat_ctx *c, const char *param, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, c->err_len, fmt, ap);
	va_end(ap);
	*c->param = param;
	return -1;
}

/* A field name built at run time ("messages[3].content"), kept in r->param. */
static const char *param_of(chat_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *param_of(chat_ctx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->r->param, sizeof c->r->param, fmt, ap);
	va_end(ap);
	return c->r->param;
}

/* The field, or NULL when absent or null. */
static json_t *field(const chat_ctx *c, const char *name)
{
	json_t *v = json_object_get(c->body, name);
	return json_is_null(v) ? NULL : v;
}

/* True when v nests no deeper than `room` more levels of arrays and objects. Recursion is bounded by room. */
static bool depth_ok(const json_t *v, int room)
{
	if (!json_is_array(v) && !json_is_object(v))
		return true;
	if (room == 0)
		return false;
	if (json_is_array(v)) {
		size_t i;
		json_t *e;
		json_array_foreach(v, i, e)
			if (!depth_ok(e, room - 1))
				return false;
		return true;
	}
	const char *k;
	json_t *e;
	json_object_foreach((json_t *)v, k, e)
		if (!depth_ok(e, room - 1))
			return false;
	return true;
}

/* developer is what OpenAI's SDKs send for a system prompt to newer models; a template that does not name it sees
 * system (chat_request_developer_as_system) */
static const char *const roles[] = { "system", "user", "assistant", "tool", "developer" };

/* A content array's text parts joined with "\n" into a new string; any other part is refused by name. */
static int content_join(chat_ctx *c, size_t mi, json_t *parts, json_t **out)
{
	size_t n = json_array_size(parts), total = 0;
	for (size_t k = 0; k < n; k++) {
		json_t *p = json_array_get(parts, k);
		const char *where = param_of(c, "messages[%zu].content[%zu]", mi, k);
		if (!json_is_object(p))
			return fail(c, where, "messages[%zu].content[%zu] must be an object {\"type\": \"text\", \"text\": …}", mi,
			            k);
		json_t *type = json_object_get(p, "type");
		if (!json_is_string(type))
			return fail(c, where, "messages[%zu].content[%zu] has no 'type' string", mi, k);
		if (strcmp(json_string_value(type), "text") != 0)
			return fail(c, where,
			            "messages[%zu].content[%zu] is of type '%.64s': this server takes text parts only (type "
			            "'text')",
			            mi, k, json_string_value(type));
		json_t *text = json_object_get(p, "text");
		if (!json_is_string(text))
			return fail(c, where, "messages[%zu].content[%zu] (type 'text') must have a 'text' string", mi, k);
		total += json_string_length(text) + (k > 0);
	}
	char *joined = malloc(total + 1);
	if (!joined)
		return fail(c, "messages", "out of memory");
	size_t at = 0;
	for (size_t k = 0; k < n; k++) {
		json_t *text = json_object_get(json_array_get(parts, k), "text");
		if (k > 0)
			joined[at++] = '\n';
		memcpy(joined + at, json_string_value(text), json_string_length(text));
		at += json_string_length(text);
	}
	*out = json_stringn_nocheck(joined, at);   /* pieces of valid UTF-8 joined by "\n" are valid UTF-8 */
	free(joined);
	return *out ? 0 : fail(c, "messages", "out of memory");
}

/* Message mi as the template sees it: role and content checked, content parts joined, the rest kept. */
static int message_parse(chat_ctx *c, size_t mi, json_t *m, json_t *out_messages)
{
	if (!json_is_object(m))
		return fail(c, param_of(c, "messages[%zu]", mi), "messages[%zu] must be an object {\"role\", \"content\"}", mi);
	json_t *role = json_object_get(m, "role");
	if (!json_is_string(role))
		return fail(c, param_of(c, "messages[%zu].role", mi), "messages[%zu] has no 'role' string", mi);
	const char *rs = json_string_value(role);
	size_t ri = 0;
	while (ri < sizeof roles / sizeof roles[0] && strcmp(roles[ri], rs) != 0)
		ri++;
	if (ri == sizeof roles / sizeof roles[0] || strlen(rs) != json_string_length(role))
		return fail(c, param_of(c, "messages[%zu].role", mi),
		            "messages[%zu].role '%.64s' is not one of system, developer, user, assistant, tool", mi, rs);
	if (!depth_ok(m, CHAT_MAX_DEPTH))
		return fail(c, param_of(c, "messages[%zu]", mi), "messages[%zu] nests deeper than %d levels", mi,
		            CHAT_MAX_DEPTH);
	json_t *name = json_object_get(m, "name");
	if (name && !json_is_string(name))
		return fail(c, param_of(c, "messages[%zu].name", mi), "messages[%zu].name must be a string", mi);
	json_t *calls = json_object_get(m, "tool_calls");
	if (calls && !json_is_array(calls) && !json_is_null(calls))
		return fail(c, param_of(c, "messages[%zu].tool_calls", mi), "messages[%zu].tool_calls must be an array", mi);
	json_t *content = json_object_get(m, "content");
	json_t *text = NULL;
	bool assistant = ri == 2;
	if (json_is_string(content)) {
		text = json_incref(content);
	} else if (json_is_array(content)) {
		if (content_join(c, mi, content, &text) != 0)
			return -1;
	} else if (content && !json_is_null(content)) {
		return fail(c, param_of(c, "messages[%zu].content", mi),
		            "messages[%zu].content must be a string or an array of text parts", mi);
	} else if (!assistant) {   /* an assistant turn may carry only tool_calls */
		return fail(c, param_of(c, "messages[%zu].content", mi), "messages[%zu] (role '%s') needs a 'content'", mi,
		            rs);
	} else {
		/* an assistant turn of only tool_calls (the SDKs send content null): the template sees "", as vLLM's
		 * string content format gives it; Qwen3's template tests '</think>' in message.content and fails on none */
		text = json_string("");
	}
	/* a copy that shares the unchanged members, in their order (a template's dict order is insertion order);
	 * content replaced by its text ("" for an assistant turn without one) */
	json_t *copy = json_object();
	if (!copy) {
		json_decref(text);
		return fail(c, "messages", "out of memory");
	}
	const char *k;
	json_t *v;
	json_object_foreach(m, k, v)
		json_object_set(copy, k, strcmp(k, "content") != 0 ? v : text);
	json_decref(text);
	return json_array_append_new(out_messages, copy) == 0 ? 0 : fail(c, "messages", "out of memory");
}

static int messages_parse(chat_ctx *c)
{
	json_t *v = field(c, "messages");
	if (!v)
		return fail(c, "messages", "'messages' is required: an array of {\"role\", \"content\"} objects");
	if (!json_is_array(v))
		return fail(c, "messages", "'messages' must be an array of {\"role\", \"content\"} objects");
	size_t n = json_array_size(v);
	if (n == 0)
		return fail(c, "messages", "'messages' must not be empty");
	if (n > CHAT_MAX_MESSAGES)
		return fail(c, "messages", "%zu messages: at most %d in one request", n, CHAT_MAX_MESSAGES);
	json_t *out = json_array();
	if (!out || json_object_set_new(c->r->vars, "messages", out) != 0)
		return fail(c, "messages", "out of memory");
	for (size_t i = 0; i < n; i++)
		if (message_parse(c, i, json_array_get(v, i), out) != 0)
			return -1;
	c->r->n_messages = (int32_t)n;
	return 0;
}

/* Python's str.strip() whitespace, the ASCII part (transformers strips the final message with it) */
static bool blank(char ch)
{
	return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= 0x1c && ch <= 0x1f);
}

/* continue_final_message, as vLLM takes it: the last message must be the assistant's, with text to continue, and an
 * explicit add_generation_prompt true beside it is refused (vLLM's check_generation_prompt: both at once are a
 * contradiction, a new turn and the old one continued). */
static int continue_parse(chat_ctx *c, const json_t *agp)
{
	json_t *v = field(c, "continue_final_message");
	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return fail(c, "continue_final_message", "'continue_final_message' must be true or false");
	c->r->continue_final = json_is_true(v);
	if (!c->r->continue_final)
		return 0;
	if (json_is_true(agp))
		return fail(c, "continue_final_message",
		            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
	json_t *msgs = json_object_get(c->r->vars, "messages");
	json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
	const char *role = json_string_value(json_object_get(last, "role"));
	if (!role || strcmp(role, "assistant") != 0)
		return fail(c, "continue_final_message",
		            "'continue_final_message' continues the final message, which must be the assistant's (it is "
		            "'%s')", role ? role : "?");
	json_t *text = json_object_get(last, "content");
	size_t n = json_string_length(text), a = 0;
	const char *s = json_string_value(text);
	while (s && a < n && blank(s[a]))
		a++;
	if (!s || a == n)
		return fail(c, "continue_final_message",
		            "'continue_final_message' needs text in the final assistant message to continue");
	return 0;
}

/* A tools[] entry's function named name, or NULL. */
static const json_t *tool_named(const json_t *tools, const char *name)
{
	for (size_t i = 0; i < json_array_size(tools); i++) {
		const json_t *fn = json_object_get(json_array_get(tools, i), "function");
		const char *n = json_string_value(json_object_get(fn, "name"));
		if (n && !strcmp(n, name))
			return fn;
	}
	return NULL;
}

/* tool_choice and parallel_tool_calls against tools (their types checked by the caller). required and a named function
 * are enforced by a grammar, so they cannot stand beside another output constraint; strict cannot be enforced where
 * the model may answer in text, so auto with a strict function is refused rather than half honoured. */
static int tools_parse(chat_ctx *c, json_t *tools)
{
	chat_request *r = c->r;
	r->tools = json_array_size(tools) > 0 ? tools : NULL;
	r->parallel_tools = true;
	json_t *par = field(c, "parallel_tool_calls");
	if (par && !json_is_boolean(par))
		return fail(c, "parallel_tool_calls", "'parallel_tool_calls' must be true or false");
	if (par)
		r->parallel_tools = json_is_true(par);
	json_t *v = field(c, "tool_choice");
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		if (!strcmp(s, "none"))
			r->tool_choice = CHAT_TOOL_CHOICE_NONE;
		else if (!strcmp(s, "auto"))
			r->tool_choice = CHAT_TOOL_CHOICE_AUTO;
		else if (!strcmp(s, "required"))
			r->tool_choice = CHAT_TOOL_CHOICE_REQUIRED;
		else
			return fail(c, "tool_choice",
			            "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
			            "\"function\": {\"name\": …}}");
	} else if (v) {
		json_t *type = json_is_object(v) ? json_object_get(v, "type") : NULL;
		json_t *name = json_object_get(json_object_get(v, "function"), "name");
		if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0 || !json_is_string(name))
			return fail(c, "tool_choice",
			            "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": …}}");
		r->tool_choice = CHAT_TOOL_CHOICE_NAMED;
		r->tool_name = json_string_value(name);
		if (!tool_named(r->tools, r->tool_name))
			return fail(c, "tool_choice", "'tool_choice' names function '%.64s', which is not among 'tools'",
			            r->tool_name);
	}
	bool forced = r->tool_choice == CHAT_TOOL_CHOICE_REQUIRED || r->tool_choice == CHAT_TOOL_CHOICE_NAMED;
	if (forced && !r->tools)
		return fail(c, "tool_choice", "'tool_choice' \"required\" or a named function needs 'tools'");
	if (forced && r->base.constraint.gbnf)
		return fail(c, "tool_choice",
		            "'tool_choice' \"required\" or a named function constrains the output to tool calls, so it cannot "
		            "be combined with '%s' (one output constraint per request)",
		            r->base.constraint.field);
	for (size_t i = 0; r->tools && r->tool_choice == CHAT_TOOL_CHOICE_AUTO && i < json_array_size(tools); i++)
		if (json_is_true(json_object_get(json_object_get(json_array_get(tools, i), "function"), "strict")))
			return fail(c, "tools",
			            "tools[%zu] is strict, which cannot be enforced with 'tool_choice' \"auto\" (the model may answer "
			            "in text, and its calls are only parsed, not constrained): set 'tool_choice' to \"required\" "
			            "or name the function, where the arguments are constrained to the schema, or drop 'strict'",
			            i);
	return 0;
}

/* The variables a template may read beyond the messages, as transformers' apply_chat_template passes them: tools and
 * documents are None when not given, add_generation_prompt defaults to true (as vLLM's chat endpoint). */
static int vars_parse(chat_ctx *c)
{
	json_t *vars = c->r->vars;
	json_t *tools = field(c, "tools");
	if (tools && (!json_is_array(tools) || !depth_ok(tools, CHAT_MAX_DEPTH + 1)))
		return fail(c, "tools", "'tools' must be an array of tool objects nesting at most %d levels", CHAT_MAX_DEPTH);
	for (size_t i = 0; tools && i < json_array_size(tools); i++) {
		json_t *t = json_array_get(tools, i), *type = json_is_object(t) ? json_object_get(t, "type") : NULL;
		if (!json_is_object(t))
			return fail(c, "tools", "tools[%zu] must be an object {\"type\": \"function\", \"function\": …}", i);
		if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
			return fail(c, "tools", "tools[%zu]: only tools of \"type\": \"function\" are supported", i);
	}
	if (tools_parse(c, tools) != 0)
		return -1;
	/* tool_choice none hides the tools: the template renders no tool prompt, and no call is looked for */
	json_object_set(vars, "tools", tools && c->r->tool_choice != CHAT_TOOL_CHOICE_NONE ? tools : json_null());
	json_object_set_new(vars, "documents", json_null());
	json_t *agp = field(c, "add_generation_prompt");
	if (agp && !json_is_boolean(agp))
		return fail(c, "add_generation_prompt", "'add_generation_prompt' must be true or false");
	if (continue_parse(c, agp) != 0)
		return -1;
	/* true by default, as in vLLM, unless the final message is continued (which opens no new turn) */
	json_object_set_new(vars, "add_generation_prompt", json_boolean(agp ? json_is_true(agp) : !c->r->continue_final));
	json_t *kw = field(c, "chat_template_kwargs");
	if (!kw)
		return 0;
	if (!json_is_object(kw) || !depth_ok(kw, CHAT_MAX_DEPTH))
		return fail(c, "chat_template_kwargs", "'chat_template_kwargs' must be an object nesting at most %d levels",
		            CHAT_MAX_DEPTH);
	static const char *const reserved[] = { "messages", "tools", "documents", "add_generation_prompt", "bos_token",
	                                        "eos_token" };
	const char *k;
	json_t *v;
	json_object_foreach(kw, k, v) {
		for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
			if (!strcmp(k, reserved[i]))
				return fail(c, "chat_template_kwargs",
				            "chat_template_kwargs may not set '%s' (the request's own fields and the tokenizer set it)",
				            k);
		json_object_set(vars, k, v);
	}
	/* Qwen3's switch: its template renders an empty think block, and the answer is all content (as vLLM's qwen3
	 * parser takes it when thinking is disabled) */
	c->r->thinking_off = json_is_false(json_object_get(kw, "enable_thinking"));
	return 0;
}

/* Fields whose meaning the server cannot honour: refused rather than silently ignored. */
static int unsupported(chat_ctx *c)
{
	json_t *v;
	if (field(c, "functions") || field(c, "function_call"))
		return fail(c, field(c, "functions") ? "functions" : "function_call",
		            "'functions' and 'function_call' (deprecated) are not supported; pass 'tools'");
	if ((v = field(c, "modalities"))) {
		bool text_only = json_is_array(v) && json_array_size(v) >= 1;
		for (size_t i = 0; text_only && i < json_array_size(v); i++)
			text_only = json_is_string(json_array_get(v, i)) && !strcmp(json_string_value(json_array_get(v, i)), "text");
		if (!text_only)
			return fail(c, "modalities", "'modalities' other than [\"text\"] is not supported");
	}
	if (field(c, "audio"))
		return fail(c, "audio", "'audio' output is not supported");
	if (field(c, "prediction"))
		return fail(c, "prediction", "'prediction' is not supported");
	if (field(c, "chat_template"))
		return fail(c, "chat_template",
		            "a request may not carry its own chat template: the server renders the model's (or --chat-template)");
	if ((v = field(c, "echo")) && !json_is_false(v))
		return fail(c, "echo", "'echo' is not supported by chat completions");
	if ((v = field(c, "best_of")) && !(json_is_integer(v) && json_integer_value(v) == c->r->base.n))
		return fail(c, "best_of", "'best_of' other than n is not supported");
	return 0;
}

static int logprobs_parse(chat_ctx *c)
{
	json_t *lp = field(c, "logprobs");
	if (lp && !json_is_boolean(lp))
		return fail(c, "logprobs", "'logprobs' must be true or false (top_logprobs says how many alternatives)");
	c->r->logprobs = json_is_true(lp);
	json_t *top = field(c, "top_logprobs");
	if (!top)
		return 0;
	if (!json_is_integer(top) || json_integer_value(top) < 0 || json_integer_value(top) > CHAT_MAX_TOP_LOGPROBS)
		return fail(c, "top_logprobs", "'top_logprobs' must be an integer in [0, %d]", CHAT_MAX_TOP_LOGPROBS);
	if (!c->r->logprobs && json_integer_value(top) > 0)
		return fail(c, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
	c->r->top_logprobs = (int32_t)json_integer_value(top);
	return 0;
}

int chat_request_parse(chat_request *r, const char *body, size_t len, const completion_limits *lim, char *err,
                       size_t err_len, const char **param)
{
	memset(r, 0, sizeof *r);
	if (completion_request_load(&r->base, body, len, err, err_len, param) != 0)
		return -1;
	chat_ctx c = { r, r->base.json, err, err_len, param };
	r->vars = json_object();
	if (!r->vars)
		return fail(&c, NULL, "out of memory");
	if (request_fields_check(r->base.json, REQUEST_CHAT, err, err_len, param) != 0 ||
	    completion_request_parse_shared(&r->base, lim, err, err_len, param) != 0)
		return -1;
	/* max_completion_tokens is the newer name of max_tokens; given both, it wins, as in vLLM */
	json_t *mct = field(&c, "max_completion_tokens");
	if (mct) {
		if (!json_is_integer(mct) || json_integer_value(mct) < 0 || json_integer_value(mct) > lim->max_tokens)
			return fail(&c, "max_completion_tokens", "'max_completion_tokens' must be an integer in [0, %lld]",
			            (long long)lim->max_tokens);
		r->base.max_tokens = json_integer_value(mct);
	}
	if (messages_parse(&c) != 0 || vars_parse(&c) != 0 || logprobs_parse(&c) != 0 || unsupported(&c) != 0)
		return -1;
	r->base.logprobs = r->logprobs ? r->top_logprobs : -1;   /* what the engine computes: the top-N and the token's */
	return 0;
}

void chat_request_developer_as_system(chat_request *r)
{
	json_t *msgs = json_object_get(r->vars, "messages");
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		const char *role = json_string_value(json_object_get(m, "role"));
		if (role && !strcmp(role, "developer"))
			json_object_set_new(m, "role", json_string("system"));
	}
}

int chat_request_continue_cut(const chat_request *r, const char *prompt, size_t len, size_t *cut)
{
	*cut = len;
	if (!r->continue_final)
		return 0;
	json_t *msgs = json_object_get(r->vars, "messages");
	json_t *text = json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "content");
	const char *s = json_string_value(text);
	size_t n = json_string_length(text);
	if (!s)
		return -1;
	/* transformers: the last occurrence of the stripped text; the cut keeps the text's trailing whitespace when the
	 * prompt has the whole text there (and it has no leading whitespace), else ends at the stripped text */
	size_t a = 0, b = n;
	while (a < b && blank(s[a]))
		a++;
	while (b > a && blank(s[b - 1]))
		b--;
	if (a == b)
		return -1;
	const char *last = NULL;
	for (const char *p = prompt; (p = memmem(p, len - (size_t)(p - prompt), s + a, b - a)); p++)
		last = p;
	if (!last)
		return -1;
	size_t at = (size_t)(last - prompt);
	*cut = at + (a == 0 && len - at >= n && !memcmp(last, s, n) ? n : b - a);
	return 0;
}

void chat_request_free(chat_request *r)
{
	json_decref(r->vars);
	completion_request_free(&r->base);
	memset(r, 0, sizeof *r);
}
