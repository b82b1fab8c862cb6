/* engine/grammar/json_schema.c — a JSON Schema written as a GBNF grammar (json_schema.h): each sub-schema becomes a
 * rule named after its JSON pointer, and every keyword is either enforced exactly or refused with its name and place.
 * This file walks the schema (keywords, $ref, anyOf/oneOf/allOf, const/enum, types) and keeps the rules;
 * json_schema_shapes.c writes each type's branch and json_schema_text.c the GBNF text of JSON.
 *
 * The policies the grammar keeps (docs/structured-output.md says them to users):
 *   - whitespace: none before or after the root value; between two tokens nothing, one space, or a newline and up
 *     to 40 spaces or tabs (rule ws). json.dumps writes all of these, compact or not, and indent= up to depth 20.
 *   - numbers: at most 16 integer digits, 16 fraction digits and 3 exponent digits, so a model cannot write digits
 *     forever; an integer is -?(0|[1-9][0-9]*) (so 1.0 is not an integer here, though JSON Schema counts it one).
 *   - an object's declared properties come in the schema's order (required ones always, optional ones maybe), and
 *     the other keys that additionalProperties allows come after them; those keys can be no declared name.
 *   - a string whose value the schema fixes or tests (const, enum, property names, keys beside them, pattern,
 *     format) is written in one canonical form: every character as itself except " \ and the controls, which are
 *     \" \\ \b \f \n \r \t or \u00XX — what json.dumps(ensure_ascii=False) writes; a free string (type string,
 *     minLength, maxLength) may use every escape JSON has, a surrogate pair counting as one character. A const or
 *     enum object keeps the key order it is written in, and a number the form Python's repr gives it.
 *   - format date, time and date-time are RFC 3339 (no leap second; at most 9 digits of a second's fraction); uuid
 *     is 8-4-4-4-12 hex digits of either case. */
#include "engine/grammar/json_schema.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytebuf.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema_internal.h"
#include "models/errf.h"

/* ---- keywords ---- */

static const char *const kw_names[KW_COUNT] = {
	"title", "description", "$schema", "$id", "examples", "default", "$comment", "deprecated", "readOnly",
	"writeOnly", "strict", "$defs", "definitions",
	"$ref", "allOf", "anyOf", "oneOf", "type", "enum", "const",
	"properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
	"minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
};
/* Keywords that constrain nothing: annotations, and the containers that $ref reads from. */
#define KW_INERT (KB(KW_TITLE) | KB(KW_DESCRIPTION) | KB(KW_SCHEMA) | KB(KW_ID) | KB(KW_EXAMPLES) | KB(KW_DEFAULT) | \
	KB(KW_COMMENT) | KB(KW_DEPRECATED) | KB(KW_READONLY) | KB(KW_WRITEONLY) | KB(KW_STRICT) | KB(KW_DEFS) | \
	KB(KW_DEFINITIONS))

static int kw_find(const char *key)
{
	for (int k = 0; k < KW_COUNT; k++)
		if (strcmp(key, kw_names[k]) == 0)
			return k;
	return -1;
}

static const char *const type_names[] = { "null", "boolean", "object", "array", "string", "number", "integer" };

static unsigned type_bit(const char *name)
{
	for (unsigned i = 0; i < 7; i++)
		if (strcmp(name, type_names[i]) == 0)
			return 1u << i;
	return 0;
}

/* ---- the converter's state ---- */

int js_fail(js_cx *c, const char *fmt, ...)
{
	if (!c->failed && c->err && c->err_len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->err, c->err_len, fmt, ap);
		va_end(ap);
	}
	c->failed = true;
	return -1;
}

const char *js_show(const char *ptr)
{
	return *ptr ? ptr : "/";
}

int js_unsupported(js_cx *c, const char *kw, const char *ptr, const char *why)
{
	return js_fail(c, "JSON Schema keyword '%s' at %s is not supported%s", kw, js_show(ptr), why ? why : "");
}

int js_oom(js_cx *c)
{
	return js_fail(c, "out of memory converting a JSON Schema");
}

/* Hands p to the conversion, which frees it at its end (p is freed here when that fails). */
static void *cx_keep(js_cx *c, void *p)
{
	if (p && c->n_mem == c->cap_mem) {
		size_t cap = c->cap_mem ? 2 * c->cap_mem : 64;
		void **m = realloc(c->mem, cap * sizeof *m);
		if (!m) {
			free(p);
			p = NULL;
		} else {
			c->mem = m;
			c->cap_mem = cap;
		}
	}
	if (!p) {
		js_oom(c);
		return NULL;
	}
	c->mem[c->n_mem++] = p;
	return p;
}

void *js_alloc(js_cx *c, size_t n)
{
	return cx_keep(c, calloc(1, n ? n : 1));
}

/* The text of b as an arena string (b is emptied); NULL when out of memory. */
const char *js_take(js_cx *c, aah_bytebuf *b)
{
	if (aah_bytebuf_put(b, "", 1) != 0) {
		aah_bytebuf_free(b);
		js_oom(c);
		return NULL;
	}
	const char *s = cx_keep(c, b->p);
	*b = (aah_bytebuf){ 0 };
	return s;
}

const char *js_fmt(js_cx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		js_oom(c);
		return NULL;
	}
	char *s = js_alloc(c, (size_t)n + 1);
	if (!s)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(s, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return s;
}

