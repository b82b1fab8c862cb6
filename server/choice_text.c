/* server/choice_text.c — see choice_text.h. Where the stop is and what is held back come from stop_text, which sees
 * the same bytes as text: the hold-back rule is that the longest suffix of the text that is a prefix of some stop
 * string is held, everything before it is safe, so a stop string that completes later starts inside the held part,
 * never inside what was sent. */
#include "server/choice_text.h"

#include <stdlib.h>
#include <string.h>

int choice_text_init(choice_text *c, const tokenizer *tok, const char *const *stop, const size_t *stop_len,
                     int32_t n_stop, int32_t max_tokens)
{
	memset(c, 0, sizeof *c);
	c->tok = tok;
	if (stop_text_init(&c->st, tok, stop, stop_len, n_stop) != 0)
		return -1;
	c->cap = 256;
	c->text = malloc(c->cap);
	c->tok_off = malloc((size_t)(max_tokens > 0 ? max_tokens : 1) * sizeof *c->tok_off);
	return c->text && c->tok_off ? 0 : -1;
}

void choice_text_free(choice_text *c)
{
	free(c->text);
	free(c->tok_off);
	free(c->markers);
	memset(c, 0, sizeof *c);
}

void choice_text_min_tokens(choice_text *c, int32_t n)
{
	stop_text_min_tokens(&c->st, n);
}

void choice_text_markers(choice_text *c, const char *const *texts, int32_t n)
{
	c->marker_text = texts;
	c->n_marker_text = n > 0 ? n : 0;
}

static int append(choice_text *c, const char *s, size_t n)
{
	if (c->len + n > c->cap) {
		size_t cap = c->cap * 2;
		while (cap < c->len + n)
			cap *= 2;
		char *grown = realloc(c->text, cap);
		if (!grown)
			return -1;
		c->text = grown;
		c->cap = cap;
	}
	memcpy(c->text + c->len, s, n);
	c->len += n;
	return 0;
}

/* After new text: cut it where a stop string begins, or move the safe mark up to what is held. */
static void text_settle(choice_text *c)
{
	if (c->st.stopped) {
		c->len = c->safe = (size_t)c->st.stop_at;
		c->stopped = true;
		c->n_kept = 0;
		while (c->n_kept < c->n_tokens && c->tok_off[c->n_kept] < c->len)
			c->n_kept++;
		/* a marker at the stop's first byte goes with it: streaming never sent one there (a piece sends the markers
		 * before the bytes it sends), so dropping it keeps the whole answer equal to the streamed one */
		while (c->n_markers > 0 && c->markers[c->n_markers - 1].at >= c->len)
			c->n_markers--;
		return;
	}
	size_t hold = stop_text_held(&c->st);
	if (c->len - hold > c->safe)
		c->safe = c->len - hold;
}

/* Whether special token id is a marker: its index in the allow-list, or -1. Only special tokens are looked at, and
 * they are rare in an answer, so comparing texts here costs nothing on ordinary tokens. */
static int32_t marker_of(const choice_text *c, int32_t id)
{
	if (c->n_marker_text == 0 || !tokenizer_is_special(c->tok, id))
		return -1;
	char t[64];
	int64_t n = tokenizer_token_bytes(c->tok, id, t, sizeof t);
	for (int32_t i = 0; n > 0 && n < (int64_t)sizeof t && i < c->n_marker_text; i++)
		if (strlen(c->marker_text[i]) == (size_t)n && !memcmp(c->marker_text[i], t, (size_t)n))
			return i;
	return -1;
}

static int marker_add(choice_text *c, int32_t which)
{
	if (c->n_markers == c->cap_markers) {
		int32_t cap = c->cap_markers ? 2 * c->cap_markers : 8;
		choice_marker *grown = realloc(c->markers, (size_t)cap * sizeof *grown);
		if (!grown)
			return -1;
		c->markers = grown;
		c->cap_markers = cap;
	}
	c->markers[c->n_markers++] = (choice_marker){ .at = c->len, .which = which };
	return 0;
}

int choice_text_push(choice_text *c, int32_t id)
{
	if (c->stopped || c->finished)
		return 0;
	const int32_t which = marker_of(c, id);
	char small[1024];
	char *buf = small;
	int64_t cap = sizeof small, room = stop_text_room(c->tok, id);
	if (room > cap) {   /* an unusually long token */
		cap = room;
		buf = malloc((size_t)cap);
		if (!buf)
			return -1;
	}
	int64_t n = stop_text_push(&c->st, id, buf, cap);
	c->tok_off[c->n_tokens++] = c->len;
	c->n_kept = c->n_tokens;
	int rc = n < 0 ? -1 : append(c, buf, (size_t)n);
	if (buf != small)
		free(buf);
	if (rc != 0 || (which >= 0 && marker_add(c, which) != 0))
		return -1;
	if (n > 0)
		text_settle(c);
	return 0;
}

int choice_text_finish(choice_text *c)
{
	if (c->finished)
		return 0;
	c->finished = true;
	if (c->stopped)
		return 0;
	char tail[8];
	int64_t n = stop_text_finish(&c->st, tail, sizeof tail);
	if (n > 0 && append(c, tail, (size_t)n) != 0)
		return -1;
	if (n > 0)
		text_settle(c);
	c->safe = c->len;
	return 0;
}

size_t choice_text_token_end(const choice_text *c, int32_t i)
{
	return i + 1 < c->n_tokens && c->tok_off[i + 1] < c->len ? c->tok_off[i + 1] : c->len;
}

int choice_text_decode(const tokenizer *tok, const int32_t *ids, int64_t n, char **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	const int32_t known = tokenizer_vocab_size(tok);
	int32_t *kept = malloc((size_t)(n > 0 ? n : 1) * sizeof *kept);
	if (!kept)
		return -1;
	int64_t k = 0;
	for (int64_t i = 0; i < n; i++) {
		if (ids[i] < 0) {
			free(kept);
			return -2;
		}
		if (ids[i] < known)   /* a padding id joins its neighbours' text, as if absent */
			kept[k++] = ids[i];
	}
	int64_t bytes = tokenizer_decode(tok, kept, k, false, NULL, 0);
	char *text = bytes >= 0 ? malloc((size_t)bytes + 1) : NULL;
	if (text)
		tokenizer_decode(tok, kept, k, false, text, bytes + 1);
	free(kept);
	if (!text)
		return -1;
	*out = text;
	*len = (size_t)bytes;
	return 0;
}
