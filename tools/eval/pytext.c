/* tools/eval/pytext.c — Python's str and re semantics over UTF-8 (see pytext.h). Case mappings come from
 * utf8proc, regular expressions from PCRE2 with PCRE2_UTF | PCRE2_UCP (\s, \d, \w as Python 3 reads them). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tools/eval/pytext.h"

#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tools/eval/util.h"

/* One code point from s[0..n); an invalid byte counts as one code point of its own (U+FFFD). */
static size_t utf8_next(const char *s, size_t n, uint32_t *cp)
{
	utf8proc_int32_t c;
	utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &c);
	if (k <= 0) {
		*cp = 0xFFFD;
		return 1;
	}
	*cp = (uint32_t)c;
	return (size_t)k;
}

bool py_isspace(uint32_t c)
{
	/* CPython: the characters of bidirectional type WS, B or S, or category Zs */
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

size_t py_len(const char *s, size_t n)
{
	size_t count = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += utf8_next(s + i, n - i, &cp);
		count++;
	}
	return count;
}

/* Byte offset where trailing whitespace starts. */
size_t py_rstrip_len(const char *s, size_t n)
{
	size_t end = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = utf8_next(s + i, n - i, &cp);
		i += k;
		if (!py_isspace(cp))
			end = i;
	}
	return end;
}

static size_t lstrip_off(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint32_t cp;
		size_t k = utf8_next(s + i, n - i, &cp);
		if (!py_isspace(cp))
			break;
		i += k;
	}
	return i;
}

char *py_strip(const char *s)
{
	size_t n = strlen(s);
	size_t a = lstrip_off(s, n);
	size_t b = a + py_rstrip_len(s + a, n - a);
	return xstrndup(s + a, b - a);
}

char *py_lstrip(const char *s)
{
	size_t n = strlen(s);
	size_t a = lstrip_off(s, n);
	return xstrndup(s + a, n - a);
}

static void add_cp(strbuf *b, uint32_t cp)
{
	utf8proc_uint8_t buf[4];
	utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, buf);
	sb_add(b, (const char *)buf, (size_t)k);
}

static char *map_case(const char *s, bool capitalize)
{
	size_t n = strlen(s);
	strbuf b = {0};
	sb_add(&b, "", 0);
	bool first = true;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = utf8_next(s + i, n - i, &cp);
		if (cp == 0xFFFD && k == 1 && (unsigned char)s[i] >= 0x80)
			sb_add(&b, s + i, 1);   /* keep an invalid byte as it was */
		else
			add_cp(&b, (uint32_t)(capitalize && first ? utf8proc_totitle((utf8proc_int32_t)cp)
			                                           : utf8proc_tolower((utf8proc_int32_t)cp)));
		first = false;
		i += k;
	}
	return sb_take(&b);
}

char *py_capitalize(const char *s)
{
	return map_case(s, true);
}

char *py_lower(const char *s)
{
	return map_case(s, false);
}

char *py_replace(const char *s, const char *old, const char *with)
{
	size_t olen = strlen(old);
	strbuf b = {0};
	sb_add(&b, "", 0);
	if (!olen) {
		sb_adds(&b, s);
		return sb_take(&b);
	}
	const char *p = s;
	for (const char *q; (q = strstr(p, old)); p = q + olen) {
		sb_add(&b, p, (size_t)(q - p));
		sb_adds(&b, with);
	}
	sb_adds(&b, p);
	return sb_take(&b);
}

char *py_remove_punctuation(const char *s)
{
	static const char punct[] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
	strbuf b = {0};
	sb_add(&b, "", 0);
	for (const char *p = s; *p; p++)
		if (!strchr(punct, *p))
			sb_add(&b, p, 1);
	return sb_take(&b);
}

char *py_text_from_json(const char *s, size_t n)
{
	strbuf b = {0};
	sb_add(&b, "", 0);
	for (size_t i = 0; i < n; i++) {
		if (s[i])
			sb_add(&b, s + i, 1);
		else
			sb_add(&b, "\xC0\x80", 2);
	}
	return sb_take(&b);
}

bool py_text_has_nul(const char *s)
{
	return strstr(s, "\xC0\x80") != NULL;
}

json_t *py_text_json(const char *s)
{
	size_t n = strlen(s);
	char *copy = xmalloc(n + 1);
	size_t m = 0;
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		if (c == 0xC0 && (unsigned char)s[i + 1] == 0x80) {
			copy[m++] = 0;
			i += 2;
			continue;
		}
		size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
		utf8proc_int32_t cp;
		if (k == 0 || utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp) != (utf8proc_ssize_t)k) {
			copy[m++] = '?';
			i++;
			continue;
		}
		memcpy(copy + m, s + i, k);
		m += k;
		i += k;
	}
	json_t *j = json_stringn(copy, m);
	free(copy);
	return j ? j : json_string("");
}