/* ---- maps and rules ---- */

static uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;   /* FNV-1a */
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

int32_t js_strmap_get(const js_strmap *m, const char *k)
{
	if (!m->cap)
		return -1;
	for (size_t i = str_hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->key[i])
			return -1;
		if (strcmp(m->key[i], k) == 0)
			return m->val[i];
	}
}

int js_strmap_put(js_cx *c, js_strmap *m, const char *k, int32_t v)
{
	if ((m->n + 1) * 2 > m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 64;
		const char **key = calloc(cap, sizeof *key);
		int32_t *val = calloc(cap, sizeof *val);
		if (!key || !val) {
			free(key);
			free(val);
			return js_oom(c);
		}
		for (size_t i = 0; i < m->cap; i++) {
			if (!m->key[i])
				continue;
			size_t j = str_hash(m->key[i]) & (cap - 1);
			while (key[j])
				j = (j + 1) & (cap - 1);
			key[j] = m->key[i];
			val[j] = m->val[i];
		}
		free(m->key);
		free(m->val);
		m->key = key;
		m->val = val;
		m->cap = cap;
	}
	size_t i = str_hash(k) & (m->cap - 1);
	while (m->key[i] && strcmp(m->key[i], k) != 0)
		i = (i + 1) & (m->cap - 1);
	if (!m->key[i])
		m->n++;
	m->key[i] = k;
	m->val[i] = v;
	return 0;
}

static void strmap_free(js_strmap *m)
{
	free(m->key);
	free(m->val);
	*m = (js_strmap){ 0 };
}

const char *js_prim(js_cx *c, enum js_prim p)
{
	c->prims |= 1u << p;
	return js_prims[p].name;
}

static bool is_prim_name(const char *s)
{
	for (int p = 0; p < PR_COUNT; p++)
		if (s == js_prims[p].name)
			return true;
	return false;
}

/* A name no rule has: base, or base-2, base-3, … */
const char *js_unique_name(js_cx *c, const char *base)
{
	if (js_strmap_get(&c->names, base) < 0)
		return base;
	for (int k = 2;; k++) {
		const char *n = js_fmt(c, "%s-%d", base, k);
		if (!n || js_strmap_get(&c->names, n) < 0)
			return n;
	}
}

int32_t js_rule_new(js_cx *c, const char *base, int32_t seq)
{
	const char *name = js_unique_name(c, base);
	if (!name)
		return -1;
	if (c->n_rules == c->cap_rules) {
		size_t cap = c->cap_rules ? 2 * c->cap_rules : 64;
		js_rule *r = realloc(c->rules, cap * sizeof *r);
		if (!r)
			return js_oom(c);
		c->rules = r;
		c->cap_rules = cap;
	}
	int32_t i = (int32_t)c->n_rules++;
	c->rules[i] = (js_rule){ .name = name, .seq = seq };
	if (js_strmap_put(c, &c->names, name, i) != 0)
		return -1;
	return i;
}

int js_account(js_cx *c, const js_rule *r)
{
	c->text += strlen(r->name) + strlen(r->body) + 6;
	if (c->text > GRAMMAR_MAX_TEXT)
		return js_fail(c, "JSON Schema would become more than %u bytes of GBNF", GRAMMAR_MAX_TEXT);
	return 0;
}

/* The rule `base ::= body` (base made unique), or the rule that already has this body; slot >= 0: that reserved
 * rule (a $ref target's) takes the body. Returns the rule's name, NULL on failure. */
const char *js_rule_add(js_cx *c, const char *base, int32_t seq, int32_t slot, const char *body)
{
	if (!body || c->failed)
		return NULL;
	if (slot < 0) {
		int32_t same = js_strmap_get(&c->bodies, body);
		if (same >= 0)
			return c->rules[same].name;
		slot = js_rule_new(c, base, seq);
		if (slot < 0)
			return NULL;
	}
	js_rule *r = &c->rules[slot];
	r->body = body;
	if (js_account(c, r) != 0)
		return NULL;
	if (js_strmap_get(&c->bodies, body) < 0 && js_strmap_put(c, &c->bodies, body, slot) != 0)
		return NULL;
	return r->name;
}

int js_count_repeat(js_cx *c, int64_t n)
{
	c->expand += (size_t)n;
	if (c->expand > GRAMMAR_MAX_SYMBOLS / 2)
		return js_fail(c, "JSON Schema repeats too much for one grammar (minItems/maxItems/minLength/maxLength add "
		               "up past %u)", GRAMMAR_MAX_SYMBOLS / 2);
	return 0;
}

/* ---- names and pointers ---- */

const char *js_ptr_child(js_cx *c, const char *ptr, const char *tok, size_t len)
{
	aah_bytebuf b = { 0 };
	js_puts(&b, ptr);
	js_put(&b, "/", 1);
	for (size_t i = 0; i < len; i++) {
		if (tok[i] == '~')
			js_puts(&b, "~0");
		else if (tok[i] == '/')
			js_puts(&b, "~1");
		else
			js_put(&b, tok + i, 1);
	}
	return js_take(c, &b);
}

const char *js_ptr_index(js_cx *c, const char *ptr, const char *kw, size_t i)
{
	return js_fmt(c, "%s/%s/%zu", ptr, kw, i);
}

