/* engine/grammar/regex.c — regular expressions (the RE2-like subset of regex.h, matched whole) and fixed choices
 * written as GBNF: a parser to a small expression graph, rewrites that keep every repeated body non-empty, a writer.
 *
 * Why the rewrites: GBNF engines (ours, llama.cpp's) compile `x*` to a right-recursive rule `r ::= x r | ""`, which
 * is left recursion, and refused, when x can match the empty string; so (a*)* or (a?b?)+ must become a repetition of
 * a body that cannot. For a nullable x, x{n,m} has the language of x'{0,m} where x' matches what x does except the
 * empty string, and x' is built without copying: the suffixes it repeats are shared nodes that the writer turns into
 * helper rules (`name-N`), so the output stays linear in the pattern. Counted repetitions stay GBNF's own {n,m}. */
#include "engine/grammar/regex.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gbnf_text.h"
#include "models/errf.h"

#define RX_MAX_REPEAT 1000            /* m and n of {n,m}; and their product along nested repetitions (RE2's rule) */
#define RX_MAX_NEST 1000              /* groups open at once */
#define RX_MAX_GBNF (1u << 20)        /* bytes of GBNF one pattern may become; also the longest pattern read */
#define RX_MAX_INLINE 24              /* nesting written inside one rule before the rest moves to a helper rule */
#define RX_CP_MAX 0x10FFFFu
#define RX_SURR_LO 0xD800u
#define RX_SURR_HI 0xDFFFu

enum rx_kind { RX_EMPTY, RX_CHAR, RX_CLASS, RX_CAT, RX_ALT, RX_REPEAT };

typedef struct rx_range {
	uint32_t lo, hi;   /* code points, inclusive */
} rx_range;

/* One node of the expression graph. Nodes are immutable once built and may be shared (the rewrites share them), so
 * the graph is a DAG; every node of one translation is on the rx's list and freed with it. */
typedef struct rx_node rx_node;
struct rx_node {
	enum rx_kind kind;
	bool nullable;          /* matches the empty string */
	uint32_t cp;            /* RX_CHAR */
	rx_range *ranges;       /* RX_CLASS: sorted, disjoint, not touching, no surrogates, at least two code points */
	uint32_t n_ranges;
	rx_node **kids;         /* RX_CAT, RX_ALT (two or more), RX_REPEAT (kids[0], never nullable) */
	uint32_t n_kids;
	int32_t min, max;       /* RX_REPEAT: max -1 for no bound; never {1,1} */
	rx_node *nonempty;      /* memo of rx_nonempty (NULL: matches only the empty string), valid when ne_done */
	bool ne_done;
	bool seen;              /* reference count taken (writer) */
	uint32_t refs;          /* edges into this node from the nodes reachable from the root */
	uint32_t rule;          /* helper rule number, 0 while the node is written inline */
	rx_node *next_all;
};

/* A set of code points being built: ranges in any order, normalized by rset_finish. */
typedef struct rx_rset {
	rx_range *r;
	uint32_t n, cap;
} rx_rset;

typedef struct rx_vec {
	rx_node **p;
	uint32_t n, cap;
} rx_vec;

typedef struct rx {
	const unsigned char *s;
	size_t len, pos;
	int depth;              /* groups open */
	char *err;
	size_t err_len;
	bool failed;
	rx_node *all;           /* every node, for rx_free */
	rx_node *empty;         /* the one RX_EMPTY node */
	/* writer */
	aah_bytebuf *out;
	size_t out_start;
	const char *name;
	const char *what;       /* "regex" or "choices", for the size message */
	uint32_t n_rules;
	rx_vec queue;           /* nodes given a helper rule, not yet written */
} rx;

/* ---- errors and memory ---- */

static void rx_oom(rx *c)
{
	if (!c->failed)
		aah_errf(c->err, c->err_len, "out of memory");
	c->failed = true;
}

#define RX_FAIL(c, ...)                                      \
	do {                                                 \
		if (!(c)->failed)                            \
			aah_errf((c)->err, (c)->err_len, __VA_ARGS__); \
		(c)->failed = true;                          \
	} while (0)

static rx_node *node_new(rx *c, enum rx_kind kind)
{
	rx_node *n = calloc(1, sizeof *n);
	if (!n) {
		rx_oom(c);
		return NULL;
	}
	n->kind = kind;
	n->next_all = c->all;
	c->all = n;
	return n;
}

static void rx_free(rx *c)
{
	for (rx_node *n = c->all, *next; n; n = next) {
		next = n->next_all;
		free(n->ranges);
		free(n->kids);
		free(n);
	}
	c->all = NULL;
	free(c->queue.p);
	c->queue = (rx_vec){ 0 };
}

static int vec_push(rx *c, rx_vec *v, rx_node *n)
{
	if (v->n == v->cap) {
		uint32_t cap = v->cap ? v->cap * 2 : 8;
		rx_node **p = realloc(v->p, cap * sizeof *p);
		if (!p) {
			rx_oom(c);
			return -1;
		}
		v->p = p;
		v->cap = cap;
	}
	v->p[v->n++] = n;
	return 0;
}

static int rset_add(rx *c, rx_rset *s, uint32_t lo, uint32_t hi)
{
	if (s->n == s->cap) {
		uint32_t cap = s->cap ? s->cap * 2 : 8;
		rx_range *r = realloc(s->r, cap * sizeof *r);
		if (!r) {
			rx_oom(c);
			return -1;
		}
		s->r = r;
		s->cap = cap;
	}
	s->r[s->n++] = (rx_range){ lo, hi };
	return 0;
}

static int range_cmp(const void *a, const void *b)
{
	const rx_range *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Replaces s by its complement over every code point (s sorted and merged). */
static int rset_complement(rx *c, rx_rset *s)
{
	rx_rset t = { 0 };
	uint32_t from = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		if (s->r[i].lo > from && rset_add(c, &t, from, s->r[i].lo - 1) != 0)
			goto oom;
		from = s->r[i].hi + 1;
	}
	if (from <= RX_CP_MAX && rset_add(c, &t, from, RX_CP_MAX) != 0)
		goto oom;
	free(s->r);
	*s = t;
	return 0;
oom:
	free(t.r);
	return -1;
}

