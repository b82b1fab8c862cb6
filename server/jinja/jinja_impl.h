/* server/jinja/jinja_impl.h — the private half of server/jinja/jinja.h: tokens (jinja_lex.c), the node tree (jinja_parse.c),
 * values with Python's semantics (jinja_value.c), the evaluator (jinja_eval.c) and its builtins (jinja_builtins.c).
 * pallets/jinja's structure: lexer → parser → node tree → one evaluator. */
#ifndef AAH_SERVER_JINJA_IMPL_H
#define AAH_SERVER_JINJA_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/jinja/jinja.h"

/* Nesting of blocks and expressions a template may have (the parser and the evaluator recurse once per level), and
 * of values a render may build or walk (repr, tojson, comparison recurse once per level). */
#define JINJA_MAX_PARSE_DEPTH 128
#define JINJA_MAX_VALUE_DEPTH 256
#define JINJA_MAX_CALL_DEPTH 64    /* macros calling macros */
#define JINJA_MAX_RANGE 100000     /* range() longer than this is refused, as the sandbox refuses it */

/* ---- tokens ---- */
typedef enum jinja_tok_kind {
	JT_EOF, JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
	JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP,
} jinja_tok_kind;

typedef struct jinja_token {
	jinja_tok_kind kind;
	uint32_t line, col;       /* from 1, in the source as given */
	const char *s;            /* TEXT, NAME, OP: into the lexer's copy of the source; STRING: decoded (owned) */
	size_t len;
	int64_t i;                /* INT */
	double f;                 /* FLOAT */
} jinja_token;

typedef struct jinja_tokens {
	jinja_token *v;
	size_t n, cap;
	char *src;                /* the source with newlines normalised to \n, a final one dropped (owned) */
	size_t src_len;
} jinja_tokens;

/* Tokenises src[0, len) with trim_blocks and lstrip_blocks. 0, or -1 with "line L, column C: what" in err. On either,
 * release with jinja_tokens_free. */
int jinja_lex(const char *src, size_t len, jinja_tokens *out, char *err, size_t err_len);
void jinja_tokens_free(jinja_tokens *t);

/* ---- values ---- */
typedef enum jv_kind {
	JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_LOOP, JV_METHOD,
	JV_MACRO, JV_FUNC,
} jv_kind;

typedef struct jobj jobj;
typedef struct jnode jnode;

/* A value: 16 bytes, passed by value. STR, LIST, DICT, NS, LOOP, METHOD hold a counted reference to a heap object;
 * MACRO points into the template; FUNC names a builtin; UNDEF may name what was missing (a name in the template). */
typedef struct jv {
	uint8_t kind;
	union {
		int b;
		int64_t i;
		double f;
		jobj *o;
		const jnode *macro;
		int func;
		const char *uname;
	};
} jv;

/* Every heap object starts with this. rc < 0: immortal (a template's constants, shared between threads). */
struct jobj {
	int32_t rc;
	uint8_t kind;            /* JV_STR, … */
	size_t bytes;            /* counted against the memory limit */
	jobj *prev, *next;       /* the render's list of live objects, swept at its end (cycles through namespaces) */
};

typedef struct jstr {
	jobj h;
	size_t len;              /* bytes of UTF-8 */
	char s[];                /* len bytes then a NUL */
} jstr;

/* What a list stands for: Jinja's filters select, map, unique, … return generators (always true, no len(), no
 * index, used up by one walk), dict.keys()/values()/items() return views; each prints as Python prints it. */
enum { JL_LIST, JL_GEN, JL_KEYS, JL_VALUES, JL_ITEMS };

typedef struct jlist {
	jobj h;
	uint32_t n, cap;
	bool tuple;
	uint8_t flavor;          /* JL_* */
	const char *broken;      /* a JL_GEN that fails when walked (over a value that is not iterable, …): the error,
	                          * a static string */
	jv *items;
} jlist;
#define JV_IS_GEN(v) ((v).kind == JV_LIST && JLIST(v)->flavor == JL_GEN)
#define JV_IS_PLAIN(v) ((v).kind == JV_LIST && JLIST(v)->flavor == JL_LIST)

/* A dict, and a namespace(): keys in insertion order, as Python's dict keeps them. Past 16 keys, an open-addressing
 * index over the string keys (slot: position + 1, 0 empty) keeps lookups and inserts O(1): request JSON may hold
 * objects of many keys. */
typedef struct jdict {
	jobj h;
	uint32_t n, cap;
	jv *keys, *vals;
	uint32_t *index;         /* index_cap slots, a power of two, or NULL */
	uint32_t index_cap;
} jdict;

typedef struct jloop {
	jobj h;
	int64_t index0, length;
	jlist *items;            /* what the loop walks (a counted reference) */
	int32_t depth0;
} jloop;

typedef struct jmethod {
	jobj h;
	jv self;                 /* the receiver (a counted reference) */
	int32_t id;              /* a JM_* of jinja_builtins.c */
} jmethod;