/* A rule name for a child of the rule `parent`: letters and digits of tok kept, the rest one '-' (so no name made
 * here holds "--", which the pattern rules use). */
const char *js_name_child(js_cx *c, const char *parent, const char *tok, size_t len)
{
	aah_bytebuf b = { 0 };
	if (strcmp(parent, "root") != 0) {
		js_puts(&b, parent);
		js_put(&b, "-", 1);
	}
	size_t start = b.n;
	bool dash = b.n > 0;
	for (size_t i = 0; i < len && b.n - start < JS_MAX_NAME; i++) {
		char ch = tok[i];
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) {
			js_put(&b, &ch, 1);
			dash = false;
		} else if (!dash) {
			js_put(&b, "-", 1);
			dash = true;
		}
	}
	while (b.n > 0 && b.p[b.n - 1] == '-')
		b.n--;
	if (b.n == 0)
		js_puts(&b, "p");
	return js_take(c, &b);
}

const char *js_name_sub(js_cx *c, const char *parent, const char *suffix)
{
	return js_name_child(c, parent, suffix, strlen(suffix));
}

const char *js_json_string(js_cx *c, const char *s, size_t n)
{
	aah_bytebuf b = { 0 };
	js_emitter e = { .b = &b, .prims = &c->prims };
	js_em_json_string(&e, s, n);
	js_em_close(&e);
	return js_take(c, &b);
}

/* ---- the compiler ---- */


int js_invalid(js_cx *c, const char *ptr, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return js_fail(c, "invalid JSON Schema at %s: %s", js_show(ptr), msg);
}

/* A count keyword (minItems …): a non-negative integer (5.0 counts), at most JS_MAX_COUNT. */
int js_count_value(js_cx *c, const json_t *v, const char *kw, const char *ptr, int64_t *n)
{
	double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
	if (!json_is_number(v) || d < 0 || d != floor(d))
		return js_invalid(c, ptr, "'%s' must be a non-negative integer", kw);
	if (d > JS_MAX_COUNT)
		return js_fail(c, "JSON Schema keyword '%s' at %s is not supported above %d", kw, js_show(ptr), JS_MAX_COUNT);
	*n = (int64_t)d;
	return 0;
}

static int check_schema_list(js_cx *c, const json_t *v, const char *kw, const char *ptr, bool empty_ok)
{
	if (!json_is_array(v) || (!empty_ok && json_array_size(v) == 0))
		return js_invalid(c, ptr, "'%s' must be a%s array of schemas", kw, empty_ok ? "n" : " non-empty");
	for (size_t i = 0; i < json_array_size(v); i++) {
		const json_t *x = json_array_get(v, i);
		if (!json_is_object(x) && !json_is_boolean(x))
			return js_invalid(c, ptr, "'%s' item %zu must be a schema (an object or a boolean)", kw, i);
	}
	return 0;
}

