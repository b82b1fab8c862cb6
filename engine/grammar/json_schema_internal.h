/* engine/grammar/json_schema_internal.h — what the three files of the JSON Schema converter share: json_schema.c walks
 * the schema and keeps the rules it makes, json_schema_shapes.c writes objects, arrays, strings and numbers, and
 * json_schema_text.c the GBNF text of JSON. Private to engine/grammar/json_schema*.c; json_schema.h is the interface. */
#ifndef AAH_ENGINE_GRAMMAR_JSON_SCHEMA_INTERNAL_H
#define AAH_ENGINE_GRAMMAR_JSON_SCHEMA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/bytebuf.h"

#ifdef __cplusplus
extern "C" {
#endif

#define JS_MAX_DEPTH 64                 /* sub-schemas nested inside one another, $ref hops counted */
#define JS_MAX_COUNT 10000              /* minItems, maxItems, minLength, maxLength: the engine's GRAMMAR_MAX_REPEAT */
#define JS_MAX_NAME 80                  /* bytes of a rule name taken from a pointer, before a "-N" making it unique */
#define JS_INT_MAX 9999999999999999LL   /* the largest integer of 16 digits: the number rules' bound */
#define JS_CP_MAX 0x10FFFFu

/* ---- json_schema_text.c ---- */

/* The fixed rules, written once at the end of a grammar when used (and the ones they use). */
enum js_prim {
	PR_VALUE, PR_OBJECT, PR_MEMBER, PR_ARRAY, PR_STRING, PR_CHAR, PR_HEX, PR_NUMBER, PR_INTEGER, PR_BOOLEAN, PR_NULL,
	PR_WS, PR_KCHAR, PR_KESC, PR_KCTL, PR_KTAIL, PR_NUMBER_ZERO, PR_NUMBER_POS, PR_DATE, PR_TIME, PR_DATE_STRING,
	PR_TIME_STRING, PR_DATE_TIME_STRING, PR_UUID_STRING, PR_COUNT
};
typedef struct js_prim_rule {
	const char *name;
	const char *body;
	uint32_t deps;   /* bits (1 << js_prim) of the fixed rules its body names */
} js_prim_rule;
extern const js_prim_rule js_prims[PR_COUNT];

void js_put(aah_bytebuf *b, const char *s, size_t n);
void js_puts(aah_bytebuf *b, const char *s);
void js_printf(aah_bytebuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* x repeated lo..hi times (hi < 0: no bound), written the shortest way; nothing for exactly none. */
void js_repeat(aah_bytebuf *b, const char *x, int64_t lo, int64_t hi);
/* Whether a GBNF expression is one item (a rule name or one literal), safe to put anywhere. */
bool js_is_atom(const char *e);
/* One UTF-8 character of s (valid UTF-8, as jansson's strings are); returns its length. */
size_t js_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

/* Writes a GBNF sequence item by item, merging characters into one "…" literal where it can; the fixed rules it
 * names are added to *prims. */
typedef struct js_emitter {
	aah_bytebuf *b;
	uint32_t *prims;
	bool in_lit;
	int items;
} js_emitter;
void js_em_close(js_emitter *e);   /* ends the open literal: call before using b */
/* One character, or a JSON string with its quotes, in canonical JSON form. */
void js_em_json_cp(js_emitter *e, uint32_t cp);
void js_em_json_string(js_emitter *e, const char *s, size_t n);
/* A JSON value as its canonical text, ws between tokens: objects keep their key order, reals Python's repr. */
void js_em_value(js_emitter *e, const json_t *v);
/* JSON Schema's equality: numbers by value (1 equals 1.0), objects whatever their key order. */
bool js_value_equal(const json_t *a, const json_t *b);

/* JSON types as bits. A schema's `number` covers `integer`, so T_NUMBER alone stands for both where types meet. */
enum { T_NULL = 1, T_BOOLEAN = 2, T_OBJECT = 4, T_ARRAY = 8, T_STRING = 16, T_NUMBER = 32, T_INTEGER = 64, T_ALL = 127 };
/* The types of a value: an integral number is T_NUMBER | T_INTEGER. */
unsigned js_value_type(const json_t *v);

/* A set of code points: ranges, sorted and merged by js_rset_norm; oom set when an add failed. */
typedef struct js_range {
	uint32_t lo, hi;
} js_range;
typedef struct js_rset {
	js_range *r;   /* malloc'd: the owner frees it */
	size_t n, cap;
	bool oom;
} js_rset;
void js_rset_add(js_rset *s, uint32_t lo, uint32_t hi);
void js_rset_norm(js_rset *s);
js_rset js_rset_complement(const js_rset *s);   /* of a normalized set, within [0, JS_CP_MAX] */
/* One character of s (normalized) in canonical JSON form, as one GBNF item. Returns 0, or -1 when s is empty or out
 * of memory (b->oom). */
int js_canon_set(aah_bytebuf *b, const js_rset *s, uint32_t *prims);
/* Appends the n bytes of GBNF at s (regex_gbnf's rules, which match a string's characters) with every terminal made
 * to match those characters' canonical JSON form instead. Returns 0, or -1 with a message in err. */
int js_gbnf_to_json(const char *s, size_t n, aah_bytebuf *out, uint32_t *prims, char *err, size_t err_len);
/* Appends, as alternatives, the decimal numerals without leading zeros of the integers lo..hi
 * (0 <= lo <= hi <= JS_INT_MAX); *first: none written yet. */
void js_uint_range(aah_bytebuf *b, bool *first, int64_t lo, int64_t hi);

/* ---- json_schema.c: keywords and the converter's state ---- */

enum js_kw {
	KW_TITLE, KW_DESCRIPTION, KW_SCHEMA, KW_ID, KW_EXAMPLES, KW_DEFAULT, KW_COMMENT, KW_DEPRECATED, KW_READONLY,
	KW_WRITEONLY, KW_STRICT, KW_DEFS, KW_DEFINITIONS,
	KW_REF, KW_ALLOF, KW_ANYOF, KW_ONEOF, KW_TYPE, KW_ENUM, KW_CONST,
	KW_PROPERTIES, KW_REQUIRED, KW_ADDITIONAL, KW_ITEMS, KW_PREFIXITEMS, KW_MINITEMS, KW_MAXITEMS, KW_UNIQUEITEMS,
	KW_MINLENGTH, KW_MAXLENGTH, KW_PATTERN, KW_FORMAT, KW_MINIMUM, KW_MAXIMUM, KW_EXCLMINIMUM, KW_EXCLMAXIMUM,
	KW_COUNT
};
#define KB(k) (UINT64_C(1) << (k))

#define NAME_TAKEN INT32_MAX   /* in the names map: a name taken by no rule of the list (a fixed rule's, a pattern's) */

typedef struct js_strmap {
	const char **key;   /* arena strings; NULL: empty slot */
	int32_t *val;
	size_t cap, n;      /* cap a power of two */
} js_strmap;

typedef struct js_rule {
	const char *name;
	const char *body;   /* NULL while a $ref target is compiled, or once it turned out to admit no value */
	int32_t seq;        /* output order: the pre-order number of the schema that made it */
	bool raw;           /* body is whole GBNF lines: a pattern's rules from regex_gbnf */
} js_rule;

enum { DEF_BUSY = 1, DEF_DONE = 2 };
typedef struct js_def {
	const char *ptr;   /* JSON pointer of the target ("" the root) */
	int32_t rule;
	int state;
	bool empty;        /* admits no value */
	bool recursive;    /* referenced while it was being compiled */
} js_def;

/* The $ref targets being compiled that the current place can reach without the output having consumed a byte
 * since: a $ref back to one of them would be left recursion (a ::= a | …), which no grammar engine takes. An object
 * or an array clears the list for what is inside it, since "{" or "[" comes first. */
typedef struct js_guard {
	int32_t def;
	const struct js_guard *next;
} js_guard;

typedef struct js_cx {
	const json_t *root;
	char *err;
	size_t err_len;
	bool failed;
	void **mem;          /* every allocation of the conversion, freed at its end */
	size_t n_mem, cap_mem;
	js_rule *rules;
	size_t n_rules, cap_rules;
	js_strmap names;     /* rule name -> rule */
	js_strmap bodies;    /* rule body -> rule, so identical sub-schemas share one rule */
	js_def *defs;
	size_t n_defs, cap_defs;
	const js_guard *unguarded;
	uint32_t prims;      /* the fixed rules named so far */
	size_t text;         /* bytes of rules so far */
	size_t expand;       /* the repetitions' counts so far: what the engine expands them into, roughly */
	int32_t seq;
} js_cx;

/* Errors: each sets the message once (the first wins) and returns -1. */
int js_fail(js_cx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int js_unsupported(js_cx *c, const char *kw, const char *ptr, const char *why);   /* why may be NULL */
int js_invalid(js_cx *c, const char *ptr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int js_oom(js_cx *c);
/* "JSON Schema keyword 'X' at P is not supported alongside 'W'", X the first key of s among the bits of others. */
int js_alongside(js_cx *c, const json_t *s, uint64_t others, int with, const char *ptr);
/* A count keyword's value (minItems …): a non-negative integer (5.0 counts) up to JS_MAX_COUNT. */
int js_count_value(js_cx *c, const json_t *v, const char *kw, const char *ptr, int64_t *n);

/* Arena memory and strings, freed with the conversion; NULL (with the error set) when out of memory. */
void *js_alloc(js_cx *c, size_t n);
const char *js_take(js_cx *c, aah_bytebuf *b);   /* b's text, NUL-terminated; b is emptied */
const char *js_fmt(js_cx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *js_json_string(js_cx *c, const char *s, size_t n);   /* a JSON string (canonical) as GBNF */

/* Rules. js_prim names a fixed rule (so it is written). js_rule_add: the rule `base ::= body` (base made unique) or
 * the one that already has this body; slot >= 0: that reserved rule takes the body. Returns the rule's name, NULL
 * on failure. js_rule_new reserves a rule with no body yet. */
const char *js_prim(js_cx *c, enum js_prim p);
const char *js_rule_add(js_cx *c, const char *base, int32_t seq, int32_t slot, const char *body);
int32_t js_rule_new(js_cx *c, const char *base, int32_t seq);
const char *js_unique_name(js_cx *c, const char *base);
int js_account(js_cx *c, const js_rule *r);   /* counts a rule's text against GRAMMAR_MAX_TEXT */
int js_count_repeat(js_cx *c, int64_t n);      /* counts a repetition against the engine's symbols */
int32_t js_strmap_get(const js_strmap *m, const char *k);
int js_strmap_put(js_cx *c, js_strmap *m, const char *k, int32_t v);

/* JSON pointers and the rule names made from them. */
const char *js_show(const char *ptr);   /* "/" for the root's "" */
const char *js_ptr_child(js_cx *c, const char *ptr, const char *tok, size_t len);
const char *js_ptr_index(js_cx *c, const char *ptr, const char *kw, size_t i);
const char *js_name_child(js_cx *c, const char *parent, const char *tok, size_t len);
const char *js_name_sub(js_cx *c, const char *parent, const char *suffix);

/* The GBNF expression of schema s at ptr (its rules named from name): a rule name or a literal in *out, NULL when
 * no value validates. slot >= 0: the rule reserved for s (a $ref target) takes its body. Returns 0 or -1. */
int js_compile(js_cx *c, const json_t *s, const char *ptr, const char *name, int depth, int32_t slot,
               const char **out);

/* ---- json_schema_shapes.c: one type's branch of a schema, as js_compile's *out ---- */

int js_object_branch(js_cx *c, const json_t *s, const char *ptr, const char *name, int depth, int32_t seq,
                     int32_t slot, const char **out);
int js_array_branch(js_cx *c, const json_t *s, const char *ptr, const char *name, int depth, int32_t seq,
                    int32_t slot, const char **out);
int js_string_branch(js_cx *c, const json_t *s, const char *ptr, const char *name, int32_t seq, int32_t slot,
                     const char **out);
int js_number_branch(js_cx *c, const json_t *s, const char *ptr, const char *name, int32_t seq, int32_t slot,
                     const char **out);
int js_integer_branch(js_cx *c, const json_t *s, const char *name, int32_t seq, int32_t slot, const char **out);

#ifdef __cplusplus
}
#endif
#endif
