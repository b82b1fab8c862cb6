/* server/tool_calls.c — the tool-call parser of server/tool_calls.h: one state machine fed a byte at a time, so its
 * decisions cannot depend on how the text was split; only the merging of events into pieces does. */
#include "server/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gbnf_text.h"
#include "engine/grammar/json_schema.h"
#include "models/utf8.h"

/* ---- growable byte buffers ---- */

typedef struct tbuf {
	char *s;
	size_t len, cap;
} tbuf;

static int tbuf_put(tbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 32;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *q = realloc(b->s, cap);
		if (!q)
			return -1;
		b->s = q;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = 0;
	return 0;
}

static void tbuf_free(tbuf *b)
{
	free(b->s);
	*b = (tbuf){ 0 };
}

/* ---- events ---- */

void tool_events_init(tool_events *out)
{
	*out = (tool_events){ 0 };
}

void tool_events_clear(tool_events *out)
{
	for (int32_t i = 0; i < out->n; i++)
		free(out->ev[i].text);
	out->n = 0;
}

void tool_events_free(tool_events *out)
{
	tool_events_clear(out);
	free(out->ev);
	*out = (tool_events){ 0 };
}

/* Appends an event, or merges text into the last one when it is of the same kind and call. */
static int events_add(tool_events *out, tool_event_kind kind, int32_t index, const char *id, const char *text,
                      size_t len)
{
	if (kind != TOOL_EVENT_CALL_BEGIN && out->n > 0) {
		tool_event *last = &out->ev[out->n - 1];
		if (last->kind == kind && last->index == index) {
			char *q = realloc(last->text, last->len + len + 1);
			if (!q)
				return -1;
			memcpy(q + last->len, text, len);
			last->len += len;
			q[last->len] = 0;
			last->text = q;
			return 0;
		}
	}
	if (out->n == out->cap) {
		int32_t cap = out->cap ? 2 * out->cap : 8;
		tool_event *ev = realloc(out->ev, (size_t)cap * sizeof *ev);
		if (!ev)
			return -1;
		out->ev = ev;
		out->cap = cap;
	}
	char *t = malloc(len + 1);
	if (!t)
		return -1;
	memcpy(t, text, len);
	t[len] = 0;
	tool_event *e = &out->ev[out->n++];
	*e = (tool_event){ .kind = kind, .index = index, .text = t, .len = len };
	if (id)
		snprintf(e->id, sizeof e->id, "%s", id);
	return 0;
}

/* ---- formats ---- */

tool_format tool_format_from_name(const char *name)
{
	if (!name)
		return TOOL_FORMAT_NONE;
	if (strcmp(name, "hermes") == 0)
		return TOOL_FORMAT_HERMES;
	if (strcmp(name, "llama3_json") == 0)
		return TOOL_FORMAT_LLAMA3_JSON;
	if (strcmp(name, "mistral") == 0)
		return TOOL_FORMAT_MISTRAL;
	return TOOL_FORMAT_NONE;
}

const char *tool_format_name(tool_format fmt)
{
	switch (fmt) {
	case TOOL_FORMAT_HERMES: return "hermes";
	case TOOL_FORMAT_LLAMA3_JSON: return "llama3_json";
	case TOOL_FORMAT_MISTRAL: return "mistral";
	default: return "none";
	}
}

tool_format tool_format_from_template(const char *t)
{
	if (!t)
		return TOOL_FORMAT_NONE;
	if (strstr(t, "[TOOL_CALLS]"))
		return TOOL_FORMAT_MISTRAL;
	if (strstr(t, "<tool_call>"))
		return TOOL_FORMAT_HERMES;
	/* Llama 3.1's own template writes <|python_tag|>; vLLM's JSON variants only the ipython role and header */
	if (strstr(t, "<|python_tag|>") || (strstr(t, "ipython") && strstr(t, "<|start_header_id|>")))
		return TOOL_FORMAT_LLAMA3_JSON;
	return TOOL_FORMAT_NONE;
}

/* ---- the parser ---- */

