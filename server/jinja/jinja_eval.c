/* server/jinja/jinja_eval.c — the one evaluator over the node tree: statements with Jinja2's scoping (a for loop's body
 * gets a fresh scope each iteration, a macro its own over the template's top level, if none), expressions with
 * Python's operators, the step, output, memory and nesting limits, and jinja_render. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja_impl.h"

#define JINJA_MAX_EVAL_DEPTH 512   /* evaluator recursion, all of it together: at most ~200 KiB of C stack (-O2) */

enum { EXEC_OK = 0, EXEC_BREAK = 1, EXEC_CONTINUE = 2 };

/* ---- scopes ---- */

static jv *scope_find(jscope *s, const char *name)
{
	for (; s; s = s->parent)
		for (uint32_t i = 0; i < s->n; i++)
			if (strcmp(s->names[i], name) == 0) return &s->vals[i];
	return NULL;
}

/* Binds name in s (not its parents), taking v's reference. name lives in the template. */
static int scope_set(jctx *c, jscope *s, const char *name, jv v)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (strcmp(s->names[i], name) == 0) {
			jv_decref(c, s->vals[i]);
			s->vals[i] = v;
			return 0;
		}
	if (s->n == s->cap) {
		uint32_t cap = s->cap ? s->cap * 2 : 4;
		const char **names = jx_alloc(c, cap * sizeof *names);
		jv *vals = names ? jx_alloc(c, cap * sizeof *vals) : NULL;
		if (!vals) {
			jx_free(c, names, cap * sizeof *names);
			jv_decref(c, v);
			return -1;
		}
		if (s->n) {
			memcpy(names, s->names, s->n * sizeof *names);
			memcpy(vals, s->vals, s->n * sizeof *vals);
		}
		jx_free(c, s->names, s->cap * sizeof *names);
		jx_free(c, s->vals, s->cap * sizeof *vals);
		s->names = names;
		s->vals = vals;
		s->cap = cap;
	}
	s->names[s->n] = name;
	s->vals[s->n] = v;
	s->n++;
	return 0;
}

static void scope_clear(jctx *c, jscope *s)
{
	for (uint32_t i = 0; i < s->n; i++) jv_decref(c, s->vals[i]);
	jx_free(c, s->names, s->cap * sizeof *s->names);
	jx_free(c, s->vals, s->cap * sizeof *s->vals);
	s->names = NULL;
	s->vals = NULL;
	s->n = s->cap = 0;
}


static int out_put(jctx *c, const jnode *at, const char *s, size_t n)
{
	if (c->out.len + n > c->lim.max_output)
		return jx_fail(c, JINJA_ERR_LIMIT, at, "the output passed its limit (%zu bytes)", c->lim.max_output);
	if (jx_step(c, at, n / 64) < 0) return -1;
	return jbuf_put(c, &c->out, s, n);
}

static int out_value(jctx *c, const jnode *at, jv v)
{
	if (v.kind == JV_STR) return out_put(c, at, JSTR(v)->s, JSTR(v)->len);
	jbuf b = { 0 };
	int r = jv_to_str(c, v, &b);
	if (r == 0) r = out_put(c, at, b.p ? b.p : "", b.len);
	jbuf_free(c, &b);
	return r;
}

static int undefined_fail(jctx *c, const jnode *at, jv v)
{
	if (v.uname) return jx_fail(c, JINJA_ERR_RUNTIME, at, "'%s' is undefined", v.uname);
	return jx_fail(c, JINJA_ERR_RUNTIME, at, "an undefined value was used");
}

/* ---- operators ---- */

static bool is_intlike(jv v) { return v.kind == JV_INT || v.kind == JV_BOOL; }
static int64_t as_int(jv v) { return v.kind == JV_INT ? v.i : v.b; }
static bool is_number(jv v) { return is_intlike(v) || v.kind == JV_FLOAT; }
static double as_float(jv v) { return v.kind == JV_FLOAT ? v.f : (double)as_int(v); }

static const char *op_sym(uint8_t op)
{
	static const char *const s[] = { "+", "-", "*", "/", "//", "%", "**", "~" };
	return op < 8 ? s[op] : "?";
}

