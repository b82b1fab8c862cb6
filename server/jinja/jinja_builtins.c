/* server/jinja/jinja_builtins.c — what a template reaches through values: attribute and item lookup with the immutable
 * sandbox's rules (getattr, then the item; methods that would change a value refused), slicing, iteration, the
 * methods of str, dict, list and loop, and the globals range, namespace, dict and raise_exception. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "server/jinja/jinja_impl.h"

enum {
	/* str */
	JM_STARTSWITH, JM_ENDSWITH, JM_STRIP, JM_LSTRIP, JM_RSTRIP, JM_SPLIT, JM_RSPLIT, JM_UPPER, JM_LOWER, JM_REPLACE,
	JM_TITLE, JM_CAPITALIZE, JM_FIND, JM_RFIND, JM_COUNT, JM_JOIN, JM_ISDIGIT, JM_ISALPHA, JM_ISALNUM, JM_ISSPACE,
	JM_ISUPPER, JM_ISLOWER, JM_SPLITLINES, JM_REMOVEPREFIX, JM_REMOVESUFFIX, JM_FORMAT,
	/* dict */
	JM_ITEMS, JM_KEYS, JM_VALUES, JM_GET,
	/* list (count shared with str) */
	JM_INDEX,
	/* loop */
	JM_CYCLE,
};

typedef struct method_row {
	const char *name;
	int32_t id;
} method_row;

static const method_row str_methods[] = {
	{ "startswith", JM_STARTSWITH }, { "endswith", JM_ENDSWITH }, { "strip", JM_STRIP }, { "lstrip", JM_LSTRIP },
	{ "rstrip", JM_RSTRIP }, { "split", JM_SPLIT }, { "rsplit", JM_RSPLIT }, { "upper", JM_UPPER },
	{ "lower", JM_LOWER }, { "replace", JM_REPLACE }, { "title", JM_TITLE }, { "capitalize", JM_CAPITALIZE },
	{ "find", JM_FIND }, { "rfind", JM_RFIND }, { "count", JM_COUNT }, { "join", JM_JOIN }, { "index", JM_INDEX },
	{ "isdigit", JM_ISDIGIT }, { "isalpha", JM_ISALPHA }, { "isalnum", JM_ISALNUM }, { "isspace", JM_ISSPACE },
	{ "isupper", JM_ISUPPER }, { "islower", JM_ISLOWER }, { "splitlines", JM_SPLITLINES },
	{ "removeprefix", JM_REMOVEPREFIX }, { "removesuffix", JM_REMOVESUFFIX }, { "format", JM_FORMAT }, { NULL, 0 },
};
static const method_row dict_methods[] = {
	{ "items", JM_ITEMS }, { "keys", JM_KEYS }, { "values", JM_VALUES }, { "get", JM_GET }, { NULL, 0 },
};
static const method_row list_methods[] = { { "index", JM_INDEX }, { "count", JM_COUNT }, { NULL, 0 } };
/* Attributes the immutable sandbox refuses: they would change the value. */
static const char *const unsafe_dict[] = { "pop", "popitem", "setdefault", "update", "clear", NULL };
static const char *const unsafe_list[] = { "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", NULL };

static int32_t find_method(const method_row *rows, const char *name, size_t len)
{
	for (int i = 0; rows[i].name; i++)
		if (strlen(rows[i].name) == len && memcmp(rows[i].name, name, len) == 0) return rows[i].id;
	return -1;
}

static bool in_list(const char *const *names, const char *name, size_t len)
{
	for (int i = 0; names[i]; i++)
		if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0) return true;
	return false;
}

static int method_value(jctx *c, jv self, int32_t id, jv *out)
{
	jmethod *m = jv_method_new(c, jv_incref(self), id);
	if (!m) return -1;
	*out = jv_obj(JV_METHOD, m);
	return 0;
}

static int undefined_use(jctx *c, const jnode *at, jv v)
{
	if (v.uname) return jx_fail(c, JINJA_ERR_RUNTIME, at, "'%s' is undefined", v.uname);
	return jx_fail(c, JINJA_ERR_RUNTIME, at, "an undefined value was used");
}

static int loop_attr(jctx *c, const jnode *at, jv self, const char *name, jv *out)
{
	jloop *l = (jloop *)self.o;
	int64_t i = l->index0, n = l->length;
	if (!strcmp(name, "index0")) *out = jv_int(i);
	else if (!strcmp(name, "index")) *out = jv_int(i + 1);
	else if (!strcmp(name, "revindex")) *out = jv_int(n - i);
	else if (!strcmp(name, "revindex0")) *out = jv_int(n - i - 1);
	else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
	else if (!strcmp(name, "last")) *out = jv_bool(i == n - 1);
	else if (!strcmp(name, "length")) *out = jv_int(n);
	else if (!strcmp(name, "depth")) *out = jv_int(1);
	else if (!strcmp(name, "depth0")) *out = jv_int(0);
	else if (!strcmp(name, "previtem")) *out = i > 0 ? jv_incref(l->items->items[i - 1]) : jv_undef("previtem");
	else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? jv_incref(l->items->items[i + 1]) : jv_undef("nextitem");
	else if (!strcmp(name, "cycle")) return method_value(c, self, JM_CYCLE, out);
	else *out = jv_undef(NULL);
	return 0;
}

