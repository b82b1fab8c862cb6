/* engine/grammar/json_schema_text.c — the GBNF text of the JSON Schema converter (json_schema_internal.h): the fixed
 * rules, JSON values and characters in canonical form, sets of code points, a regex's rules rewritten to match
 * JSON-encoded text, and integer ranges as decimal numerals. None of it knows schemas. */
#include "engine/grammar/json_schema_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gbnf_text.h"
#include "engine/grammar/json_schema.h"

/* ---- the fixed rules ---- */

/* Any JSON value (RFC 8259), with the digit bounds and the whitespace policy json_schema.c's head states. char: one
 * character of a free string, a surrogate pair being one (a lone surrogate is no character). kchar: one character in
 * its canonical form (kesc its escapes, kctl those of the controls); ktail: the rest of a key after a prefix that
 * already differs from every declared name. */
#define G_VALUE "object | array | string | number | boolean | null"
#define G_OBJECT "\"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\""
#define G_MEMBER "string ws \":\" ws value"
#define G_ARRAY "\"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\""
#define G_STRING "\"\\\"\" char* \"\\\"\""
#define G_CHAR "[^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] hex{3} | [dD] [0-7] hex{2} | " \
	"[dD] [89abAB] hex{2} \"\\\\u\" [dD] [c-fC-F] hex{2} ) )"
#define G_HEX "[0-9a-fA-F]"
#define G_EXP "( [eE] [-+]? [0-9]{1,3} )?"
#define G_NUMBER "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? " G_EXP
#define G_INTEGER "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )"
#define G_BOOLEAN "\"true\" | \"false\""
#define G_NULL "\"null\""
#define G_WS "( \" \" | \"\\n\" [ \\t]{0,40} )?"
#define G_KCHAR "[^\"\\\\\\x00-\\x1f] | kesc"
#define G_KESC "\"\\\\\" [\"\\\\] | kctl"
#define G_KCTL "\"\\\\\" [bfnrt] | \"\\\\u00\" ( \"0\" [0-7bBeEfF] | \"1\" hex )"
#define G_KTAIL "kchar* \"\\\"\""
/* An unsigned numeral whose value is 0, and one whose value is above 0 (a fraction of 16 digits not all zero), for
 * number with the bounds 0 — the only numeric bounds on `number` that a grammar of decimal numerals keeps exactly. */
#define G_NUMBER_ZERO "\"0\" ( \".\" \"0\"{1,16} )? " G_EXP
#define G_NUMBER_POS "( [1-9] [0-9]{0,15} ( \".\" [0-9]{1,16} )? | \"0.\" ( [1-9] [0-9]{0,15} | \"0\" [1-9] [0-9]{0,14} | " \
	"\"0\"{2} [1-9] [0-9]{0,13} | \"0\"{3} [1-9] [0-9]{0,12} | \"0\"{4} [1-9] [0-9]{0,11} | \"0\"{5} [1-9] [0-9]{0,10} | " \
	"\"0\"{6} [1-9] [0-9]{0,9} | \"0\"{7} [1-9] [0-9]{0,8} | \"0\"{8} [1-9] [0-9]{0,7} | \"0\"{9} [1-9] [0-9]{0,6} | " \
	"\"0\"{10} [1-9] [0-9]{0,5} | \"0\"{11} [1-9] [0-9]{0,4} | \"0\"{12} [1-9] [0-9]{0,3} | \"0\"{13} [1-9] [0-9]{0,2} | " \
	"\"0\"{14} [1-9] [0-9]? | \"0\"{15} [1-9] ) ) " G_EXP
/* RFC 3339 full-date, years 0001-9999, the days of each month, 29 February in leap years only (divisible by 4 and
 * not by 100, or by 400). */
#define G_DATE "( \"000\" [1-9] | \"00\" [1-9] [0-9] | \"0\" [1-9] [0-9]{2} | [1-9] [0-9]{3} ) \"-\" ( " \
	"( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | " \
	"( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | " \
	"\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | " \
	"( [0-9]{2} ( [02468] [48] | [13579] [26] | [2468] \"0\" ) | ( \"0\" [48] | [2468] [048] | [13579] [26] ) \"00\" ) " \
	"\"-02-29\""
