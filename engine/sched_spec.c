/* engine/sched_spec.c — speculative decoding's drafts, on the engine thread (scheduler.h's sched_draft): what each
 * decoding slot proposes before a step, and what is taken back after its verify pass.
 *
 * A step feeds a speculating slot [next, d1 … dk] as one generated item (engine_item.generated); scheduler.c samples
 * its k + 1 rows one after another as decode steps would and stops at the first token that differs from the draft.
 * Here:
 *  - ngram: the tokens after the latest earlier occurrence of the sequence's last n tokens (n = 4 … 2), in the prompt
 *    or the output: prompt lookup, no model.
 *  - regime and model: a draft sequence (of the target engine under the draft regime, or of the draft model's engine)
 *    follows the request's tokens; before a step it is fed what it has not seen (the whole prompt, the first time, a
 *    step's budget of it at a time), then its own greedy tokens one at a time, k forward passes batched over every
 *    slot that drafts on that engine. After the verify pass it is taken back to the tokens that were accepted.
 * The draft only decides how many tokens a step may produce: whatever it proposes, the output is what decoding one
 * token at a time gives. */
#include "engine/sched_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NGRAM_MAX 4   /* the longest context suffix prompt lookup matches */
#define NGRAM_MIN 2   /* the shortest: one token matches too often to be worth a verify row */

static const char *const draft_names[] = { "default", "off", "ngram", "regime", "model" };

const char *sched_draft_name(sched_draft d)
{
	return d >= SCHED_DRAFT_DEFAULT && d <= SCHED_DRAFT_MODEL ? draft_names[d] : "?";
}

int sched_draft_parse(const char *name, sched_draft *out)
{
	for (int32_t i = SCHED_DRAFT_OFF; i <= SCHED_DRAFT_MODEL; i++)
		if (!strcmp(name, draft_names[i])) {
			*out = (sched_draft)i;
			return 0;
		}
	return -1;
}

/* Prompt lookup over tokens [0, len) (len − 1 is `next`): the longest suffix of 4 … 2 tokens that occurred before,
 * its latest earlier occurrence, and up to k of the tokens that followed it into out. Returns their count. */
static int32_t ngram_draft(const sched_request *r, int32_t len, int32_t k, int32_t *out)
{
	for (int32_t n = NGRAM_MAX; n >= NGRAM_MIN; n--) {
		if (len <= n)
			continue;
		/* the suffix is [len − n, len); a match [i, i + n) with i + n < len leaves a token after it */
		for (int32_t i = len - n - 1; i >= 0; i--) {
			int32_t j = 0;
			while (j < n && sched_token_at(r, i + j) == sched_token_at(r, len - n + j))
				j++;
			if (j < n)
				continue;
			int32_t m = 0;
			while (m < k && i + n + m < len) {
				out[m] = sched_token_at(r, i + n + m);
				m++;
			}
			return m;
		}
	}
	return 0;
}

/* The draft length sl may propose this step: its k, and no more than the request may still produce (a verify pass
 * yields up to k + 1 tokens), the context holds, or its adaptive regime's next probe allows (a probe step is fed
 * alone, so that the windows are those of one-by-one decoding). */
static int32_t draft_room(sched *s, const sched_slot *sl)
{
	const sched_request *r = sl->r;
	int32_t k = sl->spec_k;
	const int32_t pos = engine_seq_len(s->e, sl->seq);   /* where `next` goes */
	if (k > r->max_tokens - sl->n_tokens - 1)
		k = r->max_tokens - sl->n_tokens - 1;
	if (k > s->ctx_len - 1 - pos)
		k = s->ctx_len - 1 - pos;
	int32_t probe = engine_seq_steps_to_probe(s->e, sl->seq);
	if (k > probe - 1)
		k = probe - 1;
	return k > 0 ? k : 0;
}

/* Closes sl's draft sequence: it failed, or the request ended. */
static void draft_seq_close(sched_slot *sl)
{
	if (sl->dseq >= 0)
		engine_seq_close(sl->de, sl->dseq);
	sl->dseq = -1;
	sl->dlen = 0;
}

static void count_draft_step(sched *s, sched_draft kind)
{
	pthread_mutex_lock(&s->metrics_mu);
	s->m.spec_draft_steps[kind - SCHED_DRAFT_NGRAM]++;
	pthread_mutex_unlock(&s->metrics_mu);
}