#define JV_HAS_OBJ(v) ((v).kind >= JV_STR && (v).kind <= JV_METHOD)
#define JSTR(v) ((jstr *)(v).o)
#define JLIST(v) ((jlist *)(v).o)
#define JDICT(v) ((jdict *)(v).o)

/* ---- nodes ---- */
typedef enum jnode_kind {
	/* expressions */
	N_CONST, N_NAME, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_BINOP, N_UNARY, N_AND, N_OR,
	N_COMPARE, N_COND, N_LIST, N_TUPLE, N_DICT,
	/* statements */
	S_TEXT, S_PRINT, S_BLOCK, S_IF, S_FOR, S_SET, S_SET_BLOCK, S_MACRO, S_BREAK, S_CONTINUE, S_FILTER_BLOCK,
} jnode_kind;

typedef enum jop {
	OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,     /* N_BINOP */
	OP_NEG, OP_POS, OP_NOT,                                                     /* N_UNARY */
	OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,                  /* N_COMPARE */
} jop;

/* One node; which fields a kind uses is written beside it in jinja_parse.c's constructors. */
struct jnode {
	uint8_t kind;
	uint8_t op;              /* N_BINOP, N_UNARY: a jop; N_TEST: 1 when negated */
	uint32_t line, col;
	jnode *a, *b, *c;        /* operands; S_IF: a unused; S_FOR: a target, b iterable, c filter */
	jnode *body, *orelse;    /* S_FOR, S_SET_BLOCK, S_MACRO, S_FILTER_BLOCK bodies; S_FOR/S_IF else */
	jnode **list;            /* S_BLOCK statements, call/filter/test positional arguments, list/tuple/dict items,
	                          * N_COMPARE operands after a, S_IF conditions, S_MACRO parameters (N_NAME) */
	jnode **list2;           /* call keyword values, dict values, S_IF bodies, S_MACRO defaults (NULL: none) */
	uint8_t *ops;            /* N_COMPARE: n operators */
	const char **kwnames;    /* call keyword names */
	uint32_t n, n2;
	const char *name;        /* N_NAME, N_GETATTR attribute, N_FILTER/N_TEST name, S_MACRO name (NUL-terminated) */
	jv value;                /* N_CONST, S_TEXT: an immortal value */
};

/* An arena owned by the template: nodes, names and constants, freed together. */
typedef struct jarena_chunk jarena_chunk;

struct jinja_template {
	jnode *root;             /* S_BLOCK */
	jarena_chunk *chunks;
};

void *jinja_arena_alloc(jinja_template *t, size_t n);   /* zeroed; NULL when out of memory */
/* An immortal string constant in t's arena. */
jstr *jinja_arena_str(jinja_template *t, const char *s, size_t len);

/* ---- a render ---- */
typedef struct jbuf {
	char *p;
	size_t len, cap;
} jbuf;

typedef struct jscope jscope;
struct jscope {
	jscope *parent;
	uint32_t n, cap;
	const char **names;
	jv *vals;
};

typedef struct jctx {
	jinja_limits lim;
	uint64_t steps;
	size_t mem;              /* bytes of live objects and buffers */
	jobj *live;              /* every live heap object */
	jinja_status status;     /* JINJA_OK until something fails */
	char *err;
	size_t err_len;
	jbuf out;
	int32_t depth;           /* evaluator recursion */
	int32_t call_depth;
	jscope *root;            /* the template's top level */
	jscope *scope;           /* where the evaluator is */
	const jdict *vars;       /* the render's variables, under every scope */
	jobj **free_stack;       /* objects whose count reached 0, freed iteratively (no recursion on deep values) */
	size_t n_free, cap_free;
	bool freeing;
} jctx;

