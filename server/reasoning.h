/* server/reasoning.h — splits a chat answer into its reasoning and its content, as vLLM's `--reasoning-parser qwen3`
 * does: a `<think>…</think>` block that opens the answer (or that the prompt opened) is reasoning, the rest content.
 * Incremental: fed the answer's text one piece at a time, it never lets out a piece of a tag that is not yet decided,
 * so that the pieces it returns join to what the whole text gives at once, wherever the text was cut. */
#ifndef AAH_SERVER_REASONING_H
#define AAH_SERVER_REASONING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define REASONING_OPEN_TAG "<think>"
#define REASONING_CLOSE_TAG "</think>"
#define REASONING_MAX_HELD 8          /* bytes held back at most: a proper prefix of a tag, or the open tag whole */

/* How an answer begins. */
typedef enum reasoning_start {
	REASONING_START_OFF,              /* no split: everything is content (reasoning_parser = none; enable_thinking
	                                   * false) */
	REASONING_START_DETECT,           /* reasoning only when the answer's first bytes are <think> */
	REASONING_START_OPEN,             /* the prompt ends inside an open <think> block: the answer starts in it */
} reasoning_start;

typedef enum reasoning_state {
	REASONING_STATE_START,            /* DETECT: matching <think> against the answer's first bytes */
	REASONING_STATE_THINK,            /* inside the block: looking for </think> */
	REASONING_STATE_CONTENT,          /* past the block, or no block: all content */
} reasoning_state;

typedef struct reasoning_split {
	reasoning_state state;
	int32_t matched;                  /* bytes of the tag being matched (START: <think>, THINK: </think>), held back */
	size_t fed;                       /* bytes fed so far */
	size_t content_from;              /* offset in the fed text where the content begins: 0 with no block, the byte
	                                   * after </think>, or SIZE_MAX while the block is open */
	bool block;                       /* a reasoning block was found (or opened by the prompt) */
} reasoning_split;

/* Where the split decides: the output of one feed. The caller gives both buffers, each with room for the fed length
 * plus REASONING_MAX_HELD bytes more than the lengths already hold; feed and finish append to them. Within one feed
 * every reasoning byte comes before every content byte of the answer. */
typedef struct reasoning_out {
	char *reasoning, *content;
	size_t reasoning_len, content_len;
} reasoning_out;

/* The start an answer to this rendered prompt takes when the split is on: OPEN when the prompt's last <think> has no
 * </think> after it (a template that opens the block itself, or continue_final_message on an assistant turn that
 * began one), DETECT otherwise. */
reasoning_start reasoning_start_of_prompt(const char *prompt, size_t len);

void reasoning_init(reasoning_split *s, reasoning_start start);
/* The next len bytes of the answer. A tag may be cut anywhere: its first bytes are held until the next feed (or
 * finish) decides. Splits only before or after ASCII tag bytes, so whole UTF-8 characters in give whole ones out. */
void reasoning_feed(reasoning_split *s, const char *text, size_t len, reasoning_out *out);
/* No more text: held bytes go where they were (a cut <think> at the start is content; a cut </think> is reasoning —
 * a block without its end, as at max_tokens, is reasoning to its last byte). */
void reasoning_finish(reasoning_split *s, reasoning_out *out);

/* Of an answer's generated tokens, how many are reasoning: the first n_text are the tokens whose texts begin at
 * tok_off[i] in the text the split was fed (after finish), each one of the reasoning when it begins before the content
 * does — so a token that straddles </think> is reasoning — and n_after more tokens without text there (those that
 * completed a stop string, a stop token) are reasoning when the block never ended. */
int32_t reasoning_count_tokens(const reasoning_split *s, const size_t *tok_off, int32_t n_text, int32_t n_after);

#ifdef __cplusplus
}
#endif
#endif
