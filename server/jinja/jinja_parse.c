/* server/jinja/jinja_parse.c — the Jinja2 parser: tokens (jinja_lex.c) into a node tree (jinja_impl.h), with the
 * statement set and the expression precedence of pallets/jinja's parser.py; unknown tags, filters and tests are
 * refused here, at load time, with their line and column. Also the template's arena and jinja_parse/jinja_free. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja_impl.h"

struct jarena_chunk {
	jarena_chunk *next;
	size_t used, cap;
	_Alignas(16) unsigned char data[];
};

void *jinja_arena_alloc(jinja_template *t, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	jarena_chunk *c = t->chunks;
	if (!c || c->cap - c->used < n) {
		size_t cap = n > 65536 ? n : 65536;
		c = malloc(sizeof *c + cap);
		if (!c) return NULL;
		c->next = t->chunks;
		c->used = 0;
		c->cap = cap;
		t->chunks = c;
	}
	void *p = c->data + c->used;
	c->used += n;
	memset(p, 0, n);
	return p;
}

jstr *jinja_arena_str(jinja_template *t, const char *s, size_t len)
{
	jstr *j = jinja_arena_alloc(t, sizeof *j + len + 1);
	if (!j) return NULL;
	j->h.rc = -1;
	j->h.kind = JV_STR;
	j->len = len;
	memcpy(j->s, s, len);
	j->s[len] = 0;
	return j;
}

void jinja_free(jinja_template *t)
{
	if (!t) return;
	jarena_chunk *c = t->chunks;
	while (c) {
		jarena_chunk *next = c->next;
		free(c);
		c = next;
	}
	free(t);
}

typedef struct parser {
	jinja_template *t;
	jinja_tokens *tk;
	size_t i;
	char *err;
	size_t err_len;
	int32_t depth;
	int32_t loop_depth;       /* for break and continue */
	bool failed;
} parser;

/* A growable array of node pointers, copied into the arena when complete. */
typedef struct nvec {
	jnode **v;
	uint32_t n, cap;
} nvec;

static jinja_token *cur(parser *p) { return &p->tk->v[p->i]; }
static jinja_token *peek(parser *p, size_t k)
{
	size_t j = p->i + k;
	return j < p->tk->n ? &p->tk->v[j] : &p->tk->v[p->tk->n - 1];
}
static void advance(parser *p) { if (cur(p)->kind != JT_EOF) p->i++; }

