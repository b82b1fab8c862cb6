/* engine/grammar/json_schema_shapes.c — one type's branch of a JSON Schema as GBNF (json_schema_internal.h): objects
 * (declared properties in order, the keys additionalProperties allows after them), arrays (prefixItems, items and
 * their counts), strings (lengths, format, pattern), integers (exact ranges) and numbers (the bounds 0). */
#include "engine/grammar/json_schema_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytebuf.h"
#include "engine/grammar/regex.h"

/* ---- numbers ---- */

/* lo and hi of an integer's bounds, clamped to the 16-digit numerals; false when none is left. */
static bool int_bounds(const json_t *s, int64_t *lo, int64_t *hi)
{
	const double big = 1e17;
	*lo = -JS_INT_MAX;
	*hi = JS_INT_MAX;
	const char *kws[] = { "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum" };
	for (int k = 0; k < 4; k++) {
		const json_t *v = json_object_get(s, kws[k]);
		if (!v)
			continue;
		bool exact = json_is_integer(v);
		double d = exact ? 0 : json_real_value(v);
		int64_t x;
		if (exact)
			x = json_integer_value(v);
		else if (d >= big)
			x = (int64_t)big;
		else if (d <= -big)
			x = -(int64_t)big;
		else
			x = k < 2 ? (int64_t)ceil(d) : (int64_t)floor(d);
		if (x > (int64_t)big)
			x = (int64_t)big;
		if (x < -(int64_t)big)
			x = -(int64_t)big;
		/* exclusive: one past the bound, unless a fraction already moved it past (ceil(2.5) = 3 > 2.5) */
		if (k == 1 && (exact || (double)x == d))
			x++;
		if (k == 3 && (exact || (double)x == d))
			x--;
		if (k < 2 && x > *lo)
			*lo = x;
		if (k >= 2 && x < *hi)
			*hi = x;
	}
	return *lo <= *hi;
}

int js_integer_branch(js_cx *c, const json_t *s, const char *name, int32_t seq, int32_t slot, const char **out)
{
	int64_t lo, hi;
	*out = NULL;
	if (!int_bounds(s, &lo, &hi))
		return 0;
	if (lo == -JS_INT_MAX && hi == JS_INT_MAX) {
		*out = js_prim(c, PR_INTEGER);
		return 0;
	}
	aah_bytebuf b = { 0 };
	bool first = true;
	if (lo <= 0) {   /* "-" and magnitudes; -0 is 0, so it counts when 0 is in range */
		aah_bytebuf neg = { 0 };
		bool nf = true;
		js_uint_range(&neg, &nf, hi >= 0 ? 0 : -hi, -lo);
		js_printf(&b, "\"-\" ( %.*s )", (int)neg.n, neg.p ? (const char *)neg.p : "");
		aah_bytebuf_free(&neg);
		first = false;
	}
	if (hi >= 0)
		js_uint_range(&b, &first, lo > 0 ? lo : 0, hi);
	*out = js_rule_add(c, name, seq, slot, js_take(c, &b));
	return *out ? 0 : -1;
}

/* number with bounds: only 0 can be a bound of a decimal numeral's value that a grammar keeps exactly (the sign and
 * whether the digits are all zero say it), so any other bound is refused. */