typedef enum pstate {
	ST_TEXT,        /* content, watching for the format's start marker */
	ST_TEXT_ONLY,   /* llama3_json: the message is no call; all the rest is content */
	ST_LEAD,        /* llama3_json: whitespace at the message's start */
	ST_MARKER_WS,   /* after a start marker, before the call */
	ST_OBJ_KEY,     /* in a call object: a key, or '}' */
	ST_OBJ_KEYSTR,  /* inside a key */
	ST_OBJ_COLON,
	ST_OBJ_VALUE,   /* before a value */
	ST_VALUE,       /* inside a value */
	ST_OBJ_AFTER,   /* after a value: ',' or '}' */
	ST_CALL_DONE,   /* the object closed: hermes awaits </tool_call>, llama3_json a ';' and the next */
	ST_SKIP,        /* after a malformed call: to the format's next marker */
	ST_M_ARRAY,     /* mistral: in the array, before an element, ',' or ']' */
	ST_M_NAME,      /* mistral v11+: the name */
	ST_M_TAG,       /* mistral v11+: a '[' after the name: [ARGS] or [CALL_ID] */
	ST_M_CALLID,    /* mistral v11+: the id after [CALL_ID], skipped */
} pstate;

typedef enum key_kind { KEY_OTHER, KEY_NAME, KEY_ARGS } key_kind;
typedef enum value_kind { VK_CONTAINER, VK_STRING, VK_SCALAR } value_kind;

#define HOLD_MAX 16
#define NAME_MAX_BYTES 256

/* The call being read: it joins the list (calls[n_calls], index n_calls) when its name is known. */
typedef struct cur_call {
	bool began;         /* its name is known and CALL_BEGIN went out */
	bool has_name, has_args;
	bool v11;           /* mistral [TOOL_CALLS]name{…}: the arguments value ends the call */
	bool in_array;      /* mistral: an element of [TOOL_CALLS][…] */
	tbuf name;          /* the name's JSON text (or v11 bytes) */
	tbuf args;
	size_t args_sent;   /* bytes of args already sent as ARGUMENTS */
} cur_call;

struct tool_parser {
	tool_format fmt;
	pstate st;
	bool finished, oom;
	uint64_t rng;
	tool_events *out;   /* of the push in progress */

	char hold[HOLD_MAX];   /* bytes that may start a marker */
	int hold_len;

	tbuf content;           /* the final content */
	tbuf ws_hold;           /* whitespace not yet known to be content */
	bool after_call;        /* content since the last call is whitespace only so far */

	tbuf raw;               /* the text since the block's start marker while no call of the block has begun */
	bool block_began;

	cur_call cur;
	char key[33];           /* the key being read (longer keys are KEY_OTHER) */
	size_t key_len;
	bool key_long, key_esc;
	key_kind vkey;          /* what the value being read is */
	value_kind vkind;
	int32_t vdepth;
	bool vstr, vesc;

	tool_call *calls;
	int32_t n_calls, cap_calls;
};

static void process_byte(tool_parser *p, unsigned char c);

static void put(tool_parser *p, tbuf *b, const char *s, size_t n)
{
	if (tbuf_put(b, s, n) != 0)
		p->oom = true;
}

static void emit(tool_parser *p, tool_event_kind kind, int32_t index, const char *id, const char *s, size_t n)
{
	if (events_add(p->out, kind, index, id, s, n) != 0)
		p->oom = true;
}

static bool is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* One byte of content: whitespace waits until something else follows it. A call next makes it no content (the
 * call drops it); so does a call before it with no content before that, or the end after a call. */
static void content_byte(tool_parser *p, unsigned char c)
{
	if (is_ws(c)) {
		put(p, &p->ws_hold, (const char *)&c, 1);
		return;
	}
	if (p->after_call && !p->content.len)
		p->ws_hold.len = 0;   /* whitespace after a call that no text came before */
	p->after_call = false;
	if (p->ws_hold.len) {
		put(p, &p->content, p->ws_hold.s, p->ws_hold.len);
		emit(p, TOOL_EVENT_CONTENT, -1, NULL, p->ws_hold.s, p->ws_hold.len);
		p->ws_hold.len = 0;
	}
	put(p, &p->content, (const char *)&c, 1);
	emit(p, TOOL_EVENT_CONTENT, -1, NULL, (const char *)&c, 1);
}

static void content_bytes(tool_parser *p, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		content_byte(p, (unsigned char)s[i]);
}

/* ---- ids ---- */

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void make_id(tool_parser *p, char *id)
{
	static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	bool mistral = p->fmt == TOOL_FORMAT_MISTRAL;
	int n = mistral ? 9 : 24, o = 0;
	if (!mistral) {
		memcpy(id, "call_", 5);
		o = 5;
	}
	for (int i = 0; i < n; i++)
		id[o++] = alnum[splitmix(&p->rng) % 62];
	id[o] = 0;
}

/* ---- calls ---- */

static void cur_reset(tool_parser *p)
{
	tbuf_free(&p->cur.name);
	tbuf_free(&p->cur.args);
	p->cur = (cur_call){ 0 };
}