/* RFC 3339 full-time: the offset is required. */
#define G_TIME "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? " \
	"( [Zz] | [-+] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"
#define G_QUOTED(x) "\"\\\"\" " x " \"\\\"\""


#define B(p) (1u << (p))
const js_prim_rule js_prims[PR_COUNT] = {
	[PR_VALUE] = { "value", G_VALUE, B(PR_OBJECT) | B(PR_ARRAY) | B(PR_STRING) | B(PR_NUMBER) | B(PR_BOOLEAN) | B(PR_NULL) },
	[PR_OBJECT] = { "object", G_OBJECT, B(PR_WS) | B(PR_MEMBER) },
	[PR_MEMBER] = { "member", G_MEMBER, B(PR_STRING) | B(PR_WS) | B(PR_VALUE) },
	[PR_ARRAY] = { "array", G_ARRAY, B(PR_WS) | B(PR_VALUE) },
	[PR_STRING] = { "string", G_STRING, B(PR_CHAR) },
	[PR_CHAR] = { "char", G_CHAR, B(PR_HEX) },
	[PR_HEX] = { "hex", G_HEX, 0 },
	[PR_NUMBER] = { "number", G_NUMBER, 0 },
	[PR_INTEGER] = { "integer", G_INTEGER, 0 },
	[PR_BOOLEAN] = { "boolean", G_BOOLEAN, 0 },
	[PR_NULL] = { "null", G_NULL, 0 },
	[PR_WS] = { "ws", G_WS, 0 },
	[PR_KCHAR] = { "kchar", G_KCHAR, B(PR_KESC) },
	[PR_KESC] = { "kesc", G_KESC, B(PR_KCTL) },
	[PR_KCTL] = { "kctl", G_KCTL, B(PR_HEX) },
	[PR_KTAIL] = { "ktail", G_KTAIL, B(PR_KCHAR) },
	[PR_NUMBER_ZERO] = { "number-zero", G_NUMBER_ZERO, 0 },
	[PR_NUMBER_POS] = { "number-pos", G_NUMBER_POS, 0 },
	[PR_DATE] = { "date", G_DATE, 0 },
	[PR_TIME] = { "time", G_TIME, 0 },
	[PR_DATE_STRING] = { "date-string", G_QUOTED("date"), B(PR_DATE) },
	[PR_TIME_STRING] = { "time-string", G_QUOTED("time"), B(PR_TIME) },
	[PR_DATE_TIME_STRING] = { "date-time-string", G_QUOTED("date [Tt] time"), B(PR_DATE) | B(PR_TIME) },
	[PR_UUID_STRING] = { "uuid-string", G_QUOTED("hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}"), B(PR_HEX) },
};
#undef B

const char *json_object_gbnf(void)
{
	return "root ::= object\n"
	       "value ::= " G_VALUE "\n"
	       "object ::= " G_OBJECT "\n"
	       "member ::= " G_MEMBER "\n"
	       "array ::= " G_ARRAY "\n"
	       "string ::= " G_STRING "\n"
	       "char ::= " G_CHAR "\n"
	       "hex ::= " G_HEX "\n"
	       "number ::= " G_NUMBER "\n"
	       "boolean ::= " G_BOOLEAN "\n"
	       "null ::= " G_NULL "\n"
	       "ws ::= " G_WS "\n";
}

/* ---- text building ---- */

void js_put(aah_bytebuf *b, const char *s, size_t n)
{
	aah_bytebuf_put(b, s, n);
}

void js_puts(aah_bytebuf *b, const char *s)
{
	aah_bytebuf_put(b, s, strlen(s));
}

void js_printf(aah_bytebuf *b, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof small) {
		aah_bytebuf_put(b, small, (size_t)n);
		return;
	}
	char *big = malloc((size_t)n + 1);
	if (!big) {
		b->oom = true;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	aah_bytebuf_put(b, big, (size_t)n);
	free(big);
}

