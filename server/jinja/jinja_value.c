/* server/jinja/jinja_value.c — a render's values with Python's semantics: counted heap objects charged to the memory
 * limit, str() and repr() as CPython writes them (float repr, string quoting), json.dumps as transformers' tojson
 * calls it, equality and ordering, and the conversion of the request's JSON variables. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "server/jinja/jinja_impl.h"

int jx_fail(jctx *c, jinja_status st, const jnode *at, const char *fmt, ...)
{
	if (c->status != JINJA_OK) return -1;
	c->status = st;
	int k = 0;
	if (at && st != JINJA_ERR_RAISE) k = snprintf(c->err, c->err_len, "line %u, column %u: ", at->line, at->col);
	if (k >= 0 && (size_t)k < c->err_len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->err + k, c->err_len - (size_t)k, fmt, ap);
		va_end(ap);
	}
	return -1;
}

int jx_oom(jctx *c)
{
	return jx_fail(c, JINJA_ERR_MEMORY, NULL, "out of memory");
}

int jx_step(jctx *c, const jnode *at, uint64_t n)
{
	if (c->status != JINJA_OK) return -1;
	c->steps += n;
	if (c->steps > c->lim.max_steps)
		return jx_fail(c, JINJA_ERR_LIMIT, at, "the template ran past its step limit (%llu)",
		               (unsigned long long)c->lim.max_steps);
	return 0;
}

void *jx_alloc(jctx *c, size_t n)
{
	if (c->status != JINJA_OK) return NULL;
	if (n > c->lim.max_memory || c->mem > c->lim.max_memory - n) {
		jx_fail(c, JINJA_ERR_LIMIT, NULL, "the template's values passed the memory limit (%zu bytes)", c->lim.max_memory);
		return NULL;
	}
	void *p = malloc(n ? n : 1);
	if (!p) { jx_oom(c); return NULL; }
	c->mem += n;
	return p;
}

void *jx_realloc(jctx *c, void *p, size_t old_n, size_t new_n)
{
	if (c->status != JINJA_OK) return NULL;
	if (new_n > old_n && (new_n - old_n > c->lim.max_memory || c->mem > c->lim.max_memory - (new_n - old_n))) {
		jx_fail(c, JINJA_ERR_LIMIT, NULL, "the template's values passed the memory limit (%zu bytes)", c->lim.max_memory);
		return NULL;
	}
	void *q = realloc(p, new_n ? new_n : 1);
	if (!q) { jx_oom(c); return NULL; }
	c->mem = c->mem - old_n + new_n;
	return q;
}

void jx_free(jctx *c, void *p, size_t n)
{
	if (!p) return;
	free(p);
	c->mem -= n;
}

int jbuf_put(jctx *c, jbuf *b, const char *s, size_t n)
{
	if (c->status != JINJA_OK) return -1;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->len + n + 1) {
			if (cap > SIZE_MAX / 2) return jx_oom(c);
			cap *= 2;
		}
		char *q = jx_realloc(c, b->p, b->cap, cap);
		if (!q) return -1;
		b->p = q;
		b->cap = cap;
	}
	if (n) memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
	return 0;
}

int jbuf_putc(jctx *c, jbuf *b, char ch)
{
	return jbuf_put(c, b, &ch, 1);
}

int jbuf_printf(jctx *c, jbuf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (k < 0) return jx_oom(c);
	return jbuf_put(c, b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

void jbuf_free(jctx *c, jbuf *b)
{
	jx_free(c, b->p, b->cap);
	b->p = NULL;
	b->len = b->cap = 0;
}

/* ---- objects ---- */

static void *obj_new(jctx *c, uint8_t kind, size_t bytes)
{
	jobj *o = jx_alloc(c, bytes);
	if (!o) return NULL;
	memset(o, 0, bytes);
	o->rc = 1;
	o->kind = kind;
	o->bytes = bytes;
	o->next = c->live;
	if (c->live) c->live->prev = o;
	c->live = o;
	return o;
}

jv jv_incref(jv v)
{
	if (JV_HAS_OBJ(v) && v.o->rc > 0) v.o->rc++;
	return v;
}

/* Unlinks and frees o alone, pushing its children's references onto the free stack. */
static void obj_release(jctx *c, jobj *o);