static void *pfail(parser *p, const jinja_token *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void *pfail(parser *p, const jinja_token *at, const char *fmt, ...)
{
	if (p->failed) return NULL;
	p->failed = true;
	int k = snprintf(p->err, p->err_len, "line %u, column %u: ", at->line, at->col);
	if (k >= 0 && (size_t)k < p->err_len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(p->err + k, p->err_len - (size_t)k, fmt, ap);
		va_end(ap);
	}
	return NULL;
}

static bool is_op(const jinja_token *t, const char *op)
{
	return t->kind == JT_OP && t->len == strlen(op) && memcmp(t->s, op, t->len) == 0;
}
static bool is_name(const jinja_token *t, const char *name)
{
	return t->kind == JT_NAME && t->len == strlen(name) && memcmp(t->s, name, t->len) == 0;
}

/* How a token reads in a message. */
static void tok_desc(const jinja_token *t, char *buf, size_t n)
{
	switch (t->kind) {
	case JT_EOF: snprintf(buf, n, "end of template"); break;
	case JT_TEXT: snprintf(buf, n, "template text"); break;
	case JT_VAR_BEGIN: snprintf(buf, n, "'{{'"); break;
	case JT_VAR_END: snprintf(buf, n, "'}}'"); break;
	case JT_BLOCK_BEGIN: snprintf(buf, n, "'{%%'"); break;
	case JT_BLOCK_END: snprintf(buf, n, "'%%}'"); break;
	case JT_STRING: snprintf(buf, n, "a string"); break;
	default: snprintf(buf, n, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s); break;
	}
}

static void *unexpected(parser *p, const char *expected)
{
	char d[64];
	tok_desc(cur(p), d, sizeof d);
	if (expected) return pfail(p, cur(p), "unexpected %s, expected %s", d, expected);
	return pfail(p, cur(p), "unexpected %s", d);
}

static bool expect_op(parser *p, const char *op)
{
	if (is_op(cur(p), op)) { advance(p); return true; }
	char e[16];
	snprintf(e, sizeof e, "'%s'", op);
	unexpected(p, e);
	return false;
}

static bool expect_kind(parser *p, jinja_tok_kind k, const char *what)
{
	if (cur(p)->kind == k) { advance(p); return true; }
	unexpected(p, what);
	return false;
}

static jnode *mknode(parser *p, uint8_t kind, const jinja_token *at)
{
	jnode *n = jinja_arena_alloc(p->t, sizeof *n);
	if (!n) return pfail(p, at, "out of memory");
	n->kind = kind;
	n->line = at->line;
	n->col = at->col;
	return n;
}

static const char *arena_name(parser *p, const char *s, size_t len)
{
	char *c = jinja_arena_alloc(p->t, len + 1);
	if (!c) return pfail(p, cur(p), "out of memory");
	memcpy(c, s, len);
	c[len] = 0;
	return c;
}

static bool nvec_push(parser *p, nvec *v, jnode *n)
{
	if (v->n == v->cap) {
		uint32_t cap = v->cap ? v->cap * 2 : 8;
		jnode **nv = realloc(v->v, cap * sizeof *nv);
		if (!nv) { pfail(p, cur(p), "out of memory"); return false; }
		v->v = nv;
		v->cap = cap;
	}
	v->v[v->n++] = n;
	return true;
}

/* The vector's nodes in the arena (NULL for none); v is released. */
static jnode **nvec_done(parser *p, nvec *v, uint32_t *n)
{
	jnode **out = NULL;
	*n = v->n;
	if (v->n) {
		out = jinja_arena_alloc(p->t, v->n * sizeof *out);
		if (out) memcpy(out, v->v, v->n * sizeof *out);
		else pfail(p, cur(p), "out of memory");
	}
	free(v->v);
	v->v = NULL;
	v->n = v->cap = 0;
	return out;
}

static bool enter(parser *p)
{
	if (++p->depth > JINJA_MAX_PARSE_DEPTH) {
		pfail(p, cur(p), "the template nests deeper than %d levels", JINJA_MAX_PARSE_DEPTH);
		return false;
	}
	return true;
}

static jnode *parse_expression(parser *p, bool with_condexpr);
static jnode *parse_tuple(parser *p, bool with_condexpr, bool explicit_parens, const char *extra_end);
static jnode *parse_unary(parser *p, bool with_filter);
static jnode *parse_primary(parser *p);
static jnode *parse_postfix(parser *p, jnode *node);
static jnode *parse_filter_expr(parser *p, jnode *node);

/* Arguments of a call: ( positional…, name=value… ). */
static bool parse_call_args(parser *p, jnode *call)
{
	nvec args = { 0 }, kwv = { 0 };
	const char *kwn[64];
	uint32_t nkw = 0;
	if (!expect_op(p, "(")) return false;
	while (!is_op(cur(p), ")")) {
		if (args.n + kwv.n > 0 && !expect_op(p, ",")) goto fail;
		if (is_op(cur(p), ")")) break;
		if (is_op(cur(p), "*") || is_op(cur(p), "**")) { pfail(p, cur(p), "*args and **kwargs are not supported"); goto fail; }
		if (cur(p)->kind == JT_NAME && is_op(peek(p, 1), "=")) {
			if (nkw == 64) { pfail(p, cur(p), "more than 64 keyword arguments"); goto fail; }
			const char *name = arena_name(p, cur(p)->s, cur(p)->len);
			advance(p);
			advance(p);
			jnode *v = parse_expression(p, true);
			if (!v || !name || !nvec_push(p, &kwv, v)) goto fail;
			kwn[nkw++] = name;
		} else {
			if (kwv.n) { pfail(p, cur(p), "a positional argument after a keyword argument"); goto fail; }
			jnode *v = parse_expression(p, true);
			if (!v || !nvec_push(p, &args, v)) goto fail;
		}
	}
	advance(p);
	call->list = nvec_done(p, &args, &call->n);
	call->list2 = nvec_done(p, &kwv, &call->n2);
	if (nkw) {
		call->kwnames = jinja_arena_alloc(p->t, nkw * sizeof *call->kwnames);
		if (!call->kwnames) { pfail(p, cur(p), "out of memory"); return false; }
		memcpy(call->kwnames, kwn, nkw * sizeof *kwn);
	}
	return !p->failed;
fail:
	free(args.v);
	free(kwv.v);
	return false;
}

/* A dotted name after '|' or 'is': the name as one string ("a.b"). */
static const char *parse_dotted(parser *p)
{
	if (cur(p)->kind != JT_NAME) return unexpected(p, "a name");
	const char *start = cur(p)->s;
	const char *end = start + cur(p)->len;
	advance(p);
	while (is_op(cur(p), ".") && peek(p, 1)->kind == JT_NAME) {
		advance(p);
		end = cur(p)->s + cur(p)->len;
		advance(p);
	}
	return arena_name(p, start, (size_t)(end - start));
}

static jnode *parse_filter(parser *p, jnode *node, bool start_inline)
{
	while (is_op(cur(p), "|") || start_inline) {
		if (!start_inline) advance(p);
		start_inline = false;
		jinja_token *at = cur(p);
		const char *name = parse_dotted(p);
		if (!name) return NULL;
		if (!jx_filter_known(name)) return pfail(p, at, "no filter named '%s'", name);
		jnode *f = mknode(p, N_FILTER, at);
		if (!f) return NULL;
		f->a = node;
		f->name = name;
		if (is_op(cur(p), "(") && !parse_call_args(p, f)) return NULL;
		node = f;
	}
	return node;
}

static jnode *parse_test(parser *p, jnode *node)
{
	jinja_token *is = cur(p);
	advance(p);
	bool negated = false;
	if (is_name(cur(p), "not")) { advance(p); negated = true; }
	jinja_token *at = cur(p);
	const char *name = parse_dotted(p);
	if (!name) return NULL;
	if (!jx_test_known(name)) return pfail(p, at, "no test named '%s'", name);
	jnode *t = mknode(p, N_TEST, is);
	if (!t) return NULL;
	t->a = node;
	t->name = name;
	t->op = negated;
	jinja_token *c = cur(p);
	if (is_op(c, "(")) {
		if (!parse_call_args(p, t)) return NULL;
	} else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT || c->kind == JT_FLOAT || is_op(c, "(") ||
	            is_op(c, "[") || is_op(c, "{")) && !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
		if (is_name(c, "is")) return pfail(p, c, "tests cannot be chained with 'is'");
		jnode *arg = parse_primary(p);
		if (arg) arg = parse_postfix(p, arg);
		if (!arg) return NULL;
		t->list = jinja_arena_alloc(p->t, sizeof *t->list);
		if (!t->list) return pfail(p, c, "out of memory");
		t->list[0] = arg;
		t->n = 1;
	}
	return t;
}