static bool in_scalar_args(const tool_parser *p)
{
	return p->st == ST_VALUE && p->vkey == KEY_ARGS && p->vkind == VK_SCALAR;
}

/* Sends the arguments written since the last send (a scalar value waits for its end: whitespace ends it and is
 * not part of it). */
static void send_args(tool_parser *p, bool force)
{
	cur_call *c = &p->cur;
	if (!c->began || c->args_sent == c->args.len || (!force && in_scalar_args(p)))
		return;
	emit(p, TOOL_EVENT_ARGUMENTS, p->n_calls - 1, NULL, c->args.s + c->args_sent, c->args.len - c->args_sent);
	c->args_sent = c->args.len;
}

static void block_start(tool_parser *p, const char *marker, size_t n)
{
	p->block_began = false;
	p->raw.len = 0;
	put(p, &p->raw, marker, n);
}

/* The name is known: the call joins the list. name: NUL-terminated, malloc'd, taken. */
static void call_begin(tool_parser *p, char *name)
{
	if (p->n_calls == p->cap_calls) {
		int32_t cap = p->cap_calls ? 2 * p->cap_calls : 4;
		tool_call *q = realloc(p->calls, (size_t)cap * sizeof *q);
		if (!q) {
			free(name);
			p->oom = true;
			return;
		}
		p->calls = q;
		p->cap_calls = cap;
	}
	tool_call *tc = &p->calls[p->n_calls++];
	*tc = (tool_call){ .name = name };
	make_id(p, tc->id);
	p->cur.began = true;
	p->block_began = true;
	p->raw.len = 0;
	p->ws_hold.len = 0;   /* whitespace before a call is not content */
	emit(p, TOOL_EVENT_CALL_BEGIN, p->n_calls - 1, tc->id, name, strlen(name));
	send_args(p, false);
}

/* The current call ends: complete when its text ended as the format says. */
static void call_end(tool_parser *p, bool complete)
{
	cur_call *c = &p->cur;
	if (c->began) {
		if (!c->has_args && complete) {
			put(p, &c->args, "{}", 2);
			c->has_args = true;
		}
		send_args(p, true);
		tool_call *tc = &p->calls[p->n_calls - 1];
		tc->arguments = c->args.s ? c->args.s : calloc(1, 1);
		if (!tc->arguments)
			p->oom = true;
		tc->arguments_len = c->args.len;
		c->args = (tbuf){ 0 };
		json_t *j = json_loadb(tc->arguments, tc->arguments_len, 0, NULL);
		tc->arguments_valid = json_is_object(j);
		json_decref(j);
		tc->complete = complete;
		p->after_call = true;
		p->ws_hold.len = 0;
	}
	cur_reset(p);
}

static void call_open(tool_parser *p, bool in_array)
{
	cur_reset(p);
	p->cur.in_array = in_array;
	p->st = ST_OBJ_KEY;
}

/* The text since the block's marker is no call. Before any call of the block began it is content (c, when not
 * consumed, is read again after it); after one began, the rest of the block is skipped. */
static void malformed(tool_parser *p, unsigned char c, bool consumed)
{
	bool began = p->cur.began;
	if (began)
		call_end(p, false);
	else
		cur_reset(p);
	p->hold_len = 0;
	if (!began && !p->block_began) {
		size_t n = p->raw.len - (consumed || !p->raw.len ? 0 : 1);
		p->raw.len = 0;
		p->st = p->fmt == TOOL_FORMAT_LLAMA3_JSON ? ST_TEXT_ONLY : ST_TEXT;
		p->after_call = false;
		content_bytes(p, p->raw.s, n);
	} else {
		p->st = ST_SKIP;
	}
	if (!consumed)
		process_byte(p, c);
}

/* ---- markers ---- */

static const char *const hermes_open[] = { "<tool_call>" };
static const char *const hermes_close[] = { "</tool_call>", "<tool_call>" };
static const char *const mistral_open[] = { "[TOOL_CALLS]" };
static const char *const llama_tag[] = { "<|python_tag|>" };
static const char *const mistral_tags[] = { "[ARGS]", "[CALL_ID]" };

static void marker_hit(tool_parser *p, const char *mark);

/* Text in a state that watches for markers: c joins the held bytes; a whole marker goes to marker_hit, bytes that
 * can start none go to the state's plain handling and the rest are read again. */
