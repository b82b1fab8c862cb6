/* engine/grammar/grammar.c — GBNF compiled to a pushdown automaton over bytes, and token masks (grammar.h).
 *
 * The form. A grammar is rules; a rule is alternatives; an alternative is a run of symbols ending in END. A symbol
 * is a byte set (one byte of the input, 256 bits) or a reference to a rule. Literals become one byte set per UTF-8
 * byte; a character class becomes one byte set when it holds only ASCII, else a rule whose alternatives are the
 * class's UTF-8 byte sequences; repetitions become rules (X* is R ::= X R | ε, right recursive). All the symbols sit
 * in one array, so a position (an index into it) says where a parse is.
 *
 * A parse stack is a chain of interned nodes (position, parent): the top node's position is the byte set to match
 * next; a parent's is where its frame goes on after the child rule ends. A reference that is the last symbol of its
 * alternative pushes no frame (a tail call), so X* runs in constant depth. The closure of a raw node expands rule
 * references and pops ended frames until every stack has a byte set on top; popping the bottom means the whole
 * grammar is complete. A state is the sorted set of its stacks, interned, and each state keeps its 256 byte
 * transitions as they are first asked for: the automaton becomes a DFA as the outputs explore it.
 *
 * Masks. Walking the vocabulary's trie from a state, byte by byte, decides every token, but a free-text position
 * (inside a JSON string) admits nearly every token, so a walk visits the whole trie (about 400k nodes for Qwen3's
 * 151,936 tokens). The walk's answer for most tokens depends only on the top few frames of a stack: a stack is cut
 * GRAMMAR_KEY_DEPTH frames down and the cut replaced by a SENTINEL node. The walk from that key (done once per key
 * per grammar and cached: every sequence, every request shares it) accepts the tokens it can consume without
 * popping the sentinel, and records the trie nodes where the sentinel pops (the closing quote of a string, say).
 * The mask of a real stack is the key's accepted tokens plus, for each recorded node, the walk of its subtree from
 * the real frames below the cut — a few thousand trie nodes at most, instead of the whole trie. XGrammar's adaptive
 * token mask cache works on the same split (context-independent and context-dependent tokens). */
#include "engine/grammar/grammar.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bits.h"
#include "base/clock.h"
#include "models/utf8.h"

#define GRAMMAR_KEY_DEPTH 3        /* frames a mask key keeps (see above) */
#define GRAMMAR_MAX_DEPTH 512      /* frames of one parse stack */
/* Memory bounds of one grammar's caches (a hostile grammar meets them and its matchers fail with a message; the
 * server's grammar cache holds at most 64 grammars): nodes 20 bytes each with their index, states 32 bytes and their
 * stacks, byte-transition arrays 1 KiB for the states that get one (past the budget, a map entry per transition),
 * mask entries' bitmaps 19 KiB each for Qwen3's vocabulary. */
#define GRAMMAR_MAX_NODES (1 << 20)
#define GRAMMAR_MAX_SETS (1 << 18)
#define GRAMMAR_TRANS_ARRAY_BYTES ((size_t)32 << 20)
#define GRAMMAR_MAX_ENTRY_BYTES ((size_t)128 << 20)
#define GRAMMAR_MAX_CLOSURE 200000 /* expansions in one closure */
#define GRAMMAR_WARM_S 0.025       /* compile explores and caches masks for this long at most (warm_up) */

enum { SYM_END = 0, SYM_BYTES, SYM_RULE };
enum { NODE_BOTTOM = 0, NODE_SENTINEL = 1 };
enum { SET_DEAD = 0 };
enum { SF_END = 1, SF_SENTINEL = 2 };

typedef struct gsym {
	int32_t kind, arg;           /* SYM_BYTES: index of the byte set; SYM_RULE: rule id */
} gsym;

/* ------------------------------------------------------------------------------------------------------------ */
/* A map from 64-bit keys to int32 values (open addressing, linear probing; key 0 is never used by callers: they
 * add one). */
typedef struct map64 {
	uint64_t *k;
	int32_t *v;
	size_t cap, n;
} map64;

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static int32_t map64_get(const map64 *m, uint64_t key)
{
	if (!m->cap)
		return -1;
	for (size_t i = mix64(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (m->k[i] == key)
			return m->v[i];
		if (!m->k[i])
			return -1;
	}
}

static int map64_put(map64 *m, uint64_t key, int32_t val)
{
	if ((m->n + 1) * 2 > m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 1024;
		uint64_t *k = calloc(cap, sizeof *k);
		int32_t *v = malloc(cap * sizeof *v);
		if (!k || !v) {
			free(k);
			free(v);
			return -1;
		}
		for (size_t i = 0; i < m->cap; i++) {
			if (!m->k[i])
				continue;
			size_t j = mix64(m->k[i]) & (cap - 1);
			while (k[j])
				j = (j + 1) & (cap - 1);
			k[j] = m->k[i];
			v[j] = m->v[i];
		}
		free(m->k);
		free(m->v);
		m->k = k;
		m->v = v;
		m->cap = cap;
	}
	size_t i = mix64(key) & (m->cap - 1);
	while (m->k[i] && m->k[i] != key)
		i = (i + 1) & (m->cap - 1);
	if (!m->k[i])
		m->n++;
	m->k[i] = key;
	m->v[i] = val;
	return 0;
}

static void map64_free(map64 *m)
{
	free(m->k);
	free(m->v);
	memset(m, 0, sizeof *m);
}

/* A growing array of int32. */
typedef struct ivec {
	int32_t *p;
	size_t n, cap;
} ivec;

static int ivec_push(ivec *v, int32_t x)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 16;
		int32_t *p = realloc(v->p, cap * sizeof *p);
		if (!p)
			return -1;
		v->p = p;
		v->cap = cap;
	}
	v->p[v->n++] = x;
	return 0;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* The vocabulary trie, its nodes in pre-order: node i's subtree is [i, end[i]), its depth is depth[i] (the root's
 * children are at depth 1), and the tokens whose bytes end at it are tok[tok_lo[i] .. tok_lo[i + 1]). */
struct grammar_vocab {
	int32_t n_vocab;
	int32_t n_nodes;
	uint8_t *byte;
	uint16_t *depth;
	int32_t *end;
	int32_t *tok_lo;           /* n_nodes + 1 */
	int32_t *tok;
	unsigned char *pool;       /* every ordinary token's bytes: pool[off[id] .. off[id] + len[id]) */
	int64_t *off;              /* n_vocab; -1: never allowed (special, empty, padding) */
	int32_t *len;
	double warm_s;             /* grammar_vocab_set_warm */
	size_t trans_array_bytes;  /* grammar_vocab_set_transition_arrays */
};

typedef struct vtok {
	const unsigned char *b;
	int32_t len, id;
} vtok;

static int vtok_cmp(const void *a, const void *b)
{
	const vtok *x = a, *y = b;
	int32_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->b, y->b, (size_t)n);
	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

void grammar_vocab_free(grammar_vocab *v)
{
	if (!v)
		return;
	free(v->byte);
	free(v->depth);
	free(v->end);
	free(v->tok_lo);
	free(v->tok);
	free(v->pool);
	free(v->off);
	free(v->len);
	free(v);
}

int32_t grammar_vocab_size(const grammar_vocab *v)
{
	return v->n_vocab;
}

void grammar_vocab_set_warm(grammar_vocab *v, double seconds)
{
	v->warm_s = seconds > 0 ? seconds : 0;
}

void grammar_vocab_set_transition_arrays(grammar_vocab *v, size_t bytes)
{
	v->trans_array_bytes = bytes;
}

#define VOCAB_MAX_TOKEN 1024       /* bytes of one token; longer ones are never allowed */

