/* engine/gen_text.h — the text of one generated sequence, made once. The engine thread pushes each generated token;
 * gen_text decodes it (stop_text's decoder and stop strings, engine/stop_text.h), keeps the bytes, where each token's
 * text begins, and the part that is safe to show — text that could still grow into a stop string is held back. A
 * snapshot (gen_text_view) is what other threads read: the scheduler copies one into every publication
 * (sched_view.text), and the server builds its answer, its stream, reasoning and tool calls from it
 * (server/choice_text.h), never decoding a generated token again.
 *
 * Readers run beside the writer without a lock: the bytes below a published length are never written again, and a
 * buffer that grows is copied into a new one while the old stays alive (until gen_text_free), so a view taken earlier
 * stays valid. The first buffer, made at gen_text_init on the submitting thread, holds 8 bytes a token; only a text
 * longer than that grows (doubling) on the engine thread. The buffers sum to at most twice the final text. */
#ifndef AAH_ENGINE_GEN_TEXT_H
#define AAH_ENGINE_GEN_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/stop_text.h"
#include "models/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A snapshot, valid while the gen_text lives. */
typedef struct gen_text_view {
	const char *text;             /* len bytes, not NUL-terminated (NULL while empty) */
	size_t len;                   /* the text so far; once stopped, up to where the stop string begins */
	size_t safe;                  /* text[0, safe) can no longer become part of a stop string: it may be shown */
	const size_t *tok_off;        /* n_tokens entries: where each token's text begins (after a stop, those past
	                               * len are cut: gen_text_kept) */
	int32_t n_tokens;             /* tokens pushed (a stop token id is never pushed: it is not among the output) */
	bool stopped;                 /* a stop string completed: the text ends where it begins */
	int32_t stop_index;           /* which one, else -1 */
	bool finished;                /* gen_text_finish ran: nothing more will come, everything is safe */
} gen_text_view;

typedef struct gen_text_block gen_text_block;   /* a buffer, and the one it replaced */

typedef struct gen_text {
	stop_text st;                 /* the decoder and the stop strings; st.len is the bytes written */
	gen_text_block *blk;          /* the current buffer (NULL without a tokenizer) */
	size_t cap;                   /* its bytes */
	int64_t room;                 /* the most one push may write (stop_text_room_max) */
	size_t *tok_off;              /* max_tokens */
	int32_t max_tokens, n_tokens;
	bool finished;
} gen_text;

/* Copies the stop strings (stop_text_init's rules) and allocates room for max_tokens tokens. tok is borrowed and
 * must outlive g; NULL makes a sequence without text (no stop strings allowed): pushes only count tokens. room_max is
 * stop_text_room_max(tok), computed once by the caller (it scans the vocabulary). Returns 0, or -1 when out of memory
 * or for bad stop strings (g is then free). Free with gen_text_free. */
int gen_text_init(gen_text *g, const tokenizer *tok, const char *const *stop, const size_t *stop_len, int32_t n_stop,
                  int32_t max_tokens, int64_t room_max);
void gen_text_free(gen_text *g);
/* The first n tokens complete no stop string (stop_text_min_tokens). Call before the first push. */
void gen_text_min_tokens(gen_text *g, int32_t n);
/* Appends a generated token (at most max_tokens): its text, if any — special tokens and ids beyond the tokenizer add
 * none. After a stop or the finish it does nothing. Returns 0, or -1 when out of memory (nothing consumed). */
int gen_text_push(gen_text *g, int32_t id);
/* No more tokens: an incomplete character becomes U+FFFD (which may complete a stop string too) and all is safe.
 * Returns 0 (the room for it is always there). */
int gen_text_finish(gen_text *g);
/* Whether a stop string has completed. */
static inline bool gen_text_stopped(const gen_text *g) { return g->st.stopped; }
void gen_text_view_get(const gen_text *g, gen_text_view *v);
/* Tokens whose text begins before the end of v's text: all of them, unless stopped (then the token that completed the
 * stop string is the last one kept when the stop string began inside its text). */
int32_t gen_text_kept(const gen_text_view *v);
/* End offset of token i's text in v (the next token's start, or len). */
size_t gen_text_token_end(const gen_text_view *v, int32_t i);

#ifdef __cplusplus
}
#endif
#endif
