/* models/tokenizer_table.c — what both tokenizer back ends build on (see tokenizer_table.h): the per-id tables of
 * spellings and bytes, the added-token matchers, the split of text at added tokens, and Unicode white space. */
#include "models/tokenizer_table.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "models/errf.h"
#include "models/utf8.h"

/* ---- white space ---- */

bool tok_is_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
	       c == 0x3000;
}

/* ---- per-id tables ---- */

int tok_tables_build(tokenizer *t, int32_t n, const char *const *text, const uint32_t *len,
                     size_t (*to_bytes)(void *ctx, int32_t id, const char *s, uint32_t n, unsigned char *out),
                     void *ctx, char *err, size_t err_len)
{
	size_t total = 0;
	for (int32_t i = 0; i < n; i++) total += (text[i] ? len[i] : 0) + 1;
	if (total + 8u * (size_t)n >= UINT32_MAX) {
		aah_errf(err, err_len, "vocabulary too large");
		return -1;
	}
	t->n_vocab = n;
	t->text = malloc(total);
	t->text_off = malloc(((size_t)n + 1) * sizeof *t->text_off);
	t->bytes = malloc(total + 8u * (size_t)n);
	t->bytes_off = malloc(((size_t)n + 1) * sizeof *t->bytes_off);
	t->flags = calloc((size_t)n ? (size_t)n : 1, 1);
	if (!t->text || !t->text_off || !t->bytes || !t->bytes_off || !t->flags) {
		aah_errf(err, err_len, "out of memory");
		return -1;
	}
	uint32_t to = 0, bo = 0;
	for (int32_t i = 0; i < n; i++) {
		t->text_off[i] = to;
		t->bytes_off[i] = bo;
		if (text[i]) {
			memcpy(t->text + to, text[i], len[i]);
			to += len[i];
			bo += (uint32_t)to_bytes(ctx, i, text[i], len[i], t->bytes + bo);
			t->flags[i] |= TOK_FLAG_PRESENT;
		}
		t->text[to++] = '\0';
	}
	t->text_off[n] = to;
	t->bytes_off[n] = bo;
	return 0;
}

/* ---- added tokens ---- */

static int added_cmp(const void *pa, const void *pb)
{
	const tok_added *a = *(const tok_added *const *)pa, *b = *(const tok_added *const *)pb;
	unsigned char fa = (unsigned char)a->content[0], fb = (unsigned char)b->content[0];
	if (fa != fb) return fa < fb ? -1 : 1;
	if (a->len != b->len) return a->len > b->len ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

static int matcher_build(tokenizer *t, tok_matcher *m, bool normalized)
{
	m->n = 0;
	m->tok = malloc(((size_t)t->n_added + 1) * sizeof *m->tok);
	if (!m->tok) return -1;
	for (int32_t i = 0; i < t->n_added; i++)
		if (t->added[i].len && t->added[i].normalized == normalized) m->tok[m->n++] = &t->added[i];
	qsort(m->tok, (size_t)m->n, sizeof *m->tok, added_cmp);
	int32_t k = 0;
	for (int b = 0; b <= 256; b++) {
		while (k < m->n && (unsigned char)m->tok[k]->content[0] < b) k++;
		m->first[b] = k;
	}
	m->first[256] = m->n;
	return 0;
}

int tok_matchers_build(tokenizer *t, char *err, size_t err_len)
{
	if (matcher_build(t, &t->match_raw, false) || matcher_build(t, &t->match_norm, true)) {
		aah_errf(err, err_len, "out of memory");
		return -1;
	}
	return 0;
}

/* Letters, digits and '_' make words: a single_word token may not touch one. */
static bool is_word_char(uint32_t cp)
{
	if (cp == '_') return true;
	utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
	return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
	       (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

/* Start of the character that ends at byte i (i > lo). */
static size_t utf8_prev_start(const unsigned char *s, size_t lo, size_t i)
{
	size_t j = i - 1;
	while (j > lo && (s[j] & 0xC0) == 0x80 && i - j < 4) j--;
	return j;
}

int tok_split_added(const tokenizer *t, const tok_matcher *m, tok_scratch *sc, const char *text, size_t n,
                    tok_sink *sink, tok_text_fn fn)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t seg = 0, i = 0;
	if (m->n == 0) return n ? fn(t, sc, text, n, sink) : 0;
	while (i < n) {
		int32_t lo = m->first[s[i]], hi = m->first[s[i] + 1];
		const tok_added *hit = NULL;
		for (int32_t k = lo; k < hi && !hit; k++) {
			const tok_added *a = m->tok[k];
			if (a->len > n - i || memcmp(s + i, a->content, a->len) != 0) continue;
			if (a->single_word) {
				uint32_t cp;
				if (i > 0) {
					size_t p = utf8_prev_start(s, 0, i);
					aah_utf8_next(s + p, i - p, &cp);
					if (is_word_char(cp)) continue;
				}
				if (i + a->len < n) {
					aah_utf8_next(s + i + a->len, n - i - a->len, &cp);
					if (is_word_char(cp)) continue;
				}
			}
			hit = a;
		}
		if (!hit) {
			i++;   /* a token starts with a lead byte, so continuation bytes never match */
			continue;
		}
		size_t text_end = i, next = i + hit->len;
		uint32_t cp;
		if (hit->lstrip)   /* the token swallows the whitespace before it */
			while (text_end > seg) {
				size_t p = utf8_prev_start(s, seg, text_end);
				aah_utf8_next(s + p, text_end - p, &cp);
				if (!tok_is_space(cp)) break;
				text_end = p;
			}
		if (hit->rstrip)
			while (next < n) {
				int l = aah_utf8_next(s + next, n - next, &cp);
				if (!tok_is_space(cp)) break;
				next += (size_t)l;
			}
		if (text_end > seg && fn(t, sc, text + seg, text_end - seg, sink)) return -1;
		tok_sink_push(sink, hit->id);
		seg = i = next;
	}
	if (seg < n) return fn(t, sc, text + seg, n - seg, sink);
	return 0;
}