int jx_getattr(jctx *c, const jnode *at, jv obj, const char *name, size_t len, jv *out)
{
	int32_t id;
	switch (obj.kind) {
	case JV_UNDEF: return undefined_use(c, at, obj);
	case JV_DICT:
		if ((id = find_method(dict_methods, name, len)) >= 0) return method_value(c, obj, id, out);
		if (in_list(unsafe_dict, name, len))
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "access to attribute '%.*s' of 'dict' object is unsafe", (int)len, name);
		/* fall through: the item of that name */
		__attribute__((fallthrough));
	case JV_NS: {
		jv *v = jv_dict_get_str(JDICT(obj), name, len);
		*out = v ? jv_incref(*v) : jv_undef(NULL);
		return 0;
	}
	case JV_STR:
		if ((id = find_method(str_methods, name, len)) >= 0) return method_value(c, obj, id, out);
		break;
	case JV_LIST:
		if ((id = find_method(list_methods, name, len)) >= 0) return method_value(c, obj, id, out);
		if (in_list(unsafe_list, name, len))
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "access to attribute '%.*s' of '%s' object is unsafe", (int)len,
			               name, jv_type_name(obj));
		break;
	case JV_LOOP: {
		char nm[32];
		if (len >= sizeof nm) break;
		memcpy(nm, name, len);
		nm[len] = 0;
		return loop_attr(c, at, obj, nm, out);
	}
	default: break;
	}
	*out = jv_undef(NULL);
	return 0;
}

/* Byte offsets of a string's characters: off[i] for character i, off[n] = len. Caller frees with jx_free. */
static size_t *char_offsets(jctx *c, const jstr *s, size_t *n)
{
	size_t count = ju_count(s->s, s->len);
	size_t *off = jx_alloc(c, (count + 1) * sizeof *off);
	if (!off) return NULL;
	size_t k = 0;
	for (size_t i = 0; i < s->len; i++)
		if (((unsigned char)s->s[i] & 0xC0) != 0x80) off[k++] = i;
	off[k] = s->len;
	*n = count;
	return off;
}

static int char_at(jctx *c, jv s, int64_t i, jv *out)
{
	size_t n;
	size_t *off = char_offsets(c, JSTR(s), &n);
	if (!off) return -1;
	if (i < 0) i += (int64_t)n;
	int r = 0;
	if (i < 0 || i >= (int64_t)n) *out = jv_undef(NULL);
	else r = jv_str_new(c, JSTR(s)->s + off[i], off[i + 1] - off[i], out);
	jx_free(c, off, (n + 1) * sizeof *off);
	return r;
}

int jx_getitem(jctx *c, const jnode *at, jv obj, jv key, jv *out)
{
	if (obj.kind == JV_LIST && JLIST(obj)->flavor) { *out = jv_undef(NULL); return 0; }   /* not subscriptable */
	switch (obj.kind) {
	case JV_UNDEF: return undefined_use(c, at, obj);
	case JV_DICT: case JV_NS: {
		jv *v = obj.kind == JV_DICT ? jv_dict_get(JDICT(obj), key) : NULL;
		if (v) { *out = jv_incref(*v); return 0; }
		break;
	}
	case JV_LIST:
		if (key.kind == JV_INT || key.kind == JV_BOOL) {
			int64_t i = key.kind == JV_INT ? key.i : key.b, n = JLIST(obj)->n;
			if (i < 0) i += n;
			*out = i >= 0 && i < n ? jv_incref(JLIST(obj)->items[i]) : jv_undef(NULL);
			return 0;
		}
		break;
	case JV_STR:
		if (key.kind == JV_INT || key.kind == JV_BOOL) return char_at(c, obj, key.kind == JV_INT ? key.i : key.b, out);
		break;
	default: break;
	}
	if (key.kind == JV_STR) return jx_getattr(c, at, obj, JSTR(key)->s, JSTR(key)->len, out);
	*out = jv_undef(NULL);
	return 0;
}

/* Python's slice.indices(n): start, stop, step normalised; -1 when step is 0 or a part is not an integer. */
static int slice_indices(jctx *c, const jnode *at, jv a, jv b, jv s, int64_t n, int64_t *start, int64_t *stop,
                         int64_t *step)
{
	jv parts[3] = { a, b, s };
	int64_t v[3] = { 0, 0, 1 };
	bool given[3];
	for (int i = 0; i < 3; i++) {
		given[i] = parts[i].kind != JV_NONE;
		if (!given[i]) continue;
		if (parts[i].kind != JV_INT && parts[i].kind != JV_BOOL)
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "slice indices must be integers or None, not %s",
			               jv_type_name(parts[i]));
		v[i] = parts[i].kind == JV_INT ? parts[i].i : parts[i].b;
	}
	if (v[2] == 0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "slice step cannot be zero");
	*step = v[2];
	bool neg = v[2] < 0;
	int64_t lo = neg ? -1 : 0, hi = neg ? n - 1 : n;
	for (int i = 0; i < 2; i++) {
		int64_t x;
		if (!given[i]) x = i == 0 ? (neg ? hi : lo) : (neg ? lo : hi);
		else {
			x = v[i];
			if (x < 0) { x += n; if (x < lo) x = lo; }
			else if (x > hi) x = hi;
		}
		if (i == 0) *start = x;
		else *stop = x;
	}
	return 0;
}