static jnode *parse_filter_expr(parser *p, jnode *node)
{
	while (node) {
		if (is_op(cur(p), "|")) node = parse_filter(p, node, false);
		else if (is_name(cur(p), "is")) node = parse_test(p, node);
		else if (is_op(cur(p), "(")) {
			jnode *call = mknode(p, N_CALL, cur(p));
			if (!call) return NULL;
			call->a = node;
			if (!parse_call_args(p, call)) return NULL;
			node = call;
		} else break;
	}
	return node;
}

/* One subscript: an expression, or a slice start:stop:step with any part left out. */
static jnode *parse_subscribed(parser *p)
{
	jinja_token *at = cur(p);
	jnode *first = NULL;
	if (!is_op(cur(p), ":")) {
		first = parse_expression(p, true);
		if (!first) return NULL;
		if (!is_op(cur(p), ":")) return first;
	}
	jnode *s = mknode(p, N_SLICE, at);
	if (!s) return NULL;
	s->list = jinja_arena_alloc(p->t, 3 * sizeof *s->list);
	if (!s->list) return pfail(p, at, "out of memory");
	s->n = 3;
	s->list[0] = first;
	advance(p);   /* ':' */
	if (!is_op(cur(p), "]") && !is_op(cur(p), ",") && !is_op(cur(p), ":")) {
		if (!(s->list[1] = parse_expression(p, true))) return NULL;
	}
	if (is_op(cur(p), ":")) {
		advance(p);
		if (!is_op(cur(p), "]") && !is_op(cur(p), ",")) {
			if (!(s->list[2] = parse_expression(p, true))) return NULL;
		}
	}
	return s;
}

static jnode *parse_postfix(parser *p, jnode *node)
{
	while (node) {
		jinja_token *at = cur(p);
		if (is_op(at, ".")) {
			advance(p);
			jinja_token *t = cur(p);
			if (t->kind == JT_NAME) {
				jnode *g = mknode(p, N_GETATTR, at);
				if (!g) return NULL;
				g->a = node;
				g->name = arena_name(p, t->s, t->len);
				advance(p);
				node = g;
			} else if (t->kind == JT_INT) {
				jnode *g = mknode(p, N_GETITEM, at), *k = mknode(p, N_CONST, t);
				if (!g || !k) return NULL;
				k->value = jv_int(t->i);
				g->a = node;
				g->b = k;
				advance(p);
				node = g;
			} else return unexpected(p, "an attribute name");
		} else if (is_op(at, "[")) {
			advance(p);
			nvec subs = { 0 };
			while (!is_op(cur(p), "]")) {
				if (subs.n && !expect_op(p, ",")) { free(subs.v); return NULL; }
				if (is_op(cur(p), "]")) break;
				jnode *s = parse_subscribed(p);
				if (!s || !nvec_push(p, &subs, s)) { free(subs.v); return NULL; }
			}
			advance(p);
			if (subs.n == 0) { free(subs.v); return pfail(p, at, "an empty subscript"); }
			jnode *g = mknode(p, N_GETITEM, at);
			if (!g) { free(subs.v); return NULL; }
			g->a = node;
			if (subs.n == 1) {
				g->b = subs.v[0];
				free(subs.v);
				if (g->b->kind == N_SLICE) { g->b->a = node; node = g->b; continue; }
			} else {
				jnode *tup = mknode(p, N_TUPLE, at);
				if (!tup) { free(subs.v); return NULL; }
				tup->list = nvec_done(p, &subs, &tup->n);
				g->b = tup;
			}
			node = g;
		} else if (is_op(at, "(")) {
			jnode *call = mknode(p, N_CALL, at);
			if (!call) return NULL;
			call->a = node;
			if (!parse_call_args(p, call)) return NULL;
			node = call;
		} else break;
	}
	return node;
}