static int repeat_seq(jctx *c, const jnode *at, jv seq, int64_t times, jv *out)
{
	if (times < 0) times = 0;
	if (seq.kind == JV_STR) {
		size_t len = JSTR(seq)->len;
		if (len && (uint64_t)times > c->lim.max_memory / len)
			return jx_fail(c, JINJA_ERR_LIMIT, at, "a string repeated past the memory limit");
		jbuf b = { 0 };
		if (jx_step(c, at, (uint64_t)times * len / 64) < 0) return -1;
		for (int64_t i = 0; i < times; i++)
			if (jbuf_put(c, &b, JSTR(seq)->s, len) < 0) { jbuf_free(c, &b); return -1; }
		return jv_str_take(c, &b, out);
	}
	jlist *src = JLIST(seq);
	if (src->flavor) return jx_fail(c, JINJA_ERR_RUNTIME, at, "unsupported operand types for *: '%s' and 'int'", jv_type_name(seq));
	if (src->n && (uint64_t)times > c->lim.max_memory / (src->n * sizeof(jv)))
		return jx_fail(c, JINJA_ERR_LIMIT, at, "a list repeated past the memory limit");
	jlist *l = jv_list_new(c, (uint32_t)(times * src->n), src->tuple);
	if (!l) return -1;
	*out = jv_obj(JV_LIST, l);
	if (jx_step(c, at, (uint64_t)times * src->n / 64) < 0) return -1;
	for (int64_t i = 0; i < times; i++)
		for (uint32_t k = 0; k < src->n; k++)
			if (jv_list_push(c, l, jv_incref(src->items[k])) < 0) return -1;
	return 0;
}

static int binop(jctx *c, const jnode *at, uint8_t op, jv a, jv b, jv *out)
{
	if (op == OP_CONCAT) {
		jbuf s = { 0 };
		if (jv_to_str(c, a, &s) < 0 || jv_to_str(c, b, &s) < 0) { jbuf_free(c, &s); return -1; }
		if (jx_step(c, at, s.len / 64) < 0) { jbuf_free(c, &s); return -1; }
		return jv_str_take(c, &s, out);
	}
	if (a.kind == JV_UNDEF) return undefined_fail(c, at, a);
	if (b.kind == JV_UNDEF) return undefined_fail(c, at, b);
	if (op == OP_ADD && a.kind == JV_STR && b.kind == JV_STR) {
		size_t n = JSTR(a)->len + JSTR(b)->len;
		if (jx_step(c, at, n / 64) < 0) return -1;
		jbuf s = { 0 };
		if (jbuf_put(c, &s, JSTR(a)->s, JSTR(a)->len) < 0 || jbuf_put(c, &s, JSTR(b)->s, JSTR(b)->len) < 0) {
			jbuf_free(c, &s);
			return -1;
		}
		return jv_str_take(c, &s, out);
	}
	if (op == OP_ADD && JV_IS_PLAIN(a) && JV_IS_PLAIN(b) && JLIST(a)->tuple == JLIST(b)->tuple) {
		jlist *x = JLIST(a), *y = JLIST(b);
		jlist *l = jv_list_new(c, x->n + y->n, x->tuple);
		if (!l) return -1;
		*out = jv_obj(JV_LIST, l);
		if (jx_step(c, at, (x->n + y->n) / 64) < 0) return -1;
		for (uint32_t i = 0; i < x->n; i++) if (jv_list_push(c, l, jv_incref(x->items[i])) < 0) return -1;
		for (uint32_t i = 0; i < y->n; i++) if (jv_list_push(c, l, jv_incref(y->items[i])) < 0) return -1;
		return 0;
	}
	if (op == OP_MUL && (a.kind == JV_STR || a.kind == JV_LIST) && is_intlike(b)) return repeat_seq(c, at, a, as_int(b), out);
	if (op == OP_MUL && (b.kind == JV_STR || b.kind == JV_LIST) && is_intlike(a)) return repeat_seq(c, at, b, as_int(a), out);
	if (op == OP_MOD && a.kind == JV_STR)
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "printf-style '%%' formatting of strings is not supported");
	if (!is_number(a) || !is_number(b))
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "unsupported operand types for %s: '%s' and '%s'", op_sym(op),
		               jv_type_name(a), jv_type_name(b));
	if (is_intlike(a) && is_intlike(b) && op != OP_DIV) {
		int64_t x = as_int(a), y = as_int(b), r;
		switch (op) {
		case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto overflow; break;
		case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto overflow; break;
		case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto overflow; break;
		case OP_FLOORDIV: case OP_MOD: {
			if (y == 0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "integer division or modulo by zero");
			if (x == INT64_MIN && y == -1) goto overflow;
			int64_t q = x / y, m = x % y;
			if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }   /* Python floors */
			r = op == OP_FLOORDIV ? q : m;
			break;
		}
		case OP_POW: {
			if (y < 0) { *out = jv_float(pow((double)x, (double)y)); return 0; }
			r = 1;
			int64_t base = x;
			while (y) {
				if ((y & 1) && __builtin_mul_overflow(r, base, &r)) goto overflow;
				y >>= 1;
				if (y && __builtin_mul_overflow(base, base, &base)) goto overflow;
			}
			break;
		}
		default: r = 0;
		}
		*out = jv_int(r);
		return 0;