/* The value of one keyword is of the right kind; the keywords we refuse by value are refused here. */
static int check_keyword(js_cx *c, int k, const json_t *v, const char *ptr)
{
	int64_t n;
	switch (k) {
	case KW_ID:
		if (*ptr)   /* below the root an $id starts a new base for $ref: not followed */
			return js_unsupported(c, "$id", ptr, " below the root");
		break;
	case KW_STRICT:
		if (!json_is_boolean(v))
			return js_invalid(c, ptr, "'strict' must be a boolean");
		break;
	case KW_DEFS:
	case KW_DEFINITIONS:
		if (!json_is_object(v))
			return js_invalid(c, ptr, "'%s' must be an object of schemas", kw_names[k]);
		break;
	case KW_REF:
		if (!json_is_string(v))
			return js_invalid(c, ptr, "'$ref' must be a string");
		break;
	case KW_ALLOF:
	case KW_ANYOF:
	case KW_ONEOF:
		if (check_schema_list(c, v, kw_names[k], ptr, false) != 0)
			return -1;
		if (k == KW_ALLOF && json_array_size(v) != 1)
			return js_unsupported(c, "allOf", ptr, " with more than one schema");
		break;
	case KW_TYPE:
		if (json_is_string(v)) {
			if (!type_bit(json_string_value(v)))
				return js_invalid(c, ptr, "'type' %s is not a JSON Schema type", json_string_value(v));
		} else if (json_is_array(v) && json_array_size(v) > 0) {
			unsigned seen = 0;
			for (size_t i = 0; i < json_array_size(v); i++) {
				const json_t *t = json_array_get(v, i);
				unsigned bit = json_is_string(t) ? type_bit(json_string_value(t)) : 0;
				if (!bit)
					return js_invalid(c, ptr, "'type' item %zu is not a JSON Schema type name", i);
				if (seen & bit)
					return js_invalid(c, ptr, "'type' names %s twice", json_string_value(t));
				seen |= bit;
			}
		} else {
			return js_invalid(c, ptr, "'type' must be a type name or a non-empty list of them");
		}
		break;
	case KW_ENUM:
		if (!json_is_array(v))
			return js_invalid(c, ptr, "'enum' must be an array");
		if (json_array_size(v) == 0)
			return js_invalid(c, ptr, "'enum' is empty: no value would validate");
		break;
	case KW_PROPERTIES: {
		if (!json_is_object(v))
			return js_invalid(c, ptr, "'properties' must be an object of schemas");
		const char *key;
		json_t *x;
		json_object_foreach((json_t *)v, key, x)
			if (!json_is_object(x) && !json_is_boolean(x))
				return js_invalid(c, ptr, "property '%s' must be a schema (an object or a boolean)", key);
		break;
	}
	case KW_REQUIRED:
		if (!json_is_array(v))
			return js_invalid(c, ptr, "'required' must be an array of strings");
		for (size_t i = 0; i < json_array_size(v); i++) {
			const json_t *x = json_array_get(v, i);
			if (!json_is_string(x))
				return js_invalid(c, ptr, "'required' must be an array of strings (item %zu is not)", i);
			for (size_t j = 0; j < i; j++)
				if (js_value_equal(x, json_array_get(v, j)))
					return js_invalid(c, ptr, "'required' names '%s' twice", json_string_value(x));
		}
		break;
	case KW_ADDITIONAL:
	case KW_ITEMS:
		if (k == KW_ITEMS && json_is_array(v))
			return js_unsupported(c, "items", ptr, " as an array (draft 2019 and before): use prefixItems");
		if (!json_is_object(v) && !json_is_boolean(v))
			return js_invalid(c, ptr, "'%s' must be a schema (an object or a boolean)", kw_names[k]);
		break;
	case KW_PREFIXITEMS:
		return check_schema_list(c, v, "prefixItems", ptr, true);
	case KW_UNIQUEITEMS:
		if (!json_is_boolean(v))
			return js_invalid(c, ptr, "'uniqueItems' must be a boolean");
		if (json_is_true(v))
			return js_unsupported(c, "uniqueItems", ptr, " (true)");
		break;
	case KW_MINITEMS:
	case KW_MAXITEMS:
	case KW_MINLENGTH:
	case KW_MAXLENGTH:
		return js_count_value(c, v, kw_names[k], ptr, &n);
	case KW_PATTERN:
	case KW_FORMAT:
		if (!json_is_string(v))
			return js_invalid(c, ptr, "'%s' must be a string", kw_names[k]);
		break;
	case KW_MINIMUM:
	case KW_MAXIMUM:
	case KW_EXCLMINIMUM:
	case KW_EXCLMAXIMUM:
		if (!json_is_number(v))
			return js_invalid(c, ptr, "'%s' must be a number%s", kw_names[k],
			               json_is_boolean(v) ? " (the draft-04 boolean form is not supported)" : "");
		break;
	default:
		break;
	}
	return 0;
}

/* "JSON Schema keyword 'X' at P is not supported alongside 'Y'", X the first key of s among others. */
int js_alongside(js_cx *c, const json_t *s, uint64_t others, int with, const char *ptr)
{
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)s, key, v) {
		int k = kw_find(key);
		if (k >= 0 && (others & KB(k))) {
			char why[64];
			snprintf(why, sizeof why, " alongside '%s'", kw_names[with]);
			return js_unsupported(c, key, ptr, why);
		}
	}
	return js_fail(c, "JSON Schema at %s combines keywords that are not supported together", js_show(ptr));
}

/* ---- $ref ---- */

static int hexval(char h)
{
	return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
}

/* The target of a $ref (#, #/$defs/NAME or #/definitions/NAME): its schema, pointer and rule name base. Returns 0,
 * or -1 with the error set. */
static int ref_target(js_cx *c, const char *ref, const char *ptr, const json_t **target, const char **tptr,
                      const char **base)
{
	if (strcmp(ref, "#") == 0) {
		*target = c->root;
		*tptr = "";
		*base = "root";
		return 0;
	}
	const char *kw = NULL;
	if (strncmp(ref, "#/$defs/", 8) == 0)
		kw = "$defs";
	else if (strncmp(ref, "#/definitions/", 14) == 0)
		kw = "definitions";
	const char *tok = kw ? ref + 3 + strlen(kw) : NULL;
	if (!kw || strchr(tok, '/'))
		return js_fail(c, "JSON Schema keyword '$ref' at %s is not supported for '%s' (only #, #/$defs/NAME and "
		               "#/definitions/NAME)", js_show(ptr), ref);
	/* the pointer token: %XX as in a URI fragment, then ~1 and ~0 as in a JSON pointer */
	size_t n = strlen(tok);
	char *name = js_alloc(c, n + 1);
	if (!name)
		return -1;
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		if (tok[i] == '%') {
			int hi = i + 2 < n ? hexval(tok[i + 1]) : -1, lo = hi >= 0 ? hexval(tok[i + 2]) : -1;
			if (hi < 0 || lo < 0)
				return js_invalid(c, ptr, "'$ref' %s has a bad %%-escape", ref);
			name[o++] = (char)(hi * 16 + lo);
			i += 2;
		} else if (tok[i] == '~') {
			if (tok[i + 1] != '0' && tok[i + 1] != '1')
				return js_invalid(c, ptr, "'$ref' %s has a bad ~-escape", ref);
			name[o++] = tok[i + 1] == '0' ? '~' : '/';
			i++;
		} else {
			name[o++] = tok[i];
		}
	}
	name[o] = 0;
	const json_t *defs = json_object_get(c->root, kw);
	*target = json_is_object(defs) ? json_object_getn(defs, name, o) : NULL;
	if (!*target)
		return js_invalid(c, ptr, "'$ref' %s does not resolve", ref);
	if (!json_is_object(*target) && !json_is_boolean(*target))
		return js_invalid(c, ptr, "'$ref' %s is not a schema", ref);
	const char *p0 = js_ptr_child(c, "", kw, strlen(kw));
	*tptr = p0 ? js_ptr_child(c, p0, name, o) : NULL;
	*base = js_name_child(c, "root", name, o);
	return *tptr && *base ? 0 : -1;
}