int jx_slice(jctx *c, const jnode *at, jv obj, jv start, jv stop, jv step, jv *out)
{
	if (obj.kind == JV_UNDEF) return undefined_use(c, at, obj);
	int64_t a, b, s;
	if (JV_IS_PLAIN(obj)) {
		jlist *l = JLIST(obj);
		if (slice_indices(c, at, start, stop, step, l->n, &a, &b, &s) < 0) return -1;
		jlist *r = jv_list_new(c, 0, l->tuple);
		if (!r) return -1;
		*out = jv_obj(JV_LIST, r);
		if (jx_step(c, at, l->n / 64) < 0) return -1;
		for (int64_t i = a; s > 0 ? i < b : i > b; i += s)
			if (jv_list_push(c, r, jv_incref(l->items[i])) < 0) return -1;
		return 0;
	}
	if (obj.kind == JV_STR) {
		size_t n;
		size_t *off = char_offsets(c, JSTR(obj), &n);
		if (!off) return -1;
		int r = slice_indices(c, at, start, stop, step, (int64_t)n, &a, &b, &s);
		jbuf buf = { 0 };
		if (r == 0) r = jx_step(c, at, n / 64);
		for (int64_t i = a; r == 0 && (s > 0 ? i < b : i > b); i += s)
			r = jbuf_put(c, &buf, JSTR(obj)->s + off[i], off[i + 1] - off[i]);
		jx_free(c, off, (n + 1) * sizeof *off);
		if (r < 0) { jbuf_free(c, &buf); return -1; }
		return jv_str_take(c, &buf, out);
	}
	/* Jinja subscripts a slice directly, not through getitem: anything else fails as Python fails */
	if (obj.kind == JV_DICT) return jx_fail(c, JINJA_ERR_RUNTIME, at, "unhashable type: 'slice'");
	return jx_fail(c, JINJA_ERR_RUNTIME, at, "'%s' object is not subscriptable", jv_type_name(obj));
}

int jx_iterate(jctx *c, const jnode *at, jv v, jlist **out)
{
	switch (v.kind) {
	case JV_LIST: {
		jlist *l = JLIST(v);
		if (l->flavor != JL_GEN) { *out = (jlist *)jv_incref(v).o; return 0; }
		if (l->broken) return jx_fail(c, JINJA_ERR_RUNTIME, at, "%s", l->broken);
		/* a generator is used up by its walk: its items move to the list the walk gets */
		jlist *w = jv_list_new(c, 0, false);
		if (!w) return -1;
		w->items = l->items;
		w->n = l->n;
		w->cap = l->cap;
		l->items = NULL;
		l->n = l->cap = 0;
		*out = w;
		return 0;
	}
	case JV_UNDEF: *out = jv_list_new(c, 0, false); return *out ? 0 : -1;
	case JV_DICT: {
		jdict *d = JDICT(v);
		jlist *l = jv_list_new(c, d->n, false);
		if (!l) return -1;
		for (uint32_t i = 0; i < d->n; i++) l->items[l->n++] = jv_incref(d->keys[i]);
		*out = l;
		return jx_step(c, at, d->n / 64);
	}
	case JV_STR: {
		jstr *s = JSTR(v);
		jlist *l = jv_list_new(c, (uint32_t)ju_count(s->s, s->len), false);
		if (!l) return -1;
		*out = l;
		for (size_t i = 0; i < s->len;) {
			uint32_t cp;
			size_t k = ju_decode(s->s + i, s->len - i, &cp);
			jv ch;
			if (jv_str_new(c, s->s + i, k, &ch) < 0 || jv_list_push(c, l, ch) < 0) {
				jv_decref(c, jv_obj(JV_LIST, l));
				return -1;
			}
			i += k;
		}
		return jx_step(c, at, s->len / 64);
	}
	default:
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "'%s' object is not iterable", jv_type_name(v));
	}
}

/* ---- str methods ---- */

static bool in_chars(uint32_t cp, const jstr *chars)
{
	for (size_t i = 0; i < chars->len;) {
		uint32_t x;
		i += ju_decode(chars->s + i, chars->len - i, &x);
		if (x == cp) return true;
	}
	return false;
}

/* str.strip/lstrip/rstrip(chars): the kept byte range of s. */
static void strip_range(const jstr *s, const jstr *chars, bool left, bool right, size_t *from, size_t *to)
{
	size_t a = 0, b = s->len;
	while (left && a < b) {
		uint32_t cp;
		size_t k = ju_decode(s->s + a, b - a, &cp);
		if (chars ? !in_chars(cp, chars) : !ju_isspace(cp)) break;
		a += k;
	}
	while (right && b > a) {
		size_t p = b - 1;
		while (p > a && ((unsigned char)s->s[p] & 0xC0) == 0x80) p--;
		uint32_t cp;
		ju_decode(s->s + p, b - p, &cp);
		if (chars ? !in_chars(cp, chars) : !ju_isspace(cp)) break;
		b = p;
	}
	*from = a;
	*to = b;
}