int js_number_branch(js_cx *c, const json_t *s, const char *ptr, const char *name, int32_t seq, int32_t slot,
                     const char **out)
{
	enum { NEG = 1, NZERO = 2, ZERO = 4, POS = 8 };
	unsigned keep = NEG | NZERO | ZERO | POS;
	static const char *const kws[] = { "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum" };
	static const unsigned cut[] = { NEG, NEG | NZERO | ZERO, POS, POS | ZERO | NZERO };
	bool any = false;
	*out = NULL;
	for (int k = 0; k < 4; k++) {
		const json_t *v = json_object_get(s, kws[k]);
		if (!v)
			continue;
		double d = json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v);
		if (d != 0)
			return js_unsupported(c, kws[k], ptr, " for type 'number' unless it is 0 (bounds other than 0 are "
			                                  "enforced on 'integer' only)");
		keep &= ~cut[k];
		any = true;
	}
	if (!any) {
		*out = js_prim(c, PR_NUMBER);
		return 0;
	}
	if (!keep)
		return 0;
	aah_bytebuf b = { 0 };
	const char *sep = "";
	if (keep & NEG) {
		js_printf(&b, "%s\"-\" %s", sep, js_prim(c, PR_NUMBER_POS));
		sep = " | ";
	}
	if (keep & NZERO) {
		js_printf(&b, "%s\"-\" %s", sep, js_prim(c, PR_NUMBER_ZERO));
		sep = " | ";
	}
	if (keep & ZERO) {
		js_printf(&b, "%s%s", sep, js_prim(c, PR_NUMBER_ZERO));
		sep = " | ";
	}
	if (keep & POS)
		js_printf(&b, "%s%s", sep, js_prim(c, PR_NUMBER_POS));
	*out = js_rule_add(c, name, seq, slot, js_take(c, &b));
	return *out ? 0 : -1;
}

/* ---- strings ---- */

static int pattern_rule(js_cx *c, const char *re, size_t len, const char *ptr, const char *name, int32_t seq,
                        const char **out)
{
	/* JSON Schema's pattern is a search, not a whole match: what ^ and $ do not pin may have anything around it.
	 * An anchor next to a top-level | pins one branch only; that is refused rather than guessed. */
	bool start = len > 0 && re[0] == '^', end = false, top_bar = false, in_class = false;
	int depth = 0;
	for (size_t i = 0; i < len; i++) {
		char ch = re[i];
		if (ch == '\\') {
			i++;
		} else if (in_class) {
			in_class = ch != ']';
		} else if (ch == '[') {
			in_class = true;
			if (i + 1 < len && re[i + 1] == '^')
				i++;
			if (i + 1 < len && re[i + 1] == ']')
				i++;
		} else if (ch == '(') {
			depth++;
		} else if (ch == ')') {
			depth--;
		} else if (ch == '|' && depth == 0) {
			top_bar = true;
		} else if (ch == '$' && i == len - 1) {
			end = true;
		}
	}
	if (top_bar && (start || end))
		return js_unsupported(c, "pattern", ptr, ": ^ or $ beside a top-level | (write ^(a|b)$)");
	const char *key = js_fmt(c, "\x01%d%d%s", start, end, re);
	if (!key)
		return -1;
	int32_t same = js_strmap_get(&c->bodies, key);
	const char *re_name;
	if (same >= 0) {
		re_name = c->rules[same].name;
	} else {
		/* "--" keeps regex.c's helper rules (re_name-N) apart from every name made from a pointer */
		const char *sub = js_name_sub(c, name, "pattern");
		const char *base = sub ? js_unique_name(c, sub) : NULL;
		re_name = base ? js_fmt(c, "%s--re", base) : NULL;
		if (!re_name || js_strmap_put(c, &c->names, base, NAME_TAKEN) != 0)
			return -1;
		aah_bytebuf rb = { 0 }, jb = { 0 };
		char rerr[256];
		if (regex_gbnf(&rb, re_name, re, len, rerr, sizeof rerr) != 0) {
			aah_bytebuf_free(&rb);
			return rb.oom ? js_oom(c) : js_unsupported(c, "pattern", ptr, js_fmt(c, ": %s", rerr));
		}
		int rc = js_gbnf_to_json((const char *)rb.p, rb.n, &jb, &c->prims, rerr, sizeof rerr);
		aah_bytebuf_free(&rb);
		if (rc != 0) {
			aah_bytebuf_free(&jb);
			return jb.oom ? js_oom(c) : js_unsupported(c, "pattern", ptr, js_fmt(c, ": %s", rerr));
		}
		int32_t r = js_rule_new(c, js_fmt(c, "%s--block", re_name), seq);
		if (r < 0) {
			aah_bytebuf_free(&jb);
			return -1;
		}
		c->rules[r].raw = true;
		c->rules[r].body = js_take(c, &jb);
		if (!c->rules[r].body || js_account(c, &c->rules[r]) != 0 || js_strmap_put(c, &c->bodies, key, r) != 0)
			return -1;
		c->rules[r].name = re_name;
	}
	const char *kc = start && end ? "" : js_prim(c, PR_KCHAR);
	*out = js_fmt(c, "\"\\\"\" %s%s%s %s%s\"\\\"\"", start ? "" : kc, start ? "" : "* ", re_name, end ? "" : kc,
	              end ? "" : "* ");
	return *out ? 0 : -1;
}