static void marked_byte(tool_parser *p, unsigned char c, const char *const *marks, int n_marks)
{
	p->hold[p->hold_len++] = (char)c;
	bool partial = false;
	for (int i = 0; i < n_marks; i++) {
		size_t m = strlen(marks[i]);
		if ((size_t)p->hold_len <= m && memcmp(marks[i], p->hold, (size_t)p->hold_len) == 0) {
			if ((size_t)p->hold_len == m) {
				p->hold_len = 0;
				marker_hit(p, marks[i]);
				return;
			}
			partial = true;
		}
	}
	if (partial)
		return;
	char tmp[HOLD_MAX];
	int n = p->hold_len;
	memcpy(tmp, p->hold, (size_t)n);
	p->hold_len = 0;
	unsigned char first = (unsigned char)tmp[0];
	switch (p->st) {
	case ST_TEXT:
		content_byte(p, first);
		break;
	case ST_LEAD:   /* neither '{' nor <|python_tag|>: no call */
		p->st = ST_TEXT_ONLY;
		content_byte(p, first);
		break;
	case ST_M_TAG:   /* name[ but no tag: the text from [TOOL_CALLS] to before '[' is content, '[' read again */
		if (!p->block_began)
			p->raw.len -= (size_t)n < p->raw.len ? (size_t)n : p->raw.len;
		malformed(p, first, true);
		for (int i = 0; i < n; i++)
			process_byte(p, (unsigned char)tmp[i]);
		return;
	case ST_CALL_DONE:
		if (p->fmt == TOOL_FORMAT_LLAMA3_JSON) {   /* text after the calls */
			p->st = ST_TEXT_ONLY;
			content_byte(p, first);
		}
		break;   /* hermes: bytes between a call's '}' and </tool_call> are dropped */
	default:
		break;   /* ST_SKIP, ST_M_CALLID: bytes between markers are dropped */
	}
	for (int i = 1; i < n; i++)
		process_byte(p, (unsigned char)tmp[i]);
}

static void marker_hit(tool_parser *p, const char *mark)
{
	size_t n = strlen(mark);
	if (strcmp(mark, "</tool_call>") == 0) {
		p->st = ST_TEXT;
		p->after_call = true;
		p->ws_hold.len = 0;
	} else if (strcmp(mark, "<tool_call>") == 0 || strcmp(mark, "[TOOL_CALLS]") == 0) {
		if (p->st == ST_CALL_DONE || p->st == ST_SKIP)
			p->after_call = true;
		block_start(p, mark, n);
		p->st = ST_MARKER_WS;
	} else if (strcmp(mark, "<|python_tag|>") == 0) {
		if (p->st == ST_LEAD)
			block_start(p, mark, n);
		p->st = ST_MARKER_WS;
	} else if (strcmp(mark, "[ARGS]") == 0) {
		p->vkey = KEY_ARGS;
		p->st = ST_OBJ_VALUE;
	} else {   /* [CALL_ID] */
		p->st = ST_M_CALLID;
	}
}

/* ---- values ---- */

static void value_capture(tool_parser *p, unsigned char c)
{
	if (p->vkey == KEY_ARGS) {
		put(p, &p->cur.args, (const char *)&c, 1);
		send_args(p, false);
	} else if (p->vkey == KEY_NAME) {
		if (p->cur.name.len < NAME_MAX_BYTES)
			put(p, &p->cur.name, (const char *)&c, 1);
		else
			p->key_long = true;   /* too long a name: malformed at its end */
	}
}

/* The value just read ends. Returns false when it made the call malformed (already handled). */
static bool value_end(tool_parser *p, unsigned char c)
{
	cur_call *cc = &p->cur;
	if (p->vkey == KEY_NAME) {
		json_t *j = p->key_long ? NULL : json_loadb(cc->name.s, cc->name.len, JSON_DECODE_ANY, NULL);
		const char *s = json_string_value(j);
		char *name = s && *s ? strdup(s) : NULL;
		json_decref(j);
		if (!name) {
			malformed(p, c, true);
			return false;
		}
		cc->has_name = true;
		p->st = ST_OBJ_AFTER;
		call_begin(p, name);
		return true;
	}
	if (p->vkey == KEY_ARGS) {
		cc->has_args = true;
		p->st = ST_OBJ_AFTER;
		send_args(p, false);
		if (cc->v11) {   /* the value ends the call; a delimiter after a scalar is read again as text */
			call_end(p, true);
			p->st = ST_TEXT;
		}
		return true;
	}
	p->st = ST_OBJ_AFTER;
	return true;
}