overflow:
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "integer overflow in %s", op_sym(op));
	}
	double x = as_float(a), y = as_float(b), r;
	switch (op) {
	case OP_ADD: r = x + y; break;
	case OP_SUB: r = x - y; break;
	case OP_MUL: r = x * y; break;
	case OP_DIV:
		if (y == 0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "division by zero");
		r = x / y;
		break;
	case OP_FLOORDIV:
		if (y == 0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "float floor division by zero");
		r = floor(x / y);
		break;
	case OP_MOD:
		if (y == 0) return jx_fail(c, JINJA_ERR_RUNTIME, at, "float modulo by zero");
		r = fmod(x, y);
		if (r != 0 && ((r < 0) != (y < 0))) r += y;
		break;
	case OP_POW: r = pow(x, y); break;
	default: r = 0;
	}
	*out = jv_float(r);
	return 0;
}

/* Python's `a in b`: 1, 0, or -1. */
static int contains(jctx *c, const jnode *at, jv item, jv seq)
{
	switch (seq.kind) {
	case JV_STR:
		if (item.kind != JV_STR)
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "'in <string>' requires a string on the left, not %s",
			               jv_type_name(item));
		if (jx_step(c, at, JSTR(seq)->len / 64) < 0) return -1;
		return JSTR(item)->len == 0 || memmem(JSTR(seq)->s, JSTR(seq)->len, JSTR(item)->s, JSTR(item)->len) != NULL;
	case JV_LIST: {
		jlist *l;
		if (jx_iterate(c, at, seq, &l) < 0) return -1;   /* a generator is used up as Python's `in` uses it */
		int r = jx_step(c, at, l->n / 16);
		for (uint32_t i = 0; r == 0 && i < l->n; i++) {
			int e = jv_eq(c, item, l->items[i], 0);
			if (e != 0) { r = e; break; }
		}
		jv_decref(c, jv_obj(JV_LIST, l));
		return r;
	}
	case JV_DICT:
		if (item.kind == JV_DICT || item.kind == JV_NS || (item.kind == JV_LIST && !JLIST(item)->tuple))
			return jx_fail(c, JINJA_ERR_RUNTIME, at, "unhashable type: '%s'", jv_type_name(item));
		if (jx_step(c, at, JDICT(seq)->n / 16) < 0) return -1;
		return jv_dict_get(JDICT(seq), item) != NULL;
	case JV_UNDEF: return 0;   /* Undefined iterates as empty */
	default:
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "argument of type '%s' is not iterable", jv_type_name(seq));
	}
}

static int compare(jctx *c, const jnode *at, uint8_t op, jv a, jv b)
{
	switch (op) {
	case OP_EQ: case OP_NE: {
		int e = jv_eq(c, a, b, 0);
		if (e < 0) return -1;
		return op == OP_EQ ? e : !e;
	}
	case OP_IN: case OP_NOTIN: {
		int e = contains(c, at, a, b);
		if (e < 0) return -1;
		return op == OP_IN ? e : !e;
	}
	default: {
		int r;
		if (jv_cmp(c, at, a, b, &r) < 0) return -1;
		if (r == 2) return 0;   /* NaN */
		switch (op) {
		case OP_LT: return r < 0;
		case OP_LE: return r <= 0;
		case OP_GT: return r > 0;
		default: return r >= 0;
		}
	}
	}
}

/* ---- expressions ---- */

static int eval_args(jctx *c, const jnode *n, jv *args, jv *kw)
{
	for (uint32_t i = 0; i < n->n; i++) args[i] = jv_none();
	for (uint32_t i = 0; i < n->n2; i++) kw[i] = jv_none();
	for (uint32_t i = 0; i < n->n; i++)
		if (jx_eval(c, n->list[i], &args[i]) < 0) return -1;
	for (uint32_t i = 0; i < n->n2; i++)
		if (jx_eval(c, n->list2[i], &kw[i]) < 0) return -1;
	return 0;
}