int jx_str_strip(jctx *c, const jnode *at, jv s, jv chars, bool left, bool right, jv *out);
int jx_str_strip(jctx *c, const jnode *at, jv s, jv chars, bool left, bool right, jv *out)
{
	if (chars.kind != JV_NONE && chars.kind != JV_STR)
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "strip arg must be None or str, not %s", jv_type_name(chars));
	size_t a, b;
	strip_range(JSTR(s), chars.kind == JV_STR ? JSTR(chars) : NULL, left, right, &a, &b);
	if (jx_step(c, at, JSTR(s)->len / 64) < 0) return -1;
	if (a == 0 && b == JSTR(s)->len) { *out = jv_incref(s); return 0; }
	return jv_str_new(c, JSTR(s)->s + a, b - a, out);
}

/* Maps each character through f (upper, lower), or title-cases words when f is NULL and title is set. */
int jx_str_case(jctx *c, const jnode *at, jv s, int mode, jv *out);
int jx_str_case(jctx *c, const jnode *at, jv s, int mode, jv *out)
{
	/* mode 0 upper, 1 lower, 2 capitalize (first upper, rest lower), 3 str.title() */
	const jstr *x = JSTR(s);
	jbuf b = { 0 };
	bool prev_cased = false, first = true;
	if (jx_step(c, at, x->len / 64) < 0) return -1;
	for (size_t i = 0; i < x->len;) {
		uint32_t cp;
		size_t k = ju_decode(x->s + i, x->len - i, &cp);
		uint32_t m;
		switch (mode) {
		case 0: m = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); break;
		case 1: m = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); break;
		case 2: m = first ? (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); break;
		default: {
			m = prev_cased ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp) : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp);
			utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
			prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
		}
		}
		first = false;
		char enc[4];
		if (jbuf_put(c, &b, enc, ju_encode(m, enc)) < 0) { jbuf_free(c, &b); return -1; }
		i += k;
	}
	return jv_str_take(c, &b, out);
}

/* str.split(sep, maxsplit) and rsplit: a new list of strings. */
int jx_str_split(jctx *c, const jnode *at, jv s, jv sep, int64_t maxsplit, bool from_right, jv *out);
int jx_str_split(jctx *c, const jnode *at, jv s, jv sep, int64_t maxsplit, bool from_right, jv *out)
{
	const jstr *x = JSTR(s);
	if (sep.kind != JV_NONE && sep.kind != JV_STR)
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "must be str or None, not %s", jv_type_name(sep));
	if (sep.kind == JV_STR && JSTR(sep)->len == 0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "empty separator");
	if (jx_step(c, at, x->len / 64) < 0) return -1;
	jlist *l = jv_list_new(c, 0, false);
	if (!l) return -1;
	*out = jv_obj(JV_LIST, l);
	/* pieces as byte ranges, collected left to right; rsplit collects from the right and reverses */
	size_t cap = 16, n = 0;
	size_t *pieces = jx_alloc(c, cap * 2 * sizeof *pieces);
	if (!pieces) return -1;
	int r = 0;
#define ADD(a_, b_) do { if (n == cap) { size_t *q_ = jx_realloc(c, pieces, cap * 2 * sizeof *pieces, cap * 4 * sizeof *pieces); \
		if (!q_) { r = -1; goto done; } pieces = q_; cap *= 2; } pieces[2 * n] = (a_); pieces[2 * n + 1] = (b_); n++; } while (0)
	if (sep.kind == JV_NONE) {
		/* runs of whitespace separate; none at either end */
		if (!from_right) {
			size_t i = 0;
			int64_t splits = 0;
			for (;;) {
				while (i < x->len) { uint32_t cp; size_t k = ju_decode(x->s + i, x->len - i, &cp); if (!ju_isspace(cp)) break; i += k; }
				if (i >= x->len) break;
				if (maxsplit >= 0 && splits == maxsplit) { ADD(i, x->len); break; }   /* the rest as it is */
				size_t j = i;
				while (j < x->len) { uint32_t cp; size_t k = ju_decode(x->s + j, x->len - j, &cp); if (ju_isspace(cp)) break; j += k; }
				ADD(i, j);
				splits++;
				i = j;
			}
		} else {
			size_t e = x->len;
			int64_t splits = 0;
			for (;;) {
				while (e > 0) { size_t p = e - 1; while (p > 0 && ((unsigned char)x->s[p] & 0xC0) == 0x80) p--; uint32_t cp; ju_decode(x->s + p, e - p, &cp); if (!ju_isspace(cp)) break; e = p; }
				if (e == 0) break;
				if (maxsplit >= 0 && splits == maxsplit) { ADD(0, e); break; }
				size_t b = e;
				while (b > 0) { size_t p = b - 1; while (p > 0 && ((unsigned char)x->s[p] & 0xC0) == 0x80) p--; uint32_t cp; ju_decode(x->s + p, b - p, &cp); if (ju_isspace(cp)) break; b = p; }
				ADD(b, e);
				splits++;
				e = b;
			}
		}
	} else {
		const jstr *p = JSTR(sep);
		int64_t splits = 0;
		if (!from_right) {
			size_t i = 0;
			for (;;) {
				const char *hit = maxsplit >= 0 && splits == maxsplit ? NULL : memmem(x->s + i, x->len - i, p->s, p->len);
				if (!hit) { ADD(i, x->len); break; }
				size_t h = (size_t)(hit - x->s);
				ADD(i, h);
				splits++;
				i = h + p->len;
			}
		} else {
			size_t e = x->len;
			for (;;) {
				size_t h = SIZE_MAX;
				if (!(maxsplit >= 0 && splits == maxsplit) && e >= p->len)
					for (size_t k = e - p->len + 1; k-- > 0;)
						if (memcmp(x->s + k, p->s, p->len) == 0) { h = k; break; }
				if (h == SIZE_MAX) { ADD(0, e); break; }
				ADD(h + p->len, e);
				splits++;
				e = h;
			}
		}
	}
	for (size_t k = 0; k < n; k++) {
		size_t idx = from_right ? n - 1 - k : k;
		jv piece;
		if (jv_str_new(c, x->s + pieces[2 * idx], pieces[2 * idx + 1] - pieces[2 * idx], &piece) < 0 ||
		    jv_list_push(c, l, piece) < 0) { r = -1; break; }
	}