void jv_decref(jctx *c, jv v)
{
	if (!JV_HAS_OBJ(v) || v.o->rc < 0) return;
	if (--v.o->rc > 0) return;
	if (c->n_free == c->cap_free) {
		size_t cap = c->cap_free ? c->cap_free * 2 : 64;
		jobj **s = realloc(c->free_stack, cap * sizeof *s);
		if (!s) return;   /* left alive: the sweep at the end of the render frees it */
		c->free_stack = s;
		c->cap_free = cap;
	}
	c->free_stack[c->n_free++] = v.o;
	if (c->freeing) return;
	c->freeing = true;
	while (c->n_free) obj_release(c, c->free_stack[--c->n_free]);
	c->freeing = false;
}

static void obj_unlink_free(jctx *c, jobj *o)
{
	if (o->prev) o->prev->next = o->next;
	else c->live = o->next;
	if (o->next) o->next->prev = o->prev;
	c->mem -= o->bytes;
	free(o);
}

static void obj_release(jctx *c, jobj *o)
{
	switch (o->kind) {
	case JV_LIST: {
		jlist *l = (jlist *)o;
		for (uint32_t i = 0; i < l->n; i++) jv_decref(c, l->items[i]);
		jx_free(c, l->items, (size_t)l->cap * sizeof *l->items);
		break;
	}
	case JV_DICT: case JV_NS: {
		jdict *d = (jdict *)o;
		for (uint32_t i = 0; i < d->n; i++) { jv_decref(c, d->keys[i]); jv_decref(c, d->vals[i]); }
		jx_free(c, d->keys, (size_t)d->cap * sizeof *d->keys);
		jx_free(c, d->vals, (size_t)d->cap * sizeof *d->vals);
		jx_free(c, d->index, (size_t)d->index_cap * sizeof *d->index);
		break;
	}
	case JV_LOOP: {
		jloop *l = (jloop *)o;
		if (l->items) jv_decref(c, jv_obj(JV_LIST, l->items));
		break;
	}
	case JV_METHOD: jv_decref(c, ((jmethod *)o)->self); break;
	default: break;
	}
	obj_unlink_free(c, o);
}

void jx_sweep(jctx *c)
{
	/* Whatever is still alive (cycles made through namespace attributes, values of a failed render): free the
	 * objects and their arrays without following references, which may point at each other. */
	while (c->live) {
		jobj *o = c->live;
		if (o->kind == JV_LIST) jx_free(c, ((jlist *)o)->items, (size_t)((jlist *)o)->cap * sizeof(jv));
		if (o->kind == JV_DICT || o->kind == JV_NS) {
			jdict *d = (jdict *)o;
			jx_free(c, d->keys, (size_t)d->cap * sizeof(jv));
			jx_free(c, d->vals, (size_t)d->cap * sizeof(jv));
			jx_free(c, d->index, (size_t)d->index_cap * sizeof(uint32_t));
		}
		obj_unlink_free(c, o);
	}
	free(c->free_stack);
	c->free_stack = NULL;
	c->n_free = c->cap_free = 0;
}

int jv_str_new(jctx *c, const char *s, size_t len, jv *out)
{
	jstr *j = obj_new(c, JV_STR, sizeof *j + len + 1);
	if (!j) return -1;
	j->len = len;
	if (len) memcpy(j->s, s, len);
	j->s[len] = 0;
	*out = jv_obj(JV_STR, j);
	return 0;
}

int jv_str_take(jctx *c, jbuf *b, jv *out)
{
	int r = jv_str_new(c, b->p ? b->p : "", b->len, out);
	jbuf_free(c, b);
	return r;
}

jlist *jv_list_new(jctx *c, uint32_t cap, bool tuple)
{
	jlist *l = obj_new(c, JV_LIST, sizeof *l);
	if (!l) return NULL;
	l->tuple = tuple;
	if (cap) {
		l->items = jx_alloc(c, (size_t)cap * sizeof *l->items);
		if (!l->items) { jv_decref(c, jv_obj(JV_LIST, l)); return NULL; }
		l->cap = cap;
	}
	return l;
}

int jv_list_push(jctx *c, jlist *l, jv v)
{
	if (l->n == l->cap) {
		if (l->cap >= UINT32_MAX / 2) { jv_decref(c, v); return jx_fail(c, JINJA_ERR_LIMIT, NULL, "a list too long"); }
		uint32_t cap = l->cap ? l->cap * 2 : 4;
		jv *items = jx_realloc(c, l->items, (size_t)l->cap * sizeof *items, (size_t)cap * sizeof *items);
		if (!items) { jv_decref(c, v); return -1; }
		l->items = items;
		l->cap = cap;
	}
	l->items[l->n++] = v;
	return 0;
}

jdict *jv_dict_new(jctx *c, uint8_t kind)
{
	return obj_new(c, kind, sizeof(jdict));
}