static void release_args(jctx *c, const jnode *n, jv *args, jv *kw)
{
	for (uint32_t i = 0; i < n->n; i++) jv_decref(c, args[i]);
	for (uint32_t i = 0; i < n->n2; i++) jv_decref(c, kw[i]);
}

/* Room for a call's arguments: on the stack for the usual few, else counted heap memory. */
typedef struct argbuf {
	jv small[8];
	jv *args, *kw;
	size_t bytes;
} argbuf;

static int args_room(jctx *c, const jnode *n, argbuf *b)
{
	size_t need = (size_t)n->n + n->n2;
	b->bytes = 0;
	jv *p = b->small;
	if (need > 8) {
		b->bytes = need * sizeof(jv);
		if (!(p = jx_alloc(c, b->bytes))) return -1;
	}
	b->args = p;
	b->kw = p + n->n;
	return 0;
}

static void args_done(jctx *c, const jnode *n, argbuf *b)
{
	release_args(c, n, b->args, b->kw);
	if (b->bytes) jx_free(c, b->args, b->bytes);
}

/* Applies a filter node (and the filters under it, down to a == NULL, which stands for input) to input. */
static int apply_filter_chain(jctx *c, const jnode *f, jv input, jv *out)
{
	jv v;
	if (f->a) {
		if (apply_filter_chain(c, f->a, input, &v) < 0) return -1;
	} else
		v = jv_incref(input);
	argbuf ab;
	if (args_room(c, f, &ab) < 0) return -1;
	jv *args = ab.args, *kw = ab.kw;
	int r = eval_args(c, f, args, kw);
	if (r == 0) r = jx_filter(c, f, f->name, v, args, f->n, f->kwnames, kw, f->n2, out);
	args_done(c, f, &ab);
	jv_decref(c, v);
	return r;
}

