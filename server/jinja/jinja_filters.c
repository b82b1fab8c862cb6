/* server/jinja/jinja_filters.c — Jinja2's filters and tests that chat templates use, each as pallets/jinja's filters.py
 * and tests.py define it (tojson as transformers overrides it: json.dumps with ensure_ascii=False), in one table of
 * names so that the parser refuses an unknown one at load time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja_impl.h"

/* from jinja_builtins.c */
int jx_str_strip(jctx *c, const jnode *at, jv s, jv chars, bool left, bool right, jv *out);
int jx_str_case(jctx *c, const jnode *at, jv s, int mode, jv *out);
int jx_str_replace(jctx *c, const jnode *at, jv s, jv old, jv new_, int64_t count, jv *out);

typedef struct fargs {
	jv *args;
	uint32_t nargs;
	const char **kwnames;
	jv *kwvals;
	uint32_t nkw;
} fargs;

/* The filter's argument at position i (after the value) or keyword name, or NULL. */
static jv *farg(const fargs *a, uint32_t i, const char *name)
{
	if (i < a->nargs) return &a->args[i];
	for (uint32_t k = 0; k < a->nkw; k++)
		if (name && strcmp(a->kwnames[k], name) == 0) return &a->kwvals[k];
	return NULL;
}

/* str(v) as a new string value (soft_str). */
static int to_str_value(jctx *c, jv v, jv *out)
{
	if (v.kind == JV_STR) { *out = jv_incref(v); return 0; }
	jbuf b = { 0 };
	if (jv_to_str(c, v, &b) < 0) { jbuf_free(c, &b); return -1; }
	return jv_str_take(c, &b, out);
}

static int length_of(jctx *c, const jnode *at, jv v, int64_t *n)
{
	switch (v.kind) {
	case JV_STR: *n = (int64_t)ju_count(JSTR(v)->s, JSTR(v)->len); return 0;
	case JV_LIST:
		if (JLIST(v)->flavor == JL_GEN) return jx_fail(c, JINJA_ERR_RUNTIME, at, "object of type 'generator' has no len()");
		*n = JLIST(v)->n;
		return 0;
	case JV_DICT: *n = JDICT(v)->n; return 0;
	case JV_UNDEF: *n = 0; return 0;
	default: return jx_fail(c, JINJA_ERR_RUNTIME, at, "object of type '%s' has no len()", jv_type_name(v));
	}
}

/* An attribute path "a.b.0" looked up as environment.getitem does for map/selectattr/sort. */
static int attr_path(jctx *c, const jnode *at, jv v, const jstr *path, jv *out)
{
	jv cur = jv_incref(v);
	size_t i = 0;
	while (i <= path->len) {
		const char *dot = memchr(path->s + i, '.', path->len - i);
		size_t e = dot ? (size_t)(dot - path->s) : path->len;
		jv key, next;
		bool digits = e > i;
		for (size_t k = i; k < e; k++) if (path->s[k] < '0' || path->s[k] > '9') digits = false;
		if (digits) key = jv_int(strtoll(path->s + i, NULL, 10));
		else if (jv_str_new(c, path->s + i, e - i, &key) < 0) { jv_decref(c, cur); return -1; }
		int r = jx_getitem(c, at, cur, key, &next);
		jv_decref(c, key);
		jv_decref(c, cur);
		if (r < 0) return -1;
		cur = next;
		i = e + 1;
		if (!dot) break;
	}
	*out = cur;
	return 0;
}

static int tojson_filter(jctx *c, const jnode *at, jv v, const fargs *a, jv *out)
{
	jjson_opts o = { .item_sep = ", ", .item_sep_len = 2, .key_sep = ": ", .key_sep_len = 2 };
	jv *ea = farg(a, 1, "ensure_ascii"), *ind = farg(a, 0, "indent"), *sep = farg(a, 2, "separators"),
	   *sk = farg(a, 3, "sort_keys");
	o.ensure_ascii = ea && jv_truthy(*ea);
	o.sort_keys = sk && jv_truthy(*sk);
	char spaces[64];
	if (ind && ind->kind != JV_NONE) {
		if (ind->kind == JV_INT || ind->kind == JV_BOOL) {
			int64_t n = ind->kind == JV_INT ? ind->i : ind->b;
			if (n < 0) n = 0;
			if (n >= (int64_t)sizeof spaces) return jx_fail(c, JINJA_ERR_RUNTIME, at, "tojson: indent %lld is too large", (long long)n);
			memset(spaces, ' ', (size_t)n);
			o.indent = spaces;
			o.indent_len = (size_t)n;
		} else if (ind->kind == JV_STR) {
			o.indent = JSTR(*ind)->s;
			o.indent_len = JSTR(*ind)->len;
		} else
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "tojson: indent must be an integer or a string");
		o.item_sep = ",";
		o.item_sep_len = 1;
	}
	if (sep && sep->kind != JV_NONE) {
		if (sep->kind != JV_LIST || JLIST(*sep)->n != 2 || JLIST(*sep)->items[0].kind != JV_STR ||
		    JLIST(*sep)->items[1].kind != JV_STR)
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "tojson: separators must be two strings");
		o.item_sep = JSTR(JLIST(*sep)->items[0])->s;
		o.item_sep_len = JSTR(JLIST(*sep)->items[0])->len;
		o.key_sep = JSTR(JLIST(*sep)->items[1])->s;
		o.key_sep_len = JSTR(JLIST(*sep)->items[1])->len;
	}
	jbuf b = { 0 };
	if (jv_tojson(c, at, v, &o, &b, 0) < 0) { jbuf_free(c, &b); return -1; }
	return jv_str_take(c, &b, out);
}