static void value_start(tool_parser *p, unsigned char c)
{
	if (c == '}' || c == ']' || c == ',' || c == ':' || (c == '<' && p->fmt == TOOL_FORMAT_HERMES)) {
		malformed(p, c, false);
		return;
	}
	p->vdepth = 0;
	p->vstr = p->vesc = false;
	p->key_long = false;
	if (c == '{' || c == '[') {
		p->vkind = VK_CONTAINER;
		p->vdepth = 1;
	} else if (c == '"') {
		p->vkind = VK_STRING;
		p->vstr = true;
	} else {
		p->vkind = VK_SCALAR;
	}
	if (p->vkey == KEY_NAME && p->vkind != VK_STRING) {
		malformed(p, c, false);
		return;
	}
	p->st = ST_VALUE;
	value_capture(p, c);
}

static void value_byte(tool_parser *p, unsigned char c)
{
	if (p->vstr) {
		value_capture(p, c);
		if (p->vesc)
			p->vesc = false;
		else if (c == '\\')
			p->vesc = true;
		else if (c == '"') {
			p->vstr = false;
			if (p->vkind == VK_STRING)
				value_end(p, c);
		}
		return;
	}
	if (p->vkind == VK_SCALAR) {
		if (is_ws(c) || c == ',' || c == '}' || c == ']' || (c == '<' && p->fmt == TOOL_FORMAT_HERMES)) {
			if (value_end(p, c))
				process_byte(p, c);
			return;
		}
		value_capture(p, c);
		return;
	}
	/* a container: '<' outside strings is no JSON, and in hermes it starts the closing tag */
	if (c == '<' && p->fmt == TOOL_FORMAT_HERMES) {
		if (p->cur.began) {
			p->cur.has_args = true;
			call_end(p, false);
			p->st = ST_SKIP;
			process_byte(p, c);
		} else {
			malformed(p, c, false);
		}
		return;
	}
	value_capture(p, c);
	if (c == '"')
		p->vstr = true;
	else if (c == '{' || c == '[')
		p->vdepth++;
	else if ((c == '}' || c == ']') && --p->vdepth == 0)
		value_end(p, c);
}

/* ---- the object ---- */

static void object_close(tool_parser *p, unsigned char c)
{
	if (!p->cur.began) {   /* no name: not a call */
		malformed(p, c, true);
		return;
	}
	bool in_array = p->cur.in_array;
	call_end(p, true);
	if (p->fmt == TOOL_FORMAT_MISTRAL)
		p->st = in_array ? ST_M_ARRAY : ST_TEXT;
	else
		p->st = ST_CALL_DONE;
}

static void key_end(tool_parser *p)
{
	p->key[p->key_len] = 0;
	p->vkey = KEY_OTHER;
	if (!p->key_long) {
		if (strcmp(p->key, "name") == 0 && !p->cur.has_name)
			p->vkey = KEY_NAME;
		else if ((strcmp(p->key, "arguments") == 0 || strcmp(p->key, "parameters") == 0) && !p->cur.has_args)
			p->vkey = KEY_ARGS;
	}
	p->st = ST_OBJ_COLON;
}

static bool is_name_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
	       c == '.';
}

/* mistral v11+: the name before '{' or [ARGS] is complete. */
static bool v11_name_end(tool_parser *p, unsigned char c)
{
	if (!p->cur.name.len) {
		malformed(p, c, false);
		return false;
	}
	char *name = strdup(p->cur.name.s);
	if (!name) {
		p->oom = true;
		return false;
	}
	p->cur.has_name = true;
	p->cur.v11 = true;
	call_begin(p, name);
	return true;
}

static bool in_call_state(pstate st)
{
	return st == ST_MARKER_WS || st == ST_OBJ_KEY || st == ST_OBJ_KEYSTR || st == ST_OBJ_COLON ||
	       st == ST_OBJ_VALUE || st == ST_VALUE || st == ST_OBJ_AFTER || st == ST_M_ARRAY || st == ST_M_NAME ||
	       st == ST_M_TAG || st == ST_M_CALLID;
}

