/* server/choice_text.h — the text of one choice as its tokens arrive: complete UTF-8 characters only, stop strings
 * found across token boundaries (engine/stop_text.h: the very rule by which the engine thread ended the request at
 * the same token), and the part that is safe to send — text that could still grow into a stop string is held back,
 * so a stop string is never sent, nor split. Beside the text, the places of chosen special tokens (markers: Llama 3's
 * <|python_tag|>, Mistral's [TOOL_CALLS]), which the text skips as it skips every special token, so that the one
 * reader that wants them (the tool-call parser) can put them back while stop strings and content never see them. */
#ifndef AAH_SERVER_CHOICE_TEXT_H
#define AAH_SERVER_CHOICE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/stop_text.h"
#include "models/tokenizer.h"

/* A marker special token in the text: it came right before the byte at offset at (at == len: after the last). */
typedef struct choice_marker {
	size_t at;
	int32_t which;                    /* its index in the allow-list given to choice_text_markers */
} choice_marker;

typedef struct choice_text {
	stop_text st;                     /* the decoder and the stop strings */
	const tokenizer *tok;
	char *text;                       /* the text so far (not NUL-terminated), len bytes */
	size_t len, cap;
	size_t safe;                      /* text[0, safe) cannot become part of a stop string: it may be sent */
	bool stopped;                     /* a stop string was found: the text ends where it began */
	bool finished;                    /* choice_text_finish was called */
	size_t *tok_off;                  /* (max_tokens) byte offset in text where each token's text begins */
	int32_t n_tokens;                 /* tokens pushed */
	int32_t n_kept;                   /* tokens whose text is in the result (all, unless stopped) */
	const char *const *marker_text;   /* the allow-list (borrowed): a special token whose text is one is a marker */
	int32_t n_marker_text;
	choice_marker *markers;           /* in text order; after a stop only those before it (at < len) */
	int32_t n_markers, cap_markers;
} choice_text;

/* The stop strings are copied (at most STOP_TEXT_MAX, each 1 … STOP_TEXT_MAX_BYTES bytes). Returns 0, or -1 when out
 * of memory or for bad stop strings. Free with choice_text_free. */
int choice_text_init(choice_text *c, const tokenizer *tok, const char *const *stop, const size_t *stop_len,
                     int32_t n_stop, int32_t max_tokens);
void choice_text_free(choice_text *c);
/* The first n tokens complete no stop string (min_tokens; stop_text_min_tokens, the engine thread's same rule). Call
 * before the first push. */
void choice_text_min_tokens(choice_text *c, int32_t n);
/* Special tokens whose text is one of the n texts (borrowed: they must outlive c) are recorded as markers from now on
 * (none by default). Call before the first push. */
void choice_text_markers(choice_text *c, const char *const *texts, int32_t n);
/* Appends a generated token (special tokens, and ids beyond the tokenizer's vocabulary, add no text). After a stop
 * it does nothing. Returns 0, or -1 when out of memory. At most max_tokens tokens. */
int choice_text_push(choice_text *c, int32_t id);
/* No more tokens: held bytes are flushed (an incomplete character becomes U+FFFD) and everything is safe. */
int choice_text_finish(choice_text *c);
/* End offset of token i's text (the next token's start, or len). */
size_t choice_text_token_end(const choice_text *c, int32_t i);

/* The text of n ids as responses show it (an echoed prompt, /detokenize): tokenizer_decode of the ids, where an id of
 * the model's padded vocabulary that the tokenizer lacks (Qwen3: 151669 … 151935) has no text, as in choice_text_push.
 * The caller checks ids against the model's vocabulary. *out is malloc'd and NUL-terminated (caller frees), *len its
 * bytes. Returns 0; -1 when out of memory; -2 when an id is negative (nothing allocated). */
int choice_text_decode(const tokenizer *tok, const int32_t *ids, int64_t n, char **out, size_t *len);

#endif
