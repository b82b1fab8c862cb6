/* engine/stop_text.c — see stop_text.h. A stop string that completes with a token ends inside that token's text and
 * is at most max_stop bytes long, so it begins at most max_stop - 1 bytes before it: the kept tail plus the new bytes
 * are all there is to search, and every earlier occurrence would have been found with an earlier token. */
#include "engine/stop_text.h"

#include <string.h>

#include "models/errf.h"

int stop_text_check(const tokenizer *tok, const char *const *stop, const size_t *stop_len, int32_t n_stop, char *err,
                    size_t err_len)
{
	if (n_stop < 0 || n_stop > STOP_TEXT_MAX || (n_stop > 0 && (!stop || !stop_len))) {
		aah_errf(err, err_len, "%d stop strings (at most %d)", n_stop, STOP_TEXT_MAX);
		return -1;
	}
	if (n_stop > 0 && !tok) {
		aah_errf(err, err_len, "stop strings need a tokenizer to decode the tokens by");
		return -1;
	}
	for (int32_t i = 0; i < n_stop; i++)
		if (!stop[i] || stop_len[i] < 1 || stop_len[i] > STOP_TEXT_MAX_BYTES) {
			aah_errf(err, err_len, "stop string %d: %zu bytes (1 to %d)", i, stop[i] ? stop_len[i] : 0,
			         STOP_TEXT_MAX_BYTES);
			return -1;
		}
	return 0;
}

int stop_text_init(stop_text *m, const tokenizer *tok, const char *const *stop, const size_t *stop_len, int32_t n_stop)
{
	memset(m, 0, sizeof *m);
	tokenizer_stream_init(&m->ts, tok, true);
	m->stop_index = -1;
	if (stop_text_check(tok, stop, stop_len, n_stop, NULL, 0) != 0)
		return -1;
	for (int32_t i = 0; i < n_stop; i++) {
		memcpy(m->stop[i], stop[i], stop_len[i]);
		m->stop_len[i] = stop_len[i];
		if (stop_len[i] > m->max_stop)
			m->max_stop = stop_len[i];
	}
	m->n_stop = n_stop;
	return 0;
}

void stop_text_min_tokens(stop_text *m, int32_t n)
{
	m->min_tokens = n > 0 ? n : 0;
}

int64_t stop_text_room(const tokenizer *tok, int32_t id)
{
	int64_t tb = tokenizer_token_bytes(tok, id, NULL, 0);
	return tb < 0 ? 0 : 3 * (tb + 3);   /* tokenizer_stream_push's worst case */
}

int64_t stop_text_room_max(const tokenizer *tok)
{
	int64_t most = 3 * 3;
	for (int32_t id = 0, n = tokenizer_vocab_size(tok); id < n; id++) {
		int64_t r = stop_text_room(tok, id);
		most = r > most ? r : most;
	}
	return most;
}

/* Whether stop string i occurs at p of tail + b (the new bytes b, n of them, after the tail). */
static bool match_at(const stop_text *m, int32_t i, size_t p, const char *b, size_t n)
{
	const size_t len = m->stop_len[i], t = m->tail_len;
	if (p + len > t + n)
		return false;
	size_t in_tail = p < t ? t - p : 0;
	if (in_tail > len)
		in_tail = len;
	if (in_tail && memcmp(m->tail + p, m->stop[i], in_tail) != 0)
		return false;
	return !memcmp(b + (p + in_tail - t), m->stop[i] + in_tail, len - in_tail);
}

/* New text b (n bytes): the earliest stop string in tail + b, then the tail moves on. Within min_tokens only the tail
 * moves: every occurrence found here ends in b, the text of the token just pushed (or the flush after the last). */
static void scan(stop_text *m, const char *b, size_t n)
{
	const size_t t = m->tail_len;
	size_t best = (size_t)-1;
	int32_t which = -1;
	const int32_t n_stop = m->n_tokens > m->min_tokens ? m->n_stop : 0;
	for (int32_t i = 0; i < n_stop; i++) {
		/* beginning in the tail, and reaching into the new bytes: one wholly in the tail was searched for already */
		size_t p = t + 1 > m->stop_len[i] ? t + 1 - m->stop_len[i] : 0;
		for (; p < t && p < best; p++)
			if (match_at(m, i, p, b, n))
				break;
		if (p < t && p < best) {
			best = p;
			which = i;
			continue;
		}
		if (best <= t)
			continue;
		const char *hit = memmem(b, n, m->stop[i], m->stop_len[i]);   /* beginning in the new bytes */
		if (hit && t + (size_t)(hit - b) < best) {
			best = t + (size_t)(hit - b);
			which = i;
		}
	}
	if (which >= 0) {
		m->stopped = true;
		m->stop_index = which;
		m->stop_at = m->len - t + best;
		m->len += n;
		m->tail_len = 0;
		return;
	}
	m->len += n;
	size_t keep = m->max_stop - 1;   /* the last max_stop - 1 bytes of tail + b */
	if (keep > t + n)
		keep = t + n;
	if (keep > n) {
		memmove(m->tail, m->tail + t - (keep - n), keep - n);
		memcpy(m->tail + keep - n, b, n);
	} else {
		memcpy(m->tail, b + n - keep, keep);
	}
	m->tail_len = keep;
}

int64_t stop_text_push(stop_text *m, int32_t id, char *out, int64_t cap)
{
	if (m->stopped)
		return 0;
	if (stop_text_room(m->ts.t, id) == 0) {
		m->n_tokens++;   /* an id of a padded vocabulary that the tokenizer lacks: no text, but a token (min_tokens) */
		return 0;
	}
	int64_t n = tokenizer_stream_push(&m->ts, id, out, cap);
	if (n >= 0)
		m->n_tokens++;   /* -1 consumed nothing */
	if (n > 0 && m->n_stop > 0)
		scan(m, out, (size_t)n);
	else if (n > 0)
		m->len += (uint64_t)n;
	return n;
}

int64_t stop_text_finish(stop_text *m, char *out, int64_t cap)
{
	if (m->stopped)
		return 0;
	int64_t n = tokenizer_stream_flush(&m->ts, out, cap);
	if (n > 0 && m->n_stop > 0)
		scan(m, out, (size_t)n);
	else if (n > 0)
		m->len += (uint64_t)n;
	return n;
}

size_t stop_text_held(const stop_text *m)
{
	size_t hold = 0;
	for (int32_t i = 0; i < m->n_stop && !m->stopped; i++) {
		size_t k = m->stop_len[i] - 1 < m->tail_len ? m->stop_len[i] - 1 : m->tail_len;
		for (; k > hold; k--)
			if (!memcmp(m->tail + m->tail_len - k, m->stop[i], k))
				break;
		if (k > hold)
			hold = k;
	}
	return hold;
}