static void process_byte(tool_parser *p, unsigned char c)
{
	if (p->oom)
		return;
	switch (p->st) {
	case ST_TEXT:
		if (p->fmt == TOOL_FORMAT_HERMES)
			marked_byte(p, c, hermes_open, 1);
		else
			marked_byte(p, c, mistral_open, 1);
		break;
	case ST_TEXT_ONLY:
		content_byte(p, c);
		break;
	case ST_LEAD:
		if (is_ws(c) && !p->hold_len) {
			content_byte(p, c);
		} else if (c == '{' && !p->hold_len) {
			block_start(p, "{", 1);
			call_open(p, false);
		} else {
			marked_byte(p, c, llama_tag, 1);
		}
		break;
	case ST_MARKER_WS:
		if (is_ws(c))
			break;
		if (c == '{') {
			call_open(p, false);
		} else if (p->fmt == TOOL_FORMAT_MISTRAL && c == '[') {
			p->st = ST_M_ARRAY;
		} else if (p->fmt == TOOL_FORMAT_MISTRAL && is_name_char(c)) {
			cur_reset(p);
			put(p, &p->cur.name, (const char *)&c, 1);
			p->st = ST_M_NAME;
		} else {
			malformed(p, c, false);
		}
		break;
	case ST_OBJ_KEY:
		if (is_ws(c) || c == ',')
			break;
		if (c == '"') {
			p->key_len = 0;
			p->key_long = p->key_esc = false;
			p->st = ST_OBJ_KEYSTR;
		} else if (c == '}') {
			object_close(p, c);
		} else {
			malformed(p, c, false);
		}
		break;
	case ST_OBJ_KEYSTR:
		if (p->key_esc) {
			p->key_esc = false;
			p->key_long = true;   /* an escaped key is none of ours */
		} else if (c == '\\') {
			p->key_esc = true;
		} else if (c == '"') {
			key_end(p);
		} else if (p->key_len + 1 < sizeof p->key) {
			p->key[p->key_len++] = (char)c;
		} else {
			p->key_long = true;
		}
		break;
	case ST_OBJ_COLON:
		if (is_ws(c))
			break;
		if (c == ':')
			p->st = ST_OBJ_VALUE;
		else
			malformed(p, c, false);
		break;
	case ST_OBJ_VALUE:
		if (!is_ws(c))
			value_start(p, c);
		break;
	case ST_VALUE:
		value_byte(p, c);
		break;
	case ST_OBJ_AFTER:
		if (is_ws(c))
			break;
		if (c == ',')
			p->st = ST_OBJ_KEY;
		else if (c == '}')
			object_close(p, c);
		else
			malformed(p, c, false);
		break;
	case ST_CALL_DONE:
		if (p->fmt == TOOL_FORMAT_HERMES) {
			marked_byte(p, c, hermes_close, 2);
		} else {   /* llama3_json: `;` and whitespace between calls, then '{' or <|python_tag|> */
			if (p->hold_len) {
				marked_byte(p, c, llama_tag, 1);
			} else if (is_ws(c) || c == ';') {
				break;
			} else if (c == '{') {
				call_open(p, false);
			} else if (c == '<') {
				marked_byte(p, c, llama_tag, 1);
			} else {
				p->st = ST_TEXT_ONLY;
				content_byte(p, c);
			}
		}
		break;
	case ST_SKIP:
		if (p->fmt == TOOL_FORMAT_HERMES)
			marked_byte(p, c, hermes_close, 2);
		else if (p->fmt == TOOL_FORMAT_MISTRAL)
			marked_byte(p, c, mistral_open, 1);
		break;   /* llama3_json: the rest of a message whose calls went wrong is dropped */
	case ST_M_ARRAY:
		if (is_ws(c) || c == ',')
			break;
		if (c == '{') {
			call_open(p, true);
		} else if (c == ']') {
			if (!p->block_began) {   /* `[TOOL_CALLS][]`: no call */
				malformed(p, c, true);
				break;
			}
			p->st = ST_TEXT;
			p->after_call = true;
		} else {
			malformed(p, c, false);
		}
		break;
	case ST_M_NAME:
		if (c == '{') {
			if (v11_name_end(p, c)) {
				p->vkey = KEY_ARGS;
				value_start(p, c);
			}
		} else if (c == '[') {
			p->st = ST_M_TAG;
			marked_byte(p, c, mistral_tags, 2);
		} else if (is_name_char(c) && p->cur.name.len < NAME_MAX_BYTES) {
			put(p, &p->cur.name, (const char *)&c, 1);
		} else {
			malformed(p, c, false);
		}
		break;
	case ST_M_TAG:
		marked_byte(p, c, mistral_tags, 2);
		if (p->st == ST_OBJ_VALUE || p->st == ST_M_CALLID) {   /* the tag ended the name */
			pstate next = p->st;
			p->st = ST_M_TAG;
			if (v11_name_end(p, c))
				p->st = next;
		}
		break;
	case ST_M_CALLID:
		if (c == '{' && !p->hold_len) {
			p->vkey = KEY_ARGS;
			value_start(p, c);
		} else if (c == '[' || p->hold_len) {
			marked_byte(p, c, mistral_tags, 1);
		}
		break;
	}
}