done:
#undef ADD
	jx_free(c, pieces, cap * 2 * sizeof *pieces);
	return r;
}

/* str.replace(old, new, count) */
int jx_str_replace(jctx *c, const jnode *at, jv s, jv old, jv new_, int64_t count, jv *out);
int jx_str_replace(jctx *c, const jnode *at, jv s, jv old, jv new_, int64_t count, jv *out)
{
	if (old.kind != JV_STR || new_.kind != JV_STR)
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "replace() arguments must be str, not %s and %s", jv_type_name(old),
		               jv_type_name(new_));
	const jstr *x = JSTR(s), *o = JSTR(old), *w = JSTR(new_);
	jbuf b = { 0 };
	if (jx_step(c, at, x->len / 64) < 0) return -1;
	int64_t done = 0;
	size_t i = 0;
	int r = 0;
	if (o->len == 0) {
		/* between every character, and at both ends */
		while (r == 0) {
			if (count < 0 || done < count) { r = jbuf_put(c, &b, w->s, w->len); done++; }
			if (i >= x->len || r < 0) break;
			uint32_t cp;
			size_t k = ju_decode(x->s + i, x->len - i, &cp);
			r = jbuf_put(c, &b, x->s + i, k);
			i += k;
			if (jx_step(c, at, w->len / 64) < 0) r = -1;
		}
		if (r == 0 && i < x->len) r = jbuf_put(c, &b, x->s + i, x->len - i);
	} else {
		while (r == 0) {
			const char *hit = count >= 0 && done >= count ? NULL : memmem(x->s + i, x->len - i, o->s, o->len);
			if (!hit) { r = jbuf_put(c, &b, x->s + i, x->len - i); break; }
			size_t h = (size_t)(hit - x->s);
			r = jbuf_put(c, &b, x->s + i, h - i);
			if (r == 0) r = jbuf_put(c, &b, w->s, w->len);
			if (r == 0) r = jx_step(c, at, w->len / 64);
			i = h + o->len;
			done++;
		}
	}
	if (r < 0) { jbuf_free(c, &b); return -1; }
	return jv_str_take(c, &b, out);
}

static bool str_all(const jstr *s, int what)
{
	if (s->len == 0) return false;
	bool cased = false;
	for (size_t i = 0; i < s->len;) {
		uint32_t cp;
		i += ju_decode(s->s + i, s->len - i, &cp);
		utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
		bool alpha = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
		             cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_LO;
		bool digit = cat == UTF8PROC_CATEGORY_ND;
		switch (what) {
		case JM_ISDIGIT: if (!digit) return false; break;
		case JM_ISALPHA: if (!alpha) return false; break;
		case JM_ISALNUM: if (!alpha && !digit && cat != UTF8PROC_CATEGORY_NL && cat != UTF8PROC_CATEGORY_NO) return false; break;
		case JM_ISSPACE: if (!ju_isspace(cp)) return false; break;
		case JM_ISUPPER:
			if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) return false;
			if (cat == UTF8PROC_CATEGORY_LU) cased = true;
			break;
		case JM_ISLOWER:
			if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return false;
			if (cat == UTF8PROC_CATEGORY_LL) cased = true;
			break;
		}
	}
	return what == JM_ISUPPER || what == JM_ISLOWER ? cased : true;
}

/* The code point index of byte offset b in s. */
static int64_t char_index(const jstr *s, size_t b)
{
	return (int64_t)ju_count(s->s, b);
}

static bool affix(const jstr *s, const jstr *p, bool end)
{
	if (p->len > s->len) return false;
	return memcmp(end ? s->s + s->len - p->len : s->s, p->s, p->len) == 0;
}

/* Positional or keyword argument i named name, or NULL. */
static jv *arg_at(jv *args, uint32_t nargs, const char **kwnames, jv *kwvals, uint32_t nkw, uint32_t i, const char *name)
{
	if (i < nargs) return &args[i];
	for (uint32_t k = 0; k < nkw; k++)
		if (name && strcmp(kwnames[k], name) == 0) return &kwvals[k];
	return NULL;
}

static int need_str(jctx *c, const jnode *at, jv *v, const char *what)
{
	if (!v || v->kind != JV_STR)
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "%s needs a string argument%s%s", what, v ? ", not " : "",
		               v ? jv_type_name(*v) : "");
	return 0;
}