static jnode *konst(parser *p, const jinja_token *at, jv v)
{
	jnode *k = mknode(p, N_CONST, at);
	if (k) k->value = v;
	return k;
}

static jnode *parse_primary(parser *p)
{
	if (!enter(p)) return NULL;
	jinja_token *t = cur(p);
	jnode *node = NULL;
	if (t->kind == JT_NAME) {
		if (is_name(t, "true") || is_name(t, "True")) node = konst(p, t, jv_bool(1));
		else if (is_name(t, "false") || is_name(t, "False")) node = konst(p, t, jv_bool(0));
		else if (is_name(t, "none") || is_name(t, "None")) node = konst(p, t, jv_none());
		else {
			node = mknode(p, N_NAME, t);
			if (node) node->name = arena_name(p, t->s, t->len);
		}
		advance(p);
	} else if (t->kind == JT_STRING) {
		/* adjacent strings are one: 'a' "b" is 'ab' */
		size_t total = 0, j = p->i;
		for (; j < p->tk->n && p->tk->v[j].kind == JT_STRING; j++)
			total += p->tk->v[j].len;
		char *buf = malloc(total + 1);
		if (!buf) return pfail(p, t, "out of memory");
		size_t o = 0;
		for (; p->i < j; p->i++) {
			memcpy(buf + o, p->tk->v[p->i].s, p->tk->v[p->i].len);
			o += p->tk->v[p->i].len;
		}
		jstr *s = jinja_arena_str(p->t, buf, o);
		free(buf);
		if (!s) return pfail(p, t, "out of memory");
		node = konst(p, t, jv_obj(JV_STR, s));
	} else if (t->kind == JT_INT) {
		node = konst(p, t, jv_int(t->i));
		advance(p);
	} else if (t->kind == JT_FLOAT) {
		node = konst(p, t, jv_float(t->f));
		advance(p);
	} else if (is_op(t, "(")) {
		advance(p);
		node = parse_tuple(p, true, true, NULL);
		if (node && !expect_op(p, ")")) node = NULL;
	} else if (is_op(t, "[") || is_op(t, "{")) {
		bool dict = is_op(t, "{");
		advance(p);
		nvec keys = { 0 }, vals = { 0 };
		const char *close = dict ? "}" : "]";
		while (!is_op(cur(p), close)) {
			if (keys.n && !expect_op(p, ",")) goto fail;
			if (is_op(cur(p), close)) break;
			jnode *k = parse_expression(p, true);
			if (!k || !nvec_push(p, &keys, k)) goto fail;
			if (dict) {
				if (!expect_op(p, ":")) goto fail;
				jnode *v = parse_expression(p, true);
				if (!v || !nvec_push(p, &vals, v)) goto fail;
			}
		}
		advance(p);
		node = mknode(p, dict ? N_DICT : N_LIST, t);
		if (node) {
			node->list = nvec_done(p, &keys, &node->n);
			node->list2 = nvec_done(p, &vals, &node->n2);
		}
		goto done;
fail:
		free(keys.v);
		free(vals.v);
		node = NULL;
	} else
		node = unexpected(p, "an expression");
done:
	p->depth--;
	return p->failed ? NULL : node;
}

static jnode *parse_unary(parser *p, bool with_filter)
{
	jinja_token *t = cur(p);
	jnode *node;
	bool sign = is_op(t, "-") || is_op(t, "+");
	if (sign && !enter(p)) return NULL;   /* a level per sign: - - - x recurses */
	if (sign) {
		advance(p);
		node = mknode(p, N_UNARY, t);
		if (node) {
			node->op = is_op(t, "-") ? OP_NEG : OP_POS;
			node->a = parse_unary(p, false);
			if (!node->a) node = NULL;
		}
	} else
		node = parse_primary(p);
	node = parse_postfix(p, node);
	if (with_filter) node = parse_filter_expr(p, node);
	if (sign) p->depth--;
	return node;
}

static jnode *binop(parser *p, const jinja_token *at, uint8_t op, jnode *a, jnode *b)
{
	if (!a || !b) return NULL;
	jnode *n = mknode(p, N_BINOP, at);
	if (!n) return NULL;
	n->op = op;
	n->a = a;
	n->b = b;
	return n;
}

static jnode *parse_pow(parser *p)
{
	jnode *l = parse_unary(p, true);
	while (l && is_op(cur(p), "**")) {
		jinja_token *at = cur(p);
		advance(p);
		l = binop(p, at, OP_POW, l, parse_unary(p, true));
	}
	return l;
}