grammar_vocab *grammar_vocab_new(const tokenizer *tk, int32_t n_vocab, char *err, size_t err_len)
{
	int32_t n_tok = tokenizer_vocab_size(tk);
	if (n_tok > n_vocab)
		n_tok = n_vocab;
	if (n_vocab <= 0) {
		snprintf(err, err_len, "an empty vocabulary");
		return NULL;
	}
	grammar_vocab *v = calloc(1, sizeof *v);
	vtok *t = NULL;
	int32_t *node_of = NULL;
	if (!v)
		goto oom;
	v->n_vocab = n_vocab;
	v->warm_s = GRAMMAR_WARM_S;
	v->trans_array_bytes = GRAMMAR_TRANS_ARRAY_BYTES;
	v->off = malloc((size_t)n_vocab * sizeof *v->off);
	v->len = calloc((size_t)n_vocab, sizeof *v->len);
	t = calloc((size_t)n_vocab, sizeof *t);
	node_of = malloc((size_t)n_vocab * sizeof *node_of);
	if (!v->off || !v->len || !t || !node_of)
		goto oom;
	/* the bytes of every ordinary token, in one pool */
	size_t pool_n = 0, pool_cap = 0;
	for (int32_t id = 0; id < n_vocab; id++) {
		v->off[id] = -1;
		if (id >= n_tok || tokenizer_is_special(tk, id))
			continue;
		char buf[VOCAB_MAX_TOKEN];
		int64_t len = tokenizer_token_bytes(tk, id, buf, sizeof buf);
		if (len <= 0 || len > (int64_t)sizeof buf)
			continue;
		if (pool_n + (size_t)len > pool_cap) {
			size_t cap = pool_cap ? pool_cap * 2 : 1 << 20;
			while (cap < pool_n + (size_t)len)
				cap *= 2;
			unsigned char *p = realloc(v->pool, cap);
			if (!p)
				goto oom;
			v->pool = p;
			pool_cap = cap;
		}
		memcpy(v->pool + pool_n, buf, (size_t)len);
		v->off[id] = (int64_t)pool_n;
		v->len[id] = (int32_t)len;
		pool_n += (size_t)len;
	}
	int32_t n = 0;
	for (int32_t id = 0; id < n_vocab; id++)
		if (v->off[id] >= 0)
			t[n++] = (vtok){ v->pool + v->off[id], v->len[id], id };
	qsort(t, (size_t)n, sizeof *t, vtok_cmp);
	/* Sorted order is the trie's pre-order: each token adds nodes for the bytes past what it shares with the
	 * previous one. At most one node per pooled byte. */
	size_t cap = pool_n + 1;
	v->byte = malloc(cap);
	v->depth = malloc(cap * sizeof *v->depth);
	v->end = malloc(cap * sizeof *v->end);
	v->tok_lo = malloc((cap + 1) * sizeof *v->tok_lo);
	v->tok = malloc((size_t)(n > 0 ? n : 1) * sizeof *v->tok);
	if (!v->byte || !v->depth || !v->end || !v->tok_lo || !v->tok)
		goto oom;
	int32_t open[VOCAB_MAX_TOKEN];      /* the node at each depth of the current path */
	int32_t nn = 0, n_open = 0;
	for (int32_t i = 0; i < n; i++) {
		int32_t common = 0;
		if (i > 0) {
			int32_t m = t[i - 1].len < t[i].len ? t[i - 1].len : t[i].len;
			while (common < m && t[i - 1].b[common] == t[i].b[common])
				common++;
		}
		while (n_open > common)
			v->end[open[--n_open]] = nn;
		for (int32_t d = common; d < t[i].len; d++) {
			v->byte[nn] = t[i].b[d];
			v->depth[nn] = (uint16_t)(d + 1);
			open[n_open++] = nn;
			nn++;
		}
		node_of[i] = open[t[i].len - 1];
		v->tok[i] = t[i].id;
	}
	while (n_open > 0)
		v->end[open[--n_open]] = nn;
	v->n_nodes = nn;
	/* node k's tokens: tok[tok_lo[k] .. tok_lo[k + 1]) (node_of is nondecreasing in sorted order) */
	for (int32_t k = 0, i = 0; k <= nn; k++) {
		while (i < n && node_of[i] < k)
			i++;
		v->tok_lo[k] = i;
	}
	free(node_of);
	free(t);
	return v;
oom:
	snprintf(err, err_len, "out of memory building the vocabulary's trie");
	free(node_of);
	free(t);
	grammar_vocab_free(v);
	return NULL;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* A compiled grammar and its caches. */
typedef struct gset {
	int32_t off, n;            /* stacks: set_pool[off .. off + n) */
	uint8_t flags;             /* SF_END: a stack reached the bottom; SF_SENTINEL: a stack popped the sentinel */
	int32_t *trans;            /* 256 next states, -1 unknown; NULL until the first is asked */
} gset;

typedef struct gentry {         /* the cached walk of one key */
	int32_t *ids;              /* accepted tokens, when few (n_ids); else bits */
	uint32_t *bits;
	int32_t n_ids;
	int32_t *points;           /* trie nodes where the sentinel popped and a subtree remains */
	int32_t n_points;
} gentry;

struct grammar {
	int refs;
	pthread_mutex_t lock;
	const grammar_vocab *v;
	double compile_s;
	/* the form */
	gsym *sym;
	int32_t n_sym;
	uint32_t (*bytes)[8];
	int32_t n_bytes;
	int32_t *alt;              /* the start positions of every rule's alternatives: alt[alt_lo[r] .. alt_lo[r + 1]) */
	int32_t *alt_lo;
	int32_t n_rules;
	int32_t root;
	/* stack nodes */
	int32_t *npos, *nparent;
	uint16_t *ndepth;
	int32_t n_nodes, cap_nodes;
	map64 node_map;
	/* states */
	gset *sets;
	int32_t n_sets, cap_sets;
	ivec set_pool;
	map64 set_map;             /* hash of a set's content → first set with it; chains through set_next */
	ivec set_next;
	int32_t initial;
	/* caches */
	map64 key_map;             /* key node → entry */
	gentry *entries;
	int32_t n_entries, cap_entries;
	map64 raw_map;             /* raw node → the state of its closure */
	map64 trans_map;           /* (state, byte) → state, for the states without an array */
	size_t trans_bytes;        /* of the states' transition arrays */
	size_t entry_bytes;        /* of the mask entries */
	/* scratch of one closure */
	ivec work, out;
	map64 seen;
	uint32_t seen_gen;
	int32_t *walk_sets;        /* per trie depth */
	char fail[160];            /* the grammar's caches ran out; every matcher fails with it */
};

struct grammar_matcher {
	grammar *g;
	int32_t state;
	char err[200];
};

static bool bytes_has(const uint32_t *b, unsigned c)
{
	return bits_get(b, (int32_t)c);
}

/* Interns the node (pos, parent); -1 when the stack is too deep or the table is full. */
static int32_t node_get(grammar *g, int32_t pos, int32_t parent)
{
	uint64_t key = ((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent) + 1;
	int32_t id = map64_get(&g->node_map, key);
	if (id >= 0)
		return id;
	int depth = parent > NODE_SENTINEL ? g->ndepth[parent] + 1 : 1;
	if (depth > GRAMMAR_MAX_DEPTH) {
		snprintf(g->fail, sizeof g->fail, "the output nests deeper than %d rules", GRAMMAR_MAX_DEPTH);
		return -1;
	}
	if (g->n_nodes == g->cap_nodes) {
		if (g->cap_nodes >= GRAMMAR_MAX_NODES) {
			snprintf(g->fail, sizeof g->fail, "the grammar's parse states exceed %d stack nodes",
			         GRAMMAR_MAX_NODES);
			return -1;
		}
		int32_t cap = g->cap_nodes * 2;
		int32_t *p = realloc(g->npos, (size_t)cap * sizeof *p);
		if (p)
			g->npos = p;
		int32_t *q = realloc(g->nparent, (size_t)cap * sizeof *q);
		if (q)
			g->nparent = q;
		uint16_t *d = realloc(g->ndepth, (size_t)cap * sizeof *d);
		if (d)
			g->ndepth = d;
		if (!p || !q || !d) {
			snprintf(g->fail, sizeof g->fail, "out of memory");
			return -1;
		}
		g->cap_nodes = cap;
	}
	id = g->n_nodes++;
	g->npos[id] = pos;
	g->nparent[id] = parent;
	g->ndepth[id] = (uint16_t)depth;
	if (map64_put(&g->node_map, key, id) < 0) {
		snprintf(g->fail, sizeof g->fail, "out of memory");
		return -1;
	}
	return id;
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return x < y ? -1 : x > y;
}

/* Interns the state of the stacks st (n, sorted, unique) and flags. -1 when out of room. */
static int32_t set_get(grammar *g, const int32_t *st, int32_t n, uint8_t flags)
{
	if (!n && !flags)
		return SET_DEAD;
	uint64_t h = 1469598103934665603ull ^ flags;
	for (int32_t i = 0; i < n; i++)
		h = (h ^ (uint32_t)st[i]) * 1099511628211ull;
	h = mix64(h) | 1;
	for (int32_t id = map64_get(&g->set_map, h); id >= 0; id = g->set_next.p[id]) {
		const gset *s = &g->sets[id];
		if (s->n == n && s->flags == flags && (!n || !memcmp(g->set_pool.p + s->off, st, (size_t)n * sizeof *st)))
			return id;
	}
	if (g->n_sets >= GRAMMAR_MAX_SETS) {
		snprintf(g->fail, sizeof g->fail, "the grammar's parse states exceed %d", GRAMMAR_MAX_SETS);
		return -1;
	}
	if (g->n_sets == g->cap_sets) {
		int32_t cap = g->cap_sets ? g->cap_sets * 2 : 256;
		gset *p = realloc(g->sets, (size_t)cap * sizeof *p);
		if (!p) {
			snprintf(g->fail, sizeof g->fail, "out of memory");
			return -1;
		}
		g->sets = p;
		g->cap_sets = cap;
	}
	int32_t id = g->n_sets;
	gset *s = &g->sets[id];
	s->off = (int32_t)g->set_pool.n;
	s->n = n;
	s->flags = flags;
	s->trans = NULL;
	for (int32_t i = 0; i < n; i++)
		if (ivec_push(&g->set_pool, st[i]) < 0) {
			snprintf(g->fail, sizeof g->fail, "out of memory");
			return -1;
		}
	int32_t prev = map64_get(&g->set_map, h);
	if (ivec_push(&g->set_next, prev) < 0 || map64_put(&g->set_map, h, id) < 0) {
		snprintf(g->fail, sizeof g->fail, "out of memory");
		return -1;
	}
	g->n_sets++;
	return id;
}

/* The closure of the raw nodes queued in g->work (pairs pos, parent): the stacks with a byte set on top, into a
 * new state. Returns its id, or -1 (g->fail says why). */
static int32_t closure(grammar *g)
{
	uint8_t flags = 0;
	int32_t budget = GRAMMAR_MAX_CLOSURE;
	g->out.n = 0;
	/* the visited raw nodes of this closure: a fresh map each time would cost; clear the old one's keys */
	if (g->seen.cap > 16384) {
		map64_free(&g->seen);
	} else if (g->seen.n) {
		memset(g->seen.k, 0, g->seen.cap * sizeof *g->seen.k);
		g->seen.n = 0;
	}
	while (g->work.n) {
		int32_t parent = g->work.p[--g->work.n];
		int32_t pos = g->work.p[--g->work.n];
		for (;;) {
			if (--budget < 0) {
				snprintf(g->fail, sizeof g->fail, "the grammar is too ambiguous to follow (a closure past %d "
				         "expansions)", GRAMMAR_MAX_CLOSURE);
				g->work.n = 0;
				return -1;
			}
			uint64_t key = ((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent) + 1;
			if (map64_get(&g->seen, key) >= 0)
				break;
			if (map64_put(&g->seen, key, 1) < 0) {
				snprintf(g->fail, sizeof g->fail, "out of memory");
				return -1;
			}
			const gsym *s = &g->sym[pos];
			if (s->kind == SYM_END) {
				if (parent == NODE_BOTTOM) {
					flags |= SF_END;
					break;
				}
				if (parent == NODE_SENTINEL) {
					flags |= SF_SENTINEL;
					break;
				}
				pos = g->npos[parent];
				parent = g->nparent[parent];
				continue;
			}
			if (s->kind == SYM_BYTES) {
				int32_t id = node_get(g, pos, parent);
				if (id < 0 || ivec_push(&g->out, id) < 0) {
					g->work.n = 0;
					return -1;
				}
				break;
			}
			/* a rule: push its continuation (none for a tail call), then each alternative */
			int32_t cont = parent;
			if (g->sym[pos + 1].kind != SYM_END && (cont = node_get(g, pos + 1, parent)) < 0) {
				g->work.n = 0;
				return -1;
			}
			int32_t r = s->arg;
			for (int32_t a = g->alt_lo[r] + 1; a < g->alt_lo[r + 1]; a++)
				if (ivec_push(&g->work, g->alt[a]) < 0 || ivec_push(&g->work, cont) < 0) {
					g->work.n = 0;
					return -1;
				}
			pos = g->alt[g->alt_lo[r]];
			parent = cont;
		}
	}
	if (g->out.n > 1)
		qsort(g->out.p, g->out.n, sizeof *g->out.p, cmp_i32);
	size_t n = 0;
	for (size_t i = 0; i < g->out.n; i++)
		if (!n || g->out.p[n - 1] != g->out.p[i])
			g->out.p[n++] = g->out.p[i];
	if (n > GRAMMAR_MAX_STACKS) {
		snprintf(g->fail, sizeof g->fail, "the grammar is too ambiguous to follow (more than %d parses at once)",
		         GRAMMAR_MAX_STACKS);
		return -1;
	}
	return set_get(g, g->out.p, (int32_t)n, flags);
}

/* The state after byte c from state s: SET_DEAD when no stack takes it, -1 on failure. Cached: in the state's array
 * of 256, or once the arrays have used their budget, in a map. */
static int32_t step(grammar *g, int32_t s, unsigned c)
{
	gset *st = &g->sets[s];
	uint64_t key = ((uint64_t)(uint32_t)s << 8 | c) + 1;
	if (st->trans) {
		if (st->trans[c] >= 0)
			return st->trans[c];
	} else if (g->trans_bytes + 256 * sizeof(int32_t) <= g->v->trans_array_bytes) {
		int32_t *t = malloc(256 * sizeof *t);
		if (!t) {
			snprintf(g->fail, sizeof g->fail, "out of memory");
			return -1;
		}
		for (int i = 0; i < 256; i++)
			t[i] = -1;
		st->trans = t;
		g->trans_bytes += 256 * sizeof *t;
	} else {
		int32_t known = map64_get(&g->trans_map, key);
		if (known >= 0)
			return known;
	}
	g->work.n = 0;
	for (int32_t i = 0; i < st->n; i++) {
		int32_t node = g->set_pool.p[st->off + i];
		int32_t pos = g->npos[node];
		if (bytes_has(g->bytes[g->sym[pos].arg], c))
			if (ivec_push(&g->work, pos + 1) < 0 || ivec_push(&g->work, g->nparent[node]) < 0) {
				snprintf(g->fail, sizeof g->fail, "out of memory");
				return -1;
			}
	}
	int32_t next = g->work.n ? closure(g) : SET_DEAD;
	if (next < 0)
		return -1;
	if (g->sets[s].trans)          /* sets may have moved */
		g->sets[s].trans[c] = next;
	else if (map64_put(&g->trans_map, key, next) < 0) {
		snprintf(g->fail, sizeof g->fail, "out of memory");
		return -1;
	}
	return next;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Masks. */

/* Walks the trie nodes [lo, hi) (a subtree's descendants, or every node) from state s at depth d0, setting the bits
 * of the tokens it admits. With points, records the nodes where the sentinel popped and that have children. Returns
 * 0 or -1. */
static int walk(grammar *g, int32_t lo, int32_t hi, int32_t d0, int32_t s, uint32_t *bits, ivec *points)
{
	const grammar_vocab *v = g->v;
	int32_t *ws = g->walk_sets;
	ws[d0] = s;
	for (int32_t i = lo; i < hi;) {
		int32_t d = v->depth[i];
		int32_t next = step(g, ws[d - 1], v->byte[i]);
		if (next < 0)
			return -1;
		if (next == SET_DEAD) {
			i = v->end[i];
			continue;
		}
		for (int32_t k = v->tok_lo[i]; k < v->tok_lo[i + 1]; k++)
			bits_set(bits, v->tok[k]);
		const gset *ns = &g->sets[next];
		if (points && (ns->flags & SF_SENTINEL) && v->end[i] > i + 1 && ivec_push(points, i) < 0)
			return -1;
		if (!ns->n) {
			i = v->end[i];
			continue;
		}
		ws[d] = next;
		i++;
	}
	return 0;
}

static int32_t mask_words(const grammar *g)
{
	return (int32_t)bits_words(g->v->n_vocab);
}

/* The entry of key node k (a stack whose bottom is the sentinel, or a whole stack). */
static gentry *entry_get(grammar *g, int32_t k)
{
	int32_t e = map64_get(&g->key_map, (uint64_t)k + 1);
	if (e >= 0)
		return &g->entries[e];
	int32_t s = set_get(g, &k, 1, 0);
	if (s < 0)
		return NULL;
	int32_t nw = mask_words(g);
	uint32_t *bits = calloc((size_t)nw, sizeof *bits);
	ivec points = { 0 };
	if (!bits || walk(g, 0, g->v->n_nodes, 0, s, bits, &points) < 0) {
		free(bits);
		free(points.p);
		if (!g->fail[0])
			snprintf(g->fail, sizeof g->fail, "out of memory");
		return NULL;
	}
	if (g->entry_bytes + (size_t)nw * sizeof *bits > GRAMMAR_MAX_ENTRY_BYTES) {
		free(bits);
		free(points.p);
		snprintf(g->fail, sizeof g->fail, "the grammar's mask cache exceeds %zu MiB (too many distinct parse "
		         "positions)", GRAMMAR_MAX_ENTRY_BYTES >> 20);
		return NULL;
	}
	gentry en = { 0 };
	int64_t cnt = 0;
	for (int32_t w = 0; w < nw; w++)
		cnt += __builtin_popcount(bits[w]);
	if (cnt * 32 < nw) {
		en.ids = malloc((size_t)(cnt ? cnt : 1) * sizeof *en.ids);
		if (!en.ids) {
			free(bits);
			free(points.p);
			snprintf(g->fail, sizeof g->fail, "out of memory");
			return NULL;
		}
		for (int32_t w = 0; w < nw; w++)
			for (uint32_t b = bits[w]; b; b &= b - 1)
				en.ids[en.n_ids++] = w * 32 + __builtin_ctz(b);
		free(bits);
		g->entry_bytes += (size_t)en.n_ids * sizeof *en.ids;
	} else {
		en.bits = bits;
		g->entry_bytes += (size_t)nw * sizeof *bits;
	}
	g->entry_bytes += points.n * sizeof *points.p;
	en.points = points.p;
	en.n_points = (int32_t)points.n;
	if (g->n_entries == g->cap_entries) {
		int32_t cap = g->cap_entries ? g->cap_entries * 2 : 64;
		gentry *p = realloc(g->entries, (size_t)cap * sizeof *p);
		if (!p) {
			free(en.ids);
			free(en.bits);
			free(en.points);
			snprintf(g->fail, sizeof g->fail, "out of memory");
			return NULL;
		}
		g->entries = p;
		g->cap_entries = cap;
	}
	g->entries[g->n_entries] = en;
	if (map64_put(&g->key_map, (uint64_t)k + 1, g->n_entries) < 0) {
		snprintf(g->fail, sizeof g->fail, "out of memory");
		return NULL;
	}
	return &g->entries[g->n_entries++];
}

/* The state of the closure of raw node r (where a frame goes on). Cached. */
static int32_t raw_state(grammar *g, int32_t r)
{
	int32_t s = map64_get(&g->raw_map, (uint64_t)r + 1);
	if (s >= 0)
		return s;
	g->work.n = 0;
	if (ivec_push(&g->work, g->npos[r]) < 0 || ivec_push(&g->work, g->nparent[r]) < 0)
		return -1;
	s = closure(g);
	if (s < 0 || map64_put(&g->raw_map, (uint64_t)r + 1, s) < 0)
		return -1;
	return s;
}

/* ORs into bits the tokens stack node top admits. */
static int stack_mask(grammar *g, int32_t top, uint32_t *bits)
{
	/* the key: the top GRAMMAR_KEY_DEPTH frames over the sentinel, or the whole stack when it is no deeper */
	int32_t chain[GRAMMAR_KEY_DEPTH];
	int32_t n = 0, x = top;
	while (n < GRAMMAR_KEY_DEPTH && x > NODE_SENTINEL) {
		chain[n++] = x;
		x = g->nparent[x];
	}
	int32_t key = top, rest = -1;
	if (x > NODE_SENTINEL) {
		rest = x;
		key = NODE_SENTINEL;
		for (int32_t i = n - 1; i >= 0; i--)
			if ((key = node_get(g, g->npos[chain[i]], key)) < 0)
				return -1;
	}
	gentry *e = entry_get(g, key);
	if (!e)
		return -1;
	if (e->bits) {
		int32_t nw = mask_words(g);
		for (int32_t w = 0; w < nw; w++)
			bits[w] |= e->bits[w];
	} else {
		for (int32_t i = 0; i < e->n_ids; i++)
			bits_set(bits, e->ids[i]);
	}
	if (!e->n_points)
		return 0;
	int32_t rs = raw_state(g, rest);
	if (rs < 0)
		return -1;
	if (rs == SET_DEAD)
		return 0;
	for (int32_t i = 0; i < e->n_points; i++) {
		int32_t p = e->points[i];
		if (walk(g, p + 1, g->v->end[p], g->v->depth[p], rs, bits, NULL) < 0)
			return -1;
	}
	return 0;
}

/* Explores the automaton breadth first from the start, byte by byte, and caches the mask entries of the states it
 * meets, until budget_s has passed: the walks of free-text positions (the whole trie once each, milliseconds) are
 * paid at compile, not at some request's first tokens. */
static void warm_up(grammar *g, double budget_s)
{
	double end = aah_now_s() + budget_s;
	int32_t nw = mask_words(g);
	uint32_t *bits = calloc((size_t)nw, sizeof *bits);
	ivec queue = { 0 };
	map64 seen = { 0 };
	if (!bits || ivec_push(&queue, g->initial) < 0 || map64_put(&seen, (uint64_t)g->initial + 1, 1) < 0)
		goto out;
	for (size_t qi = 0; qi < queue.n && aah_now_s() < end; qi++) {
		int32_t s = queue.p[qi];
		int32_t off = g->sets[s].off, n = g->sets[s].n;
		for (int32_t i = 0; i < n; i++)
			if (stack_mask(g, g->set_pool.p[off + i], bits) < 0)
				goto out;
		for (unsigned c = 0; c < 256; c++) {
			int32_t t = step(g, s, c);
			if (t < 0)
				goto out;
			if (t > SET_DEAD && g->sets[t].n && map64_get(&seen, (uint64_t)t + 1) < 0 &&
			    (ivec_push(&queue, t) < 0 || map64_put(&seen, (uint64_t)t + 1, 1) < 0))
				goto out;
		}
	}
out:
	/* a failure here is no failure of the grammar: a matcher meets it again, and reports it, if it gets there */
	g->fail[0] = 0;
	free(bits);
	free(queue.p);
	map64_free(&seen);
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Matchers. */

static int matcher_fail(grammar_matcher *m)
{
	snprintf(m->err, sizeof m->err, "constrained decoding failed: %s",
	         m->g->fail[0] ? m->g->fail : "out of memory");
	return -1;
}

grammar_matcher *grammar_matcher_new(grammar *g)
{
	grammar_matcher *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	m->g = grammar_ref(g);
	m->state = g->initial;
	return m;
}

void grammar_matcher_free(grammar_matcher *m)
{
	if (!m)
		return;
	grammar_unref(m->g);
	free(m);
}

const char *grammar_matcher_error(const grammar_matcher *m)
{
	return m->err;
}

static gset state_of(const grammar_matcher *m)
{
	pthread_mutex_lock(&m->g->lock);
	gset s = m->g->sets[m->state];
	pthread_mutex_unlock(&m->g->lock);
	return s;
}

bool grammar_matcher_can_end(const grammar_matcher *m)
{
	return !m->err[0] && (state_of(m).flags & SF_END);
}

bool grammar_matcher_must_end(const grammar_matcher *m)
{
	if (m->err[0])
		return false;
	gset s = state_of(m);
	return (s.flags & SF_END) && !s.n;
}

int64_t grammar_matcher_mask(grammar_matcher *m, uint32_t *bits)
{
	if (m->err[0])
		return -1;
	grammar *g = m->g;
	int32_t nw = mask_words(g);
	memset(bits, 0, (size_t)nw * sizeof *bits);
	pthread_mutex_lock(&g->lock);
	const gset *s = &g->sets[m->state];
	int32_t off = s->off, n = s->n;
	int rc = 0;
	for (int32_t i = 0; i < n && !rc; i++)
		rc = stack_mask(g, g->set_pool.p[off + i], bits);
	pthread_mutex_unlock(&g->lock);
	if (rc)
		return matcher_fail(m);
	int64_t cnt = 0;
	for (int32_t w = 0; w < nw; w++)
		cnt += __builtin_popcount(bits[w]);
	return cnt;
}

/* The state after bytes from state s: SET_DEAD when refused, -1 on failure. The caller holds the lock. */
static int32_t run_bytes(grammar *g, int32_t s, const unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n && s > SET_DEAD; i++) {
		s = step(g, s, b[i]);
	}
	return s;
}

static int32_t token_state(grammar_matcher *m, int32_t token)
{
	const grammar_vocab *v = m->g->v;
	if (token < 0 || token >= v->n_vocab || v->off[token] < 0)
		return SET_DEAD;
	return run_bytes(m->g, m->state, v->pool + v->off[token], (size_t)v->len[token]);
}

bool grammar_matcher_allows(grammar_matcher *m, int32_t token)
{
	if (m->err[0])
		return false;
	pthread_mutex_lock(&m->g->lock);
	int32_t s = token_state(m, token);
	pthread_mutex_unlock(&m->g->lock);
	if (s < 0) {
		matcher_fail(m);
		return false;
	}
	return s > SET_DEAD;
}

int grammar_matcher_accept(grammar_matcher *m, int32_t token)
{
	if (m->err[0])
		return -1;
	pthread_mutex_lock(&m->g->lock);
	int32_t s = token_state(m, token);
	pthread_mutex_unlock(&m->g->lock);
	if (s < 0)
		return matcher_fail(m);
	if (s == SET_DEAD)
		return -1;
	m->state = s;
	return 0;
}

int grammar_matcher_accept_bytes(grammar_matcher *m, const void *bytes, size_t n)
{
	if (m->err[0])
		return -1;
	pthread_mutex_lock(&m->g->lock);
	int32_t s = run_bytes(m->g, m->state, bytes, n);
	pthread_mutex_unlock(&m->g->lock);
	if (s < 0)
		return matcher_fail(m);
	if (s == SET_DEAD)
		return -1;
	m->state = s;
	return 0;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* The compiler: GBNF text → rules → the flat form. */

typedef struct gseq {
	gsym *s;
	int32_t n, cap;
} gseq;

typedef struct grule {
	const char *name;          /* into the text (user rules), or NULL for a generated one */
	int32_t name_len;
	int32_t origin;            /* the user rule it was made for (its own id for a user rule) */
	gseq *alts;
	int32_t n_alts, cap_alts;
	bool defined;
	int32_t line, col;         /* of the first reference (an undefined rule) or the definition */
} grule;

typedef struct gbuild {
	const char *src;
	size_t len, pos;
	int32_t line;
	size_t line_start;
	char *err;
	size_t err_len;
	bool failed;
	grule *rules;
	int32_t n_rules, cap_rules;
	map64 rule_by_name;        /* hash of a name → rule (names are compared on a hit: chained by probing a list) */
	uint32_t (*bytes)[8];
	int32_t n_bytes, cap_bytes;
	map64 bytes_map;
	int64_t n_sym;             /* symbols so far, against GRAMMAR_MAX_SYMBOLS */
	int32_t cur;               /* the user rule being parsed */
	int depth;                 /* nesting of ( ) */
} gbuild;

static int bfail(gbuild *b, const char *fmt, ...)
{
	if (b->failed)
		return -1;
	b->failed = true;
	char msg[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	snprintf(b->err, b->err_len, "grammar line %d, column %d: %s", b->line,
	         (int)(b->pos - b->line_start) + 1, msg);
	return -1;
}

static int seq_push(gbuild *b, gseq *q, gsym x)
{
	if (++b->n_sym > GRAMMAR_MAX_SYMBOLS)
		return bfail(b, "the grammar expands past %u symbols", GRAMMAR_MAX_SYMBOLS);
	if (q->n == q->cap) {
		int32_t cap = q->cap ? q->cap * 2 : 8;
		gsym *p = realloc(q->s, (size_t)cap * sizeof *p);
		if (!p)
			return bfail(b, "out of memory");
		q->s = p;
		q->cap = cap;
	}
	q->s[q->n++] = x;
	return 0;
}

static gseq *rule_add_alt(gbuild *b, int32_t r)
{
	grule *ru = &b->rules[r];
	if (ru->n_alts == ru->cap_alts) {
		int32_t cap = ru->cap_alts ? ru->cap_alts * 2 : 4;
		gseq *p = realloc(ru->alts, (size_t)cap * sizeof *p);
		if (!p) {
			bfail(b, "out of memory");
			return NULL;
		}
		ru->alts = p;
		ru->cap_alts = cap;
	}
	ru->alts[ru->n_alts] = (gseq){ 0 };
	return &ru->alts[ru->n_alts++];
}

static int32_t rule_new(gbuild *b, const char *name, int32_t name_len)
{
	if (b->n_rules == b->cap_rules) {
		int32_t cap = b->cap_rules ? b->cap_rules * 2 : 64;
		grule *p = realloc(b->rules, (size_t)cap * sizeof *p);
		if (!p) {
			bfail(b, "out of memory");
			return -1;
		}
		b->rules = p;
		b->cap_rules = cap;
	}
	int32_t r = b->n_rules++;
	b->rules[r] = (grule){ .name = name, .name_len = name_len, .origin = name ? r : b->cur,
	                       .line = b->line, .col = (int32_t)(b->pos - b->line_start) + 1 };
	return r;
}

static uint64_t name_hash(const char *s, int32_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (int32_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

/* The user rule of that name, made (undefined) at its first mention. */
static int32_t rule_named(gbuild *b, const char *name, int32_t n)
{
	uint64_t h = name_hash(name, n);
	for (uint64_t k = h;; k = mix64(k)) {
		int32_t r = map64_get(&b->rule_by_name, k | 1);
		if (r < 0) {
			r = rule_new(b, name, n);
			if (r < 0 || map64_put(&b->rule_by_name, k | 1, r) < 0)
				return r < 0 ? -1 : bfail(b, "out of memory");
			return r;
		}
		if (b->rules[r].name_len == n && !memcmp(b->rules[r].name, name, (size_t)n))
			return r;
	}
}

static int32_t bytes_add(gbuild *b, const uint32_t set[8])
{
	uint64_t h = 1469598103934665603ull;
	for (int i = 0; i < 8; i++)
		h = (h ^ set[i]) * 1099511628211ull;
	for (uint64_t k = h;; k = mix64(k)) {
		int32_t id = map64_get(&b->bytes_map, k | 1);
		if (id < 0)
			break;
		if (!memcmp(b->bytes[id], set, 32))
			return id;
	}
	if (b->n_bytes == b->cap_bytes) {
		int32_t cap = b->cap_bytes ? b->cap_bytes * 2 : 64;
		uint32_t(*p)[8] = realloc(b->bytes, (size_t)cap * sizeof *p);
		if (!p)
			return bfail(b, "out of memory");
		b->bytes = p;
		b->cap_bytes = cap;
	}
	int32_t id = b->n_bytes++;
	memcpy(b->bytes[id], set, 32);
	for (uint64_t k = h;; k = mix64(k))
		if (map64_get(&b->bytes_map, k | 1) < 0) {
			if (map64_put(&b->bytes_map, k | 1, id) < 0)
				return bfail(b, "out of memory");
			break;
		}
	return id;
}

static int push_byte_range(gbuild *b, gseq *q, unsigned lo, unsigned hi)
{
	uint32_t set[8] = { 0 };
	for (unsigned c = lo; c <= hi; c++)
		bits_set(set, (int32_t)c);
	int32_t id = bytes_add(b, set);
	return id < 0 ? -1 : seq_push(b, q, (gsym){ SYM_BYTES, id });
}

static int utf8_put(uint32_t cp, unsigned char *o)
{
	if (cp < 0x80) {
		o[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (unsigned char)(0xC0 | cp >> 6);
		o[1] = (unsigned char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xE0 | cp >> 12);
		o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
		o[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (unsigned char)(0xF0 | cp >> 18);
	o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
	o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
	o[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

/* Code point ranges of one class. */
typedef struct cprange {
	uint32_t lo, hi;
} cprange;

static int cpr_cmp(const void *a, const void *c)
{
	const cprange *x = a, *y = c;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The UTF-8 byte sequences of [lo, hi] (one encoded length, surrogates excluded), as alternatives of rule r, or
 * merged into the one-byte set *ascii. The split keeps each sequence a product of byte ranges (as RE2 does). */
static int utf8_ranges(gbuild *b, int32_t r, uint32_t lo, uint32_t hi, uint32_t ascii[8])
{
	static const uint32_t bound[] = { 0x7F, 0x7FF, 0xFFFF };
	for (int i = 0; i < 3; i++)
		if (lo <= bound[i] && hi > bound[i])
			return utf8_ranges(b, r, lo, bound[i], ascii) < 0 ? -1 : utf8_ranges(b, r, bound[i] + 1, hi, ascii);
	if (hi < 0x80) {
		for (uint32_t c = lo; c <= hi; c++)
			bits_set(ascii, (int32_t)c);
		return 0;
	}
	unsigned char a[4], z[4];
	int n = utf8_put(lo, a);
	utf8_put(hi, z);
	for (int i = 1; i < n; i++) {
		uint32_t m = (1u << (6 * i)) - 1;
		if ((lo & ~m) != (hi & ~m)) {
			if (lo & m)
				return utf8_ranges(b, r, lo, lo | m, ascii) < 0 ? -1 : utf8_ranges(b, r, (lo | m) + 1, hi, ascii);
			if ((hi & m) != m)
				return utf8_ranges(b, r, lo, (hi & ~m) - 1, ascii) < 0 ? -1 : utf8_ranges(b, r, hi & ~m, hi, ascii);
		}
	}
	gseq *q = rule_add_alt(b, r);
	if (!q)
		return -1;
	for (int i = 0; i < n; i++)
		if (push_byte_range(b, q, a[i], z[i]) < 0)
			return -1;
	return 0;
}

/* Appends the class of the ranges cr (n, sorted and merged, no surrogates) to q: one byte set when it is all ASCII,
 * else a reference to a new rule of its UTF-8 sequences. */
static int push_class(gbuild *b, gseq *q, const cprange *cr, int32_t n)
{
	bool ascii_only = true;
	for (int32_t i = 0; i < n; i++)
		if (cr[i].hi >= 0x80)
			ascii_only = false;
	uint32_t ascii[8] = { 0 };
	if (ascii_only) {
		for (int32_t i = 0; i < n; i++)
			for (uint32_t c = cr[i].lo; c <= cr[i].hi; c++)
				bits_set(ascii, (int32_t)c);
		int32_t id = bytes_add(b, ascii);
		return id < 0 ? -1 : seq_push(b, q, (gsym){ SYM_BYTES, id });
	}
	int32_t r = rule_new(b, NULL, 0);
	if (r < 0)
		return -1;
	for (int32_t i = 0; i < n; i++)
		if (utf8_ranges(b, r, cr[i].lo, cr[i].hi, ascii) < 0)
			return -1;
	bool any = false;
	for (int i = 0; i < 8; i++)
		any |= ascii[i] != 0;
	if (any) {
		gseq *a = rule_add_alt(b, r);
		int32_t id = a ? bytes_add(b, ascii) : -1;
		if (id < 0 || seq_push(b, a, (gsym){ SYM_BYTES, id }) < 0)
			return -1;
	}
	return seq_push(b, q, (gsym){ SYM_RULE, r });
}

static int at_end(const gbuild *b)
{
	return b->pos >= b->len;
}

static int peek(const gbuild *b)
{
	return b->pos < b->len ? (unsigned char)b->src[b->pos] : -1;
}

static void newline(gbuild *b)
{
	b->line++;
	b->line_start = b->pos;
}

/* Skips blanks and comments; newlines too when nl. */
static void skip_space(gbuild *b, bool nl)
{
	while (!at_end(b)) {
		int c = peek(b);
		if (c == ' ' || c == '\t' || c == '\r') {
			b->pos++;
		} else if (c == '#') {
			while (!at_end(b) && peek(b) != '\n')
				b->pos++;
		} else if (c == '\n' && nl) {
			b->pos++;
			newline(b);
		} else {
			break;
		}
	}
}

static bool is_name_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Whether a rule definition `name ::=` starts at the current position (after blanks). */
static bool rule_starts(const gbuild *b)
{
	size_t p = b->pos;
	while (p < b->len && is_name_char((unsigned char)b->src[p]))
		p++;
	if (p == b->pos)
		return false;
	while (p < b->len && (b->src[p] == ' ' || b->src[p] == '\t'))
		p++;
	return p + 3 <= b->len && !memcmp(b->src + p, "::=", 3);
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* One character of a literal or class (an escape or a UTF-8 character) into *cp. */
static int read_char(gbuild *b, uint32_t *cp)
{
	if (at_end(b))
		return bfail(b, "unexpected end of the grammar");
	int c = peek(b);
	if (c == '\n')
		return bfail(b, "a newline inside a literal or class (write \\n)");
	if (c != '\\') {
		uint32_t x;
		int n = aah_utf8_next((const unsigned char *)b->src + b->pos, b->len - b->pos, &x);
		if (n <= 0)
			return bfail(b, "invalid UTF-8");
		b->pos += (size_t)n;
		*cp = x;
		return 0;
	}
	b->pos++;
	if (at_end(b))
		return bfail(b, "a backslash at the end of the grammar");
	c = peek(b);
	b->pos++;
	int digits = 0;
	switch (c) {
	case 'n': *cp = '\n'; return 0;
	case 'r': *cp = '\r'; return 0;
	case 't': *cp = '\t'; return 0;
	case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.': case '(': case ')':
	case '|': case '*': case '+': case '?': case '{': case '}':
		*cp = (uint32_t)c;
		return 0;
	case 'x': digits = 2; break;
	case 'u': digits = 4; break;
	case 'U': digits = 8; break;
	default:
		b->pos--;
		return bfail(b, "unknown escape '\\%c'", c >= 0x20 && c < 0x7F ? c : '?');
	}
	uint32_t x = 0;
	for (int i = 0; i < digits; i++) {
		int h = hexval(peek(b));
		if (h < 0)
			return bfail(b, "\\%c needs %d hex digits", c, digits);
		x = x << 4 | (uint32_t)h;
		b->pos++;
	}
	if (x > 0x10FFFF || (x >= 0xD800 && x <= 0xDFFF))
		return bfail(b, "\\%c escape U+%X is not a Unicode scalar value", c, x);
	*cp = x;
	return 0;
}

static int parse_alternatives(gbuild *b, int32_t r);

/* The postfix operator after the item q->s[from..]: rewrites the item. */
static int apply_repeat(gbuild *b, int32_t r, int32_t alt, int32_t from, int64_t m, int64_t n /* -1: no bound */)
{
	gseq *q = &b->rules[r].alts[alt];
	gsym x;
	if (q->n - from == 1) {
		x = q->s[from];
	} else {
		int32_t w = rule_new(b, NULL, 0);
		if (w < 0)
			return -1;
		gseq *a = rule_add_alt(b, w);
		if (!a)
			return -1;
		q = &b->rules[r].alts[alt];
		for (int32_t i = from; i < q->n; i++)
			if (seq_push(b, a, q->s[i]) < 0)
				return -1;
		x = (gsym){ SYM_RULE, w };
	}
	q = &b->rules[r].alts[alt];
	b->n_sym -= q->n - from;
	q->n = from;
	for (int64_t i = 0; i < m; i++)
		if (seq_push(b, &b->rules[r].alts[alt], x) < 0)
			return -1;
	if (n < 0) {
		/* S ::= x S | ε */
		int32_t s = rule_new(b, NULL, 0);
		if (s < 0)
			return -1;
		gseq *a = rule_add_alt(b, s);
		if (!a || seq_push(b, a, x) < 0 || seq_push(b, &b->rules[s].alts[0], (gsym){ SYM_RULE, s }) < 0 ||
		    !rule_add_alt(b, s))
			return -1;
		return seq_push(b, &b->rules[r].alts[alt], (gsym){ SYM_RULE, s });
	}
	/* up to n - m more: O_1 ::= x | ε, O_k ::= x O_{k-1} | ε */
	int32_t prev = -1;
	for (int64_t k = 1; k <= n - m; k++) {
		int32_t o = rule_new(b, NULL, 0);
		if (o < 0)
			return -1;
		gseq *a = rule_add_alt(b, o);
		if (!a || seq_push(b, a, x) < 0)
			return -1;
		if (prev >= 0 && seq_push(b, &b->rules[o].alts[0], (gsym){ SYM_RULE, prev }) < 0)
			return -1;
		if (!rule_add_alt(b, o))
			return -1;
		prev = o;
	}
	if (prev >= 0)
		return seq_push(b, &b->rules[r].alts[alt], (gsym){ SYM_RULE, prev });
	return 0;
}

static int64_t read_count(gbuild *b)
{
	int64_t x = 0;
	int digits = 0;
	while (peek(b) >= '0' && peek(b) <= '9') {
		x = x * 10 + (peek(b) - '0');
		if (x > GRAMMAR_MAX_REPEAT)
			return bfail(b, "a repetition count over %d", GRAMMAR_MAX_REPEAT);
		b->pos++;
		digits++;
	}
	return digits ? x : -2;
}

/* One alternative of rule r: a run of items up to '|', ')', or the end of the rule. */
static int parse_sequence(gbuild *b, int32_t r)
{
	gseq *q0 = rule_add_alt(b, r);
	if (!q0)
		return -1;
	int32_t alt = b->rules[r].n_alts - 1;
	for (;;) {
		skip_space(b, b->depth > 0);
		if (at_end(b))
			return 0;
		int c = peek(b);
		if (c == '\n') {
			/* a newline ends the rule unless the next line goes on with it */
			size_t save = b->pos;
			int32_t save_line = b->line;
			size_t save_ls = b->line_start;
			skip_space(b, true);
			if (at_end(b) || rule_starts(b)) {
				b->pos = save;
				b->line = save_line;
				b->line_start = save_ls;
				return 0;
			}
			continue;
		}
		if (c == '|' || c == ')')
			return 0;
		int32_t from = b->rules[r].alts[alt].n;
		if (c == '"') {
			b->pos++;
			while (!at_end(b) && peek(b) != '"') {
				uint32_t cp;
				if (read_char(b, &cp) < 0)
					return -1;
				unsigned char u[4];
				int n = utf8_put(cp, u);
				for (int i = 0; i < n; i++)
					if (push_byte_range(b, &b->rules[r].alts[alt], u[i], u[i]) < 0)
						return -1;
			}
			if (at_end(b))
				return bfail(b, "an unterminated string literal");
			b->pos++;
			if (b->rules[r].alts[alt].n == from) {
				skip_space(b, b->depth > 0);
				int p = peek(b);
				if (p == '*' || p == '+' || p == '?' || p == '{')
					return bfail(b, "a repetition of the empty string");
				continue;
			}
		} else if (c == '[') {
			b->pos++;
			bool neg = false;
			if (peek(b) == '^') {
				neg = true;
				b->pos++;
			}
			cprange *cr = NULL;
			int32_t n = 0, cap = 0;
			while (!at_end(b) && peek(b) != ']') {
				uint32_t lo, hi;
				if (read_char(b, &lo) < 0) {
					free(cr);
					return -1;
				}
				hi = lo;
				if (peek(b) == '-' && b->pos + 1 < b->len && b->src[b->pos + 1] != ']') {
					b->pos++;
					if (read_char(b, &hi) < 0) {
						free(cr);
						return -1;
					}
					if (hi < lo) {
						free(cr);
						return bfail(b, "a class range whose end U+%X is below its start U+%X", hi, lo);
					}
				}
				if (n == cap) {
					cap = cap ? cap * 2 : 8;
					cprange *p = realloc(cr, (size_t)cap * sizeof *p);
					if (!p) {
						free(cr);
						return bfail(b, "out of memory");
					}
					cr = p;
				}
				cr[n++] = (cprange){ lo, hi };
			}
			if (at_end(b)) {
				free(cr);
				return bfail(b, "an unterminated character class");
			}
			b->pos++;
			/* sort, merge, negate, drop surrogates */
			if (n)
				qsort(cr, (size_t)n, sizeof *cr, cpr_cmp);
			int32_t m = 0;
			for (int32_t i = 0; i < n; i++) {
				if (m && cr[i].lo <= cr[m - 1].hi + 1) {
					if (cr[i].hi > cr[m - 1].hi)
						cr[m - 1].hi = cr[i].hi;
				} else {
					cr[m++] = cr[i];
				}
			}
			cprange *out = malloc((size_t)(m + 3) * 2 * sizeof *out);
			if (!out) {
				free(cr);
				return bfail(b, "out of memory");
			}
			int32_t k = 0;
			if (neg) {
				uint32_t next = 0;
				for (int32_t i = 0; i < m; i++) {
					if (cr[i].lo > next)
						out[k++] = (cprange){ next, cr[i].lo - 1 };
					next = cr[i].hi + 1;
				}
				if (next <= 0x10FFFF)
					out[k++] = (cprange){ next, 0x10FFFF };
			} else {
				if (m)
					memcpy(out, cr, (size_t)m * sizeof *out);
				k = m;
			}
			free(cr);
			int32_t k2 = 0;
			cprange *fin = malloc((size_t)(k * 2 + 1) * sizeof *fin);
			if (!fin) {
				free(out);
				return bfail(b, "out of memory");
			}
			for (int32_t i = 0; i < k; i++) {
				uint32_t lo = out[i].lo, hi = out[i].hi;
				if (lo <= 0xDFFF && hi >= 0xD800) {
					if (lo < 0xD800)
						fin[k2++] = (cprange){ lo, 0xD7FF };
					if (hi > 0xDFFF)
						fin[k2++] = (cprange){ 0xE000, hi };
				} else {
					fin[k2++] = out[i];
				}
			}
			free(out);
			if (!k2) {
				free(fin);
				return bfail(b, "a character class that matches no character");
			}
			int rc = push_class(b, &b->rules[r].alts[alt], fin, k2);
			free(fin);
			if (rc < 0)
				return -1;
		} else if (c == '.') {
			b->pos++;
			cprange any[2] = { { 0, 0xD7FF }, { 0xE000, 0x10FFFF } };
			if (push_class(b, &b->rules[r].alts[alt], any, 2) < 0)
				return -1;
		} else if (c == '(') {
			b->pos++;
			if (++b->depth > 256)
				return bfail(b, "groups nested deeper than 256");
			int32_t g = rule_new(b, NULL, 0);
			if (g < 0 || parse_alternatives(b, g) < 0)
				return -1;
			skip_space(b, true);
			if (peek(b) != ')')
				return bfail(b, "a group is not closed with ')'");
			b->pos++;
			b->depth--;
			if (seq_push(b, &b->rules[r].alts[alt], (gsym){ SYM_RULE, g }) < 0)
				return -1;
		} else if (is_name_char(c)) {
			size_t s = b->pos;
			while (!at_end(b) && is_name_char(peek(b)))
				b->pos++;
			int32_t ref = rule_named(b, b->src + s, (int32_t)(b->pos - s));
			if (ref < 0 || seq_push(b, &b->rules[r].alts[alt], (gsym){ SYM_RULE, ref }) < 0)
				return -1;
		} else if (c == '*' || c == '+' || c == '?' || c == '{') {
			return bfail(b, "'%c' follows nothing it could repeat", c);
		} else if (c == ':' && b->pos + 2 < b->len && !memcmp(b->src + b->pos, "::=", 3)) {
			return bfail(b, "'::=' inside a rule (a rule's name must start a line)");
		} else {
			return bfail(b, "unexpected character '%c'", c >= 0x20 && c < 0x7F ? c : '?');
		}
		/* postfix operators */
		for (;;) {
			int p = peek(b);
			int64_t m, n;
			if (p == '*') {
				m = 0;
				n = -1;
				b->pos++;
			} else if (p == '+') {
				m = 1;
				n = -1;
				b->pos++;
			} else if (p == '?') {
				m = 0;
				n = 1;
				b->pos++;
			} else if (p == '{') {
				b->pos++;
				skip_space(b, false);
				m = read_count(b);
				if (m == -1)
					return -1;
				skip_space(b, false);
				if (peek(b) == '}') {
					if (m < 0)
						return bfail(b, "'{}' needs a count");
					n = m;
				} else if (peek(b) == ',') {
					b->pos++;
					skip_space(b, false);
					n = read_count(b);
					if (n == -1)
						return -1;
					if (m == -2)
						m = 0;
					if (n == -2)
						n = -1;
					else if (n < m)
						return bfail(b, "a repetition {%lld,%lld} whose maximum is below its minimum",
						             (long long)m, (long long)n);
				} else {
					return bfail(b, "a malformed repetition (write {m}, {m,}, {m,n} or {,n})");
				}
				skip_space(b, false);
				if (peek(b) != '}')
					return bfail(b, "a repetition is not closed with '}'");
				b->pos++;
			} else {
				break;
			}
			if (apply_repeat(b, r, alt, from, m, n) < 0)
				return -1;
		}
	}
}

static int parse_alternatives(gbuild *b, int32_t r)
{
	for (;;) {
		if (parse_sequence(b, r) < 0)
			return -1;
		skip_space(b, b->depth > 0);
		if (peek(b) != '|')
			return 0;
		b->pos++;
		skip_space(b, true);
	}
}

static int parse_grammar(gbuild *b)
{
	for (;;) {
		skip_space(b, true);
		if (at_end(b))
			return 0;
		size_t s = b->pos;
		while (!at_end(b) && is_name_char(peek(b)))
			b->pos++;
		if (b->pos == s)
			return bfail(b, "expected a rule name");
		int32_t r = rule_named(b, b->src + s, (int32_t)(b->pos - s));
		if (r < 0)
			return -1;
		if (b->rules[r].defined) {
			b->pos = s;
			return bfail(b, "rule '%.*s' is defined twice", (int)(b->rules[r].name_len > 64 ? 64 :
			             b->rules[r].name_len), b->rules[r].name);
		}
		b->rules[r].defined = true;
		b->rules[r].line = b->line;
		skip_space(b, false);
		if (b->pos + 3 > b->len || memcmp(b->src + b->pos, "::=", 3))
			return bfail(b, "expected '::=' after the rule name");
		b->pos += 3;
		b->cur = r;
		skip_space(b, true);
		if (parse_alternatives(b, r) < 0)
			return -1;
		skip_space(b, false);
		if (!at_end(b) && peek(b) != '\n')
			return bfail(b, peek(b) == ')' ? "an unmatched ')'" : "expected the end of the rule");
	}
}

static void build_free(gbuild *b)
{
	for (int32_t r = 0; r < b->n_rules; r++) {
		for (int32_t a = 0; a < b->rules[r].n_alts; a++)
			free(b->rules[r].alts[a].s);
		free(b->rules[r].alts);
	}
	free(b->rules);
	free(b->bytes);
	map64_free(&b->rule_by_name);
	map64_free(&b->bytes_map);
}

/* The user rule a rule was made for, for messages. */
static const grule *user_rule(const gbuild *b, int32_t r)
{
	return &b->rules[b->rules[r].origin];
}

/* Whether every symbol of q is a rule in set, or (bytes_ok) a byte set. */
static bool alt_within(const gseq *q, const bool *set, bool bytes_ok)
{
	for (int32_t i = 0; i < q->n; i++)
		if (q->s[i].kind == SYM_RULE ? !set[q->s[i].arg] : !bytes_ok)
			return false;
	return true;
}

/* The least fixpoint: set[r] once some alternative of r is alt_within(set, bytes_ok) — the productive rules with
 * bytes_ok, the nullable ones without. */
static void rules_fixpoint(const gbuild *b, bool *set, bool bytes_ok)
{
	for (bool changed = true; changed;) {
		changed = false;
		for (int32_t r = 0; r < b->n_rules; r++)
			for (int32_t a = 0; a < b->rules[r].n_alts && !set[r]; a++)
				if (alt_within(&b->rules[r].alts[a], set, bytes_ok))
					set[r] = changed = true;
	}
}

/* Checks and prunes the rules: every mentioned rule defined; useless alternatives (those that can derive nothing)
 * dropped; no left recursion. */
static int check_rules(gbuild *b, int32_t root)
{
	for (int32_t r = 0; r < b->n_rules; r++)
		if (b->rules[r].name && !b->rules[r].defined) {
			b->line = b->rules[r].line;
			snprintf(b->err, b->err_len, "grammar line %d: rule '%.*s' is used but never defined",
			         b->rules[r].line, (int)(b->rules[r].name_len > 64 ? 64 : b->rules[r].name_len),
			         b->rules[r].name);
			return -1;
		}
	int32_t n = b->n_rules;
	bool *prod = calloc((size_t)n, 1), *null = calloc((size_t)n, 1);
	int32_t *stk = malloc((size_t)n * sizeof *stk);
	if (!prod || !null || !stk) {
		free(prod);
		free(null);
		free(stk);
		snprintf(b->err, b->err_len, "out of memory");
		return -1;
	}
	/* productive: some alternative of only productive symbols (a byte set is never empty here) */
	rules_fixpoint(b, prod, true);
	int rc = 0;
	if (!prod[root]) {
		snprintf(b->err, b->err_len, "the grammar matches no string (rule 'root' never ends)");
		rc = -1;
		goto out;
	}
	for (int32_t r = 0; r < n; r++) {
		int32_t k = 0;
		for (int32_t a = 0; a < b->rules[r].n_alts; a++) {
			gseq *q = &b->rules[r].alts[a];
			if (alt_within(q, prod, true))
				b->rules[r].alts[k++] = *q;
			else
				free(q->s);
		}
		b->rules[r].n_alts = k;
	}
	/* nullable: some alternative of only nullable rules */
	rules_fixpoint(b, null, false);
	/* Left recursion. A rule may start with another when everything before the reference can match nothing: a
	 * "start edge". A cycle of start edges where some reference has symbols after it makes every closure push a
	 * frame and come back, without end. A cycle whose references are all last in their alternatives pushes
	 * nothing (tail calls): the closure meets the same item again and stops, so that kind is allowed (it is what
	 * (a*)* becomes). Strongly connected components (Tarjan, iterative) find the first kind: a non-tail start edge
	 * inside one component. */
	{
		int32_t *idx = malloc((size_t)n * sizeof *idx), *low = malloc((size_t)n * sizeof *low);
		int32_t *comp = malloc((size_t)n * sizeof *comp), *cs = malloc((size_t)n * sizeof *cs);
		int32_t *ca = malloc((size_t)n * sizeof *ca), *ci = malloc((size_t)n * sizeof *ci);
		bool *on = calloc((size_t)n, 1);
		if (!idx || !low || !comp || !cs || !ca || !ci || !on) {
			snprintf(b->err, b->err_len, "out of memory");
			rc = -1;
		}
		int32_t counter = 0, ncomp = 0, csp = 0;
		for (int32_t r = 0; r < n && !rc; r++)
			idx[r] = -1;
		for (int32_t s0 = 0; s0 < n && !rc; s0++) {
			if (idx[s0] >= 0)
				continue;
			/* call stack: (rule, alternative, symbol) of the next edge to try */
			int32_t sp = 0;
			stk[sp] = s0;
			ca[sp] = 0;
			ci[sp] = 0;
			sp++;
			idx[s0] = low[s0] = counter++;
			cs[csp++] = s0;
			on[s0] = true;
			while (sp) {
				int32_t r = stk[sp - 1];
				int32_t to = -1;
				while (ca[sp - 1] < b->rules[r].n_alts) {
					const gseq *q = &b->rules[r].alts[ca[sp - 1]];
					int32_t i = ci[sp - 1];
					if (i < q->n && q->s[i].kind == SYM_RULE &&
					    (i == 0 || (q->s[i - 1].kind == SYM_RULE && null[q->s[i - 1].arg]))) {
						to = q->s[i].arg;
						ci[sp - 1] = i + 1;
						break;
					}
					ca[sp - 1]++;
					ci[sp - 1] = 0;
				}
				if (to >= 0) {
					if (idx[to] < 0) {
						stk[sp] = to;
						ca[sp] = 0;
						ci[sp] = 0;
						sp++;
						idx[to] = low[to] = counter++;
						cs[csp++] = to;
						on[to] = true;
					} else if (on[to] && idx[to] < low[r]) {
						low[r] = idx[to];
					}
					continue;
				}
				/* r is done */
				if (low[r] == idx[r]) {
					int32_t x;
					do {
						x = cs[--csp];
						on[x] = false;
						comp[x] = ncomp;
					} while (x != r);
					ncomp++;
				}
				sp--;
				if (sp && low[r] < low[stk[sp - 1]])
					low[stk[sp - 1]] = low[r];
			}
		}
		for (int32_t r = 0; r < n && !rc; r++)
			for (int32_t a = 0; a < b->rules[r].n_alts && !rc; a++) {
				const gseq *q = &b->rules[r].alts[a];
				for (int32_t i = 0; i < q->n && q->s[i].kind == SYM_RULE; i++) {
					int32_t to = q->s[i].arg;
					if (i + 1 < q->n && comp[to] == comp[r]) {
						const grule *u = user_rule(b, to);
						snprintf(b->err, b->err_len, "left recursion: rule '%.*s' can reach itself without "
						         "matching a character", (int)(u->name_len > 64 ? 64 : u->name_len),
						         u->name ? u->name : "?");
						rc = -1;
						break;
					}
					if (!null[to])
						break;
				}
			}
		free(idx);
		free(low);
		free(comp);
		free(cs);
		free(ca);
		free(ci);
		free(on);
	}
out:
	free(prod);
	free(null);
	free(stk);
	return rc;
}

grammar *grammar_ref(grammar *g)
{
	__atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
	return g;
}

void grammar_unref(grammar *g)
{
	if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL))
		return;
	free(g->sym);
	free(g->bytes);
	free(g->alt);
	free(g->alt_lo);
	free(g->npos);
	free(g->nparent);
	free(g->ndepth);
	map64_free(&g->node_map);
	for (int32_t i = 0; i < g->n_sets; i++)
		free(g->sets[i].trans);
	free(g->sets);
	free(g->set_pool.p);
	map64_free(&g->set_map);
	free(g->set_next.p);
	map64_free(&g->key_map);
	for (int32_t i = 0; i < g->n_entries; i++) {
		free(g->entries[i].ids);
		free(g->entries[i].bits);
		free(g->entries[i].points);
	}
	free(g->entries);
	map64_free(&g->raw_map);
	map64_free(&g->trans_map);
	free(g->work.p);
	free(g->out.p);
	map64_free(&g->seen);
	free(g->walk_sets);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

const grammar_vocab *grammar_of_vocab(const grammar *g)
{
	return g->v;
}

double grammar_compile_seconds(const grammar *g)
{
	return g->compile_s;
}

grammar *grammar_compile(const grammar_vocab *v, const char *src, size_t len, char *err, size_t err_len)
{
	double t0 = aah_now_s();
	if (len > GRAMMAR_MAX_TEXT) {
		snprintf(err, err_len, "the grammar is %zu bytes, more than %u", len, GRAMMAR_MAX_TEXT);
		return NULL;
	}
	if (aah_utf8_check(src, len) != 0) {
		snprintf(err, err_len, "the grammar is not valid UTF-8");
		return NULL;
	}
	gbuild b = { .src = src, .len = len, .line = 1, .err = err, .err_len = err_len };
	grammar *g = NULL;
	if (parse_grammar(&b) < 0)
		goto fail;
	int32_t root = -1;
	for (int32_t r = 0; r < b.n_rules; r++)
		if (b.rules[r].name && b.rules[r].name_len == 4 && !memcmp(b.rules[r].name, "root", 4))
			root = r;
	if (root < 0 || !b.rules[root].defined) {
		snprintf(err, err_len, "the grammar has no rule 'root'");
		goto fail;
	}
	if (check_rules(&b, root) < 0)
		goto fail;
	g = calloc(1, sizeof *g);
	if (!g)
		goto oom;
	g->refs = 1;
	pthread_mutex_init(&g->lock, NULL);
	g->v = v;
	g->root = root;
	g->n_rules = b.n_rules;
	/* flatten: position 0 is an END that nothing starts at (so 0 is never a live position) */
	int64_t n_sym = 1, n_alt = 0;
	for (int32_t r = 0; r < b.n_rules; r++) {
		n_alt += b.rules[r].n_alts;
		for (int32_t a = 0; a < b.rules[r].n_alts; a++)
			n_sym += b.rules[r].alts[a].n + 1;
	}
	g->sym = malloc((size_t)n_sym * sizeof *g->sym);
	g->alt = malloc((size_t)(n_alt ? n_alt : 1) * sizeof *g->alt);
	g->alt_lo = malloc((size_t)(b.n_rules + 1) * sizeof *g->alt_lo);
	g->bytes = b.bytes;
	g->n_bytes = b.n_bytes;
	b.bytes = NULL;
	g->cap_nodes = 1024;
	g->npos = malloc((size_t)g->cap_nodes * sizeof *g->npos);
	g->nparent = malloc((size_t)g->cap_nodes * sizeof *g->nparent);
	g->ndepth = malloc((size_t)g->cap_nodes * sizeof *g->ndepth);
	g->walk_sets = malloc((VOCAB_MAX_TOKEN + 2) * sizeof *g->walk_sets);
	if (!g->sym || !g->alt || !g->alt_lo || !g->npos || !g->nparent || !g->ndepth || !g->walk_sets)
		goto oom;
	int32_t p = 0, k = 0;
	g->sym[p++] = (gsym){ SYM_END, 0 };
	for (int32_t r = 0; r < b.n_rules; r++) {
		g->alt_lo[r] = k;
		for (int32_t a = 0; a < b.rules[r].n_alts; a++) {
			g->alt[k++] = p;
			const gseq *q = &b.rules[r].alts[a];
			if (q->n)   /* an empty alternative has no array */
				memcpy(g->sym + p, q->s, (size_t)q->n * sizeof *q->s);
			p += q->n;
			g->sym[p++] = (gsym){ SYM_END, 0 };
		}
	}
	g->alt_lo[b.n_rules] = k;
	g->n_sym = p;
	/* nodes 0 and 1: the bottom and the sentinel */
	g->npos[0] = g->npos[1] = 0;
	g->nparent[0] = g->nparent[1] = -1;
	g->ndepth[0] = g->ndepth[1] = 0;
	g->n_nodes = 2;
	/* state 0: dead (no stacks, no flags; set_get answers it without a lookup) */
	g->cap_sets = 256;
	g->sets = malloc((size_t)g->cap_sets * sizeof *g->sets);
	if (!g->sets || ivec_push(&g->set_next, -1) < 0)
		goto oom;
	g->sets[0] = (gset){ 0 };
	g->n_sets = 1;
	/* the start: root's alternatives over the bottom */
	g->work.n = 0;
	for (int32_t a = g->alt_lo[root]; a < g->alt_lo[root + 1]; a++)
		if (ivec_push(&g->work, g->alt[a]) < 0 || ivec_push(&g->work, NODE_BOTTOM) < 0)
			goto oom;
	g->initial = closure(g);
	if (g->initial < 0) {
		snprintf(err, err_len, "%s", g->fail);
		goto fail;
	}
	build_free(&b);
	if (v->warm_s > 0)
		warm_up(g, v->warm_s);
	g->compile_s = aah_now_s() - t0;
	return g;
oom:
	snprintf(err, err_len, "out of memory compiling the grammar");
fail:
	build_free(&b);
	grammar_unref(g);
	return NULL;
}