static int join_filter(jctx *c, const jnode *at, jv v, const fargs *a, jv *out)
{
	jv *d = farg(a, 0, "d"), *attr = farg(a, 1, "attribute");
	jlist *items;
	if (jx_iterate(c, at, v, &items) < 0) return -1;
	jbuf b = { 0 }, sep = { 0 };
	int r = d ? jv_to_str(c, *d, &sep) : 0;
	for (uint32_t i = 0; r == 0 && i < items->n; i++) {
		if (i) r = jbuf_put(c, &b, sep.p ? sep.p : "", sep.len);
		jv it = jv_incref(items->items[i]);
		if (r == 0 && attr && attr->kind == JV_STR) {
			jv x;
			r = attr_path(c, at, it, JSTR(*attr), &x);
			jv_decref(c, it);
			it = r == 0 ? x : jv_none();
		}
		if (r == 0) r = jv_to_str(c, it, &b);
		jv_decref(c, it);
	}
	if (r == 0) r = jx_step(c, at, b.len / 64);
	jbuf_free(c, &sep);
	jv_decref(c, jv_obj(JV_LIST, items));
	if (r < 0) { jbuf_free(c, &b); return -1; }
	return jv_str_take(c, &b, out);
}

static bool iterable(jv v)
{
	return v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
}

/* The TypeError a walk over v raises, as a static message (a broken generator keeps it). */
static const char *not_iterable(jv v)
{
	switch (v.kind) {
	case JV_NONE: return "'NoneType' object is not iterable";
	case JV_BOOL: return "'bool' object is not iterable";
	case JV_INT: return "'int' object is not iterable";
	case JV_FLOAT: return "'float' object is not iterable";
	case JV_NS: return "'Namespace' object is not iterable";
	default: return "the object is not iterable";
	}
}

static const char *unhashable(jv k)
{
	return k.kind == JV_DICT ? "unhashable type: 'dict'" : k.kind == JV_NS ? "unhashable type: 'Namespace'"
	                                                                      : "unhashable type: 'list'";
}

/* A generator (what Jinja's filters return lazily) that yields nothing, or fails as it is walked (broken: the
 * type name of what it would walk, or a message starting with 'C'). */
static int gen_empty(jctx *c, const char *broken, jv *out)
{
	jlist *l = jv_list_new(c, 0, false);
	if (!l) return -1;
	l->flavor = JL_GEN;
	l->broken = broken;
	*out = jv_obj(JV_LIST, l);
	return 0;
}

/* select, reject, selectattr, rejectattr, map: a generator. Like Jinja's, they yield nothing for a false value
 * and fail only when walked for a value that is not iterable. */
static int select_filter(jctx *c, const jnode *at, jv v, const fargs *a, bool attr, bool reject, bool map, jv *out)
{
	if (JV_IS_GEN(v) && JLIST(v)->broken) return gen_empty(c, JLIST(v)->broken, out);   /* fails when walked */
	if (!jv_truthy(v)) return gen_empty(c, NULL, out);
	if (!iterable(v)) return gen_empty(c, not_iterable(v), out);
	jlist *items;
	if (jx_iterate(c, at, v, &items) < 0) return -1;
	jlist *res = jv_list_new(c, 0, false);
	if (!res) { jv_decref(c, jv_obj(JV_LIST, items)); return -1; }
	res->flavor = JL_GEN;
	*out = jv_obj(JV_LIST, res);
	uint32_t first = 0;
	const jstr *path = NULL;
	jv *mattr = map ? farg(a, UINT32_MAX, "attribute") : NULL, *mdefault = map ? farg(a, UINT32_MAX, "default") : NULL;
	if (attr || (map && mattr)) {
		jv *p = map ? mattr : farg(a, 0, NULL);
		if (!p || p->kind != JV_STR) { jv_decref(c, jv_obj(JV_LIST, items)); return jx_fail(c, JINJA_ERR_RUNTIME, at, "an attribute name is needed"); }
		path = JSTR(*p);
		first = map ? 0 : 1;
	}
	const char *name = NULL;
	if (!(map && mattr)) {
		jv *t = farg(a, first, NULL);
		if (t && t->kind != JV_STR) { jv_decref(c, jv_obj(JV_LIST, items)); return jx_fail(c, JINJA_ERR_RUNTIME, at, "a filter or test name must be a string"); }
		if (t) name = JSTR(*t)->s;
		if (map && !name) { jv_decref(c, jv_obj(JV_LIST, items)); return jx_fail(c, JINJA_ERR_RUNTIME, at, "map needs a filter name or attribute="); }
		if (name && !(map ? jx_filter_known(name) : jx_test_known(name))) {
			jv_decref(c, jv_obj(JV_LIST, items));
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "no %s named '%s'", map ? "filter" : "test", name);
		}
		first++;
	}
	int r = 0;
	for (uint32_t i = 0; r == 0 && i < items->n; i++) {
		jv it = jv_incref(items->items[i]), x = jv_incref(it);
		if (path) {
			jv_decref(c, x);
			r = attr_path(c, at, it, path, &x);
			if (r < 0) { jv_decref(c, it); break; }
			if (map && x.kind == JV_UNDEF && mdefault) { x = jv_incref(*mdefault); }
		}
		if (map) {
			if (name) {
				jv y;
				r = jx_filter(c, at, name, x, a->args + first, a->nargs > first ? a->nargs - first : 0, NULL, NULL, 0, &y);
				jv_decref(c, x);
				x = r == 0 ? y : jv_none();
			}
			if (r == 0) r = jv_list_push(c, res, x);
			else jv_decref(c, x);
			jv_decref(c, it);
			continue;
		}
		int keep;
		if (name) r = jx_test(c, at, name, x, a->args + first, a->nargs > first ? a->nargs - first : 0, &keep);
		else keep = jv_truthy(x);
		jv_decref(c, x);
		if (r == 0 && (keep != 0) != reject) r = jv_list_push(c, res, it);
		else jv_decref(c, it);
	}
	jv_decref(c, jv_obj(JV_LIST, items));
	return r;
}