/* Errors: each sets ctx->status (the first one wins) and err, and returns -1. */
int jx_fail(jctx *c, jinja_status st, const jnode *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int jx_oom(jctx *c);
/* Charges work to the step limit: 1 step per evaluated node, 1 per 64 bytes or items a builtin walks. */
int jx_step(jctx *c, const jnode *at, uint64_t n);

void *jx_alloc(jctx *c, size_t n);       /* counted against the memory limit; NULL with status set */
void *jx_realloc(jctx *c, void *p, size_t old_n, size_t new_n);
void jx_free(jctx *c, void *p, size_t n);

/* Buffers: counted against the memory limit. jbuf_take hands out the bytes (the caller frees with jx_free of cap). */
int jbuf_put(jctx *c, jbuf *b, const char *s, size_t n);
int jbuf_putc(jctx *c, jbuf *b, char ch);
int jbuf_printf(jctx *c, jbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void jbuf_free(jctx *c, jbuf *b);

/* Reference counting; jv_decref frees what reaches 0. */
jv jv_incref(jv v);
void jv_decref(jctx *c, jv v);
void jx_sweep(jctx *c);                  /* frees every object still alive (the end of a render) */

static inline jv jv_undef(const char *name) { jv v = { .kind = JV_UNDEF }; v.uname = name; return v; }
static inline jv jv_none(void) { jv v = { .kind = JV_NONE }; v.i = 0; return v; }
static inline jv jv_bool(int b) { jv v = { .kind = JV_BOOL }; v.i = 0; v.b = b != 0; return v; }
static inline jv jv_int(int64_t i) { jv v = { .kind = JV_INT }; v.i = i; return v; }
static inline jv jv_float(double f) { jv v = { .kind = JV_FLOAT }; v.f = f; return v; }
static inline jv jv_obj(uint8_t kind, void *o) { jv v = { .kind = kind }; v.o = (jobj *)o; return v; }

/* Constructors: 0 and *out set, or -1 with status set. New objects have rc 1, owned by the caller. */
int jv_str_new(jctx *c, const char *s, size_t len, jv *out);
int jv_str_take(jctx *c, jbuf *b, jv *out);       /* a string of b's bytes; b is emptied */
jlist *jv_list_new(jctx *c, uint32_t cap, bool tuple);
int jv_list_push(jctx *c, jlist *l, jv v);          /* takes v's reference */
jdict *jv_dict_new(jctx *c, uint8_t kind);          /* JV_DICT or JV_NS */
jloop *jv_loop_new(jctx *c);
jmethod *jv_method_new(jctx *c, jv self, int32_t id); /* takes self's reference */
int jv_dict_set(jctx *c, jdict *d, jv key, jv val); /* takes both references */
/* The value under key (borrowed), or NULL. */
jv *jv_dict_get(const jdict *d, jv key);
jv *jv_dict_get_str(const jdict *d, const char *k, size_t len);

/* A render's values from JSON (null → None, absent → undefined). */
int jv_from_json(jctx *c, const json_t *j, jv *out, int depth);

/* Python's rules. */
bool jv_truthy(jv v);
const char *jv_type_name(jv v);
int jv_eq(jctx *c, jv a, jv b, int depth);          /* 1 equal, 0 not, -1 error */
int jv_cmp(jctx *c, const jnode *at, jv a, jv b, int *res);  /* <0, 0, >0 as Python orders them; -1 TypeError */
int jv_to_str(jctx *c, jv v, jbuf *out);            /* str(v) appended */
int jv_repr(jctx *c, jv v, jbuf *out, int depth);   /* repr(v) appended */
void jv_float_repr(double f, char *buf, size_t n);  /* float.__repr__ */
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) appended; indent NULL: none. */
typedef struct jjson_opts {
	bool ensure_ascii, sort_keys;
	const char *indent;        /* NULL: one line */
	size_t indent_len;
	const char *item_sep, *key_sep;
	size_t item_sep_len, key_sep_len;
} jjson_opts;
int jv_tojson(jctx *c, const jnode *at, jv v, const jjson_opts *o, jbuf *out, int depth);

/* UTF-8 helpers: strings are valid UTF-8 throughout (the source and JSON are checked). */
size_t ju_decode(const char *s, size_t n, uint32_t *cp);   /* bytes of the character at s (n > 0) */
size_t ju_encode(uint32_t cp, char *out);
size_t ju_count(const char *s, size_t n);
bool ju_isspace(uint32_t cp);

/* ---- the evaluator and its builtins (jinja_eval.c, jinja_builtins.c) ---- */
int jx_eval(jctx *c, const jnode *n, jv *out);
int jx_call_value(jctx *c, const jnode *at, jv fn, jv *args, uint32_t nargs, const char **kwnames, jv *kwvals,
                  uint32_t nkw, jv *out);
int jx_getattr(jctx *c, const jnode *at, jv obj, const char *name, size_t len, jv *out);
int jx_getitem(jctx *c, const jnode *at, jv obj, jv key, jv *out);
int jx_slice(jctx *c, const jnode *at, jv obj, jv start, jv stop, jv step, jv *out);   /* None: left out */
int jx_filter(jctx *c, const jnode *at, const char *name, jv v, jv *args, uint32_t nargs, const char **kwnames,
              jv *kwvals, uint32_t nkw, jv *out);
int jx_test(jctx *c, const jnode *at, const char *name, jv v, jv *args, uint32_t nargs, int *res);
int jx_call_method(jctx *c, const jnode *at, const jmethod *m, jv *args, uint32_t nargs, const char **kwnames,
                   jv *kwvals, uint32_t nkw, jv *out);
int jx_iterate(jctx *c, const jnode *at, jv v, jlist **out);   /* list(v): a new list (caller's reference) */
bool jx_filter_known(const char *name);
bool jx_test_known(const char *name);
/* A global: range, namespace, dict, raise_exception. 0 and *out, or -1 when name is none of them. */
int jx_global(const char *name, jv *out);
int jx_call_macro(jctx *c, const jnode *at, const jnode *macro, jv *args, uint32_t nargs, const char **kwnames,
                  jv *kwvals, uint32_t nkw, jv *out);

#endif
