/* server/choice_text.h — the server's reading of one choice's text. The engine thread makes the text once
 * (engine/gen_text.h: tokens → text → stop strings, published with every sched_view); a choice_text follows those
 * publications and adds what only the server wants: the places of chosen special tokens (markers: Llama 3's
 * <|python_tag|>, Mistral's [TOOL_CALLS]), which the text skips as it skips every special token, so that the one
 * reader that wants them (the tool-call parser) can put them back while stop strings and content never see them.
 * Nothing here decodes a generated token: the reasoning split, the tool-call parser, the stream and the final message
 * all read this one text, in order. */
#ifndef AAH_SERVER_CHOICE_TEXT_H
#define AAH_SERVER_CHOICE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/gen_text.h"
#include "models/tokenizer.h"

/* A marker special token in the text: it came right before the byte at offset at (at == len: after the last). */
typedef struct choice_marker {
	size_t at;
	int32_t which;                    /* its index in the allow-list given to choice_text_markers */
} choice_marker;

typedef struct choice_text {
	const tokenizer *tok;             /* the markers' texts */
	gen_text_view v;                  /* the engine's text as of the last choice_text_sync (valid while the request is) */
	int32_t n_seen;                   /* tokens looked at for markers */
	int32_t n_kept;                   /* tokens whose text is in the result (all, unless stopped: gen_text_kept) */
	const char *const *marker_text;   /* the allow-list (borrowed): a special token whose text is one is a marker */
	int32_t n_marker_text;
	choice_marker *markers;           /* in text order; after a stop only those before it (at < v.len) */
	int32_t n_markers, cap_markers;
} choice_text;

void choice_text_init(choice_text *c, const tokenizer *tok);
void choice_text_free(choice_text *c);
/* Special tokens whose text is one of the n texts (borrowed: they must outlive c) are recorded as markers from now on
 * (none by default). Call before the first sync. */
void choice_text_markers(choice_text *c, const char *const *texts, int32_t n);
/* Takes a newer publication of the choice's text (v) and its tokens (ids, v->n_tokens of them: the markers are
 * looked for among the new ones). Returns 0, or -1 when out of memory. */
int choice_text_sync(choice_text *c, const int32_t *ids, const gen_text_view *v);
/* The text of n ids as responses show it (an echoed prompt, /detokenize): tokenizer_decode of the ids, where an id of
 * the model's padded vocabulary that the tokenizer lacks (Qwen3: 151669 … 151935) has no text, as in the generated
 * text. The caller checks ids against the model's vocabulary. *out is malloc'd and NUL-terminated (caller frees),
 * *len its bytes. Returns 0; -1 when out of memory; -2 when an id is negative (nothing allocated). */
int choice_text_decode(const tokenizer *tok, const int32_t *ids, int64_t n, char **out, size_t *len);

#endif