jloop *jv_loop_new(jctx *c)
{
	return obj_new(c, JV_LOOP, sizeof(jloop));
}

jmethod *jv_method_new(jctx *c, jv self, int32_t id)
{
	jmethod *m = obj_new(c, JV_METHOD, sizeof *m);
	if (!m) { jv_decref(c, self); return NULL; }
	m->self = self;
	m->id = id;
	return m;
}

static bool key_eq(jv a, jv b)
{
	if (a.kind == JV_STR && b.kind == JV_STR)
		return JSTR(a)->len == JSTR(b)->len && memcmp(JSTR(a)->s, JSTR(b)->s, JSTR(a)->len) == 0;
	bool an = a.kind == JV_INT || a.kind == JV_BOOL || a.kind == JV_FLOAT;
	bool bn = b.kind == JV_INT || b.kind == JV_BOOL || b.kind == JV_FLOAT;
	if (an && bn) {
		double x = a.kind == JV_FLOAT ? a.f : a.kind == JV_INT ? (double)a.i : a.b;
		double y = b.kind == JV_FLOAT ? b.f : b.kind == JV_INT ? (double)b.i : b.b;
		if (a.kind != JV_FLOAT && b.kind != JV_FLOAT)
			return (a.kind == JV_INT ? a.i : a.b) == (b.kind == JV_INT ? b.i : b.b);
		return x == y;
	}
	return a.kind == JV_NONE && b.kind == JV_NONE;
}

static uint32_t str_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;   /* FNV-1a */
	for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

jv *jv_dict_get_str(const jdict *d, const char *k, size_t len)
{
	if (d->index) {
		uint32_t mask = d->index_cap - 1;
		for (uint32_t h = str_hash(k, len) & mask;; h = (h + 1) & mask) {
			uint32_t slot = d->index[h];
			if (!slot) return NULL;
			jv key = d->keys[slot - 1];
			if (JSTR(key)->len == len && memcmp(JSTR(key)->s, k, len) == 0) return &d->vals[slot - 1];
		}
	}
	for (uint32_t i = 0; i < d->n; i++) {
		jv key = d->keys[i];
		if (key.kind == JV_STR && JSTR(key)->len == len && memcmp(JSTR(key)->s, k, len) == 0) return &d->vals[i];
	}
	return NULL;
}

jv *jv_dict_get(const jdict *d, jv key)
{
	if (key.kind == JV_STR) return jv_dict_get_str(d, JSTR(key)->s, JSTR(key)->len);
	for (uint32_t i = 0; i < d->n; i++)
		if (key_eq(d->keys[i], key)) return &d->vals[i];
	return NULL;
}

/* Puts position i's key (a string) into the index. */
static void index_put(jdict *d, uint32_t i)
{
	uint32_t mask = d->index_cap - 1;
	uint32_t h = str_hash(JSTR(d->keys[i])->s, JSTR(d->keys[i])->len) & mask;
	while (d->index[h]) h = (h + 1) & mask;
	d->index[h] = i + 1;
}

/* Keeps the index at most half full once there are more than 16 keys. */
static int index_grow(jctx *c, jdict *d)
{
	if (d->n < 16 || (uint64_t)(d->n + 1) * 2 <= d->index_cap) return 0;
	uint32_t cap = d->index_cap ? d->index_cap : 64;
	while ((uint64_t)(d->n + 1) * 2 > cap) {
		if (cap >= (1u << 30)) return jx_fail(c, JINJA_ERR_LIMIT, NULL, "a dict too large");
		cap *= 2;
	}
	uint32_t *idx = jx_alloc(c, (size_t)cap * sizeof *idx);
	if (!idx) return -1;
	memset(idx, 0, (size_t)cap * sizeof *idx);
	jx_free(c, d->index, (size_t)d->index_cap * sizeof *idx);
	d->index = idx;
	d->index_cap = cap;
	for (uint32_t i = 0; i < d->n; i++)
		if (d->keys[i].kind == JV_STR) index_put(d, i);
	return 0;
}

