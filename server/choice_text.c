/* server/choice_text.c — see choice_text.h. The hold-back rule: after each token, the longest suffix of the text
 * that is a prefix of some stop string is held; everything before it is safe. A stop string that completes later
 * starts inside the held part, never inside what was sent. */
#include "server/choice_text.h"

#include <stdlib.h>
#include <string.h>

int choice_text_init(choice_text *c, const tokenizer *tok, const char *const *stop, const size_t *stop_len,
                     int32_t n_stop, int32_t max_tokens)
{
	memset(c, 0, sizeof *c);
	c->tok = tok;
	tokenizer_stream_init(&c->ts, tok, true);
	c->stop = stop;
	c->stop_len = stop_len;
	c->n_stop = n_stop;
	for (int32_t i = 0; i < n_stop; i++)
		if (stop_len[i] > c->max_stop)
			c->max_stop = stop_len[i];
	c->cap = 256;
	c->text = malloc(c->cap);
	c->tok_off = malloc((size_t)(max_tokens > 0 ? max_tokens : 1) * sizeof *c->tok_off);
	return c->text && c->tok_off ? 0 : -1;
}

void choice_text_free(choice_text *c)
{
	free(c->text);
	free(c->tok_off);
	memset(c, 0, sizeof *c);
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

/* Looks for a stop string that ends after `from` (the text before was searched already); cuts the text there. */
static void stop_search(choice_text *c, size_t from)
{
	size_t start = from > c->max_stop - 1 ? from - (c->max_stop - 1) : 0;
	size_t best = (size_t)-1;
	for (int32_t i = 0; i < c->n_stop; i++) {
		const char *hit = memmem(c->text + start, c->len - start, c->stop[i], c->stop_len[i]);
		if (hit && (size_t)(hit - c->text) < best)
			best = (size_t)(hit - c->text);
	}
	if (best == (size_t)-1)
		return;
	c->len = c->safe = best;
	c->stopped = true;
	c->n_kept = 0;
	while (c->n_kept < c->n_tokens && c->tok_off[c->n_kept] < best)
		c->n_kept++;
}

static void safe_update(choice_text *c)
{
	size_t hold = 0;
	for (int32_t i = 0; i < c->n_stop; i++) {
		size_t k = c->stop_len[i] - 1 < c->len ? c->stop_len[i] - 1 : c->len;
		for (; k > hold; k--)
			if (!memcmp(c->text + c->len - k, c->stop[i], k))
				break;
		if (k > hold)
			hold = k;
	}
	if (c->len - hold > c->safe)
		c->safe = c->len - hold;
}

int choice_text_push(choice_text *c, int32_t id)
{
	if (c->stopped || c->finished)
		return 0;
	char small[1024];
	char *buf = small;
	int64_t cap = sizeof small;
	int64_t tb = tokenizer_token_bytes(c->tok, id, NULL, 0);
	if (tb < 0) {   /* an id of the model's padded vocabulary that the tokenizer lacks: no text */
		c->tok_off[c->n_tokens++] = c->len;
		c->n_kept = c->n_tokens;
		return 0;
	}
	if (3 * (tb + 3) > cap) {   /* an unusually long token: the decoder's worst case */
		cap = 3 * (tb + 3);
		buf = malloc((size_t)cap);
		if (!buf)
			return -1;
	}
	int64_t n = tokenizer_stream_push(&c->ts, id, buf, cap);
	size_t from = c->len;
	c->tok_off[c->n_tokens++] = c->len;
	c->n_kept = c->n_tokens;
	int rc = n < 0 ? -1 : append(c, buf, (size_t)n);
	if (buf != small)
		free(buf);
	if (rc != 0)
		return -1;
	if (c->n_stop > 0 && c->len > from) {
		stop_search(c, from);
		if (!c->stopped)
			safe_update(c);
	} else if (c->n_stop == 0) {
		c->safe = c->len;
	}
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
	int64_t n = tokenizer_stream_flush(&c->ts, tail, sizeof tail);
	size_t from = c->len;
	if (n > 0 && append(c, tail, (size_t)n) != 0)
		return -1;
	if (c->n_stop > 0 && c->len > from)
		stop_search(c, from);
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