static int need_int(jctx *c, const jnode *at, jv *v, int64_t dflt, int64_t *out, const char *what)
{
	*out = dflt;
	if (!v || v->kind == JV_NONE) { *out = dflt; return 0; }
	if (v->kind == JV_INT) { *out = v->i; return 0; }
	if (v->kind == JV_BOOL) { *out = v->b; return 0; }
	return jx_fail(c, JINJA_ERR_RUNTIME, at, "%s needs an integer, not %s", what, jv_type_name(*v));
}

static int str_method(jctx *c, const jnode *at, int32_t id, jv self, jv *args, uint32_t nargs, const char **kwn,
                      jv *kwv, uint32_t nkw, jv *out)
{
	const jstr *s = JSTR(self);
	jv *a0 = arg_at(args, nargs, kwn, kwv, nkw, 0, NULL);
	jv *a1 = arg_at(args, nargs, kwn, kwv, nkw, 1, NULL);
	switch (id) {
	case JM_STARTSWITH: case JM_ENDSWITH: {
		if (!a0) return need_str(c, at, a0, id == JM_STARTSWITH ? "startswith" : "endswith");
		if (nargs > 1) return jx_fail(c, JINJA_ERR_RUNTIME, at, "start and end arguments are not supported");
		bool end = id == JM_ENDSWITH, hit = false;
		if (a0->kind == JV_STR) hit = affix(s, JSTR(*a0), end);
		else if (a0->kind == JV_LIST && JLIST(*a0)->tuple) {
			for (uint32_t i = 0; i < JLIST(*a0)->n; i++) {
				jv p = JLIST(*a0)->items[i];
				if (need_str(c, at, &p, end ? "endswith" : "startswith") < 0) return -1;
				if (affix(s, JSTR(p), end)) hit = true;
			}
		} else
			return need_str(c, at, a0, end ? "endswith" : "startswith");
		*out = jv_bool(hit);
		return 0;
	}
	case JM_STRIP: case JM_LSTRIP: case JM_RSTRIP: {
		jv chars = a0 ? *a0 : jv_none();
		return jx_str_strip(c, at, self, chars, id != JM_RSTRIP, id != JM_LSTRIP, out);
	}
	case JM_SPLIT: case JM_RSPLIT: {
		jv *sep = arg_at(args, nargs, kwn, kwv, nkw, 0, "sep");
		int64_t maxsplit;
		if (need_int(c, at, arg_at(args, nargs, kwn, kwv, nkw, 1, "maxsplit"), -1, &maxsplit, "split") < 0) return -1;
		return jx_str_split(c, at, self, sep ? *sep : jv_none(), maxsplit, id == JM_RSPLIT, out);
	}
	case JM_UPPER: return jx_str_case(c, at, self, 0, out);
	case JM_LOWER: return jx_str_case(c, at, self, 1, out);
	case JM_CAPITALIZE: return jx_str_case(c, at, self, 2, out);
	case JM_TITLE: return jx_str_case(c, at, self, 3, out);
	case JM_REPLACE: {
		int64_t count;
		if (!a0 || !a1) return jx_fail(c, JINJA_ERR_RUNTIME, at, "replace() takes at least 2 arguments");
		if (need_int(c, at, arg_at(args, nargs, kwn, kwv, nkw, 2, "count"), -1, &count, "replace") < 0) return -1;
		return jx_str_replace(c, at, self, *a0, *a1, count, out);
	}
	case JM_FIND: case JM_RFIND: case JM_INDEX: case JM_COUNT: {
		if (need_str(c, at, a0, "find") < 0) return -1;
		if (nargs > 1) return jx_fail(c, JINJA_ERR_RUNTIME, at, "start and end arguments are not supported");
		const jstr *p = JSTR(*a0);
		if (jx_step(c, at, s->len / 64) < 0) return -1;
		if (id == JM_COUNT) {
			if (p->len == 0) { *out = jv_int((int64_t)ju_count(s->s, s->len) + 1); return 0; }
			int64_t k = 0;
			for (const char *q = s->s; (q = memmem(q, s->len - (size_t)(q - s->s), p->s, p->len)); q += p->len) k++;
			*out = jv_int(k);
			return 0;
		}
		int64_t pos = -1;
		if (id == JM_RFIND) {
			for (size_t k = s->len >= p->len ? s->len - p->len + 1 : 0; k-- > 0;)
				if (memcmp(s->s + k, p->s, p->len) == 0) { pos = char_index(s, k); break; }
		} else {
			const char *h = p->len ? memmem(s->s, s->len, p->s, p->len) : s->s;
			if (h) pos = char_index(s, (size_t)(h - s->s));
		}
		if (pos < 0 && id == JM_INDEX) return jx_fail(c, JINJA_ERR_RUNTIME, at, "substring not found");
		*out = jv_int(pos);
		return 0;
	}
	case JM_JOIN: {
		if (!a0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "join() takes exactly one argument");
		jlist *items;
		if (jx_iterate(c, at, *a0, &items) < 0) return -1;
		jbuf b = { 0 };
		int r = 0;
		for (uint32_t i = 0; i < items->n && r == 0; i++) {
			jv it = items->items[i];
			if (it.kind != JV_STR) {
				r = jx_fail(c, JINJA_ERR_RUNTIME, at, "sequence item %u: expected str instance, %s found", i, jv_type_name(it));
				break;
			}
			if (i) r = jbuf_put(c, &b, s->s, s->len);
			if (r == 0) r = jbuf_put(c, &b, JSTR(it)->s, JSTR(it)->len);
		}
		if (r == 0) r = jx_step(c, at, b.len / 64);
		jv_decref(c, jv_obj(JV_LIST, items));
		if (r < 0) { jbuf_free(c, &b); return -1; }
		return jv_str_take(c, &b, out);
	}
	case JM_ISDIGIT: case JM_ISALPHA: case JM_ISALNUM: case JM_ISSPACE: case JM_ISUPPER: case JM_ISLOWER:
		*out = jv_bool(str_all(s, id));
		return 0;
	case JM_SPLITLINES: {
		bool keep = a0 && jv_truthy(*a0);
		jlist *l = jv_list_new(c, 0, false);
		if (!l) return -1;
		*out = jv_obj(JV_LIST, l);
		size_t i = 0, start = 0;
		while (i < s->len) {
			uint32_t cp;
			size_t k = ju_decode(s->s + i, s->len - i, &cp);
			bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
			           cp == 0x2028 || cp == 0x2029;
			if (!brk) { i += k; continue; }
			size_t end = i;
			i += k;
			if (cp == '\r' && i < s->len && s->s[i] == '\n') i++;
			jv piece;
			if (jv_str_new(c, s->s + start, (keep ? i : end) - start, &piece) < 0 || jv_list_push(c, l, piece) < 0) return -1;
			start = i;
		}
		if (start < s->len) {
			jv piece;
			if (jv_str_new(c, s->s + start, s->len - start, &piece) < 0 || jv_list_push(c, l, piece) < 0) return -1;
		}
		return 0;
	}
	case JM_REMOVEPREFIX: case JM_REMOVESUFFIX: {
		if (need_str(c, at, a0, "removeprefix") < 0) return -1;
		const jstr *p = JSTR(*a0);
		bool end = id == JM_REMOVESUFFIX;
		if (!p->len || !affix(s, p, end)) { *out = jv_incref(self); return 0; }
		return jv_str_new(c, end ? s->s : s->s + p->len, s->len - p->len, out);
	}
	default:
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "str.format is not supported; use ~ or + to build strings");
	}
}