int jv_dict_set(jctx *c, jdict *d, jv key, jv val)
{
	jv *slot = jv_dict_get(d, key);
	if (slot) {   /* Python keeps the first key object and the position, and takes the new value */
		jv_decref(c, key);
		jv_decref(c, *slot);
		*slot = val;
		return 0;
	}
	if (d->n == d->cap) {
		if (d->cap >= UINT32_MAX / 2) { jv_decref(c, key); jv_decref(c, val); return jx_fail(c, JINJA_ERR_LIMIT, NULL, "a dict too large"); }
		uint32_t cap = d->cap ? d->cap * 2 : 4;
		jv *k = jx_alloc(c, (size_t)cap * sizeof *k);
		jv *v = k ? jx_alloc(c, (size_t)cap * sizeof *v) : NULL;
		if (!v) {
			jx_free(c, k, (size_t)cap * sizeof *k);
			jv_decref(c, key);
			jv_decref(c, val);
			return -1;
		}
		if (d->n) {
			memcpy(k, d->keys, (size_t)d->n * sizeof *k);
			memcpy(v, d->vals, (size_t)d->n * sizeof *v);
		}
		jx_free(c, d->keys, (size_t)d->cap * sizeof *k);
		jx_free(c, d->vals, (size_t)d->cap * sizeof *v);
		d->keys = k;
		d->vals = v;
		d->cap = cap;
	}
	if (index_grow(c, d) < 0) { jv_decref(c, key); jv_decref(c, val); return -1; }
	d->keys[d->n] = key;
	d->vals[d->n] = val;
	if (d->index && key.kind == JV_STR) index_put(d, d->n);
	d->n++;
	return 0;
}

int jv_from_json(jctx *c, const json_t *j, jv *out, int depth)
{
	if (depth > JINJA_MAX_VALUE_DEPTH)
		return jx_fail(c, JINJA_ERR_LIMIT, NULL, "the variables nest deeper than %d levels", JINJA_MAX_VALUE_DEPTH);
	if (jx_step(c, NULL, 1) < 0) return -1;
	switch (json_typeof(j)) {
	case JSON_NULL: *out = jv_none(); return 0;
	case JSON_TRUE: *out = jv_bool(1); return 0;
	case JSON_FALSE: *out = jv_bool(0); return 0;
	case JSON_INTEGER: *out = jv_int(json_integer_value(j)); return 0;
	case JSON_REAL: *out = jv_float(json_real_value(j)); return 0;
	case JSON_STRING: {
		const char *s = json_string_value(j);
		size_t n = json_string_length(j);
		return jv_str_new(c, s, n, out);
	}
	case JSON_ARRAY: {
		size_t n = json_array_size(j);
		if (n > UINT32_MAX / 4) return jx_fail(c, JINJA_ERR_LIMIT, NULL, "an array too long");
		jlist *l = jv_list_new(c, (uint32_t)n, false);
		if (!l) return -1;
		*out = jv_obj(JV_LIST, l);
		for (size_t i = 0; i < n; i++) {
			jv v;
			if (jv_from_json(c, json_array_get(j, i), &v, depth + 1) < 0 || jv_list_push(c, l, v) < 0) return -1;
		}
		return 0;
	}
	case JSON_OBJECT: {
		jdict *d = jv_dict_new(c, JV_DICT);
		if (!d) return -1;
		*out = jv_obj(JV_DICT, d);
		const char *k;
		size_t klen;
		json_t *v;
		json_object_keylen_foreach((json_t *)j, k, klen, v) {
			jv key, val;
			if (jv_str_new(c, k, klen, &key) < 0) return -1;
			if (jv_from_json(c, v, &val, depth + 1) < 0) { jv_decref(c, key); return -1; }
			if (jv_dict_set(c, d, key, val) < 0) return -1;
		}
		return 0;
	}
	}
	*out = jv_none();
	return 0;
}

/* ---- Python's rules ---- */

bool jv_truthy(jv v)
{
	switch (v.kind) {
	case JV_UNDEF: case JV_NONE: return false;
	case JV_BOOL: return v.b;
	case JV_INT: return v.i != 0;
	case JV_FLOAT: return v.f != 0;
	case JV_STR: return JSTR(v)->len > 0;
	case JV_LIST: return JLIST(v)->n > 0 || JLIST(v)->flavor == JL_GEN;
	case JV_DICT: return JDICT(v)->n > 0;
	default: return true;
	}
}

const char *jv_type_name(jv v)
{
	switch (v.kind) {
	case JV_UNDEF: return "Undefined";
	case JV_NONE: return "NoneType";
	case JV_BOOL: return "bool";
	case JV_INT: return "int";
	case JV_FLOAT: return "float";
	case JV_STR: return "str";
	case JV_LIST: {
		static const char *const names[] = { "list", "generator", "dict_keys", "dict_values", "dict_items" };
		return JLIST(v)->flavor ? names[JLIST(v)->flavor] : JLIST(v)->tuple ? "tuple" : "list";
	}
	case JV_DICT: return "dict";
	case JV_NS: return "Namespace";
	case JV_LOOP: return "LoopContext";
	case JV_METHOD: return "builtin_function_or_method";
	case JV_MACRO: return "Macro";
	default: return "function";
	}
}