/* Compiles a $ref target once, as a rule of its own (so it may be recursive); *out its rule name, or NULL when it
 * admits no value. */
static int compile_def(js_cx *c, const json_t *target, const char *tptr, const char *base, int depth, const char **out)
{
	*out = NULL;
	size_t d;
	for (d = 0; d < c->n_defs; d++)
		if (strcmp(c->defs[d].ptr, tptr) == 0)
			break;
	if (d < c->n_defs) {
		js_def *df = &c->defs[d];
		if (df->state == DEF_DONE) {
			*out = df->empty ? NULL : c->rules[df->rule].name;
			return 0;
		}
		for (const js_guard *g = c->unguarded; g; g = g->next)
			if (g->def == (int32_t)d)
				return js_fail(c, "JSON Schema at %s refers to itself before any value begins (left recursion)",
				            js_show(tptr));
		df->recursive = true;
		*out = c->rules[df->rule].name;
		return 0;
	}
	if (c->n_defs == c->cap_defs) {
		size_t cap = c->cap_defs ? 2 * c->cap_defs : 16;
		js_def *nd = realloc(c->defs, cap * sizeof *nd);
		if (!nd)
			return js_oom(c);
		c->defs = nd;
		c->cap_defs = cap;
	}
	int32_t slot = js_rule_new(c, base, c->seq++);
	if (slot < 0)
		return -1;
	c->defs[d] = (js_def){ .ptr = tptr, .rule = slot, .state = DEF_BUSY };
	c->n_defs++;
	js_guard g = { (int32_t)d, c->unguarded };
	const js_guard *saved = c->unguarded;
	c->unguarded = &g;
	const char *e;
	int rc = js_compile(c, target, tptr, base, depth, slot, &e);
	c->unguarded = saved;
	if (rc != 0)
		return -1;
	js_def *df = &c->defs[d];
	df->state = DEF_DONE;
	if (!e) {
		df->empty = true;
		if (df->recursive)
			return js_fail(c, "JSON Schema at %s admits no value", js_show(tptr));
		return 0;
	}
	js_rule *r = &c->rules[slot];
	if (!r->body) {
		r->body = e;
		if (js_account(c, r) != 0)
			return -1;
	}
	*out = r->name;
	return 0;
}

/* ---- oneOf: only when at most one branch can match ---- */

static const json_t *deref(js_cx *c, const json_t *s)
{
	for (int hop = 0; hop < 16 && json_is_object(s); hop++) {
		const json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
		if (json_is_string(ref)) {
			const char *r = json_string_value(ref);
			const json_t *defs = NULL;
			const char *tok = NULL;
			if (strcmp(r, "#") == 0) {
				s = c->root;
				continue;
			}
			if (strncmp(r, "#/$defs/", 8) == 0)
				defs = json_object_get(c->root, "$defs"), tok = r + 8;
			else if (strncmp(r, "#/definitions/", 14) == 0)
				defs = json_object_get(c->root, "definitions"), tok = r + 14;
			const json_t *t = tok ? json_object_get(defs, tok) : NULL;
			if (!t)
				return s;
			s = t;
		} else if (json_is_array(all) && json_array_size(all) == 1) {
			s = json_array_get(all, 0);
		} else {
			break;
		}
	}
	return s;
}

/* The JSON types a schema may match (a superset), integer folded into number. */
static unsigned schema_types(js_cx *c, const json_t *s, int depth)
{
	s = deref(c, s);
	if (json_is_false(s))
		return 0;
	if (!json_is_object(s) || depth > 16)
		return T_ALL & ~T_INTEGER;
	unsigned t = T_ALL & ~T_INTEGER;
	const json_t *ty = json_object_get(s, "type"), *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
	if (json_is_string(ty))
		t = type_bit(json_string_value(ty));
	else if (json_is_array(ty)) {
		t = 0;
		for (size_t i = 0; i < json_array_size(ty); i++)
			t |= type_bit(json_string_value(json_array_get(ty, i)));
	}
	if (t & T_INTEGER)
		t = (t & ~T_INTEGER) | T_NUMBER;
	if (cn)
		t &= js_value_type(cn) & ~T_INTEGER;
	if (json_is_array(en)) {
		unsigned v = 0;
		for (size_t i = 0; i < json_array_size(en); i++)
			v |= js_value_type(json_array_get(en, i)) & ~T_INTEGER;
		t &= v;
	}
	const char *alts[] = { "anyOf", "oneOf" };
	for (int a = 0; a < 2; a++) {
		const json_t *l = json_object_get(s, alts[a]);
		if (json_is_array(l)) {
			unsigned u = 0;
			for (size_t i = 0; i < json_array_size(l); i++)
				u |= schema_types(c, json_array_get(l, i), depth + 1);
			t &= u;
		}
	}
	return t;
}