static int eval_inner(jctx *c, const jnode *n, jv *out)
{
	switch (n->kind) {
	case N_CONST: *out = n->value; return 0;
	case N_NAME: {
		jv *v = scope_find(c->scope, n->name);
		if (!v && c->vars) v = jv_dict_get_str(c->vars, n->name, strlen(n->name));
		if (v) { *out = jv_incref(*v); return 0; }
		if (jx_global(n->name, out) == 0) return 0;
		*out = jv_undef(n->name);
		return 0;
	}
	case N_GETATTR: {
		jv obj;
		if (jx_eval(c, n->a, &obj) < 0) return -1;
		int r = jx_getattr(c, n, obj, n->name, strlen(n->name), out);
		jv_decref(c, obj);
		return r;
	}
	case N_GETITEM: {
		jv obj, key = jv_none();
		if (jx_eval(c, n->a, &obj) < 0) return -1;
		int r = jx_eval(c, n->b, &key);
		if (r == 0) r = jx_getitem(c, n, obj, key, out);
		jv_decref(c, key);
		jv_decref(c, obj);
		return r;
	}
	case N_SLICE: {
		jv obj, parts[3] = { jv_none(), jv_none(), jv_none() };
		if (jx_eval(c, n->a, &obj) < 0) return -1;
		int r = 0;
		for (int i = 0; i < 3 && r == 0; i++)
			if (n->list[i]) r = jx_eval(c, n->list[i], &parts[i]);
		if (r == 0) r = jx_slice(c, n, obj, parts[0], parts[1], parts[2], out);
		for (int i = 0; i < 3; i++) jv_decref(c, parts[i]);
		jv_decref(c, obj);
		return r;
	}
	case N_CALL: {
		jv fn;
		if (jx_eval(c, n->a, &fn) < 0) return -1;
		argbuf ab;
		if (args_room(c, n, &ab) < 0) return -1;
		jv *args = ab.args, *kw = ab.kw;
		int r = eval_args(c, n, args, kw);
		if (r == 0) r = jx_call_value(c, n, fn, args, n->n, n->kwnames, kw, n->n2, out);
		args_done(c, n, &ab);
		jv_decref(c, fn);
		return r;
	}
	case N_FILTER: {
		jv v;
		if (jx_eval(c, n->a, &v) < 0) return -1;
		argbuf ab;
		if (args_room(c, n, &ab) < 0) return -1;
		jv *args = ab.args, *kw = ab.kw;
		int r = eval_args(c, n, args, kw);
		if (r == 0) r = jx_filter(c, n, n->name, v, args, n->n, n->kwnames, kw, n->n2, out);
		args_done(c, n, &ab);
		jv_decref(c, v);
		return r;
	}
	case N_TEST: {
		jv v;
		if (jx_eval(c, n->a, &v) < 0) return -1;
		argbuf ab;
		if (args_room(c, n, &ab) < 0) return -1;
		jv *args = ab.args, *kw = ab.kw;
		int r = eval_args(c, n, args, kw), res = 0;
		if (r == 0 && n->n2) r = jx_fail(c, JINJA_ERR_RUNTIME, n, "tests take no keyword arguments");
		if (r == 0) r = jx_test(c, n, n->name, v, args, n->n, &res);
		args_done(c, n, &ab);
		jv_decref(c, v);
		if (r == 0) *out = jv_bool(n->op ? !res : res);
		return r;
	}
	case N_BINOP: {
		jv a, b = jv_none();
		if (jx_eval(c, n->a, &a) < 0) return -1;
		int r = jx_eval(c, n->b, &b);
		if (r == 0) r = binop(c, n, n->op, a, b, out);
		jv_decref(c, a);
		jv_decref(c, b);
		return r;
	}
	case N_UNARY: {
		jv a;
		if (jx_eval(c, n->a, &a) < 0) return -1;
		int r = 0;
		if (n->op == OP_NOT) *out = jv_bool(!jv_truthy(a));
		else if (a.kind == JV_UNDEF) r = undefined_fail(c, n, a);
		else if (is_intlike(a)) {
			if (n->op == OP_NEG && as_int(a) == INT64_MIN) r = jx_fail(c, JINJA_ERR_RUNTIME, n, "integer overflow in -");
			else *out = jv_int(n->op == OP_NEG ? -as_int(a) : as_int(a));
		} else if (a.kind == JV_FLOAT) *out = jv_float(n->op == OP_NEG ? -a.f : a.f);
		else r = jx_fail(c, JINJA_ERR_RUNTIME, n, "bad operand type for unary %s: '%s'", n->op == OP_NEG ? "-" : "+",
		                 jv_type_name(a));
		jv_decref(c, a);
		return r;
	}
	case N_AND: case N_OR: {
		jv a;
		if (jx_eval(c, n->a, &a) < 0) return -1;
		bool t = jv_truthy(a);
		if ((n->kind == N_AND) != t) { *out = a; return 0; }
		jv_decref(c, a);
		return jx_eval(c, n->b, out);
	}
	case N_COMPARE: {
		jv left;
		if (jx_eval(c, n->a, &left) < 0) return -1;
		for (uint32_t i = 0; i < n->n; i++) {
			jv right;
			if (jx_eval(c, n->list[i], &right) < 0) { jv_decref(c, left); return -1; }
			int r = compare(c, n, n->ops[i], left, right);
			jv_decref(c, left);
			left = right;
			if (r <= 0) {
				jv_decref(c, left);
				if (r < 0) return -1;
				*out = jv_bool(0);
				return 0;
			}
		}
		jv_decref(c, left);
		*out = jv_bool(1);
		return 0;
	}
	case N_COND: {
		jv cond;
		if (jx_eval(c, n->a, &cond) < 0) return -1;
		bool t = jv_truthy(cond);
		jv_decref(c, cond);
		if (t) return jx_eval(c, n->b, out);
		if (n->c) return jx_eval(c, n->c, out);
		*out = jv_undef(NULL);
		return 0;
	}
	case N_LIST: case N_TUPLE: {
		jlist *l = jv_list_new(c, n->n, n->kind == N_TUPLE);
		if (!l) return -1;
		jv lv = jv_obj(JV_LIST, l);
		for (uint32_t i = 0; i < n->n; i++) {
			jv v;
			if (jx_eval(c, n->list[i], &v) < 0 || jv_list_push(c, l, v) < 0) { jv_decref(c, lv); return -1; }
		}
		*out = lv;
		return 0;
	}
	case N_DICT: {
		jdict *d = jv_dict_new(c, JV_DICT);
		if (!d) return -1;
		jv dv = jv_obj(JV_DICT, d);
		for (uint32_t i = 0; i < n->n; i++) {
			jv k, v;
			if (jx_eval(c, n->list[i], &k) < 0) { jv_decref(c, dv); return -1; }
			if (k.kind != JV_STR && k.kind != JV_INT && k.kind != JV_BOOL && k.kind != JV_FLOAT && k.kind != JV_NONE &&
			    !(k.kind == JV_LIST && JLIST(k)->tuple)) {
				jx_fail(c, JINJA_ERR_RUNTIME, n->list[i], "unhashable type: '%s'", jv_type_name(k));
				jv_decref(c, k);
				jv_decref(c, dv);
				return -1;
			}
			if (jx_eval(c, n->list2[i], &v) < 0) { jv_decref(c, k); jv_decref(c, dv); return -1; }
			if (jv_dict_set(c, d, k, v) < 0) { jv_decref(c, dv); return -1; }
		}
		*out = dv;
		return 0;
	}
	default:
		return jx_fail(c, JINJA_ERR_RUNTIME, n, "a statement where an expression belongs");
	}
}