/* A sort key: the item, its attribute, and lower-cased when a string and not case_sensitive. */
static int sort_key(jctx *c, const jnode *at, jv it, const jstr *path, bool cs, jv *out)
{
	jv x;
	if (path) { if (attr_path(c, at, it, path, &x) < 0) return -1; }
	else x = jv_incref(it);
	if (!cs && x.kind == JV_STR) {
		jv y;
		int r = jx_str_case(c, at, x, 1, &y);
		jv_decref(c, x);
		if (r < 0) return -1;
		x = y;
	}
	*out = x;
	return 0;
}

static int sort_filter(jctx *c, const jnode *at, jv v, const fargs *a, jv *out)
{
	jv *rev = farg(a, 0, "reverse"), *cs = farg(a, 1, "case_sensitive"), *attr = farg(a, 2, "attribute");
	jlist *items;
	if (jx_iterate(c, at, v, &items) < 0) return -1;
	uint32_t n = items->n;
	jlist *keys = jv_list_new(c, n, false), *res = jv_list_new(c, n, false);
	int r = keys && res ? 0 : -1;
	for (uint32_t i = 0; r == 0 && i < n; i++) {
		jv k;
		r = sort_key(c, at, items->items[i], attr && attr->kind == JV_STR ? JSTR(*attr) : NULL, cs && jv_truthy(*cs), &k);
		if (r == 0) r = jv_list_push(c, keys, k);
		if (r == 0) r = jv_list_push(c, res, jv_incref(items->items[i]));
	}
	if (r == 0) r = jx_step(c, at, (uint64_t)n * n / 64);
	/* a stable insertion sort: Python's sort is stable; n is bounded by the step limit charged above */
	bool desc = rev && jv_truthy(*rev);
	for (uint32_t i = 1; r == 0 && i < n; i++) {
		jv k = keys->items[i], x = res->items[i];
		uint32_t j = i;
		while (j > 0) {
			int cmp;
			if (jv_cmp(c, at, keys->items[j - 1], k, &cmp) < 0) { r = -1; break; }
			if (desc ? cmp >= 0 : cmp <= 0) break;
			keys->items[j] = keys->items[j - 1];
			res->items[j] = res->items[j - 1];
			j--;
		}
		keys->items[j] = k;
		res->items[j] = x;
	}
	jv_decref(c, jv_obj(JV_LIST, items));
	if (keys) jv_decref(c, jv_obj(JV_LIST, keys));
	if (r < 0) { if (res) jv_decref(c, jv_obj(JV_LIST, res)); return -1; }
	*out = jv_obj(JV_LIST, res);
	return 0;
}

static int html_escape(jctx *c, jv v, jv *out)
{
	jv s;
	if (to_str_value(c, v, &s) < 0) return -1;
	jbuf b = { 0 };
	int r = 0;
	for (size_t i = 0; r == 0 && i < JSTR(s)->len; i++) {
		char ch = JSTR(s)->s[i];
		switch (ch) {
		case '&': r = jbuf_put(c, &b, "&amp;", 5); break;
		case '<': r = jbuf_put(c, &b, "&lt;", 4); break;
		case '>': r = jbuf_put(c, &b, "&gt;", 4); break;
		case '"': r = jbuf_put(c, &b, "&#34;", 5); break;
		case '\'': r = jbuf_put(c, &b, "&#39;", 5); break;
		default: r = jbuf_putc(c, &b, ch);
		}
	}
	jv_decref(c, s);
	if (r < 0) { jbuf_free(c, &b); return -1; }
	return jv_str_take(c, &b, out);
}

static int indent_filter(jctx *c, const jnode *at, jv v, const fargs *a, jv *out)
{
	jv *w = farg(a, 0, "width"), *first = farg(a, 1, "first"), *blank = farg(a, 2, "blank");
	char spaces[128];
	const char *ind = spaces;
	size_t ind_len = 4;
	memset(spaces, ' ', sizeof spaces);
	if (w && w->kind == JV_STR) { ind = JSTR(*w)->s; ind_len = JSTR(*w)->len; }
	else if (w && (w->kind == JV_INT || w->kind == JV_BOOL)) {
		int64_t n = w->kind == JV_INT ? w->i : w->b;
		if (n < 0) n = 0;
		if (n > (int64_t)sizeof spaces) return jx_fail(c, JINJA_ERR_RUNTIME, at, "indent: width %lld is too large", (long long)n);
		ind_len = (size_t)n;
	} else if (w) return jx_fail(c, JINJA_ERR_RUNTIME, at, "indent: width must be an integer or a string");
	jv s;
	if (to_str_value(c, v, &s) < 0) return -1;
	/* lines as str.splitlines() of s + "\n" cuts them */
	jbuf src = { 0 }, b = { 0 };
	int r = jbuf_put(c, &src, JSTR(s)->s, JSTR(s)->len);
	if (r == 0) r = jbuf_putc(c, &src, '\n');
	jv_decref(c, s);
	jv srcv = jv_none(), lines = jv_none();
	if (r == 0) r = jv_str_take(c, &src, &srcv);
	else jbuf_free(c, &src);
	if (r == 0) {
		jv m;
		jmethod *meth = NULL;
		jv f;
		if (jx_getattr(c, at, srcv, "splitlines", 10, &f) < 0) r = -1;
		else {
			meth = (jmethod *)f.o;
			r = jx_call_method(c, at, meth, NULL, 0, NULL, NULL, 0, &m);
			jv_decref(c, f);
			if (r == 0) lines = m;
		}
	}
	bool bl = blank && jv_truthy(*blank);
	for (uint32_t i = 0; r == 0 && lines.kind == JV_LIST && i < JLIST(lines)->n; i++) {
		const jstr *line = JSTR(JLIST(lines)->items[i]);
		if (i) {
			r = jbuf_putc(c, &b, '\n');
			if (r == 0 && (bl || line->len)) r = jbuf_put(c, &b, ind, ind_len);
		}
		if (r == 0) r = jbuf_put(c, &b, line->s, line->len);
	}
	jv_decref(c, lines);
	jv_decref(c, srcv);
	if (r < 0) { jbuf_free(c, &b); return -1; }
	if (first && jv_truthy(*first)) {
		jbuf b2 = { 0 };
		if (jbuf_put(c, &b2, ind, ind_len) < 0 || jbuf_put(c, &b2, b.p ? b.p : "", b.len) < 0) {
			jbuf_free(c, &b);
			jbuf_free(c, &b2);
			return -1;
		}
		jbuf_free(c, &b);
		b = b2;
	}
	return jv_str_take(c, &b, out);
}