/* Takes the surrogates out of s (sorted and merged): no UTF-8 text holds one, so a class never needs them. */
static int rset_strip_surrogates(rx *c, rx_rset *s)
{
	rx_rset t = { 0 };
	for (uint32_t i = 0; i < s->n; i++) {
		rx_range r = s->r[i];
		bool ok = r.hi < RX_SURR_LO || r.lo > RX_SURR_HI ? rset_add(c, &t, r.lo, r.hi) == 0 :
		          (r.lo >= RX_SURR_LO || rset_add(c, &t, r.lo, RX_SURR_LO - 1) == 0) &&
		          (r.hi <= RX_SURR_HI || rset_add(c, &t, RX_SURR_HI + 1, r.hi) == 0);
		if (!ok) {
			free(t.r);
			return -1;
		}
	}
	free(s->r);
	*s = t;
	return 0;
}

/* Sorts and merges the ranges, complements them when negate, and takes the surrogates out. */
static int rset_finish(rx *c, rx_rset *s, bool negate)
{
	if (s->n > 1)
		qsort(s->r, s->n, sizeof *s->r, range_cmp);
	uint32_t k = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		if (k && s->r[i].lo <= s->r[k - 1].hi + 1) {
			if (s->r[i].hi > s->r[k - 1].hi)
				s->r[k - 1].hi = s->r[i].hi;
		} else {
			s->r[k++] = s->r[i];
		}
	}
	s->n = k;
	if (negate && rset_complement(c, s) != 0)
		return -1;
	return rset_strip_surrogates(c, s);
}

/* ---- constructors: each keeps the node invariants above ---- */

static rx_node *mk_char(rx *c, uint32_t cp)
{
	rx_node *n = node_new(c, RX_CHAR);
	if (n)
		n->cp = cp;
	return n;
}

/* A node for a finished set (taken over: freed here on every path). NULL without an error when the set is empty. */
static rx_node *mk_set(rx *c, rx_rset *s)
{
	rx_node *n = NULL;
	if (s->n == 1 && s->r[0].lo == s->r[0].hi) {
		n = mk_char(c, s->r[0].lo);
	} else if (s->n > 0 && (n = node_new(c, RX_CLASS))) {
		n->ranges = s->r;
		n->n_ranges = s->n;
		s->r = NULL;
	}
	free(s->r);
	*s = (rx_rset){ 0 };
	return n;
}

/* A node with kids copied from kids[0..n) (n >= 2), its nullability from them. */
static rx_node *mk_list(rx *c, enum rx_kind kind, rx_node *const *kids, uint32_t n)
{
	rx_node *r = node_new(c, kind);
	if (!r)
		return NULL;
	r->kids = malloc(n * sizeof *r->kids);
	if (!r->kids) {
		rx_oom(c);
		return NULL;
	}
	memcpy(r->kids, kids, n * sizeof *kids);
	r->n_kids = n;
	r->nullable = kind == RX_CAT;
	for (uint32_t i = 0; i < n; i++)
		r->nullable = kind == RX_CAT ? r->nullable && kids[i]->nullable : r->nullable || kids[i]->nullable;
	return r;
}

/* The concatenation; kids[] is scratch (compacted in place). */
static rx_node *mk_cat(rx *c, rx_node **kids, uint32_t n)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++)
		if (kids[i]->kind != RX_EMPTY)
			kids[k++] = kids[i];
	return k == 0 ? c->empty : k == 1 ? kids[0] : mk_list(c, RX_CAT, kids, k);
}

static rx_node *mk_rep(rx *c, rx_node *x, int32_t min, int32_t max);

/* The alternation; kids[] is scratch. An empty alternative becomes `?` on the rest (x|"" is x?), so an RX_ALT never
 * holds the empty node. */
static rx_node *mk_alt(rx *c, rx_node **kids, uint32_t n)
{
	uint32_t k = 0;
	bool empty = false;
	for (uint32_t i = 0; i < n; i++) {
		if (kids[i]->kind == RX_EMPTY)
			empty = true;
		else
			kids[k++] = kids[i];
	}
	rx_node *r = k == 0 ? c->empty : k == 1 ? kids[0] : mk_list(c, RX_ALT, kids, k);
	if (r && empty && !r->nullable)
		r = mk_rep(c, r, 0, 1);
	return r;
}

static rx_node *rx_nonempty(rx *c, rx_node *x);

/* x{min,max} (max -1: no bound). A nullable x is replaced by its non-empty part x' (x{n,m} = x'{0,m}), so the body of
 * an RX_REPEAT never matches the empty string; a repeated y+ folds: (y+){n,m} = y{n,} for any m >= 1, so (a*)* is a*. */
static rx_node *mk_rep(rx *c, rx_node *x, int32_t min, int32_t max)
{
	if (!x)
		return NULL;
	if (x->kind == RX_EMPTY || max == 0)
		return c->empty;
	if (x->nullable) {
		x = rx_nonempty(c, x);
		if (c->failed)
			return NULL;
		if (!x)
			return c->empty;
		min = 0;
	}
	if (min == 1 && max == 1)
		return x;
	if (x->kind == RX_REPEAT && x->min == 1 && x->max < 0)   /* n groups of one or more: n or more */
		return mk_rep(c, x->kids[0], min, -1);
	rx_node *r = node_new(c, RX_REPEAT);
	if (!r)
		return NULL;
	r->kids = malloc(sizeof *r->kids);
	if (!r->kids) {
		rx_oom(c);
		return NULL;
	}
	r->kids[0] = x;
	r->n_kids = 1;
	r->min = min;
	r->max = max;
	r->nullable = min == 0;
	return r;
}

/* What x matches except the empty string, as a node (NULL when that is nothing; check c->failed). For a nullable
 * concatenation c1…ck (every ci nullable) it is the alternation over i of ci' ci+1…ck — the first non-empty piece
 * comes from some ci — with the suffixes ci+1…ck built once as a shared right-nested chain, so the result is linear
 * in k. Memoized per node, so a graph is rewritten in linear time. */