/* x repeated lo..hi times (hi < 0: no bound), written the shortest way; "" for exactly none. */
void js_repeat(aah_bytebuf *b, const char *x, int64_t lo, int64_t hi)
{
	if (hi == 0)
		return;
	if (hi < 0) {
		if (lo == 0)
			js_printf(b, "%s*", x);
		else if (lo == 1)
			js_printf(b, "%s+", x);
		else
			js_printf(b, "%s{%" PRId64 ",}", x, lo);
	} else if (lo == hi) {
		if (lo == 1)
			js_puts(b, x);
		else
			js_printf(b, "%s{%" PRId64 "}", x, lo);
	} else if (lo == 0 && hi == 1) {
		js_printf(b, "%s?", x);
	} else {
		js_printf(b, "%s{%" PRId64 ",%" PRId64 "}", x, lo, hi);
	}
}

/* Whether the expression is one item (a rule name or one literal), safe to put anywhere. */
bool js_is_atom(const char *e)
{
	if (*e == '"') {
		const char *p = e + 1;
		while (*p && *p != '"')
			p += (*p == '\\' && p[1]) ? 2 : 1;
		return *p == '"' && p[1] == 0;
	}
	for (const char *p = e; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-'))
			return false;
	return *e != 0;
}

/* ---- JSON text as GBNF ---- */

/* Canonical JSON writes these characters escaped. */
static bool json_special(uint32_t cp)
{
	return cp < 0x20 || cp == '"' || cp == '\\';
}


static void em_open(js_emitter *e)
{
	if (e->in_lit)
		return;
	if (e->items)
		js_put(e->b, " ", 1);
	js_put(e->b, "\"", 1);
	e->in_lit = true;
	e->items++;
}

void js_em_close(js_emitter *e)
{
	if (e->in_lit)
		js_put(e->b, "\"", 1);
	e->in_lit = false;
}

/* text is literal content, already GBNF-escaped */
static void em_text(js_emitter *e, const char *text)
{
	em_open(e);
	js_puts(e->b, text);
}

static void em_item(js_emitter *e, const char *item)
{
	js_em_close(e);
	if (e->items)
		js_put(e->b, " ", 1);
	js_puts(e->b, item);
	e->items++;
}

/* A code point inside a GBNF literal. */
static void em_cp(js_emitter *e, uint32_t cp)
{
	em_open(e);
	char t[12];
	js_put(e->b, t, (size_t)gbnf_literal_cp(t, cp));
}

/* The canonical JSON escape of a special character, as GBNF. */
static void em_escape(js_emitter *e, uint32_t cp)
{
	static const char *const short_esc[] = { ['"'] = "\\\\\\\"", ['\\'] = "\\\\\\\\", ['\b'] = "\\\\b",
		                                   ['\f'] = "\\\\f", ['\n'] = "\\\\n", ['\r'] = "\\\\r", ['\t'] = "\\\\t" };
	if (cp < sizeof short_esc / sizeof *short_esc && short_esc[cp]) {
		em_text(e, short_esc[cp]);
		return;
	}
	static const char hexd[] = "0123456789abcdef";
	char t[16];
	snprintf(t, sizeof t, "\\\\u00%c", hexd[cp >> 4]);
	em_text(e, t);
	unsigned lo = cp & 15;
	if (lo < 10) {
		snprintf(t, sizeof t, "%c", hexd[lo]);
		em_text(e, t);
	} else {
		snprintf(t, sizeof t, "[%c%c]", hexd[lo], hexd[lo] - 'a' + 'A');
		em_item(e, t);
	}
}

void js_em_json_cp(js_emitter *e, uint32_t cp)
{
	if (json_special(cp))
		em_escape(e, cp);
	else
		em_cp(e, cp);
}

/* One UTF-8 character of s (valid UTF-8: jansson checks it); returns its length. */
size_t js_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned char b0 = s[0];
	size_t len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
	if (len > n) {
		*cp = 0xFFFD;
		return 1;
	}
	uint32_t v = len == 1 ? b0 : len == 2 ? (b0 & 0x1Fu) : len == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
	for (size_t i = 1; i < len; i++)
		v = (v << 6) | (s[i] & 0x3Fu);
	*cp = v;
	return len;
}

/* A JSON string in canonical form, quotes included. */
void js_em_json_string(js_emitter *e, const char *s, size_t n)
{
	em_text(e, "\\\"");
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += js_utf8_next((const unsigned char *)s + i, n - i, &cp);
		js_em_json_cp(e, cp);
	}
	em_text(e, "\\\"");
}

