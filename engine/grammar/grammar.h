/* engine/grammar/grammar.h — constrained decoding: a grammar over bytes, compiled once, and per sequence a matcher
 * that says which tokens of the vocabulary may come next (a mask) and follows the tokens chosen.
 *
 * The one input form is GBNF, llama.cpp's notation:
 *
 *     root   ::= "{" ws pair ("," ws pair)* "}"      # the rule named root is the language
 *     pair   ::= [a-z]+ ws ":" ws value
 *     ws     ::= [ \t\n]{0,4}
 *
 * rules `name ::= alternatives` (names of letters, digits, '-' and '_'; a rule may span lines while a bracket is
 * open or the next line does not start a new rule); `|` between alternatives; string literals "…" and character
 * classes […] / [^…] with ranges; `.` any character; grouping ( ); postfix `*` `+` `?` `{m}` `{m,}` `{m,n}` `{,n}`;
 * `#` comments. Escapes in literals and classes: \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH (code
 * points, written as UTF-8). Characters are Unicode code points; the engine matches their UTF-8 bytes, so every
 * output a grammar admits is valid UTF-8 and tokens that split a character are handled.
 *
 * Refused at compile, with a message that names the rule: a syntax error (with line and column), an undefined rule,
 * a missing root, left recursion (a rule that can reach itself without consuming a byte), a rule that derives no
 * string (so an empty language), a repetition count over 10000, and grammars past the size bounds (GRAMMAR_MAX_*).
 *
 * Matching: a set of parse stacks (a pushdown automaton run on bytes, shared stack tails, a tail call popped at
 * once); sets and their byte transitions are interned and cached, so the automaton becomes a DFA as it is explored.
 * The mask of a state is the union over its stacks of a part that depends only on the top few frames (cached per
 * grammar, shared by every sequence) and the few tokens whose bytes run past those frames, walked from the real
 * stack (engine/grammar/grammar.c says how). A state whose stack set grows past GRAMMAR_MAX_STACKS is an error of
 * the matcher (a grammar too ambiguous to follow), never a hang.
 *
 * Threads: a grammar may be shared by many matchers; its caches are guarded by its own lock. One matcher is used by
 * one thread at a time. */
#ifndef AAH_ENGINE_GRAMMAR_GRAMMAR_H
#define AAH_ENGINE_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GRAMMAR_MAX_TEXT (1u << 20)       /* bytes of GBNF */
#define GRAMMAR_MAX_SYMBOLS (1u << 20)    /* symbols after repetitions and classes are expanded */
#define GRAMMAR_MAX_REPEAT 10000          /* m and n of {m,n} */
#define GRAMMAR_MAX_STACKS 1024           /* parse stacks alive at once in one state */

typedef struct grammar_vocab grammar_vocab;
typedef struct grammar grammar;
typedef struct grammar_matcher grammar_matcher;

/* The tokens of a tokenizer as byte strings, in a trie: built once per tokenizer (about 0.1 s for 151,936 tokens).
 * Ids at or past n_vocab, special tokens and tokens with no bytes are never allowed by a mask; the caller adds the
 * ids that end a sequence (grammar_matcher_can_end). NULL with err when out of memory. */
grammar_vocab *grammar_vocab_new(const tokenizer *tok, int32_t n_vocab, char *err, size_t err_len);
void grammar_vocab_free(grammar_vocab *v);
int32_t grammar_vocab_size(const grammar_vocab *v);
/* How long grammar_compile may spend caching masks ahead of use (default 25 ms; 0: none, as the fuzz target wants):
 * it explores the grammar breadth first from its start and pays the whole-vocabulary walks of free-text positions
 * (a few ms each on 151,936 tokens) there, instead of at a request's first tokens. */
void grammar_vocab_set_warm(grammar_vocab *v, double seconds);
/* The bytes a grammar may spend on per-state transition arrays (1 KiB a state, default 32 MiB); past them its
 * transitions go to a map, slower and smaller. The tests set 0 to run the map alone. */
void grammar_vocab_set_transition_arrays(grammar_vocab *v, size_t bytes);

/* Compiles GBNF text against a vocabulary (borrowed: it must outlive the grammar). Returns the grammar with one
 * reference, or NULL with a message in err. */
grammar *grammar_compile(const grammar_vocab *v, const char *gbnf, size_t len, char *err, size_t err_len);
grammar *grammar_ref(grammar *g);
const grammar_vocab *grammar_of_vocab(const grammar *g);   /* the vocabulary it was compiled against */
void grammar_unref(grammar *g);   /* frees it with its last reference (NULL: nothing) */
/* Wall time grammar_compile took, in seconds. */
double grammar_compile_seconds(const grammar *g);

/* A matcher at the start of the grammar; it holds a reference to g. NULL when out of memory. */
grammar_matcher *grammar_matcher_new(grammar *g);
void grammar_matcher_free(grammar_matcher *m);
/* The tokens that may come next, as bits (bit i of bits[i / 32] set: token i allowed; grammar_vocab_size bits; the
 * ending ids are not among them). Returns the number of tokens allowed (0 with grammar_matcher_can_end: only an end
 * may follow), or -1 when the matcher failed (grammar_matcher_error says why). */
int64_t grammar_matcher_mask(grammar_matcher *m, uint32_t *bits);
/* Whether token may come next (the same answer as its bit in the mask, without computing the mask). */
bool grammar_matcher_allows(grammar_matcher *m, int32_t token);
/* Follows token. Returns 0, or -1 when the grammar does not allow it (the matcher is unchanged) or it failed. */
int grammar_matcher_accept(grammar_matcher *m, int32_t token);
/* Follows raw bytes (tests, and text forced into the output). Returns 0, or -1 as grammar_matcher_accept. */
int grammar_matcher_accept_bytes(grammar_matcher *m, const void *bytes, size_t n);
/* The output so far is a whole sentence of the grammar: an ending id may come next. */
bool grammar_matcher_can_end(const grammar_matcher *m);
/* Nothing but an end may come next (the grammar is complete and admits no longer sentence). */
bool grammar_matcher_must_end(const grammar_matcher *m);
/* Why the matcher failed ("" while it has not). */
const char *grammar_matcher_error(const grammar_matcher *m);

#ifdef __cplusplus
}
#endif
#endif
