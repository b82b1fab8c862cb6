/* engine/gen_text.c — see gen_text.h. */
#include "engine/gen_text.h"

#include <stdlib.h>
#include <string.h>

struct gen_text_block {
	gen_text_block *prev;   /* the buffer this one replaced: a reader may still hold it */
	char bytes[];
};

static void blocks_free(gen_text_block *b)
{
	while (b) {
		gen_text_block *prev = b->prev;
		free(b);
		b = prev;
	}
}

/* Room for one more push and the finish's U+FFFD after it, so that gen_text_finish never needs memory. */
static int reserve(gen_text *g)
{
	const size_t used = (size_t)g->st.len, need = used + (size_t)g->room + 3;
	if (g->blk && need <= g->cap)
		return 0;
	/* the first buffer (made by gen_text_init, on the submitting thread) holds 8 bytes a token, which ordinary text
	 * stays under: only a longer one grows on the engine thread, by doubling */
	size_t cap = g->cap ? 2 * g->cap : (size_t)g->max_tokens * 8 + 256;
	while (cap < need)
		cap *= 2;
	gen_text_block *b = malloc(sizeof *b + cap);
	if (!b)
		return -1;
	if (used)
		memcpy(b->bytes, g->blk->bytes, used);
	b->prev = g->blk;
	g->blk = b;
	g->cap = cap;
	return 0;
}

int gen_text_init(gen_text *g, const tokenizer *tok, const char *const *stop, const size_t *stop_len, int32_t n_stop,
                  int32_t max_tokens, int64_t room_max)
{
	memset(g, 0, sizeof *g);
	if (stop_text_init(&g->st, tok, stop, stop_len, n_stop) != 0)
		return -1;
	g->max_tokens = max_tokens > 0 ? max_tokens : 0;
	g->room = room_max > 0 ? room_max : 0;
	if (!tok)
		return 0;
	g->tok_off = malloc((size_t)(g->max_tokens > 0 ? g->max_tokens : 1) * sizeof *g->tok_off);
	if (!g->tok_off || reserve(g) != 0) {
		gen_text_free(g);
		return -1;
	}
	return 0;
}

void gen_text_free(gen_text *g)
{
	blocks_free(g->blk);
	free(g->tok_off);
	memset(g, 0, sizeof *g);
}

void gen_text_min_tokens(gen_text *g, int32_t n)
{
	stop_text_min_tokens(&g->st, n);
}

int gen_text_push(gen_text *g, int32_t id)
{
	if (g->st.stopped || g->finished || g->n_tokens >= g->max_tokens)
		return 0;
	if (!g->blk) {   /* no tokenizer: a count only */
		g->n_tokens++;
		return 0;
	}
	if (reserve(g) != 0)
		return -1;
	const size_t at = (size_t)g->st.len;
	if (stop_text_push(&g->st, id, g->blk->bytes + at, (int64_t)(g->cap - at)) < 0)
		return -1;   /* cannot happen: room is the most a token writes */
	g->tok_off[g->n_tokens++] = at;
	return 0;
}

int gen_text_finish(gen_text *g)
{
	if (g->finished)
		return 0;
	g->finished = true;
	if (g->blk && !g->st.stopped) {
		const size_t at = (size_t)g->st.len;
		stop_text_finish(&g->st, g->blk->bytes + at, (int64_t)(g->cap - at));   /* reserve kept 3 bytes for it */
	}
	return 0;
}

void gen_text_view_get(const gen_text *g, gen_text_view *v)
{
	v->text = g->blk ? g->blk->bytes : NULL;
	v->tok_off = g->tok_off;
	v->n_tokens = g->n_tokens;
	v->stopped = g->st.stopped;
	v->stop_index = g->st.stopped ? g->st.stop_index : -1;
	v->finished = g->finished;
	if (g->st.stopped) {
		v->len = v->safe = (size_t)g->st.stop_at;
	} else {
		v->len = (size_t)g->st.len;
		v->safe = g->finished ? v->len : v->len - stop_text_held(&g->st);
	}
}

int32_t gen_text_kept(const gen_text_view *v)
{
	if (!v->stopped)
		return v->n_tokens;
	int32_t n = 0;
	while (n < v->n_tokens && v->tok_off[n] < v->len)
		n++;
	return n;
}

size_t gen_text_token_end(const gen_text_view *v, int32_t i)
{
	return i + 1 < v->n_tokens && v->tok_off[i + 1] < v->len ? v->tok_off[i + 1] : v->len;
}