/* A double the way Python's repr writes it (the shortest digits that read back the same; positional between 1e-4
 * and 1e16, else d.ddde±XX), so const and enum numbers match json.dumps. */
static void format_real(double v, char *out, size_t cap)
{
	char tmp[64];
	int prec = 1;
	for (; prec <= 17; prec++) {
		snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	bool neg = tmp[0] == '-';
	const char *p = tmp + neg;
	char digits[32];
	size_t nd = 0;
	for (; *p && *p != 'e'; p++)
		if (*p >= '0' && *p <= '9')
			digits[nd++] = *p;
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = 0;
	int exp = *p == 'e' ? atoi(p + 1) : 0;
	size_t o = 0;
#define OUT(ch) do { if (o + 1 < cap) out[o++] = (ch); } while (0)
	if (neg)
		OUT('-');
	if (exp >= -4 && exp < 16) {
		if (exp < 0) {
			OUT('0');
			OUT('.');
			for (int i = 0; i < -exp - 1; i++)
				OUT('0');
			for (size_t i = 0; i < nd; i++)
				OUT(digits[i]);
		} else {
			for (int i = 0; i <= exp; i++)
				OUT((size_t)i < nd ? digits[i] : '0');
			OUT('.');
			if ((size_t)exp + 1 < nd)
				for (size_t i = (size_t)exp + 1; i < nd; i++)
					OUT(digits[i]);
			else
				OUT('0');
		}
	} else {
		OUT(digits[0]);
		if (nd > 1) {
			OUT('.');
			for (size_t i = 1; i < nd; i++)
				OUT(digits[i]);
		}
		char e[16];
		snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
		for (char *q = e; *q; q++)
			OUT(*q);
	}
#undef OUT
	out[o] = 0;
}

/* A JSON value as the GBNF of its canonical text, with ws between tokens. */
void js_em_value(js_emitter *e, const json_t *v)
{
	char num[64];
	switch (json_typeof(v)) {
	case JSON_NULL:
		em_text(e, "null");
		break;
	case JSON_TRUE:
		em_text(e, "true");
		break;
	case JSON_FALSE:
		em_text(e, "false");
		break;
	case JSON_INTEGER:
		snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		em_text(e, num);
		break;
	case JSON_REAL:
		format_real(json_real_value(v), num, sizeof num);
		em_text(e, num);
		break;
	case JSON_STRING:
		js_em_json_string(e, json_string_value(v), json_string_length(v));
		break;
	case JSON_ARRAY:
		em_text(e, "[");
		em_item(e, js_prims[PR_WS].name);
		*e->prims |= 1u << PR_WS;
		for (size_t i = 0; i < json_array_size(v); i++) {
			if (i) {
				em_text(e, ",");
				em_item(e, "ws");
			}
			js_em_value(e, json_array_get(v, i));
			em_item(e, "ws");
		}
		em_text(e, "]");
		break;
	case JSON_OBJECT: {
		const char *k;
		json_t *m;
		size_t i = 0;
		em_text(e, "{");
		em_item(e, js_prims[PR_WS].name);
		*e->prims |= 1u << PR_WS;
		json_object_foreach((json_t *)v, k, m) {
			if (i++) {
				em_text(e, ",");
				em_item(e, "ws");
			}
			js_em_json_string(e, k, strlen(k));
			em_item(e, "ws");
			em_text(e, ":");
			em_item(e, "ws");
			js_em_value(e, m);
			em_item(e, "ws");
		}
		em_text(e, "}");
		break;
	}
	}
}

/* JSON Schema's equality: numbers by value (1 equals 1.0), objects whatever their key order. */
bool js_value_equal(const json_t *a, const json_t *b)
{
	if (json_is_number(a) && json_is_number(b)) {
		if (json_is_integer(a) && json_is_integer(b))
			return json_integer_value(a) == json_integer_value(b);
		if (json_is_real(a) && json_is_real(b))
			return json_real_value(a) == json_real_value(b);
		const json_t *i = json_is_integer(a) ? a : b, *r = json_is_integer(a) ? b : a;
		double d = json_real_value(r);
		return d == floor(d) && fabs(d) < 9.2e18 && (json_int_t)d == json_integer_value(i);
	}
	if (json_typeof(a) != json_typeof(b))
		return false;
	switch (json_typeof(a)) {
	case JSON_STRING:
		return json_string_length(a) == json_string_length(b) &&
		       memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
	case JSON_ARRAY:
		if (json_array_size(a) != json_array_size(b))
			return false;
		for (size_t i = 0; i < json_array_size(a); i++)
			if (!js_value_equal(json_array_get(a, i), json_array_get(b, i)))
				return false;
		return true;
	case JSON_OBJECT: {
		if (json_object_size(a) != json_object_size(b))
			return false;
		const char *k;
		json_t *m;
		json_object_foreach((json_t *)a, k, m) {
			const json_t *o = json_object_get(b, k);
			if (!o || !js_value_equal(m, o))
				return false;
		}
		return true;
	}
	default:
		return true;
	}
}

unsigned js_value_type(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_NULL: return T_NULL;
	case JSON_TRUE:
	case JSON_FALSE: return T_BOOLEAN;
	case JSON_OBJECT: return T_OBJECT;
	case JSON_ARRAY: return T_ARRAY;
	case JSON_STRING: return T_STRING;
	case JSON_INTEGER: return T_NUMBER | T_INTEGER;
	case JSON_REAL: {
		double d = json_real_value(v);
		return d == floor(d) ? T_NUMBER | T_INTEGER : T_NUMBER;
	}
	}
	return 0;
}