/* The values a const/enum schema admits: *n of them at *one or in *list; false when s is not one. */
static bool schema_values(const json_t *s, const json_t **one, const json_t **list)
{
	*one = *list = NULL;
	if (!json_is_object(s))
		return false;
	*one = json_object_get(s, "const");
	*list = json_object_get(s, "enum");
	if (!json_is_array(*list))
		*list = NULL;
	return *one || *list;
}

static bool value_in(const json_t *v, const json_t *one, const json_t *list)
{
	if (one && !js_value_equal(v, one))
		return false;
	if (list) {
		for (size_t i = 0; i < json_array_size(list); i++)
			if (js_value_equal(v, json_array_get(list, i)))
				return true;
		return false;
	}
	return true;
}

static bool values_disjoint(const json_t *a1, const json_t *al, const json_t *b1, const json_t *bl)
{
	if (a1)
		return !value_in(a1, b1, bl);
	for (size_t i = 0; i < json_array_size(al); i++)
		if (value_in(json_array_get(al, i), b1, bl))
			return false;
	return true;
}

static bool branches_disjoint(js_cx *c, const json_t *a, const json_t *b)
{
	a = deref(c, a);
	b = deref(c, b);
	unsigned ta = schema_types(c, a, 0), tb = schema_types(c, b, 0);
	if (!(ta & tb))
		return true;
	const json_t *a1, *al, *b1, *bl;
	if (schema_values(a, &a1, &al) && schema_values(b, &b1, &bl))
		return values_disjoint(a1, al, b1, bl);
	if (ta == T_OBJECT && tb == T_OBJECT) {   /* a discriminator: a property both require, with values apart */
		const json_t *ra = json_object_get(a, "required"), *rb = json_object_get(b, "required");
		const json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
		for (size_t i = 0; i < json_array_size(ra); i++) {
			const json_t *k = json_array_get(ra, i);
			bool both = false;
			for (size_t j = 0; j < json_array_size(rb); j++)
				both |= js_value_equal(k, json_array_get(rb, j));
			const char *key = json_string_value(k);
			if (!both || !key)
				continue;
			const json_t *sa = deref(c, json_object_get(pa, key)), *sb = deref(c, json_object_get(pb, key));
			if (schema_values(sa, &a1, &al) && schema_values(sb, &b1, &bl) && values_disjoint(a1, al, b1, bl))
				return true;
		}
	}
	return false;
}

/* ---- combinators ---- */

static int compile_alternatives(js_cx *c, const json_t *list, const char *kw, const char *ptr, const char *name,
                                int depth, int32_t seq, int32_t slot, const char **out)
{
	size_t n = json_array_size(list);
	if (strcmp(kw, "oneOf") == 0)
		for (size_t i = 0; i < n; i++)
			for (size_t j = i + 1; j < n; j++)
				if (!branches_disjoint(c, json_array_get(list, i), json_array_get(list, j)))
					return js_unsupported(c, "oneOf", ptr, js_fmt(c, ": branches %zu and %zu may both match (only "
					                   "branches of distinct types or distinct const/enum values are)", i, j));
	const char **alts = js_alloc(c, n * sizeof *alts);
	if (!alts)
		return -1;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		char idx[32];
		snprintf(idx, sizeof idx, "%zu", i);
		const char *e;
		if (js_compile(c, json_array_get(list, i), js_ptr_index(c, ptr, kw, i), js_name_sub(c, name, idx), depth + 1, -1,
		            &e) != 0)
			return -1;
		if (!e)
			continue;
		bool dup = false;
		for (size_t j = 0; j < k; j++)
			dup |= strcmp(alts[j], e) == 0;
		if (!dup)
			alts[k++] = e;
	}
	*out = NULL;
	if (k == 0)
		return 0;
	if (k == 1) {
		*out = alts[0];
		return 0;
	}
	aah_bytebuf b = { 0 };
	for (size_t i = 0; i < k; i++)
		js_printf(&b, "%s%s", i ? " | " : "", alts[i]);
	*out = js_rule_add(c, name, seq, slot, js_take(c, &b));
	return *out ? 0 : -1;
}