static int number_filter(jctx *c, const jnode *at, jv v, const fargs *a, bool want_float, jv *out)
{
	jv *d = farg(a, 0, "default");
	jv dflt = d ? *d : want_float ? jv_float(0) : jv_int(0);
	if (v.kind == JV_UNDEF) {   /* int(Undefined) raises UndefinedError, which int and float do not catch */
		if (v.uname) return jx_fail(c, JINJA_ERR_RUNTIME, at, "'%s' is undefined", v.uname);
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "an undefined value was used");
	}
	double f;
	switch (v.kind) {
	case JV_INT: case JV_BOOL:
		*out = want_float ? jv_float((double)(v.kind == JV_INT ? v.i : v.b)) : jv_int(v.kind == JV_INT ? v.i : v.b);
		return 0;
	case JV_FLOAT:
		if (want_float) { *out = v; return 0; }
		if (!isfinite(v.f) || fabs(v.f) >= 9.2e18) { *out = jv_incref(dflt); return 0; }
		*out = jv_int((int64_t)v.f);
		return 0;
	case JV_STR: {
		const char *s = JSTR(v)->s;
		char *end;
		while (*s == ' ' || *s == '\t' || *s == '\n') s++;
		if (!want_float) {
			long long i = strtoll(s, &end, 10);
			while (*end == ' ' || *end == '\t' || *end == '\n') end++;
			if (end != s && *end == 0) { *out = jv_int(i); return 0; }
		}
		f = strtod(s, &end);
		while (*end == ' ' || *end == '\t' || *end == '\n') end++;
		if (end == s || *end != 0) { *out = jv_incref(dflt); return 0; }
		if (want_float) { *out = jv_float(f); return 0; }
		if (!isfinite(f) || fabs(f) >= 9.2e18) { *out = jv_incref(dflt); return 0; }
		*out = jv_int((int64_t)f);
		return 0;
	}
	default:
		*out = jv_incref(dflt);
		return 0;
	}
	(void)at;
}

static int minmax_filter(jctx *c, const jnode *at, jv v, const fargs *a, bool max, jv *out)
{
	jv *cs = farg(a, 0, "case_sensitive"), *attr = farg(a, 1, "attribute");
	jlist *items;
	if (jx_iterate(c, at, v, &items) < 0) return -1;
	int r = 0;
	jv best = jv_undef(NULL), best_key = jv_none();
	for (uint32_t i = 0; r == 0 && i < items->n; i++) {
		jv k;
		r = sort_key(c, at, items->items[i], attr && attr->kind == JV_STR ? JSTR(*attr) : NULL, cs && jv_truthy(*cs), &k);
		if (r < 0) break;
		int cmp = 0;
		if (i == 0 || (r = jv_cmp(c, at, k, best_key, &cmp)) == 0) {
			if (i == 0 || (max ? cmp > 0 : cmp < 0)) {
				jv_decref(c, best_key);
				jv_decref(c, best);
				best_key = k;
				best = jv_incref(items->items[i]);
				continue;
			}
		}
		jv_decref(c, k);
	}
	jv_decref(c, best_key);
	jv_decref(c, jv_obj(JV_LIST, items));
	if (r < 0) { jv_decref(c, best); return -1; }
	*out = best;
	return 0;
}