/* Regime or model drafts (kind) on engine de, for every decoding slot that drafts there. */
static void engine_drafts(sched *s, engine *de, sched_draft kind)
{
	char err[256];
	int32_t n = 0;
	/* Round 0: each draft sequence is fed what it has not seen, up to `next`, a step's budget at a time (the first
	 * time the whole prompt and the first token; later `next`, or two tokens after a draft taken whole); the slots
	 * whose sequence then stands at `next` take their first draft token from its last row. */
	for (int32_t i = 0; i < s->n_order; i++) {
		sched_slot *sl = &s->slots[s->order[i]];
		sched_request *r = sl->r;
		if (sl->state != SCHED_SLOT_DECODE || r->draft != kind || sl->spec_k == 0 || draft_room(s, sl) == 0)
			continue;
		if (sl->dseq < 0) {
			sl->de = de;
			sl->dlen = 0;
			sl->dseq = engine_seq_open(de, kind == SCHED_DRAFT_REGIME ? s->regimes[r->draft_regime] : NULL, err,
			                           sizeof err);
			if (sl->dseq < 0 || engine_seq_allow_rollback(de, sl->dseq, err, sizeof err) != 0) {
				draft_seq_close(sl);   /* cannot happen when the engine was sized for it (aahd): plain decoding */
				sl->spec_k = 0;
				continue;
			}
		}
		const int32_t len = r->n_prompt + sl->n_tokens;   /* the tokens up to `next` */
		int32_t c = len - sl->dlen < s->p.step_tokens ? len - sl->dlen : s->p.step_tokens;
		int32_t *feed = s->d_feed + (int64_t)s->order[i] * s->p.step_tokens;   /* prompt and output, in one piece */
		for (int32_t j = 0; j < c; j++)
			feed[j] = sched_token_at(r, sl->dlen + j);
		s->d_items[n] = (engine_item){ sl->dseq, feed, c, false, false, false };
		sl->d_need = c;
		s->d_slot[n++] = s->order[i];
	}
	if (n == 0)
		return;
	if (engine_forward(de, s->d_items, n, s->d_logits, err, sizeof err) != 0)
		goto fail;
	count_draft_step(s, kind);
	int32_t m = 0;
	const int32_t dv = engine_config(de)->vocab_size;
	for (int32_t i = 0; i < n; i++) {
		sched_slot *sl = &s->slots[s->d_slot[i]];
		sl->dlen += sl->d_need;
		if (sl->dlen == sl->r->n_prompt + sl->n_tokens) {   /* at `next`: its row proposes d1 */
			s->d_rows[m] = s->d_logits + (int64_t)i * dv;
			s->d_slot[m++] = s->d_slot[i];
		}
	}
	if (m > 0)
		engine_argmax_rows(de, s->d_ids, s->d_rows, m, s->d_vocab);
	for (int32_t i = 0; i < m; i++) {
		sched_slot *sl = &s->slots[s->d_slot[i]];
		sl->feed[1] = s->d_ids[i];
		sl->n_draft = 1;
	}
	/* Rounds 1 …: each slot that wants more feeds its last draft token and takes the next. */
	for (n = m;;) {
		int32_t k = 0;
		for (int32_t i = 0; i < n; i++) {
			sched_slot *sl = &s->slots[s->d_slot[i]];
			/* nor past the draft sequence's next probe (an adaptive draft regime): a probe moves the windows, and a
			 * draft token fed there could not be taken back; the probe then comes with the next `next` it is fed */
			if (sl->n_draft >= draft_room(s, sl) || engine_seq_steps_to_probe(de, sl->dseq) == 0)
				continue;
			s->d_items[k] = (engine_item){ sl->dseq, &sl->feed[sl->n_draft], 1, false, false, false };
			s->d_slot[k++] = s->d_slot[i];
		}
		if ((n = k) == 0)
			return;
		if (engine_forward(de, s->d_items, n, s->d_logits, err, sizeof err) != 0)
			goto fail;
		count_draft_step(s, kind);
		for (int32_t i = 0; i < n; i++)
			s->d_rows[i] = s->d_logits + (int64_t)i * dv;
		engine_argmax_rows(de, s->d_ids, s->d_rows, n, s->d_vocab);
		for (int32_t i = 0; i < n; i++) {
			sched_slot *sl = &s->slots[s->d_slot[i]];
			sl->dlen++;
			sl->feed[++sl->n_draft] = s->d_ids[i];
		}
	}
fail:
	/* cannot happen when admission is right (the draft engine's pages were reserved, or it has room for every
	 * sequence): these slots decode without drafts from now on, and their outputs are what they would be anyway */
	for (int32_t i = 0; i < n; i++) {
		sched_slot *sl = &s->slots[s->d_slot[i]];
		draft_seq_close(sl);
		sl->spec_k = 0;
		sl->n_draft = 0;
	}
}