int jx_call_method(jctx *c, const jnode *at, const jmethod *m, jv *args, uint32_t nargs, const char **kwnames,
                   jv *kwvals, uint32_t nkw, jv *out)
{
	jv self = m->self;
	if (self.kind == JV_STR) return str_method(c, at, m->id, self, args, nargs, kwnames, kwvals, nkw, out);
	jv *a0 = arg_at(args, nargs, kwnames, kwvals, nkw, 0, NULL);
	if (self.kind == JV_DICT) {
		jdict *d = JDICT(self);
		if (m->id == JM_GET) {
			if (!a0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "get expected at least 1 argument, got 0");
			jv *v = jv_dict_get(d, *a0);
			jv *dflt = arg_at(args, nargs, kwnames, kwvals, nkw, 1, NULL);
			*out = v ? jv_incref(*v) : dflt ? jv_incref(*dflt) : jv_none();
			return 0;
		}
		jlist *l = jv_list_new(c, d->n, false);
		if (!l) return -1;
		l->flavor = m->id == JM_KEYS ? JL_KEYS : m->id == JM_VALUES ? JL_VALUES : JL_ITEMS;
		*out = jv_obj(JV_LIST, l);
		for (uint32_t i = 0; i < d->n; i++) {
			jv item;
			if (m->id == JM_KEYS) item = jv_incref(d->keys[i]);
			else if (m->id == JM_VALUES) item = jv_incref(d->vals[i]);
			else {
				jlist *pair = jv_list_new(c, 2, true);
				if (!pair) return -1;
				pair->items[0] = jv_incref(d->keys[i]);
				pair->items[1] = jv_incref(d->vals[i]);
				pair->n = 2;
				item = jv_obj(JV_LIST, pair);
			}
			if (jv_list_push(c, l, item) < 0) return -1;
		}
		return jx_step(c, at, d->n / 16);
	}
	if (self.kind == JV_LIST) {
		jlist *l = JLIST(self);
		if (!a0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "%s() takes exactly one argument", m->id == JM_INDEX ? "index" : "count");
		int64_t k = 0, first = -1;
		if (jx_step(c, at, l->n / 16) < 0) return -1;
		for (uint32_t i = 0; i < l->n; i++) {
			int e = jv_eq(c, l->items[i], *a0, 0);
			if (e < 0) return -1;
			if (e) { k++; if (first < 0) first = i; }
		}
		if (m->id == JM_INDEX && first < 0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "the value is not in the list");
		*out = jv_int(m->id == JM_INDEX ? first : k);
		return 0;
	}
	if (self.kind == JV_LOOP) {
		if (nargs == 0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "no items for cycling given");
		*out = jv_incref(args[((jloop *)self.o)->index0 % nargs]);
		return 0;
	}
	return jx_fail(c, JINJA_ERR_RUNTIME, at, "not callable");
}

/* ---- globals ---- */

enum { F_RANGE, F_NAMESPACE, F_DICT, F_RAISE, F_STRFTIME };