int jx_filter(jctx *c, const jnode *at, const char *name, jv v, jv *args, uint32_t nargs, const char **kwnames,
              jv *kwvals, uint32_t nkw, jv *out)
{
	fargs a = { args, nargs, kwnames, kwvals, nkw };
	jv *a0 = farg(&a, 0, NULL);
	if (!strcmp(name, "default") || !strcmp(name, "d")) {
		jv *dv = farg(&a, 0, "default_value"), *boolean = farg(&a, 1, "boolean");
		bool use = v.kind == JV_UNDEF || (boolean && jv_truthy(*boolean) && !jv_truthy(v));
		if (!use) { *out = jv_incref(v); return 0; }
		if (dv) { *out = jv_incref(*dv); return 0; }
		return jv_str_new(c, "", 0, out);
	}
	if (!strcmp(name, "length") || !strcmp(name, "count")) {
		int64_t n = 0;
		if (length_of(c, at, v, &n) < 0) return -1;
		*out = jv_int(n);
		return 0;
	}
	if (!strcmp(name, "tojson")) return tojson_filter(c, at, v, &a, out);
	if (!strcmp(name, "join")) return join_filter(c, at, v, &a, out);
	if (!strcmp(name, "safe")) { *out = jv_incref(v); return 0; }
	if (!strcmp(name, "e") || !strcmp(name, "escape")) return html_escape(c, v, out);
	if (!strcmp(name, "indent")) {
		if (v.kind != JV_STR)   /* Jinja's indent appends "\n" to its value first: only a string can take it */
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "indent needs a string, not %s", jv_type_name(v));
		return indent_filter(c, at, v, &a, out);
	}
	if (!strcmp(name, "int")) return number_filter(c, at, v, &a, false, out);
	if (!strcmp(name, "float")) return number_filter(c, at, v, &a, true, out);
	if (!strcmp(name, "sort")) return sort_filter(c, at, v, &a, out);
	if (!strcmp(name, "dictsort")) {
		/* dictsort(case_sensitive=False, by='key', reverse=False): the items, sorted by key or value */
		jv *cs = farg(&a, 0, "case_sensitive"), *by = farg(&a, 1, "by"), *rev = farg(&a, 2, "reverse");
		if (v.kind != JV_DICT) return jx_fail(c, JINJA_ERR_RUNTIME, at, "'%s' object has no attribute 'items'", jv_type_name(v));
		int pos = 0;
		if (by && by->kind == JV_STR && !strcmp(JSTR(*by)->s, "value")) pos = 1;
		else if (by && !(by->kind == JV_STR && !strcmp(JSTR(*by)->s, "key")))
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "You can only sort by either \"key\" or \"value\"");
		jv f, items;
		if (jx_getattr(c, at, v, "items", 5, &f) < 0) return -1;
		int r = jx_call_method(c, at, (jmethod *)f.o, NULL, 0, NULL, NULL, 0, &items);
		jv_decref(c, f);
		if (r < 0) return -1;
		JLIST(items)->flavor = JL_LIST;
		jv path;
		if (jv_str_new(c, pos ? "1" : "0", 1, &path) < 0) { jv_decref(c, items); return -1; }
		jv sargs[3] = { rev ? *rev : jv_bool(0), cs ? *cs : jv_bool(0), path };
		fargs sa = { sargs, 3, NULL, NULL, 0 };
		r = sort_filter(c, at, items, &sa, out);
		jv_decref(c, path);
		jv_decref(c, items);
		return r;
	}
	if (!strcmp(name, "min") || !strcmp(name, "max")) return minmax_filter(c, at, v, &a, name[1] == 'a', out);
	if (!strcmp(name, "select")) return select_filter(c, at, v, &a, false, false, false, out);
	if (!strcmp(name, "reject")) return select_filter(c, at, v, &a, false, true, false, out);
	if (!strcmp(name, "selectattr")) return select_filter(c, at, v, &a, true, false, false, out);
	if (!strcmp(name, "rejectattr")) return select_filter(c, at, v, &a, true, true, false, out);
	if (!strcmp(name, "map")) return select_filter(c, at, v, &a, false, false, true, out);
	if (!strcmp(name, "attr")) {
		if (!a0 || a0->kind != JV_STR) return jx_fail(c, JINJA_ERR_RUNTIME, at, "attr needs an attribute name");
		/* a real attribute only (getattr), not an item: on a dict, its methods */
		if (v.kind == JV_DICT || v.kind == JV_NS) {
			if (v.kind == JV_NS) return jx_getattr(c, at, v, JSTR(*a0)->s, JSTR(*a0)->len, out);
			jv f;
			if (jx_getattr(c, at, v, JSTR(*a0)->s, JSTR(*a0)->len, &f) < 0) return -1;
			if (f.kind == JV_METHOD) { *out = f; return 0; }
			jv_decref(c, f);
			*out = jv_undef(NULL);
			return 0;
		}
		return jx_getattr(c, at, v, JSTR(*a0)->s, JSTR(*a0)->len, out);
	}
	if (!strcmp(name, "abs")) {
		if (v.kind == JV_INT) {
			if (v.i == INT64_MIN) return jx_fail(c, JINJA_ERR_RUNTIME, at, "integer overflow in abs");
			*out = jv_int(v.i < 0 ? -v.i : v.i);
		} else if (v.kind == JV_BOOL) *out = jv_int(v.b);
		else if (v.kind == JV_FLOAT) *out = jv_float(fabs(v.f));
		else return jx_fail(c, JINJA_ERR_RUNTIME, at, "bad operand type for abs(): '%s'", jv_type_name(v));
		return 0;
	}
	if (!strcmp(name, "round")) {
		int64_t prec = 0;
		jv *p = farg(&a, 0, "precision"), *m = farg(&a, 1, "method");
		if (p && (p->kind == JV_INT || p->kind == JV_BOOL)) prec = p->kind == JV_INT ? p->i : p->b;
		if (prec < 0 || prec > 30) return jx_fail(c, JINJA_ERR_RUNTIME, at, "round: precision %lld is not supported", (long long)prec);
		if (v.kind != JV_INT && v.kind != JV_BOOL && v.kind != JV_FLOAT)
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "round needs a number, not %s", jv_type_name(v));
		bool common = !(m && m->kind == JV_STR) || !strcmp(JSTR(*m)->s, "common");
		if (common && v.kind != JV_FLOAT) { *out = jv_int(v.kind == JV_INT ? v.i : v.b); return 0; }   /* round(int) is an int */
		double x = v.kind == JV_FLOAT ? v.f : (double)(v.kind == JV_INT ? v.i : v.b);
		const char *method = m && m->kind == JV_STR ? JSTR(*m)->s : "common";
		double scale = pow(10, (double)prec);
		if (!strcmp(method, "ceil")) x = ceil(x * scale) / scale;
		else if (!strcmp(method, "floor")) x = floor(x * scale) / scale;
		else if (!strcmp(method, "common")) {
			char buf[400];
			snprintf(buf, sizeof buf, "%.*f", (int)prec, x);   /* correctly rounded, ties to even: Python's round() */
			x = strtod(buf, NULL);
		} else return jx_fail(c, JINJA_ERR_RUNTIME, at, "method must be common, ceil or floor");
		*out = jv_float(x);
		return 0;
	}
	if (!strcmp(name, "first") || !strcmp(name, "last")) {
		if (name[0] == 'l' && JV_IS_GEN(v)) return jx_fail(c, JINJA_ERR_RUNTIME, at, "'generator' object is not reversible");
		jlist *items;
		if (jx_iterate(c, at, v, &items) < 0) return -1;
		*out = items->n ? jv_incref(items->items[name[0] == 'f' ? 0 : items->n - 1]) : jv_undef(NULL);
		jv_decref(c, jv_obj(JV_LIST, items));
		return 0;
	}
	if (!strcmp(name, "list")) {
		jlist *items;
		if (jx_iterate(c, at, v, &items) < 0) return -1;
		if (!items->tuple && v.kind != JV_LIST) { *out = jv_obj(JV_LIST, items); return 0; }
		jlist *l = jv_list_new(c, items->n, false);
		if (!l) { jv_decref(c, jv_obj(JV_LIST, items)); return -1; }
		for (uint32_t i = 0; i < items->n; i++) l->items[l->n++] = jv_incref(items->items[i]);
		jv_decref(c, jv_obj(JV_LIST, items));
		*out = jv_obj(JV_LIST, l);
		return 0;
	}
	if (!strcmp(name, "reverse")) {
		if (v.kind == JV_STR) {
			jv step = jv_int(-1);
			return jx_slice(c, at, v, jv_none(), jv_none(), step, out);
		}
		/* reversed(value) where it can (an iterator: a generator here), else list(value) reversed */
		bool lazy = v.kind == JV_DICT || (v.kind == JV_LIST && !JV_IS_GEN(v));
		jlist *items;
		if (jx_iterate(c, at, v, &items) < 0) return -1;
		jlist *l = jv_list_new(c, items->n, false);
		if (!l) { jv_decref(c, jv_obj(JV_LIST, items)); return -1; }
		for (uint32_t i = items->n; i-- > 0;) l->items[l->n++] = jv_incref(items->items[i]);
		jv_decref(c, jv_obj(JV_LIST, items));
		if (lazy) l->flavor = JL_GEN;
		*out = jv_obj(JV_LIST, l);
		return 0;
	}
	if (!strcmp(name, "items")) {
		if (v.kind == JV_UNDEF) return gen_empty(c, NULL, out);
		if (v.kind != JV_DICT) return gen_empty(c, "Can only get item pairs from a mapping.", out);
		jv f;
		if (jx_getattr(c, at, v, "items", 5, &f) < 0) return -1;
		int r = jx_call_method(c, at, (jmethod *)f.o, NULL, 0, NULL, NULL, 0, out);
		jv_decref(c, f);
		if (r == 0) JLIST(*out)->flavor = JL_GEN;
		return r;
	}
	if (!strcmp(name, "unique")) {
		jv *cs = farg(&a, 0, "case_sensitive"), *attr = farg(&a, 1, "attribute");
		if (!iterable(v)) return gen_empty(c, not_iterable(v), out);
		if (JV_IS_GEN(v) && JLIST(v)->broken) return gen_empty(c, JLIST(v)->broken, out);
		jlist *items;
		if (jx_iterate(c, at, v, &items) < 0) return -1;
		jlist *res = jv_list_new(c, 0, false), *seen = jv_list_new(c, 0, false);
		if (res) res->flavor = JL_GEN;
		int r = res && seen ? 0 : -1;
		for (uint32_t i = 0; r == 0 && i < items->n; i++) {
			jv k;
			r = sort_key(c, at, items->items[i], attr && attr->kind == JV_STR ? JSTR(*attr) : NULL, cs && jv_truthy(*cs), &k);
			if (r < 0) break;
			if (k.kind == JV_DICT || k.kind == JV_NS || (k.kind == JV_LIST && !JLIST(k)->tuple)) {
				/* unique keeps a set: an unhashable item fails, when the generator is walked */
				const char *msg = unhashable(k);
				jv_decref(c, k);
				jv_decref(c, jv_obj(JV_LIST, items));
				if (seen) jv_decref(c, jv_obj(JV_LIST, seen));
				if (res) jv_decref(c, jv_obj(JV_LIST, res));
				return gen_empty(c, msg, out);
			}
			int dup = 0;
			for (uint32_t j = 0; j < seen->n && !dup; j++) dup = jv_eq(c, seen->items[j], k, 0);
			if (dup < 0) { jv_decref(c, k); r = -1; break; }
			if (dup) { jv_decref(c, k); continue; }
			r = jv_list_push(c, seen, k);
			if (r == 0) r = jv_list_push(c, res, jv_incref(items->items[i]));
			if (r == 0) r = jx_step(c, at, seen->n / 16);
		}
		jv_decref(c, jv_obj(JV_LIST, items));
		if (seen) jv_decref(c, jv_obj(JV_LIST, seen));
		if (r < 0) { if (res) jv_decref(c, jv_obj(JV_LIST, res)); return -1; }
		*out = jv_obj(JV_LIST, res);
		return 0;
	}
	if (!strcmp(name, "sum")) {
		jv *attr = farg(&a, 0, "attribute"), *start = farg(&a, 1, "start");
		jlist *items;
		if (jx_iterate(c, at, v, &items) < 0) return -1;
		int64_t si = 0;
		double sf = 0;
		bool is_f = false;
		if (start) {
			if (start->kind == JV_FLOAT) { is_f = true; sf = start->f; }
			else if (start->kind == JV_INT || start->kind == JV_BOOL) si = start->kind == JV_INT ? start->i : start->b;
			else { jv_decref(c, jv_obj(JV_LIST, items)); return jx_fail(c, JINJA_ERR_RUNTIME, at, "sum: start must be a number"); }
		}
		int r = 0;
		for (uint32_t i = 0; r == 0 && i < items->n; i++) {
			jv x = jv_incref(items->items[i]);
			if (attr && attr->kind == JV_STR) { jv y; r = attr_path(c, at, x, JSTR(*attr), &y); jv_decref(c, x); x = r == 0 ? y : jv_none(); if (r < 0) break; }
			if (x.kind == JV_FLOAT) { if (!is_f) { is_f = true; sf = (double)si; } sf += x.f; }
			else if (x.kind == JV_INT || x.kind == JV_BOOL) {
				int64_t k = x.kind == JV_INT ? x.i : x.b;
				if (is_f) sf += (double)k;
				else if (__builtin_add_overflow(si, k, &si)) r = jx_fail(c, JINJA_ERR_RUNTIME, at, "integer overflow in sum");
			} else r = jx_fail(c, JINJA_ERR_RUNTIME, at, "sum: unsupported operand type '%s'", jv_type_name(x));
			jv_decref(c, x);
		}
		jv_decref(c, jv_obj(JV_LIST, items));
		if (r < 0) return -1;
		*out = is_f ? jv_float(sf) : jv_int(si);
		return 0;
	}
	/* the string filters: str(value) first */
	jv s;
	if (to_str_value(c, v, &s) < 0) return -1;
	int r;
	if (!strcmp(name, "string")) { *out = s; return 0; }
	else if (!strcmp(name, "trim")) r = jx_str_strip(c, at, s, a0 ? *a0 : jv_none(), true, true, out);
	else if (!strcmp(name, "upper")) r = jx_str_case(c, at, s, 0, out);
	else if (!strcmp(name, "lower")) r = jx_str_case(c, at, s, 1, out);
	else if (!strcmp(name, "capitalize")) r = jx_str_case(c, at, s, 2, out);
	else if (!strcmp(name, "title")) {
		/* Jinja's own title: each word's first character upper, the rest lower; words start after -, space,
		 * (, {, [ or < */
		jbuf b = { 0 };
		r = 0;
		bool start = true;
		const jstr *x = JSTR(s);
		for (size_t i = 0; r == 0 && i < x->len;) {
			uint32_t cp;
			size_t k = ju_decode(x->s + i, x->len - i, &cp);
			jv ch, m;
			r = jv_str_new(c, x->s + i, k, &ch);
			if (r == 0) r = jx_str_case(c, at, ch, start ? 0 : 1, &m);
			jv_decref(c, ch);
			if (r == 0) { r = jbuf_put(c, &b, JSTR(m)->s, JSTR(m)->len); jv_decref(c, m); }
			start = cp == '-' || ju_isspace(cp) || cp == '(' || cp == '{' || cp == '[' || cp == '<';
			i += k;
		}
		if (r == 0) r = jv_str_take(c, &b, out);
		else jbuf_free(c, &b);
	} else if (!strcmp(name, "replace")) {
		jv *old = farg(&a, 0, "old"), *nw = farg(&a, 1, "new"), *cnt = farg(&a, 2, "count");
		jv olds = jv_none(), news = jv_none();
		int64_t count = cnt && cnt->kind == JV_INT ? cnt->i : -1;
		r = old && nw ? 0 : jx_fail(c, JINJA_ERR_RUNTIME, at, "replace needs old and new");
		if (r == 0) r = to_str_value(c, *old, &olds);
		if (r == 0) r = to_str_value(c, *nw, &news);
		if (r == 0) r = jx_str_replace(c, at, s, olds, news, count, out);
		jv_decref(c, olds);
		jv_decref(c, news);
	} else if (!strcmp(name, "wordcount")) {
		int64_t words = 0;
		bool in = false;
		for (size_t i = 0; i < JSTR(s)->len;) {
			uint32_t cp;
			i += ju_decode(JSTR(s)->s + i, JSTR(s)->len - i, &cp);
			bool w = (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_' || cp >= 0x80;
			if (w && !in) words++;
			in = w;
		}
		*out = jv_int(words);
		r = 0;
	} else
		r = jx_fail(c, JINJA_ERR_RUNTIME, at, "no filter named '%s'", name);
	jv_decref(c, s);
	return r;
}