static jnode *parse_math2(parser *p)
{
	jnode *l = parse_pow(p);
	for (;;) {
		jinja_token *at = cur(p);
		uint8_t op;
		if (is_op(at, "*")) op = OP_MUL;
		else if (is_op(at, "/")) op = OP_DIV;
		else if (is_op(at, "//")) op = OP_FLOORDIV;
		else if (is_op(at, "%")) op = OP_MOD;
		else return l;
		if (!l) return NULL;
		advance(p);
		l = binop(p, at, op, l, parse_pow(p));
	}
}

static jnode *parse_concat(parser *p)
{
	jnode *l = parse_math2(p);
	while (l && is_op(cur(p), "~")) {
		jinja_token *at = cur(p);
		advance(p);
		l = binop(p, at, OP_CONCAT, l, parse_math2(p));
	}
	return l;
}

static jnode *parse_math1(parser *p)
{
	jnode *l = parse_concat(p);
	while (l && (is_op(cur(p), "+") || is_op(cur(p), "-"))) {
		jinja_token *at = cur(p);
		advance(p);
		l = binop(p, at, is_op(at, "+") ? OP_ADD : OP_SUB, l, parse_concat(p));
	}
	return l;
}

static jnode *parse_compare(parser *p)
{
	jinja_token *start = cur(p);
	jnode *expr = parse_math1(p);
	if (!expr) return NULL;
	nvec operands = { 0 };
	uint8_t ops[64];
	for (;;) {
		jinja_token *t = cur(p);
		uint8_t op;
		if (is_op(t, "==")) op = OP_EQ;
		else if (is_op(t, "!=")) op = OP_NE;
		else if (is_op(t, "<")) op = OP_LT;
		else if (is_op(t, "<=")) op = OP_LE;
		else if (is_op(t, ">")) op = OP_GT;
		else if (is_op(t, ">=")) op = OP_GE;
		else if (is_name(t, "in")) op = OP_IN;
		else if (is_name(t, "not") && is_name(peek(p, 1), "in")) { op = OP_NOTIN; advance(p); }
		else break;
		advance(p);
		if (operands.n == 64) { free(operands.v); return pfail(p, t, "more than 64 chained comparisons"); }
		jnode *r = parse_math1(p);
		if (!r || !nvec_push(p, &operands, r)) { free(operands.v); return NULL; }
		ops[operands.n - 1] = op;
	}
	if (operands.n == 0) return expr;
	jnode *c = mknode(p, N_COMPARE, start);
	if (!c) { free(operands.v); return NULL; }
	c->a = expr;
	uint32_t n = operands.n;
	c->list = nvec_done(p, &operands, &c->n);
	c->ops = jinja_arena_alloc(p->t, n);
	if (!c->ops) return pfail(p, start, "out of memory");
	memcpy(c->ops, ops, n);
	return p->failed ? NULL : c;
}

static jnode *parse_not(parser *p)
{
	if (is_name(cur(p), "not")) {
		jinja_token *at = cur(p);
		advance(p);
		if (!enter(p)) return NULL;
		jnode *n = mknode(p, N_UNARY, at);
		if (n) {
			n->op = OP_NOT;
			n->a = parse_not(p);
			if (!n->a) n = NULL;
		}
		p->depth--;
		return n;
	}
	return parse_compare(p);
}

static jnode *parse_and(parser *p)
{
	jnode *l = parse_not(p);
	while (l && is_name(cur(p), "and")) {
		jinja_token *at = cur(p);
		advance(p);
		jnode *r = parse_not(p);
		if (!r) return NULL;
		jnode *n = mknode(p, N_AND, at);
		if (!n) return NULL;
		n->a = l;
		n->b = r;
		l = n;
	}
	return l;
}

static jnode *parse_or(parser *p)
{
	jnode *l = parse_and(p);
	while (l && is_name(cur(p), "or")) {
		jinja_token *at = cur(p);
		advance(p);
		jnode *r = parse_and(p);
		if (!r) return NULL;
		jnode *n = mknode(p, N_OR, at);
		if (!n) return NULL;
		n->a = l;
		n->b = r;
		l = n;
	}
	return l;
}

static jnode *parse_expression(parser *p, bool with_condexpr)
{
	jnode *e = parse_or(p);
	while (with_condexpr && e && is_name(cur(p), "if")) {
		jinja_token *at = cur(p);
		advance(p);
		jnode *c = mknode(p, N_COND, at);
		if (!c) { e = NULL; break; }
		c->b = e;
		c->a = parse_or(p);
		if (!c->a) { e = NULL; break; }
		if (is_name(cur(p), "else")) {
			advance(p);
			if (!enter(p)) { e = NULL; break; }   /* a else b if c else … recurses */
			c->c = parse_expression(p, true);
			p->depth--;
			if (!c->c) { e = NULL; break; }
		}
		e = c;
	}
	return e;
}

static bool tuple_end(parser *p, const char *extra_end)
{
	jinja_token *t = cur(p);
	return t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || t->kind == JT_EOF || is_op(t, ")") ||
	       (extra_end && is_name(t, extra_end));
}