int js_string_branch(js_cx *c, const json_t *s, const char *ptr, const char *name, int32_t seq, int32_t slot,
                     const char **out)
{
	const json_t *minl = json_object_get(s, "minLength"), *maxl = json_object_get(s, "maxLength");
	const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
	int64_t lo = 0, hi = -1;
	*out = NULL;
	if (minl && js_count_value(c, minl, "minLength", ptr, &lo) != 0)
		return -1;
	if (maxl && js_count_value(c, maxl, "maxLength", ptr, &hi) != 0)
		return -1;
	if (hi >= 0 && lo > hi)
		return js_invalid(c, ptr, "minLength %" PRId64 " is greater than maxLength %" PRId64, lo, hi);
	if (fmt) {
		static const struct { const char *name; enum js_prim p; } formats[] = {
			{ "date", PR_DATE_STRING }, { "time", PR_TIME_STRING }, { "date-time", PR_DATE_TIME_STRING },
			{ "uuid", PR_UUID_STRING },
		};
		const char *f = json_string_value(fmt);
		for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
			if (strcmp(f, formats[i].name) != 0)
				continue;
			if (pat || minl || maxl)
				return js_alongside(c, s, KB(KW_PATTERN) | KB(KW_MINLENGTH) | KB(KW_MAXLENGTH), KW_FORMAT, ptr);
			*out = js_prim(c, formats[i].p);
			return 0;
		}
		return js_unsupported(c, "format", ptr, js_fmt(c, " for '%s' (only date, time, date-time and uuid are)", f));
	}
	if (pat) {
		if (minl || maxl)
			return js_alongside(c, s, KB(KW_MINLENGTH) | KB(KW_MAXLENGTH), KW_PATTERN, ptr);
		const char *body = NULL;
		if (pattern_rule(c, json_string_value(pat), json_string_length(pat), ptr, name, seq, &body) != 0)
			return -1;
		*out = js_rule_add(c, name, seq, slot, body);
		return *out ? 0 : -1;
	}
	if (lo == 0 && hi < 0) {
		*out = js_prim(c, PR_STRING);
		return 0;
	}
	if (js_count_repeat(c, hi >= 0 ? hi : lo) != 0)
		return -1;
	aah_bytebuf b = { 0 };
	js_puts(&b, "\"\\\"\" ");
	js_repeat(&b, js_prim(c, PR_CHAR), lo, hi);
	js_puts(&b, hi == 0 ? "\"\\\"\"" : " \"\\\"\"");
	*out = js_rule_add(c, name, seq, slot, js_take(c, &b));
	return *out ? 0 : -1;
}

/* ---- objects ---- */

typedef struct member {
	const char *key;
	size_t len;
	const char *value;
	bool required;
} member;

/* A trie of the declared names, one node per prefix; children come after their parent. */
typedef struct tnode {
	uint32_t cp;
	int32_t child, sibling;   /* first child, next sibling (sorted by cp); -1: none */
	bool is_name;
} tnode;