static bool is_num(jv v) { return v.kind == JV_BOOL || v.kind == JV_INT || v.kind == JV_FLOAT; }
static double num_f(jv v) { return v.kind == JV_FLOAT ? v.f : v.kind == JV_INT ? (double)v.i : (double)v.b; }

int jv_eq(jctx *c, jv a, jv b, int depth)
{
	if (depth > JINJA_MAX_VALUE_DEPTH)
		return jx_fail(c, JINJA_ERR_LIMIT, NULL, "values nested deeper than %d levels", JINJA_MAX_VALUE_DEPTH);
	if (is_num(a) && is_num(b)) {
		if (a.kind != JV_FLOAT && b.kind != JV_FLOAT)
			return (a.kind == JV_INT ? a.i : a.b) == (b.kind == JV_INT ? b.i : b.b);
		return num_f(a) == num_f(b);
	}
	if (a.kind != b.kind) return 0;
	switch (a.kind) {
	case JV_UNDEF: case JV_NONE: return 1;
	case JV_STR: return key_eq(a, b);
	case JV_LIST: {
		jlist *x = JLIST(a), *y = JLIST(b);
		if (x->tuple != y->tuple || x->flavor != y->flavor || x->n != y->n) return 0;
		if (x->flavor == JL_GEN) return x == y;
		for (uint32_t i = 0; i < x->n; i++) {
			int e = jv_eq(c, x->items[i], y->items[i], depth + 1);
			if (e != 1) return e;
		}
		return 1;
	}
	case JV_DICT: {
		jdict *x = JDICT(a), *y = JDICT(b);
		if (x->n != y->n) return 0;
		for (uint32_t i = 0; i < x->n; i++) {
			jv *o = jv_dict_get(y, x->keys[i]);
			if (!o) return 0;
			int e = jv_eq(c, x->vals[i], *o, depth + 1);
			if (e != 1) return e;
		}
		return 1;
	}
	case JV_MACRO: return a.macro == b.macro;
	case JV_FUNC: return a.func == b.func;
	default: return a.o == b.o;
	}
}

int jv_cmp(jctx *c, const jnode *at, jv a, jv b, int *res)
{
	if (is_num(a) && is_num(b)) {
		if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
			int64_t x = a.kind == JV_INT ? a.i : a.b, y = b.kind == JV_INT ? b.i : b.b;
			*res = x < y ? -1 : x > y;
		} else {
			double x = num_f(a), y = num_f(b);
			*res = x < y ? -1 : x > y ? 1 : 0;   /* NaN orders as neither: comparisons with it are false */
			if (x != x || y != y) *res = 2;
		}
		return 0;
	}
	if (a.kind == JV_STR && b.kind == JV_STR) {
		/* UTF-8 byte order is code point order */
		size_t n = JSTR(a)->len < JSTR(b)->len ? JSTR(a)->len : JSTR(b)->len;
		int r = memcmp(JSTR(a)->s, JSTR(b)->s, n);
		*res = r < 0 ? -1 : r > 0 ? 1 : JSTR(a)->len < JSTR(b)->len ? -1 : JSTR(a)->len > JSTR(b)->len;
		return 0;
	}
	if (JV_IS_PLAIN(a) && JV_IS_PLAIN(b) && JLIST(a)->tuple == JLIST(b)->tuple) {
		jlist *x = JLIST(a), *y = JLIST(b);
		for (uint32_t i = 0; i < x->n && i < y->n; i++) {
			int e = jv_eq(c, x->items[i], y->items[i], 0);
			if (e < 0) return -1;
			if (!e) return jv_cmp(c, at, x->items[i], y->items[i], res);
		}
		*res = x->n < y->n ? -1 : x->n > y->n;
		return 0;
	}
	if (a.kind == JV_UNDEF || b.kind == JV_UNDEF)
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "an undefined value cannot be compared");
	return jx_fail(c, JINJA_ERR_RUNTIME, at, "'<' is not supported between '%s' and '%s'", jv_type_name(a),
	               jv_type_name(b));
}

