/* server/choice_text.c — see choice_text.h. */
#include "server/choice_text.h"

#include <stdlib.h>
#include <string.h>

void choice_text_init(choice_text *c, const tokenizer *tok)
{
	memset(c, 0, sizeof *c);
	c->tok = tok;
}

void choice_text_free(choice_text *c)
{
	free(c->markers);
	memset(c, 0, sizeof *c);
}

void choice_text_markers(choice_text *c, const char *const *texts, int32_t n)
{
	c->marker_text = texts;
	c->n_marker_text = n > 0 ? n : 0;
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

static int marker_add(choice_text *c, size_t at, int32_t which)
{
	if (c->n_markers == c->cap_markers) {
		int32_t cap = c->cap_markers ? 2 * c->cap_markers : 8;
		choice_marker *grown = realloc(c->markers, (size_t)cap * sizeof *grown);
		if (!grown)
			return -1;
		c->markers = grown;
		c->cap_markers = cap;
	}
	c->markers[c->n_markers++] = (choice_marker){ .at = at, .which = which };
	return 0;
}

int choice_text_sync(choice_text *c, const int32_t *ids, const gen_text_view *v)
{
	for (; c->n_seen < v->n_tokens; c->n_seen++) {
		const int32_t which = marker_of(c, ids[c->n_seen]);
		if (which >= 0 && marker_add(c, v->tok_off[c->n_seen], which) != 0)
			return -1;
	}
	c->v = *v;
	if (!c->v.text)
		c->v.text = "";
	c->n_kept = gen_text_kept(v);
	/* a marker at the stop's first byte goes with it: streaming never sent one there (a piece sends the markers
	 * before the bytes it sends), so dropping it keeps the whole answer equal to the streamed one */
	while (v->stopped && c->n_markers > 0 && c->markers[c->n_markers - 1].at >= v->len)
		c->n_markers--;
	return 0;
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