int jx_eval(jctx *c, const jnode *n, jv *out)
{
	*out = jv_none();
	if (jx_step(c, n, 1) < 0) return -1;
	if (++c->depth > JINJA_MAX_EVAL_DEPTH) {
		c->depth--;
		return jx_fail(c, JINJA_ERR_LIMIT, n, "evaluation nested deeper than %d levels", JINJA_MAX_EVAL_DEPTH);
	}
	int r = eval_inner(c, n, out);
	c->depth--;
	if (r < 0) {
		jv_decref(c, *out);
		*out = jv_none();
		if (c->status == JINJA_OK) jx_fail(c, JINJA_ERR_RUNTIME, n, "evaluation failed");
	}
	return r;
}

/* ---- statements ---- */

static int exec_node(jctx *c, const jnode *n);

static int exec_block(jctx *c, const jnode *b)
{
	for (uint32_t i = 0; i < b->n; i++) {
		int r = exec_node(c, b->list[i]);
		if (r != EXEC_OK) return r;
	}
	return EXEC_OK;
}

/* Renders body into a new string (block set, filter blocks, macros). */
static int capture(jctx *c, const jnode *body, jv *out)
{
	jbuf saved = c->out;
	memset(&c->out, 0, sizeof c->out);
	int r = exec_block(c, body);
	jbuf got = c->out;
	c->out = saved;
	if (r < 0) { jbuf_free(c, &got); return -1; }
	return jv_str_take(c, &got, out);
}

/* Binds a for or set target: a name, or names unpacked from a sequence. Takes v's reference. */
static int assign(jctx *c, jscope *s, const jnode *target, jv v)
{
	if (target->kind == N_NAME) return scope_set(c, s, target->name, v);
	if (target->kind == N_GETATTR) {
		jv *ns = scope_find(s, target->a->name);
		if (!ns && c->vars) ns = jv_dict_get_str(c->vars, target->a->name, strlen(target->a->name));
		if (!ns || ns->kind != JV_NS) {
			jv_decref(c, v);
			return jx_fail(c, JINJA_ERR_RUNTIME, target, "cannot assign an attribute of '%s', which is not a namespace()",
			               target->a->name);
		}
		jv key;
		if (jv_str_new(c, target->name, strlen(target->name), &key) < 0) { jv_decref(c, v); return -1; }
		return jv_dict_set(c, JDICT(*ns), key, v);
	}
	/* N_TUPLE of names */
	jlist *items;
	if (jx_iterate(c, target, v, &items) < 0) { jv_decref(c, v); return -1; }
	jv_decref(c, v);
	jv iv = jv_obj(JV_LIST, items);
	int r = 0;
	if (items->n != target->n)
		r = jx_fail(c, JINJA_ERR_RUNTIME, target, "cannot unpack %u values into %u names", items->n, target->n);
	for (uint32_t i = 0; r == 0 && i < target->n; i++)
		r = assign(c, s, target->list[i], jv_incref(items->items[i]));
	jv_decref(c, iv);
	return r;
}