void jv_float_repr(double f, char *buf, size_t n)
{
	if (f != f) { snprintf(buf, n, "nan"); return; }
	if (isinf(f)) { snprintf(buf, n, f < 0 ? "-inf" : "inf"); return; }
	/* the shortest digits that read back as f, then Python's layout: fixed for 1e-4 <= |f| < 1e16 */
	char tmp[40];
	int prec;
	for (prec = 1; prec <= 17; prec++) {
		snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
		if (strtod(tmp, NULL) == f) break;
	}
	char digits[24];
	int nd = 0;
	const char *q = tmp;
	bool neg = *q == '-';
	if (neg) q++;
	for (; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9') digits[nd++] = *q;
	int exp = atoi(q + 1);
	while (nd > 1 && digits[nd - 1] == '0') nd--;
	digits[nd] = 0;
	char *o = buf;
	size_t left = n;
#define PUT(...) do { int k_ = snprintf(o, left, __VA_ARGS__); if (k_ < 0 || (size_t)k_ >= left) return; o += k_; left -= (size_t)k_; } while (0)
	if (neg) PUT("-");
	if (exp >= -4 && exp < 16) {
		if (exp < 0) {
			PUT("0.");
			for (int i = 0; i < -exp - 1; i++) PUT("0");
			PUT("%s", digits);
		} else if (nd <= exp + 1) {
			PUT("%s", digits);
			for (int i = nd; i < exp + 1; i++) PUT("0");
			PUT(".0");
		} else
			PUT("%.*s.%s", exp + 1, digits, digits + exp + 1);
	} else {
		PUT("%c", digits[0]);
		if (nd > 1) PUT(".%s", digits + 1);
		PUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
	}
#undef PUT
}

static bool ju_isprintable(uint32_t cp)
{
	if (cp == ' ') return true;
	if (cp < 0x20 || cp == 0x7F) return false;
	if (cp < 0x7F) return true;
	utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
	switch (cat) {
	case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
	case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
		return false;
	default:
		return true;
	}
}

static int str_repr(jctx *c, const char *s, size_t n, jbuf *out)
{
	bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
	char q = has_sq && !has_dq ? '"' : '\'';
	if (jbuf_putc(c, out, q) < 0) return -1;
	size_t i = 0;
	while (i < n) {
		uint32_t cp;
		size_t k = ju_decode(s + i, n - i, &cp);
		int r;
		if (cp == (uint32_t)q || cp == '\\') { char e[2] = { '\\', (char)cp }; r = jbuf_put(c, out, e, 2); }
		else if (cp == '\n') r = jbuf_put(c, out, "\\n", 2);
		else if (cp == '\r') r = jbuf_put(c, out, "\\r", 2);
		else if (cp == '\t') r = jbuf_put(c, out, "\\t", 2);
		else if (ju_isprintable(cp)) r = jbuf_put(c, out, s + i, k);
		else if (cp < 0x100) r = jbuf_printf(c, out, "\\x%02x", (unsigned)cp);
		else if (cp < 0x10000) r = jbuf_printf(c, out, "\\u%04x", (unsigned)cp);
		else r = jbuf_printf(c, out, "\\U%08x", (unsigned)cp);
		if (r < 0) return -1;
		i += k;
	}
	return jbuf_putc(c, out, q);
}

static int depth_fail(jctx *c)
{
	return jx_fail(c, JINJA_ERR_LIMIT, NULL, "values nested deeper than %d levels", JINJA_MAX_VALUE_DEPTH);
}

static int dict_repr(jctx *c, const jdict *d, jbuf *out, int depth)
{
	if (jbuf_putc(c, out, '{') < 0) return -1;
	for (uint32_t i = 0; i < d->n; i++) {
		if ((i && jbuf_put(c, out, ", ", 2) < 0) || jv_repr(c, d->keys[i], out, depth + 1) < 0 ||
		    jbuf_put(c, out, ": ", 2) < 0 || jv_repr(c, d->vals[i], out, depth + 1) < 0)
			return -1;
	}
	return jbuf_putc(c, out, '}');
}

int jv_repr(jctx *c, jv v, jbuf *out, int depth)
{
	if (depth > JINJA_MAX_VALUE_DEPTH) return depth_fail(c);
	if (jx_step(c, NULL, 1) < 0) return -1;
	switch (v.kind) {
	case JV_STR: return str_repr(c, JSTR(v)->s, JSTR(v)->len, out);
	case JV_UNDEF: return jbuf_put(c, out, "Undefined", 9);
	case JV_LIST: {
		jlist *l = JLIST(v);
		if (l->flavor == JL_GEN) return jbuf_put(c, out, "<generator object>", 18);   /* Python adds an address */
		static const char *const views[] = { "", "", "dict_keys(", "dict_values(", "dict_items(" };
		if (l->flavor && jbuf_put(c, out, views[l->flavor], strlen(views[l->flavor])) < 0) return -1;
		if (jbuf_putc(c, out, l->tuple ? '(' : '[') < 0) return -1;
		for (uint32_t i = 0; i < l->n; i++)
			if ((i && jbuf_put(c, out, ", ", 2) < 0) || jv_repr(c, l->items[i], out, depth + 1) < 0) return -1;
		if (l->tuple && l->n == 1 && jbuf_putc(c, out, ',') < 0) return -1;
		if (jbuf_putc(c, out, l->tuple ? ')' : ']') < 0) return -1;
		return l->flavor ? jbuf_putc(c, out, ')') : 0;
	}
	case JV_DICT: return dict_repr(c, JDICT(v), out, depth);
	case JV_NS:
		if (jbuf_put(c, out, "<Namespace ", 11) < 0 || dict_repr(c, JDICT(v), out, depth) < 0) return -1;
		return jbuf_putc(c, out, '>');
	default: return jv_to_str(c, v, out);
	}
}

int jv_to_str(jctx *c, jv v, jbuf *out)
{
	switch (v.kind) {
	case JV_UNDEF: return 0;
	case JV_NONE: return jbuf_put(c, out, "None", 4);
	case JV_BOOL: return v.b ? jbuf_put(c, out, "True", 4) : jbuf_put(c, out, "False", 5);
	case JV_INT: return jbuf_printf(c, out, "%lld", (long long)v.i);
	case JV_FLOAT: {
		char b[40];
		jv_float_repr(v.f, b, sizeof b);
		return jbuf_put(c, out, b, strlen(b));
	}
	case JV_STR: return jbuf_put(c, out, JSTR(v)->s, JSTR(v)->len);
	case JV_LIST: case JV_DICT: case JV_NS: return jv_repr(c, v, out, 0);
	case JV_LOOP: return jbuf_printf(c, out, "<LoopContext %lld/%lld>", (long long)((jloop *)v.o)->index0 + 1,
	                                 (long long)((jloop *)v.o)->length);
	case JV_MACRO: return jbuf_printf(c, out, "<Macro '%s'>", v.macro->name);
	case JV_METHOD: return jbuf_put(c, out, "<built-in method>", 17);
	default: return jbuf_put(c, out, "<function>", 10);
	}
}

/* ---- json.dumps ---- */

static int json_str(jctx *c, const char *s, size_t n, bool ascii, jbuf *out)
{
	if (jbuf_putc(c, out, '"') < 0) return -1;
	size_t i = 0;
	while (i < n) {
		uint32_t cp;
		size_t k = ju_decode(s + i, n - i, &cp);
		int r;
		switch (cp) {
		case '"': r = jbuf_put(c, out, "\\\"", 2); break;
		case '\\': r = jbuf_put(c, out, "\\\\", 2); break;
		case '\n': r = jbuf_put(c, out, "\\n", 2); break;
		case '\r': r = jbuf_put(c, out, "\\r", 2); break;
		case '\t': r = jbuf_put(c, out, "\\t", 2); break;
		case '\b': r = jbuf_put(c, out, "\\b", 2); break;
		case '\f': r = jbuf_put(c, out, "\\f", 2); break;
		default:
			if (cp < 0x20) r = jbuf_printf(c, out, "\\u%04x", (unsigned)cp);
			else if (ascii && cp >= 0x7F) {
				if (cp < 0x10000) r = jbuf_printf(c, out, "\\u%04x", (unsigned)cp);
				else {
					uint32_t u = cp - 0x10000;
					r = jbuf_printf(c, out, "\\u%04x\\u%04x", (unsigned)(0xD800 + (u >> 10)), (unsigned)(0xDC00 + (u & 0x3FF)));
				}
			} else
				r = jbuf_put(c, out, s + i, k);
		}
		if (r < 0) return -1;
		i += k;
	}
	return jbuf_putc(c, out, '"');
}

static int json_float(jctx *c, double f, jbuf *out)
{
	if (f != f) return jbuf_put(c, out, "NaN", 3);
	if (isinf(f)) return f < 0 ? jbuf_put(c, out, "-Infinity", 9) : jbuf_put(c, out, "Infinity", 8);
	char b[40];
	jv_float_repr(f, b, sizeof b);
	return jbuf_put(c, out, b, strlen(b));
}

static int json_newline(jctx *c, const jjson_opts *o, int level, jbuf *out)
{
	if (jbuf_putc(c, out, '\n') < 0) return -1;
	for (int i = 0; i < level; i++)
		if (jbuf_put(c, out, o->indent, o->indent_len) < 0) return -1;
	return 0;
}

/* A dict key as json.dumps writes it: strings as they are; numbers, booleans and None as their JSON text. */
static int json_key(jctx *c, const jnode *at, jv k, const jjson_opts *o, jbuf *out)
{
	switch (k.kind) {
	case JV_STR: return json_str(c, JSTR(k)->s, JSTR(k)->len, o->ensure_ascii, out);
	case JV_BOOL: return jbuf_put(c, out, k.b ? "\"true\"" : "\"false\"", k.b ? 6 : 7);
	case JV_NONE: return jbuf_put(c, out, "\"null\"", 6);
	case JV_INT: return jbuf_printf(c, out, "\"%lld\"", (long long)k.i);
	case JV_FLOAT:
		if (jbuf_putc(c, out, '"') < 0 || json_float(c, k.f, out) < 0) return -1;
		return jbuf_putc(c, out, '"');
	default:
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "tojson: keys must be str, int, float, bool or None, not %s",
		               jv_type_name(k));
	}
}