/* The key of a member that additionalProperties allows beside the declared ones: a canonical JSON string that is
 * none of names. One rule per trie node: close the quote (unless the prefix is a name), go on along the trie, or
 * leave it with any other character and then write anything. */
static const char *key_rule(js_cx *c, const char *name, int32_t seq, const member *names, size_t n)
{
	size_t cap = 1;
	for (size_t i = 0; i < n; i++)
		cap += names[i].len;
	tnode *t = js_alloc(c, cap * sizeof *t);
	if (!t)
		return NULL;
	size_t nt = 1;
	t[0] = (tnode){ .child = -1, .sibling = -1 };
	for (size_t i = 0; i < n; i++) {
		int32_t v = 0;
		for (size_t j = 0; j < names[i].len;) {
			uint32_t cp;
			j += js_utf8_next((const unsigned char *)names[i].key + j, names[i].len - j, &cp);
			int32_t *link = &t[v].child;
			while (*link >= 0 && t[*link].cp < cp)
				link = &t[*link].sibling;
			if (*link < 0 || t[*link].cp != cp) {
				t[nt] = (tnode){ .cp = cp, .child = -1, .sibling = *link };
				*link = (int32_t)nt++;
			}
			v = *link;
		}
		t[v].is_name = true;
	}
	const char **rname = js_alloc(c, nt * sizeof *rname);
	if (!rname)
		return NULL;
	int32_t seq0 = c->seq;   /* written root first, though made from the leaves */
	c->seq += (int32_t)nt;
	const char *tail = js_prim(c, PR_KTAIL), *kchar = js_prim(c, PR_KCHAR);
	for (size_t v = nt; v-- > 0 && !c->failed;) {
		if (t[v].child < 0 && v > 0)
			continue;   /* a leaf is a whole name: written inline as kchar ktail */
		aah_bytebuf b = { 0 };
		if (v == 0)
			js_puts(&b, "\"\\\"\" ( ");
		const char *sep = "";
		if (!t[v].is_name) {
			js_puts(&b, "\"\\\"\"");
			sep = " | ";
		}
		js_rset other = { 0 };
		for (int32_t w = t[v].child; w >= 0; w = t[w].sibling) {
			js_puts(&b, sep);
			sep = " | ";
			js_emitter e = { .b = &b };
			js_em_json_cp(&e, t[w].cp);
			js_em_close(&e);
			if (t[w].child >= 0)
				js_printf(&b, " %s", rname[w]);
			else
				js_printf(&b, " %s %s", kchar, tail);
			js_rset_add(&other, t[w].cp, t[w].cp);
		}
		js_rset_norm(&other);
		js_rset rest = js_rset_complement(&other);
		free(other.r);
		js_puts(&b, sep);
		b.oom |= rest.oom;
		int rc = rest.oom ? -1 : js_canon_set(&b, &rest, &c->prims);
		free(rest.r);
		if (rc != 0) {   /* rest is never empty: it holds every code point but a few */
			aah_bytebuf_free(&b);
			js_oom(c);
			return NULL;
		}
		js_printf(&b, " %s", tail);
		if (v == 0)
			js_puts(&b, " )");
		const char *base = v == 0 ? js_name_sub(c, name, "key") : js_fmt(c, "%s-key-%zu", name, v);
		rname[v] = js_rule_add(c, base, seq0 + (int32_t)v, -1, js_take(c, &b));
		if (!rname[v])
			return NULL;
	}
	return rname[0];
}

static const char *join2(js_cx *c, const char *a, const char *b)
{
	return !a || !b ? NULL : !*a ? b : !*b ? a : js_fmt(c, "%s %s", a, b);
}