tool_parser *tool_parser_new(tool_format fmt, uint64_t seed)
{
	if (fmt != TOOL_FORMAT_HERMES && fmt != TOOL_FORMAT_LLAMA3_JSON && fmt != TOOL_FORMAT_MISTRAL)
		return NULL;
	tool_parser *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->fmt = fmt;
	p->rng = seed;
	p->st = fmt == TOOL_FORMAT_LLAMA3_JSON ? ST_LEAD : ST_TEXT;
	return p;
}

void tool_parser_free(tool_parser *p)
{
	if (!p)
		return;
	for (int32_t i = 0; i < p->n_calls; i++) {
		free(p->calls[i].name);
		free(p->calls[i].arguments);
	}
	free(p->calls);
	cur_reset(p);
	tbuf_free(&p->content);
	tbuf_free(&p->ws_hold);
	tbuf_free(&p->raw);
	free(p);
}

int tool_parser_push(tool_parser *p, const char *text, size_t n, tool_events *out)
{
	if (p->finished || p->oom)
		return -1;
	p->out = out;
	for (size_t i = 0; i < n && !p->oom; i++) {
		/* raw keeps each byte once, as read; bytes read again after a decision are not added twice */
		if (in_call_state(p->st) && !p->block_began)
			put(p, &p->raw, text + i, 1);
		process_byte(p, (unsigned char)text[i]);
	}
	p->out = NULL;
	return p->oom ? -1 : 0;
}

int tool_parser_finish(tool_parser *p, tool_events *out)
{
	if (p->finished || p->oom)
		return -1;
	p->out = out;
	p->finished = true;
	char tmp[HOLD_MAX];
	int n = p->hold_len;
	memcpy(tmp, p->hold, (size_t)n);
	p->hold_len = 0;
	if (p->st == ST_TEXT || p->st == ST_LEAD) {   /* a marker never completed: text */
		content_bytes(p, tmp, (size_t)n);
	} else if (in_call_state(p->st)) {
		if (p->cur.began) {
			call_end(p, false);
		} else if (!p->block_began) {
			size_t len = p->raw.len;
			p->raw.len = 0;
			p->after_call = false;
			content_bytes(p, p->raw.s, len);
		}
		cur_reset(p);
	}
	if (p->ws_hold.len && !p->after_call) {   /* the message's trailing whitespace, after no call */
		put(p, &p->content, p->ws_hold.s, p->ws_hold.len);
		emit(p, TOOL_EVENT_CONTENT, -1, NULL, p->ws_hold.s, p->ws_hold.len);
		p->ws_hold.len = 0;
	}
	p->out = NULL;
	return p->oom ? -1 : 0;
}

const char *tool_parser_content(const tool_parser *p, size_t *len)
{
	if (len)
		*len = p->content.len;
	return p->content.s ? p->content.s : "";
}

int32_t tool_parser_n_calls(const tool_parser *p)
{
	return p->n_calls;
}

const tool_call *tool_parser_call(const tool_parser *p, int32_t i)
{
	return i >= 0 && i < p->n_calls ? &p->calls[i] : NULL;
}

/* ---- the grammar of forced calls ---- */

static bool is_rule_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* Copies the GBNF text g with every rule name, defined or used, given the prefix, so that the rules of several
 * schemas (each with its own root, value, ws, …) live in one grammar. Names are the runs of [A-Za-z0-9_-] outside
 * string literals, character classes, {m,n} counts and comments — json_schema_to_gbnf writes nothing else. */
static int rename_rules(tbuf *out, const char *g, const char *prefix)
{
	size_t plen = strlen(prefix);
	for (const char *s = g; *s;) {
		const char *start = s;
		if (*s == '"' || *s == '[') {
			char close = *s == '"' ? '"' : ']';
			for (s++; *s && *s != close; s++)
				if (*s == '\\' && s[1])
					s++;
			if (*s)
				s++;
		} else if (*s == '{') {
			while (*s && *s != '}')
				s++;
			if (*s)
				s++;
		} else if (*s == '#') {
			while (*s && *s != '\n')
				s++;
		} else if (is_rule_char(*s)) {
			while (is_rule_char(*s))
				s++;
			if (tbuf_put(out, prefix, plen) != 0)
				return -1;
		} else {
			s++;
		}
		if (tbuf_put(out, start, (size_t)(s - start)) != 0)
			return -1;
	}
	return 0;
}

/* s (UTF-8, as every JSON string is) as the inside of a GBNF string literal (gbnf_literal_cp's spelling). */
static int gbnf_escape(tbuf *out, const char *s)
{
	const size_t n = strlen(s);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += (size_t)aah_utf8_next((const unsigned char *)s + i, n - i, &cp);
		char tmp[12];
		if (tbuf_put(out, tmp, (size_t)gbnf_literal_cp(tmp, cp)) != 0)
			return -1;
	}
	return 0;
}