static int key_order(jctx *c, const jnode *at, const jdict *d, uint32_t *idx)
{
	/* sort_keys: insertion sort by Python's ordering (keys are all strings in practice) */
	for (uint32_t i = 0; i < d->n; i++) idx[i] = i;
	for (uint32_t i = 1; i < d->n; i++) {
		uint32_t x = idx[i];
		uint32_t j = i;
		while (j > 0) {
			int r;
			if (jv_cmp(c, at, d->keys[idx[j - 1]], d->keys[x], &r) < 0) return -1;
			if (r <= 0) break;
			idx[j] = idx[j - 1];
			j--;
		}
		idx[j] = x;
	}
	return jx_step(c, at, (uint64_t)d->n * d->n / 64);
}

int jv_tojson(jctx *c, const jnode *at, jv v, const jjson_opts *o, jbuf *out, int depth)
{
	if (depth > JINJA_MAX_VALUE_DEPTH) return depth_fail(c);
	if (jx_step(c, at, 1) < 0) return -1;
	switch (v.kind) {
	case JV_NONE: return jbuf_put(c, out, "null", 4);
	case JV_BOOL: return v.b ? jbuf_put(c, out, "true", 4) : jbuf_put(c, out, "false", 5);
	case JV_INT: return jbuf_printf(c, out, "%lld", (long long)v.i);
	case JV_FLOAT: return json_float(c, v.f, out);
	case JV_STR: return json_str(c, JSTR(v)->s, JSTR(v)->len, o->ensure_ascii, out);
	case JV_LIST: {
		jlist *l = JLIST(v);
		if (l->flavor) return jx_fail(c, JINJA_ERR_RUNTIME, at, "tojson: an object of type %s is not JSON serializable",
		                              jv_type_name(v));
		if (l->n == 0) return jbuf_put(c, out, "[]", 2);
		if (jbuf_putc(c, out, '[') < 0) return -1;
		for (uint32_t i = 0; i < l->n; i++) {
			if (i && jbuf_put(c, out, o->item_sep, o->item_sep_len) < 0) return -1;
			if (o->indent && json_newline(c, o, depth + 1, out) < 0) return -1;
			if (jv_tojson(c, at, l->items[i], o, out, depth + 1) < 0) return -1;
		}
		if (o->indent && json_newline(c, o, depth, out) < 0) return -1;
		return jbuf_putc(c, out, ']');
	}
	case JV_DICT: {
		jdict *d = JDICT(v);
		if (d->n == 0) return jbuf_put(c, out, "{}", 2);
		uint32_t *idx = NULL;
		if (o->sort_keys) {
			idx = jx_alloc(c, (size_t)d->n * sizeof *idx);
			if (!idx || key_order(c, at, d, idx) < 0) { jx_free(c, idx, (size_t)d->n * sizeof *idx); return -1; }
		}
		int r = jbuf_putc(c, out, '{');
		for (uint32_t i = 0; r == 0 && i < d->n; i++) {
			uint32_t k = idx ? idx[i] : i;
			if (i && jbuf_put(c, out, o->item_sep, o->item_sep_len) < 0) r = -1;
			else if (o->indent && json_newline(c, o, depth + 1, out) < 0) r = -1;
			else if (json_key(c, at, d->keys[k], o, out) < 0 || jbuf_put(c, out, o->key_sep, o->key_sep_len) < 0 ||
			         jv_tojson(c, at, d->vals[k], o, out, depth + 1) < 0)
				r = -1;
		}
		if (idx) jx_free(c, idx, (size_t)d->n * sizeof *idx);
		if (r < 0) return -1;
		if (o->indent && json_newline(c, o, depth, out) < 0) return -1;
		return jbuf_putc(c, out, '}');
	}
	default:
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "tojson: an object of type %s is not JSON serializable",
		               jv_type_name(v));
	}
}