static int object_members(js_cx *c, const json_t *s, const char *ptr, const char *name, int depth, int32_t seq,
                          int32_t slot, const char **out)
{
	const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
	const json_t *addl = json_object_get(s, "additionalProperties");
	size_t n_props = json_object_size(props), n_req = json_array_size(req);
	member *m = js_alloc(c, (n_props + n_req + 1) * sizeof *m);
	member *declared = js_alloc(c, (n_props + n_req + 1) * sizeof *declared);
	if (!m || !declared)
		return -1;
	size_t n = 0, n_decl = 0;
	*out = NULL;
	const char *pp = js_ptr_child(c, ptr, "properties", 10);
	const char *key;
	json_t *sub;
	json_object_foreach((json_t *)props, key, sub) {
		size_t len = strlen(key);
		bool required = false;
		for (size_t i = 0; i < n_req; i++) {
			const json_t *r = json_array_get(req, i);
			required |= json_string_length(r) == len && memcmp(json_string_value(r), key, len) == 0;
		}
		declared[n_decl++] = (member){ key, len, NULL, required };
		const char *e;
		if (js_compile(c, sub, js_ptr_child(c, pp, key, len), js_name_child(c, name, key, len), depth + 1, -1, &e) != 0)
			return -1;
		if (!e) {
			if (required)
				return 0;   /* a required property that admits no value: no object does */
			continue;
		}
		m[n++] = (member){ key, len, e, required };
	}
	/* the value any other key may have: additionalProperties' schema (absent: any value) */
	const char *other = NULL;
	if (!addl || json_is_true(addl))
		other = js_prim(c, PR_VALUE);
	else if (js_compile(c, addl, js_ptr_child(c, ptr, "additionalProperties", 20), js_name_sub(c, name, "additional"),
	                 depth + 1, -1, &other) != 0)
		return -1;
	for (size_t i = 0; i < n_req; i++) {   /* required names with no schema of their own: other's value */
		const json_t *r = json_array_get(req, i);
		if (json_object_getn(props, json_string_value(r), json_string_length(r)))
			continue;
		if (!other)
			return 0;
		declared[n_decl++] = (member){ json_string_value(r), json_string_length(r), NULL, true };
		m[n++] = (member){ json_string_value(r), json_string_length(r), other, true };
	}
	const char *ws = js_prim(c, PR_WS);
	const char *extra = NULL;   /* one more member: key ws ":" ws value */
	if (other) {
		const char *k = n_decl ? key_rule(c, name, seq, declared, n_decl) : js_prim(c, PR_STRING);
		extra = k ? js_fmt(c, "%s %s \":\" %s %s", k, ws, ws, other) : NULL;
		if (!extra)
			return -1;
	}
	const char **kv = js_alloc(c, (n + 1) * sizeof *kv);
	if (!kv)
		return -1;
	for (size_t i = 0; i < n; i++) {
		const char *k = js_json_string(c, m[i].key, m[i].len);
		if (!k || !(kv[i] = js_fmt(c, "%s ws \":\" ws %s", k, m[i].value)))
			return -1;
	}
	/* L: the first required member (n: none). The members before it are optional, so the object's first member is
	 * any of 0..L (or, with none required, an extra one); after member j comes rest(j+1): members j+1.. each with
	 * its comma, optional ones in ( )?, then the extras. rest(i) for i <= L is a rule, shared by the alternative
	 * that starts at i-1 and by rest(i-1), which keeps the grammar linear in the number of properties. */
	size_t L = n;
	for (size_t i = 0; i < n; i++)
		if (m[i].required) {
			L = i;
			break;
		}
	const char *tail = extra ? js_fmt(c, "( ws \",\" ws %s )*", extra) : "";
	const char **rest = js_alloc(c, (n + 2) * sizeof *rest);
	if (!tail || !rest)
		return -1;
	rest[n] = tail;
	if (L < n) {
		const char *flat = tail;
		for (size_t i = n; i-- > L + 1;) {
			const char *piece = m[i].required ? js_fmt(c, "ws \",\" ws %s", kv[i]) : js_fmt(c, "( ws \",\" ws %s )?", kv[i]);
			flat = join2(c, piece, flat);
		}
		rest[L + 1] = flat;
	}
	int32_t seq0 = c->seq;   /* written in member order, though made from the last */
	c->seq += (int32_t)n + 1;
	for (size_t i = (L < n ? L : n - (n > 0)); i >= 1 && i < n; i--) {
		const char *piece = m[i].required ? js_fmt(c, "ws \",\" ws %s", kv[i]) : js_fmt(c, "( ws \",\" ws %s )?", kv[i]);
		char suffix[32];
		snprintf(suffix, sizeof suffix, "rest-%zu", i);
		rest[i] = js_rule_add(c, js_name_sub(c, name, suffix), seq0 + (int32_t)i, -1, join2(c, piece, rest[i + 1]));
		if (!rest[i])
			return -1;
	}
	aah_bytebuf b = { 0 };
	size_t alts = 0;
	for (size_t j = 0; j < n && j <= L; j++, alts++) {
		const char *a = join2(c, kv[j], rest[j + 1]);
		if (!a) {
			aah_bytebuf_free(&b);
			return -1;
		}
		js_printf(&b, "%s%s", alts ? " | " : "", a);
	}
	if (L == n && extra) {
		js_printf(&b, "%s%s", alts ? " | " : "", join2(c, extra, tail));
		alts++;
	}
	const char *first = alts ? js_take(c, &b) : "";
	if (!first)
		return -1;
	const char *body;
	if (!alts)
		body = "\"{\" ws \"}\"";
	else if (alts > 1)
		first = js_fmt(c, "( %s )", first);
	if (alts)
		body = L < n ? js_fmt(c, "\"{\" ws %s ws \"}\"", first) : js_fmt(c, "\"{\" ws ( %s ws )? \"}\"", first);
	*out = js_rule_add(c, name, seq, slot, body);
	return *out ? 0 : -1;
}