static int put_str(tbuf *out, const char *s)
{
	return tbuf_put(out, s, strlen(s));
}

/* One function's rules: `fK-call ::= "{\"name\": \"NAME\", \"KEY\": " fK-root "}"` and its schema's rules. */
static int function_rules(tbuf *g, tool_format fmt, int k, const char *name, const json_t *params, char *err,
                          size_t err_len)
{
	json_t *any = NULL;
	if (!params)
		params = any = json_pack("{s:s}", "type", "object");
	char serr[256] = "";
	char *schema = params ? json_schema_to_gbnf(params, serr, sizeof serr) : NULL;
	json_decref(any);
	if (!schema) {
		snprintf(err, err_len, "the parameters of function '%s': %s", name, *serr ? serr : "out of memory");
		return -1;
	}
	json_t *js = json_string(name);
	char *quoted = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
	json_decref(js);
	char prefix[24];
	snprintf(prefix, sizeof prefix, "f%d-", k);
	char head[64];
	snprintf(head, sizeof head, "%scall ::= \"{\\\"name\\\": ", prefix);
	int rc = quoted ? 0 : -1;
	rc = rc || put_str(g, head) || gbnf_escape(g, quoted) ||
	     put_str(g, fmt == TOOL_FORMAT_LLAMA3_JSON ? ", \\\"parameters\\\": \" " : ", \\\"arguments\\\": \" ") ||
	     put_str(g, prefix) || put_str(g, "root \"}\"\n") || rename_rules(g, schema, prefix) || put_str(g, "\n");
	free(quoted);
	free(schema);
	if (rc)
		snprintf(err, err_len, "out of memory");
	return rc ? -1 : 0;
}

char *tool_calls_gbnf(tool_format fmt, const json_t *tools, const char *only_name, bool parallel, char *err,
                      size_t err_len)
{
	if (fmt != TOOL_FORMAT_HERMES && fmt != TOOL_FORMAT_LLAMA3_JSON && fmt != TOOL_FORMAT_MISTRAL) {
		snprintf(err, err_len, "no tool-call format");
		return NULL;
	}
	if (!json_is_array(tools) || json_array_size(tools) == 0) {
		snprintf(err, err_len, "'tools' must be a non-empty array");
		return NULL;
	}
	tbuf g = { 0 }, body = { 0 };
	int n = 0;
	for (size_t i = 0; i < json_array_size(tools); i++) {
		const json_t *fn = json_object_get(json_array_get(tools, i), "function");
		const char *name = json_string_value(json_object_get(fn, "name"));
		if (!name || !*name) {
			snprintf(err, err_len, "tools[%zu] has no function name", i);
			goto fail;
		}
		if (only_name && strcmp(name, only_name) != 0)
			continue;
		if (function_rules(&g, fmt, n, name, json_object_get(fn, "parameters"), err, err_len) != 0)
			goto fail;
		char alt[40];
		snprintf(alt, sizeof alt, "%sf%d-call", n ? " | " : "", n);
		if (put_str(&body, alt) != 0)
			goto oom;
		n++;
	}
	if (n == 0) {
		snprintf(err, err_len, "no function named '%s' in 'tools'", only_name ? only_name : "");
		goto fail;
	}
	const char *root;
	switch (fmt) {
	case TOOL_FORMAT_HERMES:
		root = parallel ? "root ::= call ( \"\\n\" call )*\ncall ::= \"<tool_call>\\n\" body \"\\n</tool_call>\"\n"
		                : "root ::= \"<tool_call>\\n\" body \"\\n</tool_call>\"\n";
		break;
	case TOOL_FORMAT_LLAMA3_JSON:
		root = parallel ? "root ::= body ( \"; \" body )*\n" : "root ::= body\n";
		break;
	default:
		root = parallel ? "root ::= \"[TOOL_CALLS][\" body ( \", \" body )* \"]\"\n"
		                : "root ::= \"[TOOL_CALLS][\" body \"]\"\n";
		break;
	}
	tbuf whole = { 0 };
	if (put_str(&whole, root) || put_str(&whole, "body ::= ") || tbuf_put(&whole, body.s, body.len) ||
	    put_str(&whole, "\n") || tbuf_put(&whole, g.s, g.len)) {
		tbuf_free(&whole);
		goto oom;
	}
	tbuf_free(&g);
	tbuf_free(&body);
	return whole.s;
oom:
	snprintf(err, err_len, "out of memory");
fail:
	tbuf_free(&g);
	tbuf_free(&body);
	return NULL;
}
