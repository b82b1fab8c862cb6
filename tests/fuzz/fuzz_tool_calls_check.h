/* tests/fuzz/fuzz_tool_calls_check.h — what the three tool-call fuzz targets (fuzz_tool_calls_*.c, one per format)
 * share: any bytes parsed in one piece, byte by byte and split at points drawn from the input must give the same
 * content and calls, and each run's events must reassemble to its final result. */
#ifndef AAH_FUZZ_TOOL_CALLS_CHECK_H
#define AAH_FUZZ_TOOL_CALLS_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tool_calls.h"

/* What the events said so far. */
typedef struct fuzz_streamed {
	char *content;
	size_t content_len, content_cap;
	char **args;
	size_t *args_len;
	int32_t n;
} fuzz_streamed;

static void fuzz_take(fuzz_streamed *st, tool_events *ev)
{
	for (int32_t i = 0; i < ev->n; i++) {
		tool_event *e = &ev->ev[i];
		if (e->kind == TOOL_EVENT_CONTENT) {
			if (st->content_len + e->len > st->content_cap)
				abort();   /* content never outgrows the text */
			memcpy(st->content + st->content_len, e->text, e->len);
			st->content_len += e->len;
		} else if (e->kind == TOOL_EVENT_CALL_BEGIN) {
			if (e->index != st->n)
				abort();
			st->args = realloc(st->args, (size_t)(st->n + 1) * sizeof *st->args);
			st->args_len = realloc(st->args_len, (size_t)(st->n + 1) * sizeof *st->args_len);
			if (!st->args || !st->args_len)
				abort();
			st->args[st->n] = NULL;
			st->args_len[st->n++] = 0;
		} else {
			if (e->index < 0 || e->index >= st->n)
				abort();
			char **a = &st->args[e->index];
			if (!(*a = realloc(*a, st->args_len[e->index] + e->len + 1)))
				abort();
			memcpy(*a + st->args_len[e->index], e->text, e->len);
			st->args_len[e->index] += e->len;
		}
	}
	tool_events_clear(ev);
}

/* One run, in one piece (cut_seed 0) or in pieces of 0 to 8 bytes drawn from cut_seed: its result written out
 * (malloc'd, *out_len bytes); aborts when the events do not rebuild it. */
static char *fuzz_tool_calls_run(tool_format fmt, const uint8_t *data, size_t size, uint64_t cut_seed, size_t *out_len)
{
	tool_parser *p = tool_parser_new(fmt, 9);
	tool_events ev;
	tool_events_init(&ev);
	fuzz_streamed st = { .content = malloc(size + 1), .content_cap = size };
	if (!p || !st.content)
		abort();
	uint64_t s = cut_seed | 1;
	for (size_t at = 0; at < size;) {
		size_t step = size - at;
		if (cut_seed) {
			s ^= s << 13; s ^= s >> 7; s ^= s << 17;
			if (step > s % 9)
				step = s % 9;   /* 0 too: an empty push */
		}
		if (tool_parser_push(p, (const char *)data + at, step, &ev) != 0)
			abort();
		fuzz_take(&st, &ev);
		at += step;
	}
	if (tool_parser_finish(p, &ev) != 0)
		abort();
	fuzz_take(&st, &ev);

	size_t clen;
	const char *content = tool_parser_content(p, &clen);
	if (clen != st.content_len || memcmp(content, st.content, clen) != 0 || tool_parser_n_calls(p) != st.n)
		abort();
	size_t cap = clen + 1, len = clen;
	char *r = malloc(cap);
	if (!r)
		abort();
	memcpy(r, content, clen);
	for (int32_t i = 0; i < st.n; i++) {
		const tool_call *c = tool_parser_call(p, i);
		if (c->arguments_len != st.args_len[i] ||
		    (c->arguments_len && memcmp(c->arguments, st.args[i], c->arguments_len) != 0) ||
		    c->arguments[c->arguments_len] != 0 || !*c->name)
			abort();
		size_t need = len + strlen(c->id) + strlen(c->name) + c->arguments_len + 16;
		if (need > cap && !(r = realloc(r, cap = 2 * need)))
			abort();
		len += (size_t)sprintf(r + len, "\x01%s\x02%s\x03%d%d", c->id, c->name, c->arguments_valid, c->complete);
		memcpy(r + len, c->arguments, c->arguments_len);
		len += c->arguments_len;
		free(st.args[i]);
	}
	free(st.args);
	free(st.args_len);
	free(st.content);
	tool_events_free(&ev);
	tool_parser_free(p);
	*out_len = len;
	return r;
}

static void fuzz_tool_calls_check(tool_format fmt, const uint8_t *data, size_t size)
{
	uint64_t seed = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < size; i++)
		seed = (seed ^ data[i]) * 0x100000001B3ull;
	size_t n1, n2;
	char *whole = fuzz_tool_calls_run(fmt, data, size, 0, &n1);
	for (int r = 0; r < 3; r++) {
		char *split = fuzz_tool_calls_run(fmt, data, size, seed + (uint64_t)r * 7919u, &n2);
		if (n1 != n2 || memcmp(whole, split, n1) != 0)
			abort();
		free(split);
	}
	free(whole);
}

#endif