int js_object_branch(js_cx *c, const json_t *s, const char *ptr, const char *name, int depth, int32_t seq,
                     int32_t slot, const char **out)
{
	const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
	const json_t *addl = json_object_get(s, "additionalProperties");
	*out = NULL;
	if (!props && !req && (!addl || json_is_true(addl))) {
		*out = js_prim(c, PR_OBJECT);
		return 0;
	}
	const js_guard *saved = c->unguarded;   /* "{" comes first: a $ref inside is no left recursion */
	c->unguarded = NULL;
	int rc = object_members(c, s, ptr, name, depth, seq, slot, out);
	c->unguarded = saved;
	return rc;
}

/* ---- arrays ---- */

static int array_items(js_cx *c, const json_t *s, const char *ptr, const char *name, int depth, int32_t seq,
                       int32_t slot, const char **out)
{
	const json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
	const json_t *minv = json_object_get(s, "minItems"), *maxv = json_object_get(s, "maxItems");
	int64_t lo = 0, hi = -1;
	*out = NULL;
	if (minv && js_count_value(c, minv, "minItems", ptr, &lo) != 0)
		return -1;
	if (maxv && js_count_value(c, maxv, "maxItems", ptr, &hi) != 0)
		return -1;
	if (hi >= 0 && lo > hi)
		return js_invalid(c, ptr, "minItems %" PRId64 " is greater than maxItems %" PRId64, lo, hi);
	size_t k = json_array_size(prefix);
	const char **e = js_alloc(c, (k + 1) * sizeof *e);
	if (!e)
		return -1;
	for (size_t j = 0; j < k; j++) {
		char suffix[32];
		snprintf(suffix, sizeof suffix, "item-%zu", j);
		if (js_compile(c, json_array_get(prefix, j), js_ptr_index(c, ptr, "prefixItems", j), js_name_sub(c, name, suffix),
		            depth + 1, -1, &e[j]) != 0)
			return -1;
		if (!e[j]) {   /* no value fits item j: the array stops before it */
			k = j;
			if (hi < 0 || (int64_t)j < hi)
				hi = (int64_t)j;
			break;
		}
	}
	const char *item = NULL;
	if (!items || json_is_true(items))
		item = js_prim(c, PR_VALUE);
	else if (js_compile(c, items, js_ptr_child(c, ptr, "items", 5), js_name_sub(c, name, "item"), depth + 1, -1, &item) != 0)
		return -1;
	if (!item && (hi < 0 || hi > (int64_t)k))
		hi = (int64_t)k;
	if (hi >= 0 && (int64_t)k > hi)
		k = (size_t)hi;
	if (hi >= 0 && lo > hi)
		return 0;
	if (!prefix && !minv && !maxv && item == js_prims[PR_VALUE].name) {
		*out = js_prim(c, PR_ARRAY);
		return 0;
	}
	const char *ws = js_prim(c, PR_WS);
	if (js_count_repeat(c, 5 * (hi >= 0 ? hi : lo)) != 0)   /* ( ws "," ws item ): about 5 symbols a copy */
		return -1;
	const char *body_req;   /* the elements, given there is at least one */
	aah_bytebuf b = { 0 };
	if (hi == 0) {
		*out = js_rule_add(c, name, seq, slot, js_fmt(c, "\"[\" %s \"]\"", ws));
		return *out ? 0 : -1;
	}
	if (k == 0) {
		js_puts(&b, item);
		const char *more = js_fmt(c, "( ws \",\" ws %s )", item);
		if (!more)
			return -1;
		aah_bytebuf r = { 0 };
		js_repeat(&r, more, lo > 1 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
		if (r.n) {
			js_puts(&b, " ");
			js_put(&b, (const char *)r.p, r.n);
		}
		aah_bytebuf_free(&r);
		body_req = js_take(c, &b);
	} else {
		/* after the k prefix items, tmin..tmax more of items */
		int64_t tmin = lo > (int64_t)k ? lo - (int64_t)k : 0, tmax = hi < 0 ? -1 : hi - (int64_t)k;
		const char *inner = "";
		if (item && tmax != 0) {
			const char *more = js_fmt(c, "( ws \",\" ws %s )", item);
			if (!more)
				return -1;
			js_repeat(&b, more, tmin, tmax);
			inner = js_take(c, &b);
		}
		int32_t seq0 = c->seq;   /* written in item order, though made from the last */
		c->seq += (int32_t)k;
		for (size_t j = k; j-- > 1 && inner;) {
			const char *seg = join2(c, js_fmt(c, "ws \",\" ws %s", e[j]), inner);
			if ((int64_t)j < lo) {
				inner = seg;
			} else if (k - (size_t)(lo > 1 ? lo : 1) > 4) {   /* many optional items: a rule each, not deep ( )? */
				char suffix[32];
				snprintf(suffix, sizeof suffix, "tuple-%zu", j);
				const char *r = js_rule_add(c, js_name_sub(c, name, suffix), seq0 + (int32_t)j, -1, seg);
				inner = r ? js_fmt(c, "%s?", r) : NULL;
			} else {
				inner = seg ? js_fmt(c, "( %s )?", seg) : NULL;
			}
		}
		body_req = join2(c, e[0], inner);
	}
	if (!body_req)
		return -1;
	const char *body = lo >= 1 ? js_fmt(c, "\"[\" ws %s ws \"]\"", body_req)
	                           : js_fmt(c, "\"[\" ws ( %s ws )? \"]\"", body_req);
	*out = js_rule_add(c, name, seq, slot, body);
	return *out ? 0 : -1;
}

int js_array_branch(js_cx *c, const json_t *s, const char *ptr, const char *name, int depth, int32_t seq,
                    int32_t slot, const char **out)
{
	const js_guard *saved = c->unguarded;   /* "[" comes first */
	c->unguarded = NULL;
	int rc = array_items(c, s, ptr, name, depth, seq, slot, out);
	c->unguarded = saved;
	return rc;
}