static const char *const filter_names[] = {
	"abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "indent", "int", "items",
	"join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse",
	"round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper",
	"wordcount", NULL,
};

bool jx_filter_known(const char *name)
{
	for (int i = 0; filter_names[i]; i++)
		if (!strcmp(filter_names[i], name)) return true;
	return false;
}

static const char *const test_names[] = {
	"boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "float", "ge", "gt",
	"greaterthan", "in", "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none", "number",
	"odd", "sameas", "sequence", "string", "true", "undefined", "upper", NULL,
};

bool jx_test_known(const char *name)
{
	for (int i = 0; test_names[i]; i++)
		if (!strcmp(test_names[i], name)) return true;
	return false;
}

int jx_test(jctx *c, const jnode *at, const char *name, jv v, jv *args, uint32_t nargs, int *res)
{
	jv *a0 = nargs ? &args[0] : NULL;
	bool isint = v.kind == JV_INT, isnum = v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
	if (!strcmp(name, "defined")) *res = v.kind != JV_UNDEF;
	else if (!strcmp(name, "undefined")) *res = v.kind == JV_UNDEF;
	else if (!strcmp(name, "none")) *res = v.kind == JV_NONE;
	else if (!strcmp(name, "boolean")) *res = v.kind == JV_BOOL;
	else if (!strcmp(name, "true")) *res = v.kind == JV_BOOL && v.b;
	else if (!strcmp(name, "false")) *res = v.kind == JV_BOOL && !v.b;
	else if (!strcmp(name, "integer")) *res = isint;
	else if (!strcmp(name, "float")) *res = v.kind == JV_FLOAT;
	else if (!strcmp(name, "number")) *res = isnum;
	else if (!strcmp(name, "string")) *res = v.kind == JV_STR;
	else if (!strcmp(name, "mapping")) *res = v.kind == JV_DICT;
	else if (!strcmp(name, "sequence"))   /* len() and __getitem__: Undefined has both */
		*res = v.kind == JV_STR || JV_IS_PLAIN(v) || v.kind == JV_DICT || v.kind == JV_UNDEF;
	else if (!strcmp(name, "iterable")) *res = v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
	else if (!strcmp(name, "callable"))   /* Undefined has a __call__ (that fails): callable() says True */
		*res = v.kind == JV_MACRO || v.kind == JV_FUNC || v.kind == JV_METHOD || v.kind == JV_UNDEF;
	else if (!strcmp(name, "escaped")) *res = 0;
	else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
		jbuf b = { 0 };
		if (jv_to_str(c, v, &b) < 0) { jbuf_free(c, &b); return -1; }
		jv s, f, r;
		if (jv_str_take(c, &b, &s) < 0) return -1;
		int rc = jx_getattr(c, at, s, name[0] == 'l' ? "islower" : "isupper", 7, &f);
		if (rc == 0) { rc = jx_call_method(c, at, (jmethod *)f.o, NULL, 0, NULL, NULL, 0, &r); jv_decref(c, f); }
		jv_decref(c, s);
		if (rc < 0) return -1;
		*res = r.b;
	} else if ((!strcmp(name, "odd") || !strcmp(name, "even")) && v.kind == JV_FLOAT) {
		double r = fmod(v.f, 2);   /* value % 2, with Python's sign */
		if (r < 0) r += 2;
		*res = name[0] == 'o' ? r == 1 : r == 0;
	} else if (!strcmp(name, "divisibleby") && (v.kind == JV_FLOAT || (a0 && a0->kind == JV_FLOAT)) &&
	           (v.kind == JV_FLOAT || v.kind == JV_INT || v.kind == JV_BOOL)) {
		if (!a0 || (a0->kind != JV_FLOAT && a0->kind != JV_INT && a0->kind != JV_BOOL))
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "divisibleby needs a number argument");
		double x = v.kind == JV_FLOAT ? v.f : v.kind == JV_INT ? (double)v.i : v.b;
		double d = a0->kind == JV_FLOAT ? a0->f : a0->kind == JV_INT ? (double)a0->i : a0->b;
		if (d == 0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "float modulo by zero");
		*res = fmod(x, d) == 0;
	} else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
		if (v.kind != JV_INT && v.kind != JV_BOOL)
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "the '%s' test needs an integer, not %s", name, jv_type_name(v));
		int64_t x = v.kind == JV_INT ? v.i : v.b;
		if (name[0] == 'o') *res = (x % 2) != 0;
		else if (name[0] == 'e') *res = (x % 2) == 0;
		else {
			if (!a0 || (a0->kind != JV_INT && a0->kind != JV_BOOL))
				return jx_fail(c, JINJA_ERR_RUNTIME, at, "divisibleby needs an integer argument");
			int64_t d = a0->kind == JV_INT ? a0->i : a0->b;
			if (d == 0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "integer division or modulo by zero");
			*res = d == -1 ? 1 : (x % d) == 0;
		}
	} else {
		if (!a0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "the '%s' test needs an argument", name);
		if (!strcmp(name, "sameas")) {
			if (v.kind != a0->kind) *res = 0;
			else if (v.kind == JV_NONE || v.kind == JV_UNDEF) *res = 1;
			else if (v.kind == JV_BOOL) *res = v.b == a0->b;
			else if (v.kind == JV_INT) *res = v.i == a0->i;
			else if (v.kind == JV_FLOAT) *res = v.f == a0->f;
			else *res = v.o == a0->o;
			return 0;
		}
		if (!strcmp(name, "in")) {
			/* as the `in` operator */
			if (a0->kind == JV_STR) {
				if (v.kind != JV_STR) return jx_fail(c, JINJA_ERR_RUNTIME, at, "'in <string>' requires a string on the left");
				*res = JSTR(v)->len == 0 || memmem(JSTR(*a0)->s, JSTR(*a0)->len, JSTR(v)->s, JSTR(v)->len) != NULL;
				return 0;
			}
			jlist *items;
			if (jx_iterate(c, at, *a0, &items) < 0) return -1;
			*res = 0;
			int rc = 0;
			for (uint32_t i = 0; i < items->n && !*res && rc >= 0; i++) {
				rc = jv_eq(c, v, items->items[i], 0);
				if (rc > 0) *res = 1;
			}
			jv_decref(c, jv_obj(JV_LIST, items));
			return rc < 0 ? -1 : 0;
		}
		if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "ne")) {
			int e = jv_eq(c, v, *a0, 0);
			if (e < 0) return -1;
			*res = name[0] == 'n' ? !e : e;
			return 0;
		}
		int cmp;
		if (jv_cmp(c, at, v, *a0, &cmp) < 0) return -1;
		if (cmp == 2) { *res = 0; return 0; }
		if (!strcmp(name, "lt") || !strcmp(name, "lessthan")) *res = cmp < 0;
		else if (!strcmp(name, "le")) *res = cmp <= 0;
		else if (!strcmp(name, "gt") || !strcmp(name, "greaterthan")) *res = cmp > 0;
		else *res = cmp >= 0;
	}
	return 0;
}