static rx_node *rx_nonempty(rx *c, rx_node *x)
{
	if (!x->nullable)
		return x;
	if (x->ne_done)
		return x->nonempty;
	rx_node *r = NULL;
	rx_vec alts = { 0 };
	switch (x->kind) {
	case RX_EMPTY:
		break;
	case RX_REPEAT:   /* y{0,m}, y not nullable */
		r = mk_rep(c, x->kids[0], 1, x->max);
		break;
	case RX_ALT:
		for (uint32_t i = 0; i < x->n_kids && !c->failed; i++) {
			rx_node *k = rx_nonempty(c, x->kids[i]);
			if (k && vec_push(c, &alts, k) != 0)
				break;
		}
		if (!c->failed)
			r = alts.n ? mk_alt(c, alts.p, alts.n) : NULL;
		break;
	case RX_CAT: {
		rx_node *suffix = NULL;   /* kids[i+1..n) as one node */
		for (uint32_t i = x->n_kids; i-- > 0 && !c->failed;) {
			rx_node *k = rx_nonempty(c, x->kids[i]);
			if (c->failed)
				break;
			if (k) {
				rx_node *pair[2] = { k, suffix };
				rx_node *a = suffix ? mk_list(c, RX_CAT, pair, 2) : k;
				if (!a || vec_push(c, &alts, a) != 0)
					break;
			}
			if (i > 0) {
				rx_node *pair[2] = { x->kids[i], suffix };
				suffix = suffix ? mk_list(c, RX_CAT, pair, 2) : x->kids[i];
			}
		}
		for (uint32_t i = 0; i < alts.n / 2; i++) {   /* built from the end: written in the pattern's order */
			rx_node *t = alts.p[i];
			alts.p[i] = alts.p[alts.n - 1 - i];
			alts.p[alts.n - 1 - i] = t;
		}
		if (!c->failed)
			r = alts.n ? mk_alt(c, alts.p, alts.n) : NULL;
		break;
	}
	default:
		break;
	}
	free(alts.p);
	if (c->failed)
		return NULL;
	x->nonempty = r;
	x->ne_done = true;
	return r;
}

/* ---- the pattern ---- */

/* The length of the UTF-8 character at s (len bytes left) with its code point in *cp, or 0 when it is not valid
 * UTF-8 (overlong forms, surrogates and code points past U+10FFFF are not). */
static size_t utf8_decode(const unsigned char *s, size_t len, uint32_t *cp)
{
	if (len == 0)
		return 0;
	unsigned char b = s[0];
	size_t n;
	uint32_t v, min;
	if (b < 0x80) {
		*cp = b;
		return 1;
	} else if (b >= 0xC2 && b <= 0xDF) {
		n = 2, v = b & 0x1F, min = 0x80;
	} else if (b >= 0xE0 && b <= 0xEF) {
		n = 3, v = b & 0x0F, min = 0x800;
	} else if (b >= 0xF0 && b <= 0xF4) {
		n = 4, v = b & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (len < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3F);
	}
	if (v < min || v > RX_CP_MAX || (v >= RX_SURR_LO && v <= RX_SURR_HI))
		return 0;
	*cp = v;
	return n;
}

/* Where s (len bytes) stops being valid UTF-8, or len. */
static size_t utf8_invalid_at(const unsigned char *s, size_t len)
{
	uint32_t cp;
	for (size_t i = 0; i < len;) {
		size_t n = utf8_decode(s + i, len - i, &cp);
		if (!n)
			return i;
		i += n;
	}
	return len;
}