struct py_regex {
	pcre2_code *code;
	uint32_t groups;
};

py_regex *py_regex_compile(const char *pattern, char *err, size_t errlen)
{
	int code;
	PCRE2_SIZE at;
	pcre2_code *c = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
	                               PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
	if (!c) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(code, msg, sizeof msg);
		snprintf(err, errlen, "bad regular expression '%s' at %zu: %s", pattern, (size_t)at, (char *)msg);
		return NULL;
	}
	py_regex *re = xcalloc(1, sizeof *re);
	re->code = c;
	pcre2_pattern_info(c, PCRE2_INFO_CAPTURECOUNT, &re->groups);
	return re;
}

void py_regex_free(py_regex *re)
{
	if (!re)
		return;
	pcre2_code_free(re->code);
	free(re);
}

char *py_regex_sub(const py_regex *re, const char *s, const char *with)
{
	size_t n = strlen(s);
	PCRE2_SIZE cap = n + 64;
	for (int tries = 0; tries < 8; tries++) {
		PCRE2_UCHAR *out = xmalloc(cap + 1);
		PCRE2_SIZE got = cap + 1;
		int rc = pcre2_substitute(re->code, (PCRE2_SPTR)s, n, 0,
		                          PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_LITERAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH,
		                          NULL, NULL, (PCRE2_SPTR)with, PCRE2_ZERO_TERMINATED, out, &got);
		if (rc >= 0) {
			out[got] = 0;
			return (char *)out;
		}
		free(out);
		if (rc != PCRE2_ERROR_NOMEMORY)
			break;
		cap = got;
	}
	return xstrdup(s);   /* a subject PCRE2 refuses (never from valid UTF-8) is left as it was */
}

/* Calls fn(ctx, md) for each non-overlapping match in order, as re.finditer does (an empty match is followed by a
 * non-empty attempt at the same place, then by a step of one character). Returns the number of matches. */
static int64_t for_each_match(const py_regex *re, const char *s, void (*fn)(void *, const char *, pcre2_match_data *,
                                                                          uint32_t), void *ctx)
{
	size_t n = strlen(s);
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->code, NULL);
	int64_t count = 0;
	PCRE2_SIZE at = 0;
	uint32_t opts = 0;
	while (at <= n) {
		int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, at, opts, md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH && opts) {
			/* no non-empty match here: step one character and try again normally */
			opts = 0;
			at++;
			while (at < n && ((unsigned char)s[at] & 0xC0) == 0x80)
				at++;
			continue;
		}
		if (rc < 0)
			break;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		if (fn)
			fn(ctx, s, md, re->groups);
		count++;
		opts = ov[0] == ov[1] ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
		at = ov[1];
	}
	pcre2_match_data_free(md);
	return count;
}

typedef struct {
	int want;       /* index of the match to keep */
	int64_t seen;
	char *pick;
	bool tuple;
} pick_ctx;

static char *group_text(const char *s, pcre2_match_data *md, uint32_t g)
{
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
	if (g >= pcre2_get_ovector_count(md) || ov[2 * g] == PCRE2_UNSET)
		return xstrdup("");
	return xstrndup(s + ov[2 * g], ov[2 * g + 1] - ov[2 * g]);
}

static void pick_match(void *vctx, const char *s, pcre2_match_data *md, uint32_t groups)
{
	pick_ctx *c = vctx;
	if (c->seen++ != c->want)
		return;
	if (groups == 0)
		c->pick = group_text(s, md, 0);
	else if (groups == 1)
		c->pick = group_text(s, md, 1);
	else {
		c->tuple = true;
		for (uint32_t g = 1; g <= groups && !c->pick; g++) {
			char *t = group_text(s, md, g);
			if (*t)
				c->pick = t;
			else
				free(t);
		}
	}
}

char *py_regex_filter(const py_regex *re, const char *s, int group_select, const char *fallback)
{
	int64_t n = for_each_match(re, s, NULL, NULL);
	if (n == 0)
		return xstrdup(fallback);
	int64_t want = group_select < 0 ? n + group_select : group_select;
	if (want < 0 || want >= n)
		return xstrdup(fallback);   /* the harness would raise IndexError; an item without it scores as no match */
	pick_ctx c = {(int)want, 0, NULL, false};
	for_each_match(re, s, pick_match, &c);
	if (!c.pick)
		return xstrdup(fallback);   /* a tuple of empty groups */
	char *out = py_strip(c.pick);
	free(c.pick);
	return out;
}

int64_t py_regex_split_count(const py_regex *re, const char *s)
{
	return for_each_match(re, s, NULL, NULL) + 1;
}