/* ---- code point sets (for a pattern's classes and the keys beside the declared ones) ---- */

void js_rset_add(js_rset *s, uint32_t lo, uint32_t hi)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		js_range *r = realloc(s->r, cap * sizeof *r);
		if (!r) {
			s->oom = true;
			return;
		}
		s->r = r;
		s->cap = cap;
	}
	s->r[s->n++] = (js_range){ lo, hi };
}

static int range_cmp(const void *a, const void *b)
{
	const js_range *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void js_rset_norm(js_rset *s)
{
	if (!s->n)
		return;
	qsort(s->r, s->n, sizeof *s->r, range_cmp);
	size_t o = 0;
	for (size_t i = 1; i < s->n; i++) {
		if (s->r[i].lo <= s->r[o].hi + 1) {
			if (s->r[i].hi > s->r[o].hi)
				s->r[o].hi = s->r[i].hi;
		} else {
			s->r[++o] = s->r[i];
		}
	}
	s->n = o + 1;
}

/* The code points of [0, JS_CP_MAX] not in s (s normalized). */
js_rset js_rset_complement(const js_rset *s)
{
	js_rset o = { 0 };
	uint32_t next = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (s->r[i].lo > next)
			js_rset_add(&o, next, s->r[i].lo - 1);
		next = s->r[i].hi + 1;
	}
	if (next <= JS_CP_MAX)
		js_rset_add(&o, next, JS_CP_MAX);
	o.oom |= s->oom;
	return o;
}

static bool rset_has(const js_rset *s, uint32_t cp)
{
	for (size_t i = 0; i < s->n; i++)
		if (cp >= s->r[i].lo && cp <= s->r[i].hi)
			return true;
	return false;
}

static void class_cp(aah_bytebuf *b, uint32_t cp)
{
	char t[12];
	js_put(b, t, (size_t)gbnf_class_cp(t, cp));
}

static void class_ranges(aah_bytebuf *b, const js_rset *s)
{
	for (size_t i = 0; i < s->n; i++) {
		class_cp(b, s->r[i].lo);
		if (s->r[i].hi == s->r[i].lo)
			continue;
		if (s->r[i].hi > s->r[i].lo + 1)
			js_put(b, "-", 1);
		class_cp(b, s->r[i].hi);
	}
}