static int hexval(unsigned char ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 :
	       ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

static bool is_alpha(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static bool is_digit(unsigned char ch)
{
	return ch >= '0' && ch <= '9';
}

static int peek(const rx *c, size_t ahead)
{
	return c->pos + ahead < c->len ? c->s[c->pos + ahead] : -1;
}

/* Perl and POSIX classes, ASCII only, as RE2 defines them. */
typedef struct rx_named_class {
	const char *name;
	const char *ranges;   /* pairs of bytes lo, hi */
} rx_named_class;

static const rx_named_class posix_classes[] = {
	{ "alnum", "09AZaz" }, { "alpha", "AZaz" }, { "ascii", "\x01\x7f" }, { "blank", "\t\t  " },
	{ "cntrl", "\x01\x1f\x7f\x7f" }, { "digit", "09" }, { "graph", "!~" }, { "lower", "az" },
	{ "print", " ~" }, { "punct", "!/:@[`{~" }, { "space", "\t\r  " }, { "upper", "AZ" },
	{ "word", "09AZaz__" }, { "xdigit", "09AFaf" },
};

/* Adds a class's ranges to s, or their complement over every code point when negate. [:ascii:] and [:cntrl:] start
 * at 1 in the table (a C string cannot hold 0); the 0 is added here. */
static int add_named(rx *c, rx_rset *s, const char *ranges, bool with_nul, bool negate)
{
	rx_rset t = { 0 };
	if (with_nul && rset_add(c, &t, 0, 0) != 0)
		return -1;
	for (const char *p = ranges; *p; p += 2)
		if (rset_add(c, &t, (unsigned char)p[0], (unsigned char)p[1]) != 0)
			goto oom;
	if (negate && rset_finish(c, &t, true) != 0)
		goto oom;
	for (uint32_t i = 0; i < t.n; i++)
		if (rset_add(c, s, t.r[i].lo, t.r[i].hi) != 0)
			goto oom;
	free(t.r);
	return 0;
oom:
	free(t.r);
	return -1;
}

static const char *perl_class(unsigned char ch)
{
	switch (ch | 0x20) {
	case 'd': return "09";
	case 's': return "\t\n\f\r  ";   /* RE2's \s: no \v */
	case 'w': return "09AZaz__";
	default: return NULL;
	}
}

enum rx_esc { ESC_ERR = -1, ESC_CHAR, ESC_SET, ESC_START, ESC_END };

/* Reads n hex digits at c->pos into *v. */
static bool read_hex(rx *c, int n, uint32_t *v)
{
	uint32_t x = 0;
	for (int i = 0; i < n; i++) {
		int h = peek(c, (size_t)i);
		if (h < 0 || hexval((unsigned char)h) < 0)
			return false;
		x = x << 4 | (uint32_t)hexval((unsigned char)h);
	}
	c->pos += (size_t)n;
	*v = x;
	return true;
}

/* The escape at c->pos (a backslash), inside a class or not: one code point (*cp), a Perl class (added to set), or an
 * anchor (\A, \z; outside classes). */
static enum rx_esc parse_escape(rx *c, bool in_class, uint32_t *cp, rx_rset *set)
{
	size_t at = c->pos;
	int e = peek(c, 1);
	if (e < 0) {
		RX_FAIL(c, "regex trailing backslash at offset %zu", at);
		return ESC_ERR;
	}
	c->pos += 2;
	unsigned char ch = (unsigned char)e;
	const char *perl = perl_class(ch);
	if (perl && is_alpha(ch)) {
		bool negate = ch >= 'A' && ch <= 'Z';
		return add_named(c, set, perl, false, negate) == 0 ? ESC_SET : ESC_ERR;
	}
	static const char ctl_names[] = "aftnrv";
	static const uint8_t ctl_values[] = { 0x07, 0x0C, 0x09, 0x0A, 0x0D, 0x0B };
	const char *ctl = is_alpha(ch) ? strchr(ctl_names, ch) : NULL;
	if (ctl) {
		*cp = ctl_values[ctl - ctl_names];
		return ESC_CHAR;
	}
	switch (ch) {
	case '0': {   /* \0 and \0NN: octal, as in RE2 and Python */
		uint32_t v = 0;
		for (int i = 0; i < 2 && peek(c, 0) >= '0' && peek(c, 0) <= '7'; i++)
			v = v * 8 + (uint32_t)(c->s[c->pos++] - '0');
		*cp = v;
		return ESC_CHAR;
	}
	case 'x':
		if (peek(c, 0) == '{') {
			size_t p = c->pos + 1;
			uint32_t v = 0;
			int digits = 0;
			while (p < c->len && hexval(c->s[p]) >= 0) {
				if (v <= RX_CP_MAX)
					v = v << 4 | (uint32_t)hexval(c->s[p]);
				p++, digits++;
			}
			if (digits == 0 || p >= c->len || c->s[p] != '}') {
				RX_FAIL(c, "regex escape '\\x{' at offset %zu needs hex digits and a '}'", at);
				return ESC_ERR;
			}
			if (v > RX_CP_MAX) {
				RX_FAIL(c, "regex escape '\\x{…}' at offset %zu is past U+10FFFF", at);
				return ESC_ERR;
			}
			c->pos = p + 1;
			*cp = v;
			return ESC_CHAR;
		}
		if (!read_hex(c, 2, cp)) {
			RX_FAIL(c, "regex escape '\\x' at offset %zu needs two hex digits", at);
			return ESC_ERR;
		}
		return ESC_CHAR;
	case 'u':
		if (!read_hex(c, 4, cp)) {
			RX_FAIL(c, "regex escape '\\u' at offset %zu needs four hex digits", at);
			return ESC_ERR;
		}
		return ESC_CHAR;
	case 'b':
		if (!in_class)
			break;
		*cp = 0x08;   /* backspace inside a class, as Python and ECMAScript read it */
		return ESC_CHAR;
	case 'A':
		if (!in_class && at == 0)
			return ESC_START;
		RX_FAIL(c, "regex anchor '\\A' at offset %zu is not supported (only at the start)", at);
		return ESC_ERR;
	case 'z':
		if (!in_class && c->pos == c->len)
			return ESC_END;
		RX_FAIL(c, "regex anchor '\\z' at offset %zu is not supported (only at the end)", at);
		return ESC_ERR;
	default:
		break;
	}
	/* escapes other engines give a meaning this subset cannot keep, refused by what they are */
	static const struct {
		char ch;
		const char *what;
	} refused[] = {
		{ 'b', "word boundary" }, { 'B', "word boundary" }, { 'Z', "anchor" }, { 'G', "anchor" },
		{ 'p', "Unicode class" }, { 'P', "Unicode class" }, { 'k', "backreference" }, { 'g', "backreference" },
		{ 'Q', "quoting" }, { 'E', "quoting" }, { 'C', "single byte" },
	};
	for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
		if (refused[i].ch == (char)ch) {
			RX_FAIL(c, "regex %s '\\%c' at offset %zu is not supported", refused[i].what, ch, at);
			return ESC_ERR;
		}
	if (ch >= '1' && ch <= '9') {
		RX_FAIL(c, "regex backreference '\\%c' at offset %zu is not supported", ch, at);
		return ESC_ERR;
	}
	if (is_alpha(ch) || is_digit(ch)) {
		RX_FAIL(c, "regex escape '\\%c' at offset %zu is not supported", ch, at);
		return ESC_ERR;
	}
	/* punctuation, space, control characters and non-ASCII characters stand for themselves */
	c->pos = at + 1;
	size_t n = utf8_decode(c->s + c->pos, c->len - c->pos, cp);
	c->pos += n;   /* the pattern was checked to be UTF-8: n > 0 */
	return ESC_CHAR;
}

/* A class [...] at c->pos. */
static rx_node *parse_class(rx *c)
{
	size_t at = c->pos;
	c->pos++;
	bool negate = peek(c, 0) == '^';
	if (negate)
		c->pos++;
	rx_rset set = { 0 };
	bool first = true;
	for (;;) {
		if (c->pos >= c->len) {
			RX_FAIL(c, "regex missing ']' for '[' at offset %zu", at);
			goto fail;
		}
		if (c->s[c->pos] == ']' && !first) {
			c->pos++;
			break;
		}
		first = false;
		/* one item: a character, an escape, a POSIX class; then maybe '-' and the range's end */
		size_t item_at = c->pos;
		uint32_t lo = 0;
		bool is_set = false;
		if (c->s[c->pos] == '[' && peek(c, 1) == ':') {
			const unsigned char *end = memmem(c->s + c->pos + 2, c->len - c->pos - 2, ":]", 2);
			if (!end) {
				RX_FAIL(c, "regex POSIX class '[:' at offset %zu has no ':]'", item_at);
				goto fail;
			}
			const char *name = (const char *)c->s + c->pos + 2;
			size_t name_len = (size_t)(end - (c->s + c->pos + 2));
			bool neg = name_len > 0 && name[0] == '^';
			if (neg)
				name++, name_len--;
			const rx_named_class *k = NULL;
			for (size_t i = 0; i < sizeof posix_classes / sizeof *posix_classes; i++)
				if (strlen(posix_classes[i].name) == name_len && !memcmp(posix_classes[i].name, name, name_len))
					k = &posix_classes[i];
			if (!k) {
				bool plain = name_len <= 20;   /* quoted only when short printable ASCII: messages stay UTF-8 */
				for (size_t i = 0; i < name_len; i++)
					plain = plain && name[i] > 0x20 && name[i] < 0x7F;
				if (plain)
					RX_FAIL(c, "regex POSIX class '[:%.*s:]' at offset %zu is not supported", (int)name_len, name,
					        item_at);
				else
					RX_FAIL(c, "regex POSIX class at offset %zu is not supported", item_at);
				goto fail;
			}
			bool with_nul = !strcmp(k->name, "ascii") || !strcmp(k->name, "cntrl");
			if (add_named(c, &set, k->ranges, with_nul, neg) != 0)
				goto fail;
			c->pos = (size_t)(end - c->s) + 2;
			is_set = true;
		} else if (c->s[c->pos] == '\\') {
			enum rx_esc e = parse_escape(c, true, &lo, &set);
			if (e == ESC_ERR)
				goto fail;
			is_set = e == ESC_SET;
		} else {
			c->pos += utf8_decode(c->s + c->pos, c->len - c->pos, &lo);
		}
		bool range = peek(c, 0) == '-' && peek(c, 1) >= 0 && peek(c, 1) != ']';
		if (range && is_set) {
			RX_FAIL(c, "regex class range at offset %zu starts at a class", item_at);
			goto fail;
		}
		if (!range) {
			if (!is_set && rset_add(c, &set, lo, lo) != 0)
				goto fail;
			continue;
		}
		c->pos++;   /* the '-' */
		size_t hi_at = c->pos;
		uint32_t hi = 0;
		if (c->s[c->pos] == '[' && peek(c, 1) == ':') {
			RX_FAIL(c, "regex class range at offset %zu ends at a class", item_at);
			goto fail;
		} else if (c->s[c->pos] == '\\') {
			enum rx_esc e = parse_escape(c, true, &hi, &set);
			if (e == ESC_ERR)
				goto fail;
			if (e == ESC_SET) {
				RX_FAIL(c, "regex class range at offset %zu ends at a class", item_at);
				goto fail;
			}
		} else {
			c->pos += utf8_decode(c->s + c->pos, c->len - c->pos, &hi);
		}
		if (hi < lo) {
			RX_FAIL(c, "regex class range at offset %zu runs backwards (U+%04X to U+%04X at offset %zu)", item_at,
			        (unsigned)lo, (unsigned)hi, hi_at);
			goto fail;
		}
		if (rset_add(c, &set, lo, hi) != 0)
			goto fail;
	}
	if (rset_finish(c, &set, negate) != 0)
		goto fail;
	if (set.n == 0) {
		free(set.r);
		RX_FAIL(c, "regex empty character class at offset %zu", at);
		return NULL;
	}
	return mk_set(c, &set);
fail:
	free(set.r);
	return NULL;
}

/* A repetition count {n}, {n,} or {n,m} at c->pos: true with the counts and its end in *end (counts past the bound
 * are clamped to RX_MAX_REPEAT + 1, for the message). false when the text there is not one, so '{' is a literal —
 * except {,m} and {,}, which RE2 reads as literals and Python as {0,m}: *ambiguous is set for them. */
static bool parse_count(const rx *c, int32_t *min, int32_t *max, size_t *end, bool *ambiguous)
{
	size_t p = c->pos + 1;
	*ambiguous = false;
	int32_t v[2] = { 0, -1 };
	int digits[2] = { 0, 0 };
	for (int part = 0; part < 2; part++) {
		int32_t x = 0;
		while (p < c->len && is_digit(c->s[p])) {
			x = x * 10 + (c->s[p] - '0');
			if (x > RX_MAX_REPEAT)
				x = RX_MAX_REPEAT + 1;
			p++, digits[part]++;
		}
		v[part] = x;
		if (part == 0) {
			if (p < c->len && c->s[p] == '}' && digits[0]) {
				*min = *max = x;
				*end = p + 1;
				return true;
			}
			if (p >= c->len || c->s[p] != ',')
				return false;
			p++;
		}
	}
	if (p >= c->len || c->s[p] != '}')
		return false;
	if (!digits[0]) {
		*ambiguous = true;
		*end = p + 1;
		return false;
	}
	*min = v[0];
	*max = digits[1] ? v[1] : -1;
	*end = p + 1;
	return true;
}

static bool quant_at(const rx *c)
{
	int ch = peek(c, 0);
	if (ch == '*' || ch == '+' || ch == '?')
		return true;
	int32_t lo, hi;
	size_t end;
	bool amb;
	return ch == '{' && (parse_count(c, &lo, &hi, &end, &amb) || amb);
}

static rx_node *parse_alt(rx *c, int32_t *weight);

/* A group at c->pos: (…), (?:…), (?P<name>…), (?<name>…); the other (? forms are refused by name. */
static rx_node *parse_group(rx *c, int32_t *weight)
{
	size_t at = c->pos;
	if (++c->depth > RX_MAX_NEST) {
		RX_FAIL(c, "regex groups nested deeper than %d at offset %zu", RX_MAX_NEST, at);
		return NULL;
	}
	c->pos++;
	if (peek(c, 0) == '?') {
		int k = peek(c, 1), k2 = peek(c, 2);
		if (k == ':') {
			c->pos += 2;
		} else if ((k == 'P' && k2 == '<') || (k == '<' && k2 != '=' && k2 != '!')) {
			size_t p = c->pos + (k == 'P' ? 3 : 2), name_at = p;
			while (p < c->len && (is_alpha(c->s[p]) || is_digit(c->s[p]) || c->s[p] == '_'))
				p++;
			if (p == name_at || is_digit(c->s[name_at]) || p >= c->len || c->s[p] != '>') {
				RX_FAIL(c, "regex group name at offset %zu is not a name followed by '>'", name_at);
				return NULL;
			}
			c->pos = p + 1;
		} else if (k == 'P' && (k2 == '=' || k2 == '>')) {
			RX_FAIL(c, "regex %s '(?P%c' at offset %zu is not supported", k2 == '=' ? "backreference" : "recursion",
			        k2, at);
			return NULL;
		} else if (k == '=' || k == '!') {
			RX_FAIL(c, "regex lookahead '(?%c' at offset %zu is not supported", k, at);
			return NULL;
		} else if (k == '<') {
			RX_FAIL(c, "regex lookbehind '(?<%c' at offset %zu is not supported", k2, at);
			return NULL;
		} else if (k == '>') {
			RX_FAIL(c, "regex atomic group '(?>' at offset %zu is not supported", at);
			return NULL;
		} else if (k == '#') {
			RX_FAIL(c, "regex comment group '(?#' at offset %zu is not supported", at);
			return NULL;
		} else if (k >= 0 && (is_alpha((unsigned char)k) || k == '-' || k == '^')) {
			RX_FAIL(c, "regex flag group '(?%c' at offset %zu is not supported", k, at);
			return NULL;
		} else if (k > 0x20 && k < 0x7F) {
			RX_FAIL(c, "regex group '(?%c' at offset %zu is not supported", k, at);
			return NULL;
		} else {
			RX_FAIL(c, "regex group '(?' at offset %zu is not supported", at);
			return NULL;
		}
	}
	rx_node *inner = parse_alt(c, weight);
	if (!inner)
		return NULL;
	if (peek(c, 0) != ')') {
		RX_FAIL(c, "regex missing ')' for '(' at offset %zu", at);
		return NULL;
	}
	c->pos++;
	c->depth--;
	return inner;
}

/* An atom and the one quantifier after it (a lazy '?' after that changes nothing: the language is the same). */
static rx_node *parse_repeat(rx *c, rx_node *atom, int32_t *weight)
{
	if (!quant_at(c))
		return atom;
	size_t at = c->pos;
	int32_t min, max;
	bool braces = c->s[at] == '{';
	if (braces) {
		size_t end;
		bool amb;
		if (!parse_count(c, &min, &max, &end, &amb)) {
			RX_FAIL(c, "regex repetition '{,' at offset %zu is ambiguous (RE2 reads it as text, Python as {0,m}): "
			        "write {0,m} or \\{", at);
			return NULL;
		}
		if (min > RX_MAX_REPEAT || max > RX_MAX_REPEAT) {
			RX_FAIL(c, "regex repetition count at offset %zu is over %d", at, RX_MAX_REPEAT);
			return NULL;
		}
		if (max >= 0 && min > max) {
			RX_FAIL(c, "regex repetition {%d,%d} at offset %zu has its minimum over its maximum", (int)min, (int)max,
			        at);
			return NULL;
		}
		c->pos = end;
		/* RE2 bounds the product of nested counts, so (a{1000}){1000} cannot ask the engine for a million symbols */
		int32_t times = max >= 0 ? max : min;
		if (times > 0) {
			int64_t w = (int64_t)*weight * times;
			if (w > RX_MAX_REPEAT) {
				RX_FAIL(c, "regex nested repetition counts at offset %zu multiply past %d", at, RX_MAX_REPEAT);
				return NULL;
			}
			*weight = (int32_t)w;
		}
	} else {
		min = c->s[at] == '+';
		max = c->s[at] == '?' ? 1 : -1;
		c->pos++;
	}
	if (peek(c, 0) == '?') {
		c->pos++;
	} else if (peek(c, 0) == '+') {
		RX_FAIL(c, "regex possessive quantifier '%.*s' at offset %zu is not supported", (int)(c->pos + 1 - at),
		        (const char *)c->s + at, at);
		return NULL;
	}
	if (quant_at(c)) {
		RX_FAIL(c, "regex quantifier at offset %zu follows another (group the inner one)", c->pos);
		return NULL;
	}
	return mk_rep(c, atom, min, max);
}

/* A concatenation, up to '|', ')' or the end. */
static rx_node *parse_seq(rx *c, int32_t *weight)
{
	rx_vec items = { 0 };
	rx_node *r = NULL;
	*weight = 1;
	while (c->pos < c->len && c->s[c->pos] != '|' && c->s[c->pos] != ')') {
		size_t at = c->pos;
		unsigned char ch = c->s[at];
		rx_node *atom = NULL;
		int32_t w = 1;
		if (ch == '^' || ch == '$') {
			bool ok = ch == '^' ? at == 0 : at + 1 == c->len;
			if (!ok) {
				RX_FAIL(c, "regex anchor '%c' at offset %zu is not supported (only at the %s)", ch, at,
				        ch == '^' ? "very start" : "very end");
				goto done;
			}
			c->pos++;
			if (quant_at(c)) {
				RX_FAIL(c, "regex quantifier at offset %zu has nothing to repeat", c->pos);
				goto done;
			}
			continue;
		}
		if (quant_at(c)) {
			RX_FAIL(c, "regex quantifier at offset %zu has nothing to repeat", at);
			goto done;
		}
		if (ch == '(') {
			atom = parse_group(c, &w);
		} else if (ch == '[') {
			atom = parse_class(c);
		} else if (ch == '.') {
			rx_rset s = { 0 };
			c->pos++;
			if (rset_add(c, &s, '\n', '\n') == 0 && rset_finish(c, &s, true) == 0)
				atom = mk_set(c, &s);
			free(s.r);
		} else if (ch == '\\') {
			uint32_t cp = 0;
			rx_rset s = { 0 };
			enum rx_esc e = parse_escape(c, false, &cp, &s);
			if (e == ESC_START || e == ESC_END) {
				free(s.r);
				if (quant_at(c)) {
					RX_FAIL(c, "regex quantifier at offset %zu has nothing to repeat", c->pos);
					goto done;
				}
				continue;
			}
			if (e == ESC_CHAR) {
				if (cp >= RX_SURR_LO && cp <= RX_SURR_HI)
					RX_FAIL(c, "regex escape at offset %zu is a surrogate (U+%04X), which UTF-8 text never holds",
					        at, (unsigned)cp);
				else
					atom = mk_char(c, cp);
			} else if (e == ESC_SET) {
				if (rset_finish(c, &s, false) == 0)
					atom = mk_set(c, &s);
			}
			free(s.r);
		} else {
			uint32_t cp;
			c->pos += utf8_decode(c->s + at, c->len - at, &cp);
			atom = mk_char(c, cp);
		}
		if (!atom)
			goto done;
		atom = parse_repeat(c, atom, &w);
		if (!atom || vec_push(c, &items, atom) != 0)
			goto done;
		if (w > *weight)
			*weight = w;
	}
	r = mk_cat(c, items.p, items.n);
done:
	free(items.p);
	return c->failed ? NULL : r;
}

static rx_node *parse_alt(rx *c, int32_t *weight)
{
	rx_vec alts = { 0 };
	rx_node *r = NULL;
	*weight = 1;
	for (;;) {
		int32_t w;
		rx_node *s = parse_seq(c, &w);
		if (!s || vec_push(c, &alts, s) != 0)
			goto done;
		if (w > *weight)
			*weight = w;
		if (peek(c, 0) != '|')
			break;
		c->pos++;
	}
	r = mk_alt(c, alts.p, alts.n);
done:
	free(alts.p);
	return c->failed ? NULL : r;
}

/* ---- the writer ---- */

static void put(rx *c, const char *s, size_t n)
{
	if (c->failed)
		return;
	if (c->out->n - c->out_start + n > RX_MAX_GBNF) {
		RX_FAIL(c, "%s would become more than %u bytes of GBNF", c->what, RX_MAX_GBNF);
		return;
	}
	if (aah_bytebuf_put(c->out, s, n) != 0)
		rx_oom(c);
}

static void puts_(rx *c, const char *s)
{
	put(c, s, strlen(s));
}

/* A code point inside "…" and inside […], as every front end spells it (gbnf_literal_cp, gbnf_class_cp). */
static void put_lit_cp(rx *c, uint32_t cp)
{
	char b[12];
	put(c, b, (size_t)gbnf_literal_cp(b, cp));
}

static void put_class_cp(rx *c, uint32_t cp)
{
	char b[12];
	put(c, b, (size_t)gbnf_class_cp(b, cp));
}

static void put_ranges(rx *c, const rx_range *r, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		put_class_cp(c, r[i].lo);
		if (r[i].hi == r[i].lo)
			continue;
		if (r[i].hi > r[i].lo + 1)
			puts_(c, "-");
		put_class_cp(c, r[i].hi);
	}
}

/* A class as […] or as [^…], whichever lists fewer ranges: `.` is [^\x0A], not three ranges. The complement left
 * out of [^…] omits the surrogates, which match nothing either way. */
static void put_class(rx *c, const rx_node *n)
{
	rx_rset comp = { 0 };
	for (uint32_t i = 0; i < n->n_ranges; i++)
		if (rset_add(c, &comp, n->ranges[i].lo, n->ranges[i].hi) != 0)
			return;
	if (rset_finish(c, &comp, true) != 0) {
		free(comp.r);
		return;
	}
	if (comp.n < n->n_ranges && comp.n > 0) {
		puts_(c, "[^");
		put_ranges(c, comp.r, comp.n);
	} else {
		puts_(c, "[");
		put_ranges(c, n->ranges, n->n_ranges);
	}
	puts_(c, "]");
	free(comp.r);
}

/* Counts the edges into every node reachable from root (iteratively: the shared suffix chains are deep). */
static void count_refs(rx *c, rx_node *root)
{
	rx_vec stack = { 0 };
	root->seen = true;
	if (vec_push(c, &stack, root) != 0)
		return;
	while (stack.n && !c->failed) {
		rx_node *n = stack.p[--stack.n];
		for (uint32_t i = 0; i < n->n_kids; i++) {
			rx_node *k = n->kids[i];
			k->refs++;
			if (!k->seen) {
				k->seen = true;
				if (vec_push(c, &stack, k) != 0)
					break;
			}
		}
	}
	free(stack.p);
}

enum rx_ctx { CTX_TOP, CTX_SEQ, CTX_ATOM };   /* where a node is written: alternatives, a sequence, before a postfix */

static void put_body(rx *c, rx_node *n, enum rx_ctx ctx, int depth);

static void put_ref(rx *c, const rx_node *n)
{
	char b[32];
	snprintf(b, sizeof b, "-%u", (unsigned)n->rule);
	puts_(c, c->name);
	puts_(c, b);
}

/* Whether n is written as a reference to its own rule: a shared composite node (written once, referred to from
 * everywhere), or one nested too deep for a reader to follow (or an engine's parser to recurse into). */
static bool as_rule(rx *c, rx_node *n, int depth)
{
	if (n->rule)
		return true;
	/* a character, a class, or one repeated, is as short written again as referred to */
	bool small = n->kind == RX_CHAR || n->kind == RX_CLASS ||
	             (n->kind == RX_REPEAT && (n->kids[0]->kind == RX_CHAR || n->kids[0]->kind == RX_CLASS));
	if (small || n->kind == RX_EMPTY || (n->refs <= 1 && depth <= RX_MAX_INLINE))
		return false;
	n->rule = ++c->n_rules;
	return vec_push(c, &c->queue, n) == 0;
}

static void put_node(rx *c, rx_node *n, enum rx_ctx ctx, int depth)
{
	if (as_rule(c, n, depth))
		put_ref(c, n);
	else
		put_body(c, n, ctx, depth);
}

/* The items of a sequence, inline concatenations flattened into it, runs of characters as one literal. *open: a
 * literal is open. */
static void put_seq(rx *c, rx_node *n, int depth, bool *open, bool *first)
{
	for (uint32_t i = 0; i < n->n_kids && !c->failed; i++) {
		rx_node *k = n->kids[i];
		bool inline_cat = k->kind == RX_CAT && !as_rule(c, k, depth + 1);
		if (inline_cat) {
			put_seq(c, k, depth + 1, open, first);
			continue;
		}
		if (k->kind == RX_CHAR && *open) {
			put_lit_cp(c, k->cp);
			continue;
		}
		if (*open)
			puts_(c, "\"");
		*open = false;
		if (!*first)
			puts_(c, " ");
		*first = false;
		if (k->kind == RX_CHAR) {
			puts_(c, "\"");
			put_lit_cp(c, k->cp);
			*open = true;
		} else {
			put_node(c, k, CTX_SEQ, depth + 1);
		}
	}
}

static void put_alts(rx *c, rx_node *n, int depth, bool *first)
{
	for (uint32_t i = 0; i < n->n_kids && !c->failed; i++) {
		rx_node *k = n->kids[i];
		if (k->kind == RX_ALT && !as_rule(c, k, depth + 1)) {
			put_alts(c, k, depth + 1, first);
			continue;
		}
		if (!*first)
			puts_(c, " | ");
		*first = false;
		put_node(c, k, CTX_SEQ, depth + 1);
	}
}

static void put_body(rx *c, rx_node *n, enum rx_ctx ctx, int depth)
{
	switch (n->kind) {
	case RX_EMPTY:
		puts_(c, "\"\"");
		break;
	case RX_CHAR:
		puts_(c, "\"");
		put_lit_cp(c, n->cp);
		puts_(c, "\"");
		break;
	case RX_CLASS:
		put_class(c, n);
		break;
	case RX_CAT: {
		bool open = false, first = true;
		if (ctx == CTX_ATOM)
			puts_(c, "(");
		put_seq(c, n, depth, &open, &first);
		if (open)
			puts_(c, "\"");
		if (ctx == CTX_ATOM)
			puts_(c, ")");
		break;
	}
	case RX_ALT: {
		bool first = true;
		if (ctx != CTX_TOP)
			puts_(c, "(");
		put_alts(c, n, depth, &first);
		if (ctx != CTX_TOP)
			puts_(c, ")");
		break;
	}
	case RX_REPEAT: {
		char b[32];
		if (ctx == CTX_ATOM)
			puts_(c, "(");
		put_node(c, n->kids[0], CTX_ATOM, depth + 1);
		if (n->min == 0 && n->max < 0)
			snprintf(b, sizeof b, "*");
		else if (n->min == 1 && n->max < 0)
			snprintf(b, sizeof b, "+");
		else if (n->min == 0 && n->max == 1)
			snprintf(b, sizeof b, "?");
		else if (n->max < 0)
			snprintf(b, sizeof b, "{%d,}", (int)n->min);
		else if (n->min == n->max)
			snprintf(b, sizeof b, "{%d}", (int)n->min);
		else
			snprintf(b, sizeof b, "{%d,%d}", (int)n->min, (int)n->max);
		puts_(c, b);
		if (ctx == CTX_ATOM)
			puts_(c, ")");
		break;
	}
	}
}

static bool rule_name_ok(const char *name)
{
	if (!name || !*name)
		return false;
	for (const char *p = name; *p; p++)
		if (!is_alpha((unsigned char)*p) && !is_digit((unsigned char)*p) && *p != '-' && *p != '_')
			return false;
	return true;
}

int regex_gbnf(aah_bytebuf *out, const char *name, const char *re, size_t len, char *err, size_t err_len)
{
	rx c = { .s = (const unsigned char *)re, .len = len, .err = err, .err_len = err_len, .out = out,
	         .out_start = out->n, .name = name, .what = "regex" };
	if (err && err_len)
		err[0] = 0;
	if (!rule_name_ok(name)) {
		aah_errf(err, err_len, "rule name '%s' is not letters, digits, '-' and '_'", name ? name : "(null)");
		return -1;
	}
	if (!re && len) {
		aah_errf(err, err_len, "regex is NULL");
		return -1;
	}
	if (len > RX_MAX_GBNF) {
		aah_errf(err, err_len, "regex of %zu bytes is longer than %u", len, RX_MAX_GBNF);
		return -1;
	}
	size_t bad = len ? utf8_invalid_at(c.s, len) : 0;
	if (bad < len) {
		aah_errf(err, err_len, "regex is not valid UTF-8 at offset %zu", bad);
		return -1;
	}
	c.empty = node_new(&c, RX_EMPTY);
	if (c.empty)
		c.empty->nullable = true;
	int32_t weight;
	rx_node *root = c.empty ? parse_alt(&c, &weight) : NULL;
	if (root && c.pos < len)   /* parse_alt stops only at the end or at a ')' no '(' opened */
		RX_FAIL(&c, "regex unbalanced ')' at offset %zu", c.pos);
	if (!c.failed) {
		count_refs(&c, root);
		puts_(&c, name);
		puts_(&c, " ::= ");
		put_body(&c, root, CTX_TOP, 0);
		puts_(&c, "\n");
		for (uint32_t i = 0; i < c.queue.n && !c.failed; i++) {
			rx_node *n = c.queue.p[i];
			put_ref(&c, n);
			puts_(&c, " ::= ");
			put_body(&c, n, CTX_TOP, 0);
			puts_(&c, "\n");
		}
	}
	int rc = c.failed ? -1 : 0;
	rx_free(&c);
	return rc;
}

char *regex_to_gbnf(const char *re, size_t len, char *err, size_t err_len)
{
	aah_bytebuf b = { 0 };
	if (regex_gbnf(&b, "root", re, len, err, err_len) != 0 || aah_bytebuf_put(&b, "", 1) != 0) {
		if (b.oom)
			aah_errf(err, err_len, "out of memory");
		aah_bytebuf_free(&b);
		return NULL;
	}
	return (char *)b.p;
}

char *choice_to_gbnf(const char *const *s, const size_t *len, size_t n, char *err, size_t err_len)
{
	if (err && err_len)
		err[0] = 0;
	if (n == 0 || !s || !len) {
		aah_errf(err, err_len, "no choices: at least one string is needed");
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		if (!s[i] && len[i]) {
			aah_errf(err, err_len, "choice %zu is NULL", i);
			return NULL;
		}
		size_t bad = len[i] ? utf8_invalid_at((const unsigned char *)s[i], len[i]) : 0;
		if (bad < len[i]) {
			aah_errf(err, err_len, "choice %zu is not valid UTF-8 at byte %zu", i, bad);
			return NULL;
		}
	}
	aah_bytebuf b = { 0 };
	rx c = { .out = &b, .err = err, .err_len = err_len, .what = "choices" };
	puts_(&c, "root ::= ");
	for (size_t i = 0; i < n && !c.failed; i++) {
		const unsigned char *p = (const unsigned char *)s[i];
		puts_(&c, i ? " | \"" : "\"");
		for (size_t j = 0; j < len[i];) {
			uint32_t cp;
			j += utf8_decode(p + j, len[i] - j, &cp);
			put_lit_cp(&c, cp);
		}
		puts_(&c, "\"");
	}
	puts_(&c, "\n");
	if (!c.failed && aah_bytebuf_put(&b, "", 1) != 0)
		rx_oom(&c);
	if (c.failed) {
		aah_bytebuf_free(&b);
		return NULL;
	}
	return (char *)b.p;
}