/* const and enum: the values, less those of a type the schema's `type` leaves out. */
static int compile_values(js_cx *c, const json_t *s, const char *ptr, const char *name, int32_t seq, int32_t slot,
                          const char **out)
{
	const json_t *one, *list, *ty = json_object_get(s, "type");
	schema_values(s, &one, &list);
	unsigned mask = T_ALL;
	if (json_is_string(ty))
		mask = type_bit(json_string_value(ty));
	else if (json_is_array(ty)) {
		mask = 0;
		for (size_t i = 0; i < json_array_size(ty); i++)
			mask |= type_bit(json_string_value(json_array_get(ty, i)));
	}
	if (mask & T_NUMBER)
		mask |= T_INTEGER;
	size_t n = list ? json_array_size(list) : 1;
	js_strmap seen = { 0 };
	aah_bytebuf b = { 0 };
	size_t k = 0;
	const char *first = NULL;
	for (size_t i = 0; i < n && !c->failed; i++) {
		const json_t *v = list ? json_array_get(list, i) : one;
		unsigned vt = js_value_type(v);
		if (list && one && !js_value_equal(v, one))
			continue;
		if (!(vt & mask) || (vt == (T_NUMBER | T_INTEGER) && !(mask & (T_NUMBER | T_INTEGER))))
			continue;
		if (vt == T_NUMBER && !(mask & T_NUMBER))   /* 1.5 is no integer */
			continue;
		aah_bytebuf one_b = { 0 };
		js_emitter e = { .b = &one_b, .prims = &c->prims };
		js_em_value(&e, v);
		js_em_close(&e);
		const char *text = js_take(c, &one_b);
		if (!text || js_strmap_get(&seen, text) >= 0)
			continue;
		if (js_strmap_put(c, &seen, text, 0) != 0)
			break;
		js_printf(&b, "%s%s", k ? " | " : "", text);
		if (!k)
			first = text;
		k++;
		if (b.n > GRAMMAR_MAX_TEXT) {
			js_fail(c, "JSON Schema would become more than %u bytes of GBNF", GRAMMAR_MAX_TEXT);
			break;
		}
	}
	strmap_free(&seen);
	*out = NULL;
	if (c->failed) {
		aah_bytebuf_free(&b);
		return -1;
	}
	if (k == 0) {
		aah_bytebuf_free(&b);
		return 0;
	}
	if (k == 1 && js_is_atom(first)) {
		aah_bytebuf_free(&b);
		*out = first;
		return 0;
	}
	*out = js_rule_add(c, name, seq, slot, js_take(c, &b));
	return *out ? 0 : -1;
}

/* ---- types ---- */

static int compile_types(js_cx *c, const json_t *s, const char *ptr, const char *name, int depth, int32_t seq,
                         int32_t slot, const char **out)
{
	const json_t *ty = json_object_get(s, "type");
	unsigned order[7], n = 0, mask = 0;
	if (json_is_string(ty)) {
		order[n++] = type_bit(json_string_value(ty));
	} else if (json_is_array(ty)) {
		for (size_t i = 0; i < json_array_size(ty); i++)
			order[n++] = type_bit(json_string_value(json_array_get(ty, i)));
	} else {
		static const unsigned all[] = { T_OBJECT, T_ARRAY, T_STRING, T_NUMBER, T_BOOLEAN, T_NULL };
		for (unsigned i = 0; i < 6; i++)
			order[n++] = all[i];
	}
	for (unsigned i = 0; i < n; i++)
		mask |= order[i];
	unsigned branches = 0;
	for (unsigned i = 0; i < n; i++)
		if (!(order[i] == T_INTEGER && (mask & T_NUMBER)))   /* number already holds every integer */
			branches++;
	const char *alts[7];
	unsigned k = 0;
	bool plain = !ty;   /* every branch its fixed rule: the whole is `value` */
	for (unsigned i = 0; i < n; i++) {
		if (order[i] == T_INTEGER && (mask & T_NUMBER))
			continue;
		int32_t bslot = branches == 1 ? slot : -1;
		const char *e = NULL;
		int rc = 0;
		switch (order[i]) {
		case T_NULL: e = js_prim(c, PR_NULL); break;
		case T_BOOLEAN: e = js_prim(c, PR_BOOLEAN); break;
		case T_OBJECT: rc = js_object_branch(c, s, ptr, name, depth, seq, bslot, &e); break;
		case T_ARRAY: rc = js_array_branch(c, s, ptr, name, depth, seq, bslot, &e); break;
		case T_STRING: rc = js_string_branch(c, s, ptr, name, seq, bslot, &e); break;
		case T_NUMBER: rc = js_number_branch(c, s, ptr, name, seq, bslot, &e); break;
		case T_INTEGER: rc = js_integer_branch(c, s, name, seq, bslot, &e); break;
		}
		if (rc != 0)
			return -1;
		plain &= e && is_prim_name(e);
		if (e)
			alts[k++] = e;
	}
	*out = NULL;
	if (plain && k == 6) {
		*out = js_prim(c, PR_VALUE);
		return 0;
	}
	if (k <= 1) {
		*out = k ? alts[0] : NULL;
		return 0;
	}
	aah_bytebuf b = { 0 };
	for (unsigned i = 0; i < k; i++)
		js_printf(&b, "%s%s", i ? " | " : "", alts[i]);
	*out = js_rule_add(c, name, seq, slot, js_take(c, &b));
	return *out ? 0 : -1;
}

/* The GBNF expression of schema s (at pointer ptr; rules it makes are named from name): a rule name or a literal in
 * *out, NULL when no value validates. slot >= 0: the rule reserved for s (a $ref target) takes its body. */