void spec_draft(sched *s)
{
	int32_t rows = s->spec_rows;   /* the step's verify rows beyond one a slot */
	bool engines = false;
	for (int32_t i = 0; i < s->n_order; i++) {
		sched_slot *sl = &s->slots[s->order[i]];
		sl->feed[0] = sl->next;
		sl->n_draft = 0;
		if (sl->state != SCHED_SLOT_DECODE || sl->spec_k == 0)
			continue;
		if (sl->r->draft == SCHED_DRAFT_NGRAM) {
			int32_t k = draft_room(s, sl);
			k = k < rows ? k : rows;
			sl->n_draft = ngram_draft(sl->r, sl->r->n_prompt + sl->n_tokens, k, sl->feed + 1);
			rows -= sl->n_draft;
		} else {
			engines = true;
		}
	}
	if (!engines)
		return;
	engine_drafts(s, s->e, SCHED_DRAFT_REGIME);
	if (s->p.draft)
		engine_drafts(s, s->p.draft, SCHED_DRAFT_MODEL);
	/* the step's rows are bounded (its logits buffer): a draft past them is cut, the later slots' first */
	for (int32_t i = 0; i < s->n_order; i++) {
		sched_slot *sl = &s->slots[s->order[i]];
		if (sl->n_draft == 0 || sl->r->draft == SCHED_DRAFT_NGRAM)
			continue;
		sl->n_draft = sl->n_draft < rows ? sl->n_draft : rows;   /* the draft sequence's extra: spec_verified */
		rows -= sl->n_draft;
	}
}

void spec_counted(sched *s, sched_draft kind, int32_t drafted, int32_t accepted)
{
	const int32_t d = kind - SCHED_DRAFT_NGRAM;
	pthread_mutex_lock(&s->metrics_mu);
	s->m.spec_drafted[d] += (uint64_t)drafted;
	s->m.spec_accepted[d] += (uint64_t)accepted;
	s->m.spec_passes[d]++;
	pthread_mutex_unlock(&s->metrics_mu);
}

void spec_verified(sched *s, sched_slot *sl, int32_t accepted)
{
	sched_request *r = sl->r;
	char err[256];
	/* the item fed `next` at pos and the draft after it; what stands is `next` and the accepted tokens */
	const int32_t pos = engine_seq_len(s->e, sl->seq) - 1 - sl->n_draft;
	if (accepted < sl->n_draft && engine_seq_truncate(s->e, sl->seq, pos + 1 + accepted, err, sizeof err) != 0) {
		/* cannot happen: the sequence was opened for it and the item was the last it fed */
		fprintf(stderr, "aahd: speculative decoding: %s\n", err);
		abort();
	}
	/* the draft sequence holds `next` and the draft tokens it was fed after it: those past the accepted ones go */
	if (sl->dseq >= 0 && sl->dlen > pos + 1 + accepted) {
		if (engine_seq_truncate(sl->de, sl->dseq, pos + 1 + accepted, err, sizeof err) == 0)
			sl->dlen = pos + 1 + accepted;
		else
			draft_seq_close(sl);   /* it starts again from the whole prompt */
	}
	if (r->spec_adaptive)
		sl->spec_k = accepted == sl->n_draft ? (sl->spec_k < r->spec_k ? sl->spec_k + 1 : r->spec_k) : accepted + 1;
}

void spec_end(sched *s, sched_slot *sl, sched_result *res)
{
	(void)s;
	draft_seq_close(sl);
	res->draft = sl->r->draft;
	res->spec_drafted = sl->spec_drafted;
	res->spec_accepted = sl->spec_accepted;
	res->spec_passes = sl->spec_passes;
}