static int exec_for(jctx *c, const jnode *n)
{
	jv seqv;
	if (jx_eval(c, n->b, &seqv) < 0) return -1;
	jlist *items;
	int r = jx_iterate(c, n->b, seqv, &items);
	jv_decref(c, seqv);
	if (r < 0) return -1;
	jscope *outer = c->scope;
	if (n->c) {
		/* for x in xs if cond: the loop walks the items that pass (loop.length counts those) */
		jlist *kept = jv_list_new(c, 0, false);
		if (!kept) { jv_decref(c, jv_obj(JV_LIST, items)); return -1; }
		for (uint32_t i = 0; i < items->n && r == 0; i++) {
			jscope s = { .parent = outer };
			c->scope = &s;
			jv cond = jv_none();
			r = assign(c, &s, n->a, jv_incref(items->items[i]));
			if (r == 0) r = jx_eval(c, n->c, &cond);
			if (r == 0 && jv_truthy(cond)) r = jv_list_push(c, kept, jv_incref(items->items[i]));
			jv_decref(c, cond);
			c->scope = outer;
			scope_clear(c, &s);
		}
		jv_decref(c, jv_obj(JV_LIST, items));
		items = kept;
		if (r < 0) { jv_decref(c, jv_obj(JV_LIST, items)); return -1; }
	}
	jloop *loop = NULL;
	if (items->n) {
		loop = jv_loop_new(c);
		if (!loop) { jv_decref(c, jv_obj(JV_LIST, items)); return -1; }
		loop->items = items;
		loop->length = items->n;
		loop->index0 = 0;
	}
	r = EXEC_OK;
	for (uint32_t i = 0; loop && i < items->n; i++) {
		if (jx_step(c, n, 1) < 0) { r = -1; break; }
		loop->index0 = i;
		jscope s = { .parent = outer };
		c->scope = &s;
		r = scope_set(c, &s, "loop", jv_incref(jv_obj(JV_LOOP, loop)));
		if (r == 0) r = assign(c, &s, n->a, jv_incref(items->items[i]));
		if (r == 0) r = exec_block(c, n->body);
		c->scope = outer;
		scope_clear(c, &s);
		if (r < 0) break;
		if (r == EXEC_BREAK) { r = EXEC_OK; break; }
		r = EXEC_OK;
	}
	bool ran = items->n > 0;
	if (loop) jv_decref(c, jv_obj(JV_LOOP, loop));   /* drops items too */
	else jv_decref(c, jv_obj(JV_LIST, items));
	if (r < 0) return -1;
	if (!ran && n->orelse) return exec_block(c, n->orelse);
	return EXEC_OK;
}

static int exec_node(jctx *c, const jnode *n)
{
	if (jx_step(c, n, 1) < 0) return -1;
	switch (n->kind) {
	case S_TEXT: return out_put(c, n, JSTR(n->value)->s, JSTR(n->value)->len);
	case S_PRINT: {
		jv v;
		if (jx_eval(c, n->a, &v) < 0) return -1;
		int r = out_value(c, n, v);
		jv_decref(c, v);
		return r;
	}
	case S_BLOCK: return exec_block(c, n);
	case S_IF:
		for (uint32_t i = 0; i < n->n; i++) {
			jv cond;
			if (jx_eval(c, n->list[i], &cond) < 0) return -1;
			bool t = jv_truthy(cond);
			jv_decref(c, cond);
			if (t) return exec_block(c, n->list2[i]);
		}
		return n->orelse ? exec_block(c, n->orelse) : EXEC_OK;
	case S_FOR: {
		if (++c->depth > JINJA_MAX_EVAL_DEPTH) { c->depth--; return jx_fail(c, JINJA_ERR_LIMIT, n, "loops nested too deep"); }
		int r = exec_for(c, n);
		c->depth--;
		return r;
	}
	case S_SET: {
		jv v;
		if (jx_eval(c, n->b, &v) < 0) return -1;
		return assign(c, c->scope, n->a, v);
	}
	case S_SET_BLOCK: {
		jv v;
		if (capture(c, n->body, &v) < 0) return -1;
		if (n->b) {
			jv f;
			int r = apply_filter_chain(c, n->b, v, &f);
			jv_decref(c, v);
			if (r < 0) return -1;
			v = f;
		}
		return assign(c, c->scope, n->a, v);
	}
	case S_MACRO: {
		jv m = { .kind = JV_MACRO };
		m.macro = n;
		return scope_set(c, c->scope, n->name, m);
	}
	case S_BREAK: return EXEC_BREAK;
	case S_CONTINUE: return EXEC_CONTINUE;
	case S_FILTER_BLOCK: {
		jv v, f;
		if (!n->b) {   /* {% generation %}: a call block's body, in a scope of its own */
			jscope *outer = c->scope;
			jscope s = { .parent = outer };
			c->scope = &s;
			int r = exec_block(c, n->body);
			c->scope = outer;
			scope_clear(c, &s);
			return r < 0 ? -1 : r;
		}
		if (capture(c, n->body, &v) < 0) return -1;
		int r = apply_filter_chain(c, n->b, v, &f);
		jv_decref(c, v);
		if (r < 0) return -1;
		if (f.kind != JV_STR) {   /* Jinja puts the result into the output as it is: "".join fails on a non-string */
			jx_fail(c, JINJA_ERR_RUNTIME, n, "a filter block gives %s, not a string", jv_type_name(f));
			jv_decref(c, f);
			return -1;
		}
		r = out_value(c, n, f);
		jv_decref(c, f);
		return r;
	}
	default:
		return jx_fail(c, JINJA_ERR_RUNTIME, n, "an expression where a statement belongs");
	}
}