int jx_global(const char *name, jv *out)
{
	int f;
	if (!strcmp(name, "range")) f = F_RANGE;
	else if (!strcmp(name, "namespace")) f = F_NAMESPACE;
	else if (!strcmp(name, "dict")) f = F_DICT;
	else if (!strcmp(name, "raise_exception")) f = F_RAISE;
	else if (!strcmp(name, "strftime_now")) f = F_STRFTIME;   /* transformers adds it: Llama 3.2's template dates itself */
	else return -1;
	jv v = { .kind = JV_FUNC };
	v.func = f;
	*out = v;
	return 0;
}

static int call_func(jctx *c, const jnode *at, int f, jv *args, uint32_t nargs, const char **kwnames, jv *kwvals,
                     uint32_t nkw, jv *out)
{
	switch (f) {
	case F_RANGE: {
		if (nkw) return jx_fail(c, JINJA_ERR_RUNTIME, at, "range() takes no keyword arguments");
		if (nargs < 1 || nargs > 3) return jx_fail(c, JINJA_ERR_RUNTIME, at, "range expected 1 to 3 arguments, got %u", nargs);
		int64_t v[3] = { 0, 0, 1 };
		for (uint32_t i = 0; i < nargs; i++)
			if (need_int(c, at, &args[i], 0, &v[nargs == 1 ? 1 : i], "range") < 0) return -1;
		if (v[2] == 0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "range() arg 3 must not be zero");
		__int128 span = (__int128)v[1] - v[0];
		__int128 len = v[2] > 0 ? (span > 0 ? (span + v[2] - 1) / v[2] : 0) : (span < 0 ? (-span + (-v[2]) - 1) / -v[2] : 0);
		if (len > JINJA_MAX_RANGE)
			return jx_fail(c, JINJA_ERR_LIMIT, at, "range of %lld items: the sandbox allows at most %d",
			               (long long)(len > INT64_MAX ? INT64_MAX : (int64_t)len), JINJA_MAX_RANGE);
		jlist *l = jv_list_new(c, (uint32_t)len, false);
		if (!l) return -1;
		for (int64_t i = 0; i < (int64_t)len; i++) l->items[l->n++] = jv_int(v[0] + i * v[2]);
		*out = jv_obj(JV_LIST, l);
		return jx_step(c, at, (uint64_t)len / 16);
	}
	case F_NAMESPACE: case F_DICT: {
		jdict *d = jv_dict_new(c, f == F_NAMESPACE ? JV_NS : JV_DICT);
		if (!d) return -1;
		*out = jv_obj(f == F_NAMESPACE ? JV_NS : JV_DICT, d);
		if (nargs > 1) return jx_fail(c, JINJA_ERR_RUNTIME, at, "expected at most 1 positional argument, got %u", nargs);
		if (nargs == 1) {
			if (args[0].kind != JV_DICT && args[0].kind != JV_NS)
				return jx_fail(c, JINJA_ERR_RUNTIME, at, "the positional argument must be a dict, not %s", jv_type_name(args[0]));
			jdict *src = JDICT(args[0]);
			for (uint32_t i = 0; i < src->n; i++)
				if (jv_dict_set(c, d, jv_incref(src->keys[i]), jv_incref(src->vals[i])) < 0) return -1;
		}
		for (uint32_t i = 0; i < nkw; i++) {
			jv key;
			if (jv_str_new(c, kwnames[i], strlen(kwnames[i]), &key) < 0) return -1;
			if (jv_dict_set(c, d, key, jv_incref(kwvals[i])) < 0) return -1;
		}
		return 0;
	}
	case F_STRFTIME: {
		if (nargs != 1 || args[0].kind != JV_STR || nkw)
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "strftime_now takes one format string");
		time_t now = time(NULL);
		struct tm tm;
		char buf[512];
		size_t n = 0;
		if (localtime_r(&now, &tm) && JSTR(args[0])->len < 200) n = strftime(buf, sizeof buf, JSTR(args[0])->s, &tm);
		if (n == 0 && JSTR(args[0])->len) return jx_fail(c, JINJA_ERR_RUNTIME, at, "strftime_now: the format is too long");
		return jv_str_new(c, buf, n, out);
	}
	default: {
		jbuf b = { 0 };
		if (nargs >= 1 && jv_to_str(c, args[0], &b) < 0) { jbuf_free(c, &b); return -1; }
		jx_fail(c, JINJA_ERR_RAISE, at, "%s", b.p ? b.p : "");
		jbuf_free(c, &b);
		return -1;
	}
	}
}

int jx_call_value(jctx *c, const jnode *at, jv fn, jv *args, uint32_t nargs, const char **kwnames, jv *kwvals,
                  uint32_t nkw, jv *out)
{
	switch (fn.kind) {
	case JV_FUNC: return call_func(c, at, fn.func, args, nargs, kwnames, kwvals, nkw, out);
	case JV_MACRO: return jx_call_macro(c, at, fn.macro, args, nargs, kwnames, kwvals, nkw, out);
	case JV_METHOD: return jx_call_method(c, at, (const jmethod *)fn.o, args, nargs, kwnames, kwvals, nkw, out);
	case JV_UNDEF: return undefined_use(c, at, fn);
	default: return jx_fail(c, JINJA_ERR_RUNTIME, at, "'%s' object is not callable", jv_type_name(fn));
	}
}
