/* server/http_framing.c — see http_framing.h. RFC 9112's framing, strictly: one Content-Length value however often
 * it is repeated, digits only and below 2^64; Transfer-Encoding only as `chunked`, never beside a Content-Length;
 * no line folding, no whitespace before a header's colon, no bare CR; a body or a chunk past max_body refused when
 * its size is read, before any of it. */
#include "server/http_framing.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

enum {
	S_HEAD,
	S_NOBODY,           /* the head is through and there is no body: END comes next */
	S_BODY,             /* Content-Length bytes */
	S_CHUNK_SIZE,       /* hex digits, then optional whitespace */
	S_CHUNK_EXT,        /* ";…" up to the line's end, dropped */
	S_CHUNK_DATA,
	S_CHUNK_CRLF,       /* the line end after a chunk's data */
	S_TRAILER,          /* header lines after the last chunk, dropped */
	S_ERROR,
};

#define CHUNK_LINE_MAX 4096
#define BLANK_LINES_MAX 8

static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_field_byte(unsigned char c)   /* field-vchar, SP, HTAB */
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int hex_value(unsigned char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void fail(http_framing *f, int32_t status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(http_framing *f, int32_t status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(f->message, sizeof f->message, fmt, ap);
	va_end(ap);
	f->status = status;
	f->state = S_ERROR;
}

static void next_request(http_framing *f)
{
	uint64_t max_body = f->max_body;
	f->state = S_HEAD;
	f->started = false;
	f->head_len = 0;
	f->blank_lines = 0;
	f->cr = false;
	f->remaining = f->total = f->chunk_size = 0;
	f->chunk_digits = 0;
	f->line_len = f->trailer_len = 0;
	f->trailer_named = false;
	memset(&f->req, 0, sizeof f->req);
	f->max_body = max_body;
}

void http_framing_init(http_framing *f, uint64_t max_body)
{
	f->max_body = max_body;
	f->status = 0;
	f->message[0] = 0;
	next_request(f);
}

bool http_framing_in_head(const http_framing *f)
{
	return f->state == S_HEAD;
}

/* Appends n bytes at *at (the caller checked the room). */
static void put(char *out, size_t *at, const void *p, size_t n)
{
	memcpy(out + *at, p, n);
	*at += n;
}

/* Body bytes (of a Content-Length body or of a chunk): as many of the n at in as the body still has and out has room
 * for, into out; returns how many (0: none fit, or none are left). */
static size_t take_body(http_framing *f, const char *in, size_t n, char *out, size_t out_cap, size_t *out_len)
{
	size_t take = n;
	if (take > f->remaining)
		take = (size_t)f->remaining;
	if (take > out_cap - *out_len)
		take = out_cap - *out_len;
	put(out, out_len, in, take);
	f->remaining -= take;
	return take;
}

/* Content-Length: digits only, below 2^64. */
static bool parse_length(const char *v, size_t n, uint64_t *out)
{
	uint64_t x = 0;
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return false;
		unsigned d = (unsigned)(v[i] - '0');
		if (x > (UINT64_MAX - d) / 10)
			return false;
		x = x * 10 + d;
	}
	*out = x;
	return true;
}

/* The request line: method SP target SP HTTP/1.x. Writes its canonical form. */
static bool request_line(http_framing *f, const char *s, size_t n, char *out, size_t *at)
{
	const char *sp1 = memchr(s, ' ', n);
	if (!sp1 || sp1 == s) {
		fail(f, 400, "malformed request line");
		return false;
	}
	size_t ml = (size_t)(sp1 - s);
	for (size_t i = 0; i < ml; i++)
		if (!is_tchar((unsigned char)s[i])) {
			fail(f, 400, "malformed request line (method)");
			return false;
		}
	if (ml >= sizeof f->req.method) {
		fail(f, 501, "method not supported");
		return false;
	}
	const char *t = sp1 + 1, *end = s + n;
	const char *sp2 = memchr(t, ' ', (size_t)(end - t));
	if (!sp2 || sp2 == t) {
		fail(f, 400, "malformed request line (target)");
		return false;
	}
	for (const char *p = t; p < sp2; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f) {
			fail(f, 400, "malformed request line (target)");
			return false;
		}
	const char *v = sp2 + 1;
	size_t vl = (size_t)(end - v);
	if (vl != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' || v[7] > '9') {
		fail(f, 400, "malformed request line (version)");
		return false;
	}
	if (v[5] != '1') {
		fail(f, 505, "HTTP version not supported (HTTP/1.0 and HTTP/1.1 are)");
		return false;
	}
	memcpy(f->req.method, s, ml);
	f->req.method[ml] = 0;
	size_t pl = 0;
	while (t + pl < sp2 && t[pl] != '?' && t[pl] != '#' && pl < sizeof f->req.path - 1)
		pl++;
	memcpy(f->req.path, t, pl);
	f->req.path[pl] = 0;
	f->req.minor = v[7] == '0' ? 0 : 1;   /* a later 1.x speaks 1.1 */
	put(out, at, s, (size_t)(sp2 - s) + 1);
	put(out, at, f->req.minor ? "HTTP/1.1\r\n" : "HTTP/1.0\r\n", 10);
	return true;
}

/* The whole head is in f->head (head_len bytes, the last line empty). Checks it and writes its canonical form to
 * out at *at; on an error nothing counts (the caller keeps *at). */
static bool head_finish(http_framing *f, char *out, size_t *at)
{
	size_t pos = 0, w = *at;
	bool first = true, has_length = false;
	int32_t te = 0, fields = 0;
	bool te_chunked = false;
	char te_value[64] = "";
	while (pos < f->head_len) {
		const char *s = f->head + pos;
		const char *nl = memchr(s, '\n', f->head_len - pos);
		size_t n = (size_t)(nl - s);
		pos += n + 1;
		if (n > 0 && s[n - 1] == '\r')
			n--;
		if (n == 0)
			break;   /* the empty line that ends the head */
		if (first) {
			if (!request_line(f, s, n, out, &w))
				return false;
			first = false;
			continue;
		}
		if (s[0] == ' ' || s[0] == '\t') {
			fail(f, 400, "obsolete line folding in the headers");
			return false;
		}
		if (++fields > HTTP_FRAMING_FIELDS_MAX) {
			fail(f, 431, "more than %d header fields", HTTP_FRAMING_FIELDS_MAX);
			return false;
		}
		const char *colon = memchr(s, ':', n);
		if (!colon || colon == s) {
			fail(f, 400, "malformed header line");
			return false;
		}
		size_t nl_name = (size_t)(colon - s);
		for (size_t i = 0; i < nl_name; i++)
			if (!is_tchar((unsigned char)s[i])) {
				fail(f, 400, "malformed header name (whitespace before the colon?)");
				return false;
			}
		const char *v = colon + 1, *ve = s + n;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		size_t vl = (size_t)(ve - v);
		for (size_t i = 0; i < vl; i++)
			if (!is_field_byte((unsigned char)v[i])) {
				fail(f, 400, "a control character in a header value");
				return false;
			}
		if (nl_name == 14 && !strncasecmp(s, "Content-Length", 14)) {
			uint64_t len;
			if (!parse_length(v, vl, &len)) {
				fail(f, 400, "Content-Length '%.*s' is not a number of bytes below 2^64", (int)(vl < 40 ? vl : 40), v);
				return false;
			}
			if (has_length && len != f->req.length) {
				fail(f, 400, "two different Content-Length headers (%llu and %llu)", (unsigned long long)f->req.length,
				     (unsigned long long)len);
				return false;
			}
			if (has_length)
				continue;   /* the same value again: one is enough */
			has_length = true;
			f->req.length = len;
		} else if (nl_name == 17 && !strncasecmp(s, "Transfer-Encoding", 17)) {
			te++;
			te_chunked = vl == 7 && !strncasecmp(v, "chunked", 7);
			snprintf(te_value, sizeof te_value, "%.*s", (int)(vl < 60 ? vl : 60), v);
		} else if (nl_name == 6 && !strncasecmp(s, "Expect", 6)) {
			f->req.expect_continue = vl == 12 && !strncasecmp(v, "100-continue", 12);
		}
		put(out, &w, s, nl_name);
		put(out, &w, ": ", vl ? 2 : 1);
		put(out, &w, v, vl);
		put(out, &w, "\r\n", 2);
	}
	if (te > 0 && (te > 1 || !te_chunked)) {
		fail(f, 501, "Transfer-Encoding '%s' is not supported (only chunked, once)", te_value);
		return false;
	}
	if (te > 0 && has_length) {
		fail(f, 400, "both Transfer-Encoding and Content-Length");
		return false;
	}
	if (te > 0 && f->req.minor == 0) {
		fail(f, 400, "Transfer-Encoding in an HTTP/1.0 request");
		return false;
	}
	f->req.chunked = te > 0;
	if (f->req.length > f->max_body) {
		fail(f, 413, "the body (Content-Length %llu) exceeds max_body_bytes %llu", (unsigned long long)f->req.length,
		     (unsigned long long)f->max_body);
		return false;
	}
	put(out, &w, "\r\n", 2);
	*at = w;
	f->state = f->req.chunked ? S_CHUNK_SIZE : f->req.length ? S_BODY : S_NOBODY;
	f->remaining = f->req.length;
	return true;
}

/* A CR must be followed by an LF. Returns false (failed) for a bare CR; *skip when c is the CR itself. */
static bool line_byte(http_framing *f, unsigned char c, bool *skip)
{
	*skip = false;
	if (f->cr) {
		f->cr = false;
		if (c != '\n') {
			fail(f, 400, "a CR not followed by LF");
			return false;
		}
		return true;
	}
	if (c == '\r') {
		f->cr = true;
		*skip = true;
	}
	return true;
}

size_t http_framing_feed(http_framing *f, const char *in, size_t n, char *out, size_t out_cap, size_t *out_len,
                         http_framing_event *ev)
{
	size_t i = 0;
	*ev = HTTP_FRAMING_MORE;
	while (f->state != S_ERROR) {
		if (f->state == S_NOBODY || (f->state == S_BODY && f->remaining == 0)) {
			next_request(f);
			*ev = HTTP_FRAMING_END;
			return i;
		}
		if (i == n)
			return i;
		if ((f->state == S_CHUNK_SIZE || f->state == S_CHUNK_EXT || f->state == S_CHUNK_CRLF || f->state == S_TRAILER) &&
		    out_cap - *out_len < 24)
			return i;   /* any byte of a chunk line may complete it: room for its canonical form first */
		const unsigned char c = (unsigned char)in[i];
		bool skip;
		switch (f->state) {
		case S_HEAD: {
			if (out_cap - *out_len < HTTP_FRAMING_OUT_MIN)
				return i;   /* the canonical head may need it all */
			if (!line_byte(f, c, &skip))
				break;
			i++;
			if (skip)
				break;
			if (c == 0) {
				fail(f, 400, "a NUL byte in the head");
				break;
			}
			if (f->head_len == 0 && c == '\n') {   /* an empty line before the request line: ignored */
				if (++f->blank_lines > BLANK_LINES_MAX)
					fail(f, 400, "empty lines instead of a request");
				break;
			}
			if (f->head_len + 2 > HTTP_FRAMING_HEAD_MAX) {
				bool line = !memchr(f->head, '\n', f->head_len);
				fail(f, line ? 414 : 431, line ? "the request line is longer than %d bytes"
				                             : "the request head is longer than %d bytes", HTTP_FRAMING_HEAD_MAX);
				break;
			}
			f->started = true;
			f->head[f->head_len++] = (char)c;
			/* lines are stored with LF ends only (line_byte drops the CR of a CRLF): an empty one ends the head */
			if (c == '\n' && f->head_len >= 2 && f->head[f->head_len - 2] == '\n' && head_finish(f, out, out_len)) {
				*ev = HTTP_FRAMING_HEAD;
				return i;
			}
			break;
		}
		case S_BODY: {
			size_t take = take_body(f, in + i, n - i, out, out_cap, out_len);
			if (take == 0)
				return i;
			i += take;
			break;
		}
		case S_CHUNK_SIZE:
		case S_CHUNK_EXT: {
			if (!line_byte(f, c, &skip))
				break;
			if (++f->line_len > CHUNK_LINE_MAX) {
				fail(f, 400, "a chunk-size line longer than %d bytes", CHUNK_LINE_MAX);
				break;
			}
			if (skip) {
				i++;
				break;
			}
			if (c == '\n') {
				if (f->chunk_digits == 0) {
					fail(f, 400, "a chunk without a size");
					break;
				}
				if (f->chunk_size == 0) {
					i++;
					f->state = S_TRAILER;
					f->line_len = 0;
					f->trailer_named = false;
					break;
				}
				i++;
				char line[24];
				int ln = snprintf(line, sizeof line, "%llx\r\n", (unsigned long long)f->chunk_size);
				put(out, out_len, line, (size_t)ln);
				f->total += f->chunk_size;
				f->remaining = f->chunk_size;
				f->state = S_CHUNK_DATA;
				break;
			}
			i++;
			if (f->state == S_CHUNK_EXT) {
				if (!is_field_byte(c))
					fail(f, 400, "a control character in a chunk extension");
				break;
			}
			int d = hex_value(c);
			if (d >= 0 && f->line_len == (size_t)f->chunk_digits + 1) {   /* digits, before any whitespace */
				f->chunk_digits++;
				f->chunk_size = f->chunk_size * 16 + (uint64_t)d;
				if (f->chunk_size > f->max_body - f->total) {   /* as soon as the digits say so */
					fail(f, 413, "a chunk of %llu bytes or more takes the body past max_body_bytes %llu",
					     (unsigned long long)f->chunk_size, (unsigned long long)f->max_body);
					break;
				}
			} else if (f->chunk_digits > 0 && (c == ' ' || c == '\t')) {
				/* whitespace before an extension */
			} else if (f->chunk_digits > 0 && c == ';') {
				f->state = S_CHUNK_EXT;
			} else {
				fail(f, 400, "a malformed chunk size");
			}
			break;
		}
		case S_CHUNK_DATA: {
			size_t take = take_body(f, in + i, n - i, out, out_cap, out_len);
			if (take == 0)
				return i;
			i += take;
			if (f->remaining == 0)
				f->state = S_CHUNK_CRLF;
			break;
		}
		case S_CHUNK_CRLF: {
			if (!line_byte(f, c, &skip))
				break;
			if (skip) {
				i++;
				break;
			}
			if (c != '\n') {
				fail(f, 400, "chunk data longer than its size");
				break;
			}
			i++;
			put(out, out_len, "\r\n", 2);
			f->state = S_CHUNK_SIZE;
			f->chunk_size = 0;
			f->chunk_digits = 0;
			f->line_len = 0;
			break;
		}
		case S_TRAILER: {
			if (!line_byte(f, c, &skip))
				break;
			if (++f->trailer_len > HTTP_FRAMING_HEAD_MAX) {
				fail(f, 431, "the trailer is longer than %d bytes", HTTP_FRAMING_HEAD_MAX);
				break;
			}
			if (skip) {
				i++;
				break;
			}
			if (c == '\n') {
				if (f->line_len == 0) {   /* the empty line: the body is complete */
					i++;
					put(out, out_len, "0\r\n\r\n", 5);
					next_request(f);
					*ev = HTTP_FRAMING_END;
					return i;
				}
				if (!f->trailer_named) {
					fail(f, 400, "a malformed trailer line");
					break;
				}
				i++;
				f->line_len = 0;
				f->trailer_named = false;
				break;
			}
			i++;
			/* a trailer field is dropped, but must look like one: a name of tchars, a colon, a value */
			if (!f->trailer_named && c == ':' && f->line_len > 0)
				f->trailer_named = true;
			else if (!(f->trailer_named ? is_field_byte(c) : is_tchar(c)))
				fail(f, 400, "a malformed trailer line");
			f->line_len++;
			break;
		}
		default:
			return i;
		}
	}
	*ev = HTTP_FRAMING_ERROR;
	return i;
}