int jx_call_macro(jctx *c, const jnode *at, const jnode *m, jv *args, uint32_t nargs, const char **kwnames,
                  jv *kwvals, uint32_t nkw, jv *out)
{
	if (nargs > m->n)
		return jx_fail(c, JINJA_ERR_RUNTIME, at, "macro '%s' takes at most %u argument%s, not %u", m->name, m->n,
		               m->n == 1 ? "" : "s", nargs);
	for (uint32_t k = 0; k < nkw; k++) {
		uint32_t i;
		for (i = 0; i < m->n && strcmp(m->list[i]->name, kwnames[k]) != 0; i++) {}
		if (i == m->n) return jx_fail(c, JINJA_ERR_RUNTIME, at, "macro '%s' has no parameter '%s'", m->name, kwnames[k]);
		if (i < nargs) return jx_fail(c, JINJA_ERR_RUNTIME, at, "macro '%s' got '%s' twice", m->name, kwnames[k]);
	}
	if (++c->call_depth > JINJA_MAX_CALL_DEPTH) {
		c->call_depth--;
		return jx_fail(c, JINJA_ERR_LIMIT, at, "macros called deeper than %d levels", JINJA_MAX_CALL_DEPTH);
	}
	jscope *saved = c->scope;
	jscope s = { .parent = c->root };
	c->scope = &s;
	int r = 0;
	for (uint32_t i = 0; i < m->n && r == 0; i++) {
		jv v;
		bool have = false;
		if (i < nargs) { v = jv_incref(args[i]); have = true; }
		for (uint32_t k = 0; k < nkw && !have; k++)
			if (strcmp(m->list[i]->name, kwnames[k]) == 0) { v = jv_incref(kwvals[k]); have = true; }
		if (!have) {
			if (m->list2[i]) r = jx_eval(c, m->list2[i], &v);   /* defaults are evaluated in the macro's scope */
			else v = jv_undef(m->list[i]->name);
		}
		if (r == 0) r = scope_set(c, &s, m->list[i]->name, v);
	}
	if (r == 0) r = capture(c, m->body, out);
	c->scope = saved;
	scope_clear(c, &s);
	c->call_depth--;
	return r < 0 ? -1 : 0;
}

jinja_status jinja_render(const jinja_template *t, const json_t *vars, const jinja_limits *limits, char **out,
                          size_t *out_len, char *err, size_t err_len)
{
	char dummy[8];
	if (!err || !err_len) { err = dummy; err_len = sizeof dummy; }
	err[0] = 0;
	if (out) *out = NULL;
	if (out_len) *out_len = 0;
	if (!t || !out) {
		snprintf(err, err_len, "no template or no output");
		return JINJA_ERR_RUNTIME;
	}
	if (vars && !json_is_object(vars)) {
		snprintf(err, err_len, "the variables are not a JSON object");
		return JINJA_ERR_RUNTIME;
	}
	jctx c = { .err = err, .err_len = err_len };
	c.lim.max_steps = limits && limits->max_steps ? limits->max_steps : 10000000;
	c.lim.max_output = limits && limits->max_output ? limits->max_output : (size_t)16 << 20;
	c.lim.max_memory = limits && limits->max_memory ? limits->max_memory : (size_t)64 << 20;
	jv varsv = jv_none();
	jscope root = { 0 };
	c.root = &root;
	int r = 0;
	if (vars) r = jv_from_json(&c, vars, &varsv, 0);
	if (r == 0) {
		c.vars = vars ? JDICT(varsv) : NULL;
		c.scope = &root;
		r = exec_block(&c, t->root);
		if (r > 0) r = 0;
	}
	jinja_status st = c.status;
	if (r < 0 && st == JINJA_OK) { st = JINJA_ERR_RUNTIME; snprintf(err, err_len, "the render failed"); }
	if (st == JINJA_OK) {
		*out = malloc(c.out.len + 1);
		if (!*out) { st = JINJA_ERR_MEMORY; snprintf(err, err_len, "out of memory"); }
		else {
			if (c.out.len) memcpy(*out, c.out.p, c.out.len);
			(*out)[c.out.len] = 0;
			if (out_len) *out_len = c.out.len;
		}
	}
	jbuf_free(&c, &c.out);
	scope_clear(&c, &root);
	jv_decref(&c, varsv);
	jx_sweep(&c);
	return st;
}