static jnode *parse_tuple(parser *p, bool with_condexpr, bool explicit_parens, const char *extra_end)
{
	jinja_token *at = cur(p);
	nvec items = { 0 };
	bool is_tuple = false;
	for (;;) {
		if (items.n && !expect_op(p, ",")) goto fail;
		if (tuple_end(p, extra_end)) break;
		jnode *e = parse_expression(p, with_condexpr);
		if (!e || !nvec_push(p, &items, e)) goto fail;
		if (is_op(cur(p), ",")) is_tuple = true;
		else break;
	}
	if (!is_tuple) {
		if (items.n) { jnode *e = items.v[0]; free(items.v); return e; }
		if (!explicit_parens) { free(items.v); return unexpected(p, "an expression"); }
	}
	jnode *t = mknode(p, N_TUPLE, at);
	if (!t) goto fail;
	t->list = nvec_done(p, &items, &t->n);
	return p->failed ? NULL : t;
fail:
	free(items.v);
	return NULL;
}

/* A target of for or set: a name, ns.attr (set only), or names in a tuple. */
static jnode *parse_assign_target(parser *p, bool with_namespace, const char *extra_end)
{
	jinja_token *at = cur(p);
	if (with_namespace && at->kind == JT_NAME && is_op(peek(p, 1), ".") && peek(p, 2)->kind == JT_NAME) {
		jnode *ns = mknode(p, N_NAME, at), *g = mknode(p, N_GETATTR, peek(p, 1));
		if (!ns || !g) return NULL;
		ns->name = arena_name(p, at->s, at->len);
		g->a = ns;
		g->name = arena_name(p, peek(p, 2)->s, peek(p, 2)->len);
		p->i += 3;
		return g;
	}
	nvec names = { 0 };
	bool is_tuple = false;
	bool paren = is_op(at, "(");
	if (paren) advance(p);
	for (;;) {
		if (names.n && !expect_op(p, ",")) goto fail;
		if (tuple_end(p, extra_end) || is_op(cur(p), "=") || is_op(cur(p), "|")) break;
		jinja_token *t = cur(p);
		if (t->kind != JT_NAME) { unexpected(p, "a name to assign to"); goto fail; }
		if (is_name(t, "true") || is_name(t, "false") || is_name(t, "none") || is_name(t, "True") ||
		    is_name(t, "False") || is_name(t, "None")) {
			pfail(p, t, "cannot assign to '%.*s'", (int)t->len, t->s);
			goto fail;
		}
		if (is_name(t, "loop") && (!with_namespace || p->loop_depth > 0)) {   /* a for target, or a set in a loop */
			pfail(p, t, "cannot assign to the special loop variable in a for loop");
			goto fail;
		}
		jnode *n = mknode(p, N_NAME, t);
		if (!n || !(n->name = arena_name(p, t->s, t->len)) || !nvec_push(p, &names, n)) goto fail;
		advance(p);
		if (is_op(cur(p), ",")) is_tuple = true;
		else break;
	}
	if (paren && !expect_op(p, ")")) goto fail;
	if (names.n == 0) { unexpected(p, "a name to assign to"); goto fail; }
	if (!is_tuple && !paren) { jnode *n = names.v[0]; free(names.v); return n; }
	jnode *t = mknode(p, N_TUPLE, at);
	if (!t) goto fail;
	t->list = nvec_done(p, &names, &t->n);
	return p->failed ? NULL : t;
fail:
	free(names.v);
	return NULL;
}

/* Statements up to a {% name %} whose name is one of ends (NULL-terminated; NULL: the end of the template). On
 * return the current token is that name. */
static jnode *parse_body(parser *p, const char *const *ends, const jinja_token *opener);

static bool at_end_tag(parser *p, const char *name)
{
	return is_name(cur(p), name);
}

/* After an end name such as endif: the name, then '%}'. */
static bool close_tag(parser *p)
{
	advance(p);
	return expect_kind(p, JT_BLOCK_END, "'%}'");
}

static jnode *parse_if(parser *p, jinja_token *at)
{
	jnode *n = mknode(p, S_IF, at);
	if (!n) return NULL;
	nvec conds = { 0 }, bodies = { 0 };
	static const char *const ends[] = { "elif", "else", "endif", NULL };
	for (;;) {
		jnode *c = parse_tuple(p, false, false, NULL);
		if (!c || !expect_kind(p, JT_BLOCK_END, "'%}'") || !nvec_push(p, &conds, c)) goto fail;
		jnode *b = parse_body(p, ends, at);
		if (!b || !nvec_push(p, &bodies, b)) goto fail;
		if (at_end_tag(p, "elif")) { advance(p); continue; }
		if (at_end_tag(p, "else")) {
			if (!close_tag(p)) goto fail;
			static const char *const ends2[] = { "endif", NULL };
			if (!(n->orelse = parse_body(p, ends2, at))) goto fail;
		}
		if (!close_tag(p)) goto fail;
		break;
	}
	n->list = nvec_done(p, &conds, &n->n);
	n->list2 = nvec_done(p, &bodies, &n->n2);
	return p->failed ? NULL : n;
fail:
	free(conds.v);
	free(bodies.v);
	return NULL;
}

