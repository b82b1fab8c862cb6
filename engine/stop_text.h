/* engine/stop_text.h — stop strings over the text of generated tokens: the decoder and the matcher of a sequence's
 * text (engine/gen_text.h, which the engine thread runs once per generated token: the request ends at the token that
 * completes a stop string, so that its stats stop there, and the text every reader sees is cut there).
 *
 * The rule: each token is decoded by the streaming decoder (tokenizer_stream: complete UTF-8 characters only, a
 * character split over tokens appears with the token that completes it; special tokens and ids beyond the tokenizer
 * add no text). After each token the whole text so far is searched: the first token after which some stop string
 * occurs anywhere in it is the stopping token, and the text ends where the earliest such occurrence begins (across
 * token boundaries; of two stop strings the one that begins first wins). At the end (stop_text_finish) an incomplete
 * character becomes U+FFFD, which may complete a stop string too. With min_tokens (vLLM's), a stop string that ends
 * in the text of one of the first min_tokens tokens does not count, ever; one that begins there and ends later does.
 * Only the text's last max_stop - 1 bytes are kept, and nothing is allocated: the engine thread may run it on its
 * decode path. */
#ifndef AAH_ENGINE_STOP_TEXT_H
#define AAH_ENGINE_STOP_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STOP_TEXT_MAX 4            /* stop strings at most (OpenAI's limit) */
#define STOP_TEXT_MAX_BYTES 256    /* bytes of one stop string at most */

typedef struct stop_text {
	tokenizer_stream ts;
	int32_t n_stop;
	size_t stop_len[STOP_TEXT_MAX];
	char stop[STOP_TEXT_MAX][STOP_TEXT_MAX_BYTES];   /* copies of the stop strings, stop_len bytes each */
	size_t max_stop;                  /* the longest stop_len */
	char tail[STOP_TEXT_MAX_BYTES];   /* the text's last tail_len = min(len, max_stop - 1) bytes: a stop string that
	                                   * completes later begins in them or after them */
	size_t tail_len;
	uint64_t len;                     /* bytes of text so far (up to the stop's end when stopped) */
	int32_t min_tokens;               /* tokens whose text completes no stop string (stop_text_min_tokens) */
	int32_t n_tokens;                 /* tokens pushed */
	bool stopped;
	int32_t stop_index;               /* once stopped: the stop string found, and where in the text it begins */
	uint64_t stop_at;
} stop_text;

/* Whether n_stop stop strings are ones stop_text takes (0 … STOP_TEXT_MAX of them, each 1 … STOP_TEXT_MAX_BYTES bytes,
 * with a tokenizer to decode by when there are any): 0, or -1 with the reason in err. */
int stop_text_check(const tokenizer *tok, const char *const *stop, const size_t *stop_len, int32_t n_stop, char *err,
                    size_t err_len);
/* Copies the n_stop stop strings (each 1 … STOP_TEXT_MAX_BYTES bytes, any bytes). tok is borrowed and must outlive m;
 * it may be NULL only when n_stop is 0 and stop_text_push is never called. Returns 0, or -1 for a bad count or length.
 * Nothing to free. */
int stop_text_init(stop_text *m, const tokenizer *tok, const char *const *stop, const size_t *stop_len, int32_t n_stop);
/* The first n tokens pushed (≥ 0; 0, the default, is off) complete no stop string: vLLM's min_tokens, which holds
 * stop strings back as it does the stop token ids. Call before the first push. */
void stop_text_min_tokens(stop_text *m, int32_t n);
/* The room stop_text_push needs for token id (0 for an id the tokenizer lacks), and its most over the vocabulary
 * (a scan of the vocabulary: call it once). */
int64_t stop_text_room(const tokenizer *tok, int32_t id);
int64_t stop_text_room_max(const tokenizer *tok);
/* Appends token id: writes the text it completes to out and returns its length (0: none yet, or a special token), or
 * -1 when cap is below stop_text_room (then nothing was consumed). Then m->stopped says whether a stop string has
 * occurred. Once stopped it consumes nothing and returns 0. */
int64_t stop_text_push(stop_text *m, int32_t id, char *out, int64_t cap);
/* The end of the text: what the decoder holds (an incomplete character, as U+FFFD) is written to out and searched.
 * Returns its length (0 or 3), or -1 when cap < 3. */
int64_t stop_text_finish(stop_text *m, char *out, int64_t cap);
/* Bytes at the text's end that could still grow into a stop string (the longest suffix that is a proper prefix of
 * one); 0 once stopped, and without stop strings. */
size_t stop_text_held(const stop_text *m);

#ifdef __cplusplus
}
#endif
#endif