/* One character of s (normalized, not empty) in canonical JSON form, as one GBNF item. */
int js_canon_set(aah_bytebuf *b, const js_rset *s, uint32_t *prims)
{
	js_rset raw = { 0 };
	for (size_t i = 0; i < s->n; i++) {   /* s less the specials: [0,0x1F], '"', '\\' */
		uint32_t lo = s->r[i].lo < 0x20 ? 0x20 : s->r[i].lo, hi = s->r[i].hi;
		for (uint32_t cut = 0; lo <= hi && cut < 2; cut++) {
			uint32_t sp = cut == 0 ? '"' : '\\';
			if (sp >= lo && sp <= hi) {
				if (sp > lo)
					js_rset_add(&raw, lo, sp - 1);
				lo = sp + 1;
			}
		}
		if (lo <= hi)
			js_rset_add(&raw, lo, hi);
	}
	/* The escapes, as few items as they fit: kesc for all 34, kctl for the 32 controls, else "\\" [btnfr…] for the
	 * controls with a short escape, "\\u00" ( "0" […] | "1" […] ) for the other controls, and \" and \\. */
	uint32_t short_bits = 0, long_bits = 0;   /* bit cp of the controls in s */
	bool quote = rset_has(s, '"'), bslash = rset_has(s, '\\');
	for (uint32_t cp = 0; cp < 0x20; cp++)
		if (rset_has(s, cp))
			*(cp == '\b' || cp == '\t' || cp == '\n' || cp == '\f' || cp == '\r' ? &short_bits : &long_bits) |= 1u << cp;
	bool all_ctl = (short_bits | long_bits) == UINT32_MAX;
	int items = (raw.n > 0) + (all_ctl && quote && bslash ? 1
	                           : all_ctl ? 1 + quote + bslash : (short_bits != 0) + (long_bits != 0) + quote + bslash);
	if (items == 0 || raw.oom) {
		free(raw.r);
		b->oom |= raw.oom;
		return -1;
	}
	if (items > 1)
		js_puts(b, "( ");
	const char *sep = "";
	if (raw.n) {
		js_rset neg = js_rset_complement(&raw);
		if (neg.n <= raw.n) {
			js_puts(b, "[^");
			class_ranges(b, &neg);
		} else {
			js_puts(b, "[");
			class_ranges(b, &raw);
		}
		js_puts(b, "]");
		free(neg.r);
		sep = " | ";
	}
	if (all_ctl && quote && bslash) {
		js_printf(b, "%s%s", sep, js_prims[PR_KESC].name);
		*prims |= 1u << PR_KESC;
		quote = bslash = false;
	} else if (all_ctl) {
		js_printf(b, "%s%s", sep, js_prims[PR_KCTL].name);
		*prims |= 1u << PR_KCTL;
		sep = " | ";
	} else {
		if (short_bits) {
			static const char letter[] = { ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r' };
			js_printf(b, "%s\"\\\\\" [", sep);
			for (uint32_t cp = 0; cp < sizeof letter; cp++)
				if (short_bits >> cp & 1)
					js_put(b, &letter[cp], 1);
			js_puts(b, "]");
			sep = " | ";
		}
		if (long_bits) {
			static const char hexd[] = "0123456789abcdef";
			js_printf(b, "%s\"\\\\u00\" ( ", sep);
			for (unsigned hi = 0; hi < 2; hi++) {
				uint32_t row = long_bits >> (16 * hi) & 0xFFFF;
				if (!row)
					continue;
				js_printf(b, "%s\"%u\" [", hi && (long_bits & 0xFFFF) ? " | " : "", hi);
				for (unsigned lo = 0; lo < 16; lo++)
					if (row >> lo & 1) {
						js_put(b, &hexd[lo], 1);
						if (lo >= 10)
							js_printf(b, "%c", hexd[lo] - 'a' + 'A');
					}
				js_puts(b, "]");
			}
			js_puts(b, " )");
			sep = " | ";
		}
	}
	if (quote) {
		js_printf(b, "%s\"\\\\\\\"\"", sep);
		sep = " | ";
	}
	if (bslash)
		js_printf(b, "%s\"\\\\\\\\\"", sep);
	if (items > 1)
		js_puts(b, " )");
	free(raw.r);
	return 0;
}

/* ---- a pattern's GBNF, made to match JSON text ---- */

/* regex_gbnf's rules match the string's characters; the output holds them JSON-encoded. This rewrites every
 * terminal of those rules (literals, classes, `.`) into the canonical JSON form of the characters it matches,
 * leaving names and operators as they are. */
static int gbnf_escape_decode(const char *s, size_t n, size_t *i, uint32_t *cp)
{
	if (*i + 1 >= n)
		return -1;
	char ch = s[*i + 1];
	int digits = ch == 'x' ? 2 : ch == 'u' ? 4 : ch == 'U' ? 8 : 0;
	if (!digits) {
		static const char from[] = "nrt\\\"'[]-^/", to[] = "\n\r\t\\\"'[]-^/";
		const char *f = memchr(from, ch, sizeof from - 1);
		if (!f)
			return -1;
		*cp = (unsigned char)to[f - from];
		*i += 2;
		return 0;
	}
	uint32_t v = 0;
	for (int k = 0; k < digits; k++) {
		size_t at = *i + 2 + (size_t)k;
		if (at >= n)
			return -1;
		char h = s[at];
		int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
		if (d < 0)
			return -1;
		v = v * 16 + (uint32_t)d;
	}
	*cp = v;
	*i += 2 + (size_t)digits;
	return 0;
}

static int gbnf_read_cp(const char *s, size_t n, size_t *i, uint32_t *cp)
{
	if (s[*i] == '\\')
		return gbnf_escape_decode(s, n, i, cp);
	*i += js_utf8_next((const unsigned char *)s + *i, n - *i, cp);
	return 0;
}

int js_gbnf_to_json(const char *s, size_t n, aah_bytebuf *out, uint32_t *prims, char *err, size_t err_len)
{
	for (size_t i = 0; i < n && !out->oom;) {
		char ch = s[i];
		if (ch == '#') {
			while (i < n && s[i] != '\n')
				i++;
		} else if (ch == '"') {
			aah_bytebuf lit = { 0 };
			js_emitter e = { .b = &lit };
			for (i++; i < n && s[i] != '"';) {
				uint32_t cp;
				if (gbnf_read_cp(s, n, &i, &cp) != 0) {
					aah_bytebuf_free(&lit);
					goto bad_escape;
				}
				js_em_json_cp(&e, cp);
			}
			js_em_close(&e);
			i++;
			if (e.items == 0)
				js_puts(out, "\"\"");
			else if (e.items == 1)
				js_put(out, (const char *)lit.p, lit.n);
			else {
				js_puts(out, "( ");
				js_put(out, (const char *)lit.p, lit.n);
				js_puts(out, " )");
			}
			aah_bytebuf_free(&lit);
		} else if (ch == '[' || ch == '.') {
			js_rset set = { 0 };
			if (ch == '.') {
				js_rset_add(&set, 0, JS_CP_MAX);
				i++;
			} else {
				bool neg = i + 1 < n && s[i + 1] == '^';
				for (i += neg ? 2 : 1; i < n && s[i] != ']';) {
					uint32_t lo, hi;
					if (gbnf_read_cp(s, n, &i, &lo) != 0) {
						free(set.r);
						goto bad_escape;
					}
					hi = lo;
					if (i + 1 < n && s[i] == '-' && s[i + 1] != ']') {
						i++;
						if (gbnf_read_cp(s, n, &i, &hi) != 0) {
							free(set.r);
							goto bad_escape;
						}
					}
					if (lo <= hi)
						js_rset_add(&set, lo, hi);
				}
				i++;
				js_rset_norm(&set);
				if (neg) {
					js_rset comp = js_rset_complement(&set);
					free(set.r);
					set = comp;
				}
			}
			js_rset_norm(&set);
			out->oom |= set.oom;
			int rc = set.oom ? -1 : js_canon_set(out, &set, prims);
			free(set.r);
			if (rc != 0 && !out->oom) {
				snprintf(err, err_len, "a character class matches no character");
				return -1;
			}
		} else {
			js_put(out, &s[i], 1);
			i++;
		}
	}
	if (out->oom) {
		snprintf(err, err_len, "out of memory");
		return -1;
	}
	return 0;
bad_escape:
	snprintf(err, err_len, "the regex's GBNF has a bad escape");
	return -1;
}

/* ---- integers: exact ranges of decimal numerals ---- */

static void range_alt(aah_bytebuf *b, bool *first, const char *digits, const char *tail)
{
	js_puts(b, *first ? "" : " | ");
	*first = false;
	if (*digits && tail[0] == '"' && strlen(tail) == 3) {   /* one more fixed digit: "15" "0" is "150" */
		js_printf(b, "\"%s%c\"", digits, tail[1]);
		return;
	}
	if (*digits)
		js_printf(b, "\"%s\"%s", digits, *tail ? " " : "");
	js_puts(b, tail);
}

/* [lo-hi] followed by r digits of any value */
static void range_tail(char *t, size_t cap, int lo, int hi, int r)
{
	int o = lo == hi ? snprintf(t, cap, "\"%d\"", lo) : snprintf(t, cap, "[%d-%d]", lo, hi);
	if (r == 1)
		snprintf(t + o, cap - (size_t)o, " [0-9]");
	else if (r > 1)
		snprintf(t + o, cap - (size_t)o, " [0-9]{%d}", r);
}

static bool all_of(const char *s, char ch)
{
	for (; *s; s++)
		if (*s != ch)
			return false;
	return true;
}

/* Numerals of r digits (leading zeros written) at least s, after the fixed digits pre. */
static void digits_ge(aah_bytebuf *b, bool *first, char *pre, const char *s)
{
	int r = (int)strlen(s);
	char t[64];
	size_t pl = strlen(pre);
	if (all_of(s + 1, '0')) {
		range_tail(t, sizeof t, s[0] - '0', 9, r - 1);
		range_alt(b, first, pre, t);
		return;
	}
	pre[pl] = s[0];
	pre[pl + 1] = 0;
	digits_ge(b, first, pre, s + 1);
	pre[pl] = 0;
	if (s[0] < '9') {
		range_tail(t, sizeof t, s[0] - '0' + 1, 9, r - 1);
		range_alt(b, first, pre, t);
	}
}

/* Numerals of r digits at most s, after pre. */
static void digits_le(aah_bytebuf *b, bool *first, char *pre, const char *s)
{
	int r = (int)strlen(s);
	char t[64];
	size_t pl = strlen(pre);
	if (all_of(s + 1, '9')) {
		range_tail(t, sizeof t, 0, s[0] - '0', r - 1);
		range_alt(b, first, pre, t);
		return;
	}
	if (s[0] > '0') {
		range_tail(t, sizeof t, 0, s[0] - '0' - 1, r - 1);
		range_alt(b, first, pre, t);
	}
	pre[pl] = s[0];
	pre[pl + 1] = 0;
	digits_le(b, first, pre, s + 1);
	pre[pl] = 0;
}

/* The numerals a..z (same length, a <= z), as alternatives. */
static void digits_between(aah_bytebuf *b, bool *first, const char *a, const char *z)
{
	char pre[32] = "";
	size_t i = 0;
	while (a[i] && a[i] == z[i])
		i++;
	memcpy(pre, a, i);
	pre[i] = 0;
	if (!a[i]) {
		range_alt(b, first, pre, "");
		return;
	}
	int r = (int)strlen(a + i + 1);
	bool lo0 = all_of(a + i + 1, '0'), hi9 = all_of(z + i + 1, '9');
	int lo = a[i] - '0' + !lo0, hi = z[i] - '0' - !hi9;
	if (!lo0) {
		pre[i] = a[i];
		pre[i + 1] = 0;
		digits_ge(b, first, pre, a + i + 1);
	}
	if (lo <= hi) {
		char t[64];
		pre[i] = 0;
		range_tail(t, sizeof t, lo, hi, r);
		range_alt(b, first, pre, t);
	}
	if (!hi9) {
		pre[i] = z[i];
		pre[i + 1] = 0;
		digits_le(b, first, pre, z + i + 1);
	}
}

/* Decimal numerals without leading zeros of the integers lo..hi (0 <= lo <= hi <= JS_INT_MAX), as alternatives. */
void js_uint_range(aah_bytebuf *b, bool *first, int64_t lo, int64_t hi)
{
	int64_t p = 1;
	for (int len = 1; len <= 16; len++, p *= 10) {
		int64_t a = len == 1 ? 0 : p, z = p * 10 - 1;
		if (a < lo)
			a = lo;
		if (z > hi)
			z = hi;
		if (a > z)
			continue;
		char as[24], zs[24];
		snprintf(as, sizeof as, "%" PRId64, a);
		snprintf(zs, sizeof zs, "%" PRId64, z);
		digits_between(b, first, as, zs);
	}
}