static jnode *parse_for(parser *p, jinja_token *at)
{
	jnode *n = mknode(p, S_FOR, at);
	if (!n) return NULL;
	if (!(n->a = parse_assign_target(p, false, "in"))) return NULL;
	if (!is_name(cur(p), "in")) return unexpected(p, "'in'");
	advance(p);
	if (!(n->b = parse_tuple(p, false, false, "recursive"))) return NULL;
	if (is_name(cur(p), "if")) {
		advance(p);
		if (!(n->c = parse_expression(p, true))) return NULL;
	}
	if (is_name(cur(p), "recursive")) return pfail(p, cur(p), "recursive loops are not supported");
	if (!expect_kind(p, JT_BLOCK_END, "'%}'")) return NULL;
	static const char *const ends[] = { "endfor", "else", NULL };
	p->loop_depth++;
	n->body = parse_body(p, ends, at);
	p->loop_depth--;
	if (!n->body) return NULL;
	if (at_end_tag(p, "else")) {
		if (!close_tag(p)) return NULL;
		static const char *const ends2[] = { "endfor", NULL };
		if (!(n->orelse = parse_body(p, ends2, at))) return NULL;
	}
	return close_tag(p) ? n : NULL;
}

static jnode *parse_set(parser *p, jinja_token *at)
{
	jnode *target = parse_assign_target(p, true, NULL);
	if (!target) return NULL;
	if (is_op(cur(p), "=")) {
		advance(p);
		jnode *n = mknode(p, S_SET, at);
		if (!n) return NULL;
		n->a = target;
		if (!(n->b = parse_tuple(p, true, false, NULL))) return NULL;
		return expect_kind(p, JT_BLOCK_END, "'%}'") ? n : NULL;
	}
	if (target->kind != N_NAME && target->kind != N_GETATTR)
		return pfail(p, at, "a block set assigns to one name");
	jnode *n = mknode(p, S_SET_BLOCK, at);
	if (!n) return NULL;
	n->a = target;
	if (is_op(cur(p), "|") && !(n->b = parse_filter(p, NULL, false))) return NULL;
	if (!expect_kind(p, JT_BLOCK_END, "'%}'")) return NULL;
	static const char *const ends[] = { "endset", NULL };
	if (!(n->body = parse_body(p, ends, at))) return NULL;
	return close_tag(p) ? n : NULL;
}

static jnode *parse_macro(parser *p, jinja_token *at)
{
	jnode *n = mknode(p, S_MACRO, at);
	if (!n) return NULL;
	if (cur(p)->kind != JT_NAME) return unexpected(p, "a macro name");
	n->name = arena_name(p, cur(p)->s, cur(p)->len);
	advance(p);
	nvec params = { 0 }, defs = { 0 };
	bool any_default = false;
	if (!expect_op(p, "(")) return NULL;
	while (!is_op(cur(p), ")")) {
		if (params.n && !expect_op(p, ",")) goto fail;
		if (is_op(cur(p), ")")) break;
		jinja_token *t = cur(p);
		if (t->kind != JT_NAME) { unexpected(p, "a parameter name"); goto fail; }
		jnode *pn = mknode(p, N_NAME, t);
		if (!pn || !(pn->name = arena_name(p, t->s, t->len))) goto fail;
		advance(p);
		jnode *d = NULL;
		if (is_op(cur(p), "=")) {
			advance(p);
			if (!(d = parse_expression(p, true))) goto fail;
			any_default = true;
		} else if (any_default) {
			pfail(p, t, "a parameter without a default after one with a default");
			goto fail;
		}
		if (!nvec_push(p, &params, pn)) goto fail;
		if (!nvec_push(p, &defs, d)) goto fail;
	}
	advance(p);
	if (!expect_kind(p, JT_BLOCK_END, "'%}'")) goto fail;
	n->list = nvec_done(p, &params, &n->n);
	n->list2 = nvec_done(p, &defs, &n->n2);
	static const char *const ends[] = { "endmacro", NULL };
	int32_t loops = p->loop_depth;
	p->loop_depth = 0;
	n->body = parse_body(p, ends, at);
	p->loop_depth = loops;
	if (!n->body) return NULL;
	return close_tag(p) ? n : NULL;
fail:
	free(params.v);
	free(defs.v);
	return NULL;
}

