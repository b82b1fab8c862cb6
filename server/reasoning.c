/* server/reasoning.c — the reasoning/content split of a chat answer (see reasoning.h): a three-state machine over the
 * answer's bytes that holds back at most one tag's worth of them. Neither tag has a proper prefix that is also its
 * suffix, so a failed match never restarts inside the bytes it held: those bytes are the tag's own first bytes and
 * need no buffer of their own. */
#include "server/reasoning.h"

#include <string.h>

static const char open_tag[] = REASONING_OPEN_TAG;
static const char close_tag[] = REASONING_CLOSE_TAG;
#define OPEN_LEN ((int32_t)sizeof open_tag - 1)
#define CLOSE_LEN ((int32_t)sizeof close_tag - 1)

_Static_assert(sizeof close_tag - 1 <= REASONING_MAX_HELD && sizeof open_tag - 1 <= REASONING_MAX_HELD,
               "a held tag fits the room reasoning_out promises");

reasoning_start reasoning_start_of_prompt(const char *prompt, size_t len)
{
	const char *last_open = NULL;
	for (const char *p = prompt; (p = memmem(p, len - (size_t)(p - prompt), open_tag, OPEN_LEN)); p += OPEN_LEN)
		last_open = p;
	if (!last_open)
		return REASONING_START_DETECT;
	const char *after = last_open + OPEN_LEN;
	return memmem(after, len - (size_t)(after - prompt), close_tag, CLOSE_LEN) ? REASONING_START_DETECT
	                                                                           : REASONING_START_OPEN;
}

void reasoning_init(reasoning_split *s, reasoning_start start)
{
	memset(s, 0, sizeof *s);
	switch (start) {
	case REASONING_START_OFF:
		s->state = REASONING_STATE_CONTENT;
		break;
	case REASONING_START_DETECT:
		s->state = REASONING_STATE_START;
		break;
	case REASONING_START_OPEN:
		s->state = REASONING_STATE_THINK;
		s->block = true;
		s->content_from = SIZE_MAX;
		break;
	}
}

static void put(char *buf, size_t *len, const char *p, size_t n)
{
	memcpy(buf + *len, p, n);
	*len += n;
}

void reasoning_feed(reasoning_split *s, const char *text, size_t len, reasoning_out *out)
{
	size_t i = 0;
	while (i < len) {
		const char b = text[i];
		switch (s->state) {
		case REASONING_STATE_START:
			if (b == open_tag[s->matched]) {
				i++;
				if (++s->matched == OPEN_LEN) {
					s->state = REASONING_STATE_THINK;
					s->matched = 0;
					s->block = true;
					s->content_from = SIZE_MAX;
				}
				break;
			}
			/* not a block after all: what was held is content, and so is the rest */
			put(out->content, &out->content_len, open_tag, (size_t)s->matched);
			s->matched = 0;
			s->state = REASONING_STATE_CONTENT;
			break;
		case REASONING_STATE_THINK:
			i++;
			if (b == close_tag[s->matched]) {
				if (++s->matched == CLOSE_LEN) {
					s->state = REASONING_STATE_CONTENT;
					s->matched = 0;
					s->content_from = s->fed + i;
				}
				break;
			}
			put(out->reasoning, &out->reasoning_len, close_tag, (size_t)s->matched);
			/* '<' is the only byte that can begin the tag again */
			s->matched = b == close_tag[0];
			if (!s->matched)
				out->reasoning[out->reasoning_len++] = b;
			break;
		case REASONING_STATE_CONTENT:
			put(out->content, &out->content_len, text + i, len - i);
			i = len;
			break;
		}
	}
	s->fed += len;
}

void reasoning_finish(reasoning_split *s, reasoning_out *out)
{
	if (s->state == REASONING_STATE_START) {
		put(out->content, &out->content_len, open_tag, (size_t)s->matched);
		s->state = REASONING_STATE_CONTENT;
	} else if (s->state == REASONING_STATE_THINK) {
		put(out->reasoning, &out->reasoning_len, close_tag, (size_t)s->matched);
	}
	s->matched = 0;
}

int32_t reasoning_count_tokens(const reasoning_split *s, const size_t *tok_off, int32_t n_text, int32_t n_after)
{
	int32_t n = 0;
	for (int32_t i = 0; i < n_text; i++)
		n += tok_off[i] < s->content_from;
	if (s->state == REASONING_STATE_THINK)
		n += n_after;
	return n;
}