int js_compile(js_cx *c, const json_t *s, const char *ptr, const char *name, int depth, int32_t slot,
               const char **out)
{
	*out = NULL;
	if (c->failed || !ptr || !name)
		return -1;
	if (depth > JS_MAX_DEPTH)
		return js_fail(c, "JSON Schema nested deeper than %d levels at %s", JS_MAX_DEPTH, js_show(ptr));
	if (json_is_true(s)) {
		*out = js_prim(c, PR_VALUE);
		return 0;
	}
	if (json_is_false(s))
		return 0;
	if (!json_is_object(s))
		return js_invalid(c, ptr, "a schema must be an object or a boolean, not %s", aah_json_kind(s));
	int32_t seq = c->seq++;
	uint64_t have = 0;
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)s, key, v) {
		int k = kw_find(key);
		if (k < 0)
			return js_unsupported(c, key, ptr, "");
		if (check_keyword(c, k, v, ptr) != 0)
			return -1;
		have |= KB(k);
	}
	uint64_t constraining = have & ~KW_INERT & ~KB(KW_UNIQUEITEMS);   /* uniqueItems here is false */
	static const int combinators[] = { KW_REF, KW_ALLOF, KW_ANYOF, KW_ONEOF };
	for (int i = 0; i < 4; i++) {
		int kw = combinators[i];
		if (!(have & KB(kw)))
			continue;
		if (constraining & ~KB(kw))
			return js_alongside(c, s, constraining & ~KB(kw), kw, ptr);
		const json_t *val = json_object_get(s, kw_names[kw]);
		if (kw == KW_REF) {
			const json_t *target = NULL;
			const char *tptr = NULL, *base = NULL;
			if (ref_target(c, json_string_value(val), ptr, &target, &tptr, &base) != 0)
				return -1;
			return compile_def(c, target, tptr, base, depth + 1, out);
		}
		if (kw == KW_ALLOF)
			return js_compile(c, json_array_get(val, 0), js_ptr_index(c, ptr, "allOf", 0), name, depth + 1, slot, out);
		return compile_alternatives(c, val, kw_names[kw], ptr, name, depth, seq, slot, out);
	}
	if (have & (KB(KW_ENUM) | KB(KW_CONST))) {
		uint64_t others = constraining & ~(KB(KW_ENUM) | KB(KW_CONST) | KB(KW_TYPE));
		if (others)
			return js_alongside(c, s, others, (have & KB(KW_ENUM)) ? KW_ENUM : KW_CONST, ptr);
		return compile_values(c, s, ptr, name, seq, slot, out);
	}
	return compile_types(c, s, ptr, name, depth, seq, slot, out);
}

/* ---- the whole grammar ---- */

static int rule_order(const void *a, const void *b)
{
	const js_rule *x = *(const js_rule *const *)a, *y = *(const js_rule *const *)b;
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return x < y ? -1 : x > y;
}

static char *write_grammar(js_cx *c)
{
	js_rule **live = malloc((c->n_rules + 1) * sizeof *live);
	if (!live) {
		js_oom(c);
		return NULL;
	}
	size_t n = 0;
	for (size_t i = 0; i < c->n_rules; i++)
		if (c->rules[i].body)
			live[n++] = &c->rules[i];
	qsort(live, n, sizeof *live, rule_order);
	aah_bytebuf b = { 0 };
	for (size_t i = 0; i < n; i++) {
		if (live[i]->raw)
			js_puts(&b, live[i]->body);
		else
			js_printf(&b, "%s ::= %s\n", live[i]->name, live[i]->body);
	}
	free(live);
	for (bool grew = true; grew;) {   /* the fixed rules used, and those they use */
		grew = false;
		for (int p = 0; p < PR_COUNT; p++)
			if ((c->prims & (1u << p)) && (c->prims | js_prims[p].deps) != c->prims) {
				c->prims |= js_prims[p].deps;
				grew = true;
			}
	}
	for (int p = 0; p < PR_COUNT; p++)
		if (c->prims & (1u << p))
			js_printf(&b, "%s ::= %s\n", js_prims[p].name, js_prims[p].body);
	if (b.n > GRAMMAR_MAX_TEXT) {
		aah_bytebuf_free(&b);
		js_fail(c, "JSON Schema would become more than %u bytes of GBNF", GRAMMAR_MAX_TEXT);
		return NULL;
	}
	if (aah_bytebuf_put(&b, "", 1) != 0) {
		aah_bytebuf_free(&b);
		js_oom(c);
		return NULL;
	}
	return (char *)b.p;
}

char *json_schema_to_gbnf(const json_t *schema, char *err, size_t err_len)
{
	if (err && err_len)
		err[0] = 0;
	js_cx c = { .root = schema, .err = err, .err_len = err_len };
	char *out = NULL;
	if (!schema) {
		js_fail(&c, "no JSON Schema");
		return NULL;
	}
	for (int p = 0; p < PR_COUNT && !c.failed; p++)   /* the fixed rules' names are taken */
		js_strmap_put(&c, &c.names, js_prims[p].name, NAME_TAKEN);
	/* the root is a $ref target like any other ("#"), its rule named root */
	const char *e = NULL;
	int rc = c.failed ? -1 : compile_def(&c, schema, "", "root", 0, &e);
	if (rc != 0 && !c.failed)   /* every failure sets a message; this guards that promise */
		js_fail(&c, "JSON Schema could not be converted (internal error)");
	if (rc == 0) {
		if (!e)
			js_fail(&c, "JSON Schema at / admits no value");
		else if (strcmp(e, "root") != 0)
			js_fail(&c, "JSON Schema: the root rule was named %s", e);   /* cannot happen: "root" is free at first */
		else
			out = write_grammar(&c);
	}
	for (size_t i = 0; i < c.n_mem; i++)
		free(c.mem[i]);
	free(c.mem);
	free(c.rules);
	free(c.defs);
	strmap_free(&c.names);
	strmap_free(&c.bodies);
	if (c.failed) {
		free(out);
		return NULL;
	}
	return out;
}