static jnode *parse_statement(parser *p)
{
	jinja_token *at = cur(p);   /* the tag's name */
	if (at->kind != JT_NAME) return unexpected(p, "a tag name");
	if (!enter(p)) return NULL;
	jnode *n = NULL;
	advance(p);
	if (is_name(at, "if")) n = parse_if(p, at);
	else if (is_name(at, "for")) n = parse_for(p, at);
	else if (is_name(at, "set")) n = parse_set(p, at);
	else if (is_name(at, "macro")) n = parse_macro(p, at);
	else if (is_name(at, "break") || is_name(at, "continue")) {
		if (p->loop_depth == 0) n = pfail(p, at, "'%.*s' outside a loop", (int)at->len, at->s);
		else if ((n = mknode(p, is_name(at, "break") ? S_BREAK : S_CONTINUE, at)) &&
		         !expect_kind(p, JT_BLOCK_END, "'%}'"))
			n = NULL;
	} else if (is_name(at, "filter")) {
		n = mknode(p, S_FILTER_BLOCK, at);
		if (n && !(n->b = parse_filter(p, NULL, true))) n = NULL;
		if (n && !expect_kind(p, JT_BLOCK_END, "'%}'")) n = NULL;
		static const char *const ends[] = { "endfilter", NULL };
		if (n && !(n->body = parse_body(p, ends, at))) n = NULL;
		if (n && !close_tag(p)) n = NULL;
	} else if (is_name(at, "generation")) {
		/* transformers' {% generation %} marks the assistant's text for a mask; rendering passes it through */
		static const char *const ends[] = { "endgeneration", NULL };
		n = mknode(p, S_FILTER_BLOCK, at);   /* no filter: the body rendered in its own scope, as a call block */
		if (n && !expect_kind(p, JT_BLOCK_END, "'%}'")) n = NULL;
		if (n && !(n->body = parse_body(p, ends, at))) n = NULL;
		if (n && !close_tag(p)) n = NULL;
	} else if (is_name(at, "include") || is_name(at, "import") || is_name(at, "from") || is_name(at, "extends") ||
	           is_name(at, "block") || is_name(at, "call") || is_name(at, "do") || is_name(at, "with") ||
	           is_name(at, "autoescape") || is_name(at, "trans"))
		n = pfail(p, at, "the '%.*s' tag is not supported (a chat template may only render)", (int)at->len, at->s);
	else if ((at->len > 3 && memcmp(at->s, "end", 3) == 0) || is_name(at, "elif") || is_name(at, "else"))
		n = pfail(p, at, "unexpected '%.*s'", (int)at->len, at->s);
	else
		n = pfail(p, at, "unknown tag '%.*s'", (int)at->len, at->s);
	p->depth--;
	return n;
}

static jnode *parse_body(parser *p, const char *const *ends, const jinja_token *opener)
{
	jinja_token *start = cur(p);
	jnode *block = mknode(p, S_BLOCK, start);
	if (!block) return NULL;
	nvec stmts = { 0 };
	for (;;) {
		jinja_token *t = cur(p);
		jnode *s = NULL;
		if (t->kind == JT_EOF) {
			if (ends) {
				char want[64] = "";
				for (int k = 0; ends[k]; k++)
					snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'", k ? " or " : "", ends[k]);
				pfail(p, opener ? opener : start, "this block is not closed: the template ends before %s", want);
				goto fail;
			}
			break;
		}
		if (t->kind == JT_TEXT) {
			s = mknode(p, S_TEXT, t);
			jstr *str = s ? jinja_arena_str(p->t, t->s, t->len) : NULL;
			if (!str) { pfail(p, t, "out of memory"); goto fail; }
			s->value = jv_obj(JV_STR, str);
			advance(p);
		} else if (t->kind == JT_VAR_BEGIN) {
			advance(p);
			s = mknode(p, S_PRINT, t);
			if (!s || !(s->a = parse_tuple(p, true, false, NULL)) || !expect_kind(p, JT_VAR_END, "'}}'")) goto fail;
		} else if (t->kind == JT_BLOCK_BEGIN) {
			advance(p);
			bool end = false;
			for (int k = 0; ends && ends[k]; k++)
				if (is_name(cur(p), ends[k])) end = true;
			if (end) break;
			if (!(s = parse_statement(p))) goto fail;
		} else {
			unexpected(p, NULL);
			goto fail;
		}
		if (!nvec_push(p, &stmts, s)) goto fail;
	}
	block->list = nvec_done(p, &stmts, &block->n);
	return p->failed ? NULL : block;
fail:
	free(stmts.v);
	return NULL;
}

jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t err_len)
{
	char dummy[8];
	if (!err || !err_len) { err = dummy; err_len = sizeof dummy; }
	err[0] = 0;
	jinja_tokens tk;
	if (jinja_lex(src ? src : "", src ? len : 0, &tk, err, err_len) < 0) {
		jinja_tokens_free(&tk);
		return NULL;
	}
	jinja_template *t = calloc(1, sizeof *t);
	if (!t) {
		jinja_tokens_free(&tk);
		snprintf(err, err_len, "line 1, column 1: out of memory");
		return NULL;
	}
	parser p = { .t = t, .tk = &tk, .err = err, .err_len = err_len };
	t->root = parse_body(&p, NULL, NULL);
	jinja_tokens_free(&tk);
	if (!t->root) {
		jinja_free(t);
		return NULL;
	}
	return t;
}
