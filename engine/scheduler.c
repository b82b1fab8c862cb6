/* engine/scheduler.c — the engine thread (see scheduler.h): a bounded FIFO of waiting requests, a few slots
 * (IDLE → PREFILL → DECODE → DONE, as llama.cpp's server), one engine_forward per step over every running slot.
 * Requests of one submission with the same prompt and regime (n choices) share its prefill: the first runs it,
 * the others wait in FORK_WAIT and fork its sequence when the prompt is through.
 *
 * Device sampling (where the backend's memory is not the host's and it has logits_top; AAH_DEVICE_SAMPLING=1|0
 * forces it on or off): a step's logits rows stay in the engine (engine_forward without host logits), one
 * engine_logits_top reduces them all to their stats and candidates, and each slot draws with sampler_sample_top and
 * fills its logprobs with sampler_logprobs_top — the same tokens and numbers as sampler_sample and logprob_fill over
 * the whole row (bit for bit on the CPU). A row is read back whole (engine_logits_row) only when its candidates do not
 * decide: plain temperature sampling, penalties after the first token, logit_bias, the repetition penalty, min_tokens'
 * ban of the stop ids unless greedy, a top-p / min-p cut beyond the candidates, a
 * sampler over other columns than the step's first (vocab_limit), a follower at another temperature than its leader,
 * a token outside the logprobs candidates. A step with prompt log-probabilities, or with more rows than the engine
 * keeps, brings its rows to the host as the host path does (which also picks its greedy rows at once,
 * engine_argmax_rows). sched_metrics counts both kinds.
 *
 * This file is the engine thread's loop (admission, prefill chunks, decode, the prefix cache calls); the requests and
 * the calls other threads make are in sched_request.c, and the objects both share in sched_internal.h. */
#include "engine/sched_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bits.h"
#include "base/clock.h"
#include "engine/prefix_cache.h"

/* A slot's logits row in this step: in host memory (the host path), or kept in the engine (device sampling) with
 * the candidates logits_top left of it. */
typedef struct sched_row {
	const float *host;                /* the whole row on the host, or NULL: not read back (yet) */
	int32_t kept;                     /* device sampling: its row among the engine's kept rows; else -1 */
	sampler_top top;                  /* its candidates; top.n 0: none */
	double lse;                       /* its log-softmax normaliser over top.n_cols columns */
	float temperature;                /* the temperature top.sum was taken at (1 stands for greedy) */
	int32_t greedy_id;                /* host path, decode rows: its token, picked with the step's other greedy rows;
	                                   * else -1 (a finished prompt's row, which forked followers share, never has one) */
} sched_row;

static const double ttft_bounds[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 };
static const double itl_bounds[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5 };
static const double duration_bounds[] = { 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600 };

static void histogram_init(sched_histogram *h, const double *bounds, int32_t n)
{
	memset(h, 0, sizeof *h);
	h->n_bounds = n;
	memcpy(h->bounds, bounds, (size_t)n * sizeof *bounds);
}

static void histogram_observe(sched_histogram *h, double v)
{
	int32_t b = 0;
	while (b < h->n_bounds && v > h->bounds[b])
		b++;
	h->counts[b]++;
	h->sum += v;
	h->count++;
}

/* Adds to the tokens-per-second buckets (metrics_mu held). */
static void rate_add(sched *s, double t, double prompt, double gen)
{
	int64_t sec = (int64_t)t;
	int32_t i = (int32_t)(sec % 10);
	if (s->rate_sec[i] != sec) {
		s->rate_sec[i] = sec;
		s->rate_prompt[i] = s->rate_gen[i] = 0;
	}
	s->rate_prompt[i] += prompt;
	s->rate_gen[i] += gen;
}

/* ---- the engine thread ---- */

/* log_softmax(x)[id] and the n_top best entries into row i of rows (sampler_logprobs). */
static void logprob_fill(const float *x, int32_t vocab, int32_t id, sched_logprob_rows *rows, int64_t i)
{
	const int32_t n = rows->n_top;
	sampler_logprobs(x, vocab, id, n, rows->logprob + i, rows->top_ids + i * n, rows->top_logprobs + i * n);
}

static void publish(sched_request *r, const sched_slot *sl)
{
	pthread_mutex_lock(&r->mu);
	r->pub.n_tokens = sl->n_tokens;
	gen_text_view_get(&r->text, &r->pub.text);
	r->pub.prompt_done = sl->n_fed == r->n_prompt;
	r->pub.version++;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	if (r->notify)
		r->notify(r->notify_ctx, false);
}

static void followers_handoff(sched *s, int32_t leader);
static void prefix_waiters_release(sched *s, int32_t leader);

/* aahd_kv_cache_bytes_used has one owner, this thread, and one rule: it is set (never adjusted) from the page pool
 * itself, pages the sequences' rings hold × page bytes (a page shared by forks or with the prefix cache once; the
 * cache's own pages are aahd_prefix_cache_bytes), after anything that took or returned pages. So it is never
 * negative, never above kv_bytes_capacity (the pool's pages × page bytes), and exact at every point a reader can see
 * it. Called with metrics_mu held. */
static void kv_gauge_set(sched *s)
{
	s->m.kv_bytes_used = engine_kv_pages_in_sequences(s->e) * s->page_bytes;
	if (s->prefix)   /* the cache's pages change with the pool's, so its counters are read with the gauge */
		engine_prefix_stats_get(s->e, &s->m.prefix);
}

static void kv_gauge_update(sched *s)
{
	pthread_mutex_lock(&s->metrics_mu);
	kv_gauge_set(s);
	pthread_mutex_unlock(&s->metrics_mu);
}

/* Ends r (running in sl when sl is not NULL): stats, close the sequence, publish, last notify, drop the engine's
 * reference. The slot becomes DONE; the step compacts it away. */
static void request_end(sched *s, sched_request *r, sched_slot *sl, sched_finish why, const char *msg)
{
	double t = aah_now_s();
	/* the text's end: an incomplete last character becomes U+FFFD, and may complete a stop string itself */
	gen_text_finish(&r->text);
	if (gen_text_stopped(&r->text) && why == SCHED_FINISH_LENGTH)
		why = SCHED_FINISH_STOP;
	sched_result res = r->result;
	res.finish = why;
	res.stop_string = r->text.st.stopped ? r->text.st.stop_index : -1;
	res.duration_s = t - r->t_submit;
	if (sl) {
		if (sl->state == SCHED_SLOT_PREFILL || sl->state == SCHED_SLOT_PREFIX_WAIT) {
			followers_handoff(s, (int32_t)(sl - s->slots));
			prefix_waiters_release(s, (int32_t)(sl - s->slots));
		}
		res.n_tokens = sl->n_tokens;
		res.cached_tokens = sl->cached;
		spec_end(s, sl, &res);
		res.has_stats = engine_seq_stats_get(s->e, sl->seq, &res.stats) == 0;
		engine_seq_close(s->e, sl->seq);
		s->reserved_pages -= r->pages_max;
		sl->state = SCHED_SLOT_DONE;
		sl->r = NULL;
		pthread_mutex_lock(&s->mu);
		s->n_running--;
		pthread_mutex_unlock(&s->mu);
	}
	res.queue_s = r->t_admit > 0 ? r->t_admit - r->t_submit : res.duration_s;
	if (msg)
		snprintf(res.err, sizeof res.err, "%s", msg);

	pthread_mutex_lock(&s->metrics_mu);
	kv_gauge_set(s);   /* before the end is published, so that a reader who saw it sees the pages gone */
	histogram_observe(&s->m.duration, res.duration_s);
	if (r->regime < SCHED_MAX_REGIMES)
		histogram_observe(&s->m.regimes[r->regime].duration, res.duration_s);
	if (res.has_stats && r->regime < SCHED_MAX_REGIMES)
		aah_tally_add(&s->m.regimes[r->regime].aah, &res.stats);
	pthread_mutex_unlock(&s->metrics_mu);

	pthread_mutex_lock(&r->mu);
	r->result = res;
	r->pub.finish = why;
	r->pub.n_tokens = res.n_tokens;
	r->pub.prompt_done = sl && sl->n_fed == r->n_prompt;
	gen_text_view_get(&r->text, &r->pub.text);
	r->pub.version++;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	if (r->notify)
		r->notify(r->notify_ctx, true);
	sched_request_release(r);   /* the engine thread's reference */
}

static bool request_cancelled(const sched *s, sched_request *r)
{
	return atomic_load(&r->cancel) || r->epoch < atomic_load(&s->epoch);
}

/* The columns a sampler draws from (sampler_top.n_cols). */
static int32_t sampler_cols(const sampler *smp)
{
	return smp->p.vocab_limit > 0 && smp->p.vocab_limit < smp->n_vocab ? smp->p.vocab_limit : smp->n_vocab;
}

/* The whole row on the host: read back from the engine once per step and row (a leader's row serves its followers
 * too). NULL when the backend failed. */
static const float *row_host(sched *s, sched_row *src)
{
	if (src->host)
		return src->host;
	float *h = s->logits + (int64_t)src->kept * s->vocab;
	if (!s->row_fetched[src->kept]) {
		if (engine_logits_row(s->e, src->kept, h) != 0)
			return NULL;
		s->row_fetched[src->kept] = true;
		pthread_mutex_lock(&s->metrics_mu);
		s->m.logits_rows_fetched++;
		pthread_mutex_unlock(&s->metrics_mu);
	}
	return src->host = h;
}

/* Row i of rows from the candidates: those of the step when they span every column, else a logits_top of this row
 * alone over all columns (the sampler's may stop at its vocab_limit). false: the row is needed (the token is not
 * among them). */
static bool logprobs_from_top(sched *s, const sched_row *src, int32_t id, sched_logprob_rows *rows, int64_t i)
{
	const int32_t n_lp = rows->n_top;
	float *lp = rows->logprob + i;
	int32_t *ids = rows->top_ids + i * n_lp;
	float *lps = rows->top_logprobs + i * n_lp;
	if (src->top.n > 0 && src->top.n_cols == s->vocab)
		return sampler_logprobs_top(&src->top, src->lse, id, n_lp, lp, ids, lps) == 0;
	int32_t n = n_lp > 64 ? n_lp : 64;
	n = n < AAH_LOGITS_TOP_MAX ? n : AAH_LOGITS_TOP_MAX;
	n = n < s->vocab ? n : s->vocab;
	aah_logits_stats st;
	const float one = 1;
	if (engine_logits_top(s->e, &st, s->lp_ids, s->lp_logits, src->kept, 1, s->vocab, &one, n) != 0)
		return false;
	sampler_top t = { st.max, st.sum, s->lp_ids, s->lp_logits, n, s->vocab };
	return sampler_logprobs_top(&t, st.lse, id, n_lp, lp, ids, lps) == 0;
}

/* Ends a constrained request whose grammar admits nothing longer (SCHED_FINISH_STOP); returns whether it did. */
static bool grammar_end(sched *s, sched_request *r, sched_slot *sl)
{
	if (!grammar_matcher_must_end(r->gm))
		return false;
	r->result.grammar_complete = true;
	pthread_mutex_lock(&s->metrics_mu);
	s->m.constrained_complete++;
	pthread_mutex_unlock(&s->metrics_mu);
	request_end(s, r, sl, SCHED_FINISH_STOP, NULL);
	return true;
}

static void grammar_error(sched *s, sched_request *r, sched_slot *sl, const char *why)
{
	r->result.grammar_failed = true;
	pthread_mutex_lock(&s->metrics_mu);
	s->m.constrained_errors++;
	pthread_mutex_unlock(&s->metrics_mu);
	request_end(s, r, sl, SCHED_FINISH_ERROR, why);
}

/* Samples the next token of sl from its logits row (src: on the host, or its candidates first and the row only when
 * they do not decide); ends the request when it is complete. */
static void slot_generate(sched *s, sched_slot *sl, sched_row *src, double t)
{
	sched_request *r = sl->r;
	const float *row = src->host;
	if (sl->n_tokens >= r->max_tokens) {
		if (r->t_first == 0) {   /* max_tokens 0: the prompt was all there was to do */
			r->t_first = t;
			r->result.ttft_s = t - r->t_submit;
		}
		request_end(s, r, sl, SCHED_FINISH_LENGTH, NULL);
		return;
	}
	const uint32_t *mask = NULL;
	if (r->gm) {
		if (grammar_end(s, r, sl))
			return;
		double t0 = aah_now_s();
		int64_t n_allowed = grammar_matcher_mask(r->gm, r->mask);
		bool can_end = grammar_matcher_can_end(r->gm);
		double dt = aah_now_s() - t0;
		pthread_mutex_lock(&s->metrics_mu);
		histogram_observe(&s->m.grammar_mask, dt);
		pthread_mutex_unlock(&s->metrics_mu);
		if (n_allowed < 0) {
			grammar_error(s, r, sl, grammar_matcher_error(r->gm));
			return;
		}
		if (can_end)   /* the stop ids only where the grammar may end */
			for (int32_t i = 0; i < r->n_stop_ids; i++)
				bits_set(r->mask, r->stop_ids[i]);
		mask = r->mask;
	}
	int32_t id = mask ? -1 : src->greedy_id;
	bool from_top = false;
	/* the candidates' sum is at the row's temperature: a follower at another one reads the row */
	if (id < 0 && src->top.n > 0 && (r->smp.p.temperature <= 0 || r->smp.p.temperature == src->temperature)) {
		id = sampler_sample_top_masked(&r->smp, &src->top, mask);
		from_top = id >= 0;
	}
	if (id < 0) {
		if (!row && !(row = row_host(s, src))) {
			request_end(s, r, sl, SCHED_FINISH_ERROR, "the backend failed to read back a logits row");
			return;
		}
		id = sampler_sample_masked(&r->smp, row, mask);
		if (id < 0) {
			if (mask)   /* the grammar allows only ids that min_tokens holds back, or none the vocabulary has */
				grammar_error(s, r, sl, "the grammar allows no token here that may be drawn (min_tokens holds "
				              "back the ends, or no token of the vocabulary continues it)");
			else        /* min_tokens' ban left nothing: a vocabulary of stop ids alone */
				request_end(s, r, sl, SCHED_FINISH_ERROR, "no token may be drawn: every id is held back");
			return;
		}
	}
	sampler_accept(&r->smp, id);
	pthread_mutex_lock(&s->metrics_mu);
	s->m.generation_tokens++;
	s->m.draws_from_top += from_top;
	s->m.draws_greedy_batched += src->greedy_id >= 0;
	rate_add(s, t, 0, 1);
	sched_regime_totals *rg = r->regime < SCHED_MAX_REGIMES ? &s->m.regimes[r->regime] : NULL;
	if (r->t_first == 0) {
		histogram_observe(&s->m.ttft, t - r->t_submit);
		if (rg)
			histogram_observe(&rg->ttft, t - r->t_submit);
	} else {
		histogram_observe(&s->m.inter_token, t - r->t_last);
		if (rg)
			histogram_observe(&rg->inter_token, t - r->t_last);
	}
	pthread_mutex_unlock(&s->metrics_mu);
	if (r->t_first == 0) {
		r->t_first = t;
		r->result.ttft_s = t - r->t_submit;
	}
	r->t_last = t;
	for (int32_t i = 0; i < r->n_stop_ids; i++)
		if (id == r->stop_ids[i]) {
			r->result.stop_id = id;
			if (r->gm) {   /* the mask let it through: the grammar may end here */
				r->result.grammar_complete = true;
				pthread_mutex_lock(&s->metrics_mu);
				s->m.constrained_complete++;
				pthread_mutex_unlock(&s->metrics_mu);
			}
			request_end(s, r, sl, SCHED_FINISH_STOP, NULL);
			return;
		}
	if (r->gm && grammar_matcher_accept(r->gm, id) < 0) {   /* cannot happen but for a bound: the mask allowed it */
		grammar_error(s, r, sl, grammar_matcher_error(r->gm)[0] ? grammar_matcher_error(r->gm) :
		              "the grammar refused the token its mask allowed");
		return;
	}
	if (r->logprobs >= 0) {
		if (!row && logprobs_from_top(s, src, id, &r->gen_lp, sl->n_tokens)) {
			pthread_mutex_lock(&s->metrics_mu);
			s->m.logprobs_from_top++;
			pthread_mutex_unlock(&s->metrics_mu);
		} else {
			if (!row && !(row = row_host(s, src))) {
				request_end(s, r, sl, SCHED_FINISH_ERROR, "the backend failed to read back a logits row");
				return;
			}
			logprob_fill(row, s->vocab, id, &r->gen_lp, sl->n_tokens);
		}
	}
	r->tokens[sl->n_tokens++] = id;
	sl->changed = true;
	/* the text, made here and only here; a stop string is decided at the token that completes it, so that nothing
	 * runs after it */
	if (gen_text_push(&r->text, id) != 0) {
		request_end(s, r, sl, SCHED_FINISH_ERROR, "out of memory for the text of the output");
		return;
	}
	if (gen_text_stopped(&r->text)) {
		request_end(s, r, sl, SCHED_FINISH_STOP, NULL);
		return;
	}
	/* a grammar that admits nothing longer ends the output here, without a step for an end token */
	if (r->gm && grammar_end(s, r, sl))
		return;
	/* the next step would append this token at position n_prompt + n_tokens - 1 */
	if (sl->n_tokens >= r->max_tokens || (int64_t)r->n_prompt + sl->n_tokens > s->ctx_len) {
		request_end(s, r, sl, SCHED_FINISH_LENGTH, NULL);
		return;
	}
	sl->next = id;
	sl->state = SCHED_SLOT_DECODE;
}

/* A verify pass: sl fed `next` and its draft (rows: the item's rows, host memory). Each row is sampled as the decode
 * step that fed its token alone would sample it, in order, while the token drawn is the draft's next one: the output
 * is that of one-by-one decoding, draw for draw (scheduler.h's sched_draft). The positions after the last token that
 * stands are taken back. */
static void slot_verify(sched *s, sched_slot *sl, const float *rows, double t)
{
	sched_request *r = sl->r;
	const sched_draft kind = r->draft;
	const int32_t n_draft = sl->n_draft;
	/* the slot's counts first: a row that ends the request hands them to its result (spec_end) */
	sl->spec_drafted += n_draft;
	sl->spec_passes++;
	int32_t j = 0;
	for (;; j++) {
		sched_row src = { .host = rows + (int64_t)j * s->vocab, .kept = -1, .greedy_id = -1 };
		slot_generate(s, sl, &src, t);
		if (sl->state != SCHED_SLOT_DECODE || j == n_draft || sl->next != sl->feed[j + 1])
			break;
		sl->spec_accepted++;
	}
	spec_counted(s, kind, n_draft, j);   /* the metrics once a pass, not once a token */
	if (sl->state != SCHED_SLOT_DECODE)
		return;   /* ended: its sequence is closed, its counts are in its result */
	spec_verified(s, sl, j);
	if (sl->changed)
		publish(r, sl);
}

/* Takes waiting requests into free slots, first come first served, while their worst-case pages fit; drops the
 * cancelled ones. Returns with the admitted in s->admitted (count) and the dropped in s->dropped (*n_dropped). */
static int32_t queue_take(sched *s, int32_t *n_dropped)
{
	int32_t n_admit = 0, n_drop = 0;
	/* cancelled waiting requests leave the queue at once, wherever they stand */
	int32_t kept = 0;
	for (int32_t i = 0; i < s->q_len; i++) {
		sched_request *r = s->queue[(s->q_head + i) % s->p.queue_length];
		if (request_cancelled(s, r) || s->stop)
			s->dropped[n_drop++] = r;
		else
			s->queue[(s->q_head + kept++) % s->p.queue_length] = r;
	}
	s->q_len = kept;
	while (s->q_len > 0 && s->n_running < s->p.max_seqs) {
		/* The head and the requests right behind it that share its prompt enter together, so that its prefill
		 * serves them all — unless the group could never fit at once; then one at a time. */
		sched_request *r = s->queue[s->q_head];
		int32_t g = 1;
		int64_t pages = r->pages_max;
		while (g < s->q_len) {
			sched_request *f = s->queue[(s->q_head + g) % s->p.queue_length];
			if (f->leader_id != r->id)
				break;
			pages += f->pages_max;
			g++;
		}
		if (g > s->p.max_seqs || pages > s->pool_pages) {
			g = 1;
			pages = r->pages_max;
		}
		if (s->n_running + g > s->p.max_seqs || s->reserved_pages + pages > s->pool_pages)
			break;   /* the head waits for slots or pages; those behind it wait too (FIFO) */
		for (int32_t i = 0; i < g; i++) {
			s->admitted[n_admit++] = s->queue[s->q_head];
			s->q_head = (s->q_head + 1) % s->p.queue_length;
		}
		s->q_len -= g;
		s->n_running += g;
		s->reserved_pages += pages;
	}
	*n_dropped = n_drop;
	return n_admit;
}

/* The request's prompt log-probability rows as the engine's prefix cache reads and writes them; NULL without. */
static const engine_prefix_lp *prompt_lp_of(sched_request *r, engine_prefix_lp *lp)
{
	if (!r->prompt_lp)
		return NULL;
	*lp = (engine_prefix_lp){ r->prompt_lp_rows.n_top, r->prompt_lp_rows.logprob, r->prompt_lp_rows.top_ids,
	                          r->prompt_lp_rows.top_logprobs };
	return lp;
}

/* Opens the slot's own sequence to prefill its prompt: after what the prefix cache holds of it, else from the start. */
static void slot_prefill(sched *s, sched_slot *sl)
{
	char err[256];
	sl->state = SCHED_SLOT_PREFILL;
	sl->n_fed = 0;
	sl->seq = engine_seq_open(s->e, s->regimes[sl->r->regime], err, sizeof err);
	/* cannot fail: the regime was checked at submit, a slot is free, and the engine was made with rollback when the
	 * request may speculate (sched_submit) */
	if (sl->seq < 0 || (sl->r->draft != SCHED_DRAFT_OFF && engine_seq_allow_rollback(s->e, sl->seq, err, sizeof err))) {
		request_end(s, sl->r, sl, SCHED_FINISH_ERROR, err);
		return;
	}
	if (s->prefix) {
		engine_prefix_lp lp;
		sl->cached = engine_prefix_restore(s->e, sl->seq, sl->r->tenant, sl->r->prompt, sl->r->n_prompt,
		                                   prompt_lp_of(sl->r, &lp));
		sl->n_fed = sl->cached;
	}
}

/* The running prefill of the same regime and tenant whose prompt, once in the prefix cache, would give sl's more than
 * the cache gives it now, by at least a block; -1: none (sl prefills at once). Every regime's cache hits at every
 * boundary (its windowed heads' dropped pages are spilled to the cache), so any shared beginning is worth the wait. */
static int32_t prefix_leader(sched *s, const sched_slot *sl)
{
	const sched_request *r = sl->r;
	const int32_t lp_top = r->prompt_lp ? r->prompt_lp_rows.n_top : -1;
	const int32_t have = engine_prefix_peek(s->e, s->regimes[r->regime], r->tenant, r->prompt, r->n_prompt, lp_top);
	int32_t best = -1, best_blocks = (have + 1) / AAH_PAGE_LEN;   /* a hit of k blocks restores 16·k − 1 */
	for (int32_t i = 0; i < s->n_order; i++) {
		const sched_slot *l = &s->slots[s->order[i]];
		if (l == sl || l->state != SCHED_SLOT_PREFILL || l->r->regime != r->regime || !sched_same_tenant(l->r, r) ||
		    (lp_top >= 0 && (!l->r->prompt_lp || l->r->prompt_lp_rows.n_top < lp_top)))
			continue;
		int32_t c = 0, lim = r->n_prompt - 1 < l->r->n_prompt ? r->n_prompt - 1 : l->r->n_prompt;
		while (c < lim && r->prompt[c] == l->r->prompt[c])
			c++;
		int32_t k = c / AAH_PAGE_LEN;
		if (k == 0)
			continue;
		if (k > best_blocks) {
			best = s->order[i];
			best_blocks = k;
		}
	}
	return best;
}

static void slot_start(sched *s, sched_request *r, double t)
{
	r->t_admit = t;
	if (r->gm) {
		pthread_mutex_lock(&s->metrics_mu);
		s->m.constrained_requests++;
		pthread_mutex_unlock(&s->metrics_mu);
	}
	int32_t k = 0;
	while (s->slots[k].r || s->slots[k].state != SCHED_SLOT_IDLE)
		k++;   /* n_running ≤ max_seqs guarantees one */
	sched_slot *sl = &s->slots[k];
	memset(sl, 0, sizeof *sl);
	sl->r = r;
	sl->seq = -1;
	sl->dseq = -1;
	sl->spec_k = r->draft != SCHED_DRAFT_OFF ? r->spec_k : 0;
	s->order[s->n_order++] = k;
	/* a choice whose leader is still prefilling the same prompt waits for it; otherwise it prefills alone */
	for (int32_t i = 0; r->leader_id && i < s->n_order; i++) {
		const sched_slot *l = &s->slots[s->order[i]];
		if ((l->state == SCHED_SLOT_PREFILL || l->state == SCHED_SLOT_PREFIX_WAIT) && l->r->id == r->leader_id) {
			sl->state = SCHED_SLOT_FORK_WAIT;
			sl->leader = s->order[i];
			return;
		}
	}
	int32_t pl = s->prefix ? prefix_leader(s, sl) : -1;
	if (pl >= 0) {
		sl->state = SCHED_SLOT_PREFIX_WAIT;
		sl->leader = pl;
		return;
	}
	slot_prefill(s, sl);
}

/* The leader's prompt is in the prefix cache (or the leader ended): the slots waiting for it prefill after what the
 * cache holds now. */
static void prefix_waiters_release(sched *s, int32_t leader)
{
	for (int32_t i = 0; i < s->n_order; i++) {
		sched_slot *f = &s->slots[s->order[i]];
		if (f->state == SCHED_SLOT_PREFIX_WAIT && f->leader == leader)
			slot_prefill(s, f);
	}
}

/* A leader ends before its prompt is through: the first of its waiting followers prefills instead, and the others
 * wait for that one. */
static void followers_handoff(sched *s, int32_t leader)
{
	int32_t heir = -1;
	for (int32_t i = 0; i < s->n_order; i++) {
		sched_slot *f = &s->slots[s->order[i]];
		if (f->state != SCHED_SLOT_FORK_WAIT || f->leader != leader)
			continue;
		if (heir < 0) {
			heir = s->order[i];
			slot_prefill(s, f);
		} else {
			f->leader = heir;
		}
	}
}

/* The leader's prompt is through (row: its logits after the last prompt token): each waiting follower forks its
 * sequence and samples its first token from the same row. Runs before the leader samples, which may end it. */
static void followers_fork(sched *s, int32_t leader, sched_row *row, double t)
{
	const sched_slot *l = &s->slots[leader];
	for (int32_t i = 0; i < s->n_order; i++) {
		sched_slot *f = &s->slots[s->order[i]];
		if (f->state != SCHED_SLOT_FORK_WAIT || f->leader != leader)
			continue;
		char err[256];
		f->seq = engine_seq_fork(s->e, l->seq, err, sizeof err);
		if (f->seq < 0) {   /* cannot happen: admission reserved the follower's pages and a slot */
			request_end(s, f->r, f, SCHED_FINISH_ERROR, err);
			continue;
		}
		f->state = SCHED_SLOT_PREFILL;
		f->n_fed = f->r->n_prompt;
		if (f->r->prompt_lp) {   /* prompt_leader made sure the leader computes the same rows */
			const sched_logprob_rows *a = &l->r->prompt_lp_rows;
			sched_logprob_rows *b = &f->r->prompt_lp_rows;
			size_t n = (size_t)f->r->n_prompt, nt = (size_t)(b->n_top > 0 ? b->n_top : 1);
			memcpy(b->logprob, a->logprob, n * sizeof *b->logprob);
			memcpy(b->top_ids, a->top_ids, n * nt * sizeof *b->top_ids);
			memcpy(b->top_logprobs, a->top_logprobs, n * nt * sizeof *b->top_logprobs);
		}
		f->changed = true;   /* prompt_done */
		slot_generate(s, f, row, t);
		if (f->state != SCHED_SLOT_DONE && f->changed)
			publish(f->r, f);
	}
}

/* Drops DONE slots from the running order. */
static void order_compact(sched *s)
{
	int32_t kept = 0;
	for (int32_t i = 0; i < s->n_order; i++) {
		sched_slot *sl = &s->slots[s->order[i]];
		if (sl->state == SCHED_SLOT_DONE)
			sl->state = SCHED_SLOT_IDLE;
		else
			s->order[kept++] = s->order[i];
	}
	s->n_order = kept;
}


/* Device sampling: one logits_top over the step's kept rows (row i is item i's) — each row's temperature, as many
 * candidates as the hungriest sampler wants (its followers' included) or its logprobs need, over the columns of the
 * first row that samples (a row over other columns reads its row back). Returns 0, or -1 when the backend failed. */
static int step_top(sched *s, int32_t n_items)
{
	int32_t n_top = 0, cols = 0;
	for (int32_t i = 0; i < n_items; i++) {
		const sched_slot *sl = &s->slots[s->item_slot[i]];
		const sched_request *r = sl->r;
		s->row_fetched[i] = false;
		s->top_temp[i] = 1;
		bool samples = sl->state == SCHED_SLOT_DECODE ||
		               (sl->state == SCHED_SLOT_PREFILL && sl->n_fed + sl->chunk >= r->n_prompt);
		if (!samples)
			continue;   /* a prompt chunk that is not the last samples nothing */
		if (r->smp.p.temperature > 0)
			s->top_temp[i] = r->smp.p.temperature;
		if (cols == 0)
			cols = sampler_cols(&r->smp);
		for (int32_t j = -1; j < s->n_order; j++) {   /* the slot, then the followers that fork its row */
			const sched_slot *f = j < 0 ? sl : &s->slots[s->order[j]];
			if (j >= 0 && (f->state != SCHED_SLOT_FORK_WAIT || f->leader != s->item_slot[i]))
				continue;
			int32_t want = sampler_top_wanted(&f->r->smp, AAH_LOGITS_TOP_MAX);
			want = want > f->r->logprobs ? want : f->r->logprobs;
			n_top = n_top > want ? n_top : want;
		}
	}
	n_top = n_top < cols ? n_top : cols;
	s->top_n = n_top;
	s->top_cols = cols;
	if (n_top == 0)
		return 0;
	return engine_logits_top(s->e, s->top_stats, s->top_ids, s->top_logits, 0, n_items, cols, s->top_temp, n_top);
}

/* One engine_forward over every running slot: a decode token each, then prompt chunks within the budget. */
static void sched_step(sched *s)
{
	for (int32_t i = 0; i < s->n_order; i++) {
		sched_slot *sl = &s->slots[s->order[i]];
		if (sl->state != SCHED_SLOT_DONE && request_cancelled(s, sl->r))
			request_end(s, sl->r, sl, SCHED_FINISH_CANCELLED, NULL);
	}
	order_compact(s);
	spec_draft(s);   /* every decoding slot's draft, and the draft engines' passes that make them */

	int32_t n_items = 0, budget = s->p.step_tokens, lp_budget = s->prompt_logit_rows;
	int64_t rows = 0, prompt_tokens = 0;
	for (int32_t pass = 0; pass < 2; pass++)   /* decoders first, so that prompts never delay them */
		for (int32_t i = 0; i < s->n_order; i++) {
			sched_slot *sl = &s->slots[s->order[i]];
			sched_request *r = sl->r;
			if (pass == 0) {
				sl->chunk = 0;
				sl->changed = false;
				if (sl->state != SCHED_SLOT_DECODE)
					continue;
				/* next, and the draft after it checked in the same pass: a row each */
				const bool verify = sl->n_draft > 0;
				s->items[n_items] = (engine_item){ sl->seq, sl->feed, 1 + sl->n_draft, verify, false, verify };
				sl->chunk = 1 + sl->n_draft;
				sl->row0 = rows;
				rows += sl->chunk;
			} else {
				if (sl->state != SCHED_SLOT_PREFILL)
					continue;
				const int32_t left = r->n_prompt - sl->n_fed;
				int32_t c = left;
				if (c > budget)
					c = budget;
				if (r->prompt_lp && c > lp_budget)
					c = lp_budget;
				/* Never a one-token chunk past position 0: the engine would take it for a decode step (engine.h), and an
				 * adaptive sequence's probes, hence its windows and tokens, would depend on how its prompt was split.
				 * So a chunk leaves two tokens or none, and one of one token waits for a step with more budget (the
				 * first prefilling slot always has a step's budget, at least 3: it never waits). */
				if (c < left && left - c == 1)
					c--;
				if (c == 1 && sl->n_fed > 0)
					c = 0;
				if (c <= 0)
					continue;
				budget -= c;
				s->items[n_items] = (engine_item){ sl->seq, r->prompt + sl->n_fed, c, r->prompt_lp, s->prefix, false };
				sl->chunk = c;
				sl->row0 = rows;
				if (r->prompt_lp) {
					lp_budget -= c;
					rows += c;
				} else {
					rows += 1;
				}
				prompt_tokens += c;
			}
			s->item_slot[n_items++] = s->order[i];
		}
	if (n_items == 0)
		return;

	/* Device sampling takes a step whose rows are one per item (no prompt log-probabilities) and fit the engine's
	 * kept rows; any other step brings its rows to the host as before. */
	bool dev = s->device && rows == n_items && rows <= engine_logits_rows_max(s->e);
	for (int32_t i = 0; i < n_items && dev; i++)
		dev = !s->items[i].all_logits;
	char err[256];
	int frc = engine_forward(s->e, s->items, n_items, dev ? NULL : s->logits, err, sizeof err);
	if (frc == 0 && dev && step_top(s, n_items) != 0) {
		snprintf(err, sizeof err, "the backend failed to reduce the logits");
		frc = -1;
	}
	if (frc != 0) {
		/* cannot happen when admission is right; end this step's requests rather than retry forever */
		for (int32_t i = 0; i < n_items; i++) {
			sched_slot *sl = &s->slots[s->item_slot[i]];
			request_end(s, sl->r, sl, SCHED_FINISH_ERROR, err);
		}
		order_compact(s);
		kv_gauge_update(s);
		return;
	}
	/* The greedy decoders' tokens at once, over the backend's workers (the same ids sampler_sample would pick). */
	int32_t n_greedy = 0, greedy_cols = 0;
	for (int32_t i = 0; i < n_items && !dev; i++) {
		sched_slot *sl = &s->slots[s->item_slot[i]];
		int32_t cols = sl->state == SCHED_SLOT_DECODE && !sl->r->gm && sl->n_draft == 0 ?
		               sampler_greedy_cols(&sl->r->smp) : 0;
		if (cols == 0 || (n_greedy > 0 && cols != greedy_cols))
			continue;
		greedy_cols = cols;
		s->greedy_rows[n_greedy] = s->logits + sl->row0 * (int64_t)s->vocab;
		s->greedy_item[n_greedy++] = i;
	}
	if (n_greedy > 1)
		engine_argmax_rows(s->e, s->greedy_ids, s->greedy_rows, n_greedy, greedy_cols);
	else
		n_greedy = 0;   /* one row: sampler_sample picks it as fast */
	double t = aah_now_s();
	pthread_mutex_lock(&s->metrics_mu);
	s->m.prompt_tokens += (uint64_t)prompt_tokens;
	rate_add(s, t, (double)prompt_tokens, 0);
	pthread_mutex_unlock(&s->metrics_mu);

	for (int32_t i = 0, g = 0; i < n_items; i++) {
		sched_slot *sl = &s->slots[s->item_slot[i]];
		sched_request *r = sl->r;
		const float *row = s->logits + sl->row0 * (int64_t)s->vocab;
		sched_row src = { .host = row, .kept = -1, .greedy_id = -1 };
		if (g < n_greedy && s->greedy_item[g] == i)
			src.greedy_id = s->greedy_ids[g++];
		if (dev) {
			src.host = NULL;
			src.kept = (int32_t)sl->row0;   /* = i: one row per item */
			src.temperature = s->top_temp[i];
			if (s->top_n > 0) {
				const aah_logits_stats *st = &s->top_stats[i];
				src.top = (sampler_top){ st->max, st->sum, s->top_ids + (int64_t)i * s->top_n,
				                         s->top_logits + (int64_t)i * s->top_n, s->top_n, s->top_cols };
				src.lse = st->lse;
			}
		}
		if (sl->state == SCHED_SLOT_PREFILL) {
			if (r->prompt_lp) {
				/* row j predicts prompt token n_fed + j + 1 */
				for (int32_t j = 0; j < sl->chunk; j++) {
					int32_t pos = sl->n_fed + j + 1;
					if (pos < r->n_prompt)
						logprob_fill(row + (int64_t)j * s->vocab, s->vocab, r->prompt[pos], &r->prompt_lp_rows, pos);
				}
				src.host = row + (int64_t)(sl->chunk - 1) * s->vocab;
			}
			sl->n_fed += sl->chunk;
			if (s->prefix) {   /* its blocks so far, with their log-probabilities: the rows above are complete */
				engine_prefix_lp lp;
				engine_prefix_insert(s->e, sl->seq, r->tenant, r->prompt, prompt_lp_of(r, &lp));
			}
			if (sl->n_fed < r->n_prompt)
				continue;
			prefix_waiters_release(s, s->item_slot[i]);
			sl->changed = true;   /* prompt_done */
			followers_fork(s, s->item_slot[i], &src, t);
		}
		if (sl->state == SCHED_SLOT_DECODE && sl->n_draft > 0) {
			slot_verify(s, sl, row, t);
			continue;
		}
		slot_generate(s, sl, &src, t);
		if (sl->state != SCHED_SLOT_DONE && sl->changed)
			publish(r, sl);
	}
	order_compact(s);
	kv_gauge_update(s);
}

static void *engine_main(void *arg)
{
	sched *s = arg;
	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (!s->stop && s->q_len == 0 && s->n_order == 0)
			pthread_cond_wait(&s->cv, &s->mu);
		int32_t n_drop;
		int32_t n_admit = queue_take(s, &n_drop);
		bool stop = s->stop;
		pthread_mutex_unlock(&s->mu);

		for (int32_t i = 0; i < n_drop; i++)
			request_end(s, s->dropped[i], NULL, SCHED_FINISH_CANCELLED, NULL);
		double t = aah_now_s();
		for (int32_t i = 0; i < n_admit; i++)
			slot_start(s, s->admitted[i], t);
		order_compact(s);
		if (stop) {
			for (int32_t i = 0; i < s->n_order; i++) {
				sched_slot *sl = &s->slots[s->order[i]];
				request_end(s, sl->r, sl, SCHED_FINISH_CANCELLED, NULL);
			}
			order_compact(s);
			kv_gauge_update(s);
			break;
		}
		if (s->p.step_delay_us > 0)
			usleep((useconds_t)s->p.step_delay_us);
		sched_step(s);
	}
	return NULL;
}

/* ---- life cycle ---- */

int sched_init(sched **out, engine *e, const engine_params *ep, const sched_params *p, char *err, size_t err_len)
{
	*out = NULL;
	sched *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(err, err_len, "out of memory");
		return -1;
	}
	s->e = e;
	s->p = *p;
	if (s->p.max_seqs <= 0)
		s->p.max_seqs = 8;
	if (s->p.queue_length <= 0)
		s->p.queue_length = 64;
	if (s->p.step_tokens <= 0)
		s->p.step_tokens = 256;
	if (s->p.step_tokens < 3)
		s->p.step_tokens = 3;   /* the least that always moves a prompt on without a one-token chunk (sched_step) */
	const model_config *c = engine_config(e);
	int32_t engine_seqs = ep->max_seqs > 0 ? ep->max_seqs : 8;
	if (s->p.max_seqs > engine_seqs) {
		snprintf(err, err_len, "scheduler: %d slots but the engine opens only %d sequences", s->p.max_seqs,
		         engine_seqs);
		free(s);
		return -1;
	}
	s->vocab = c->vocab_size;
	s->ctx_len = engine_ctx_len(e);
	s->kv_heads = (int64_t)c->n_layers * c->n_kv_heads;
	s->page_bytes = engine_kv_page_bytes(e);
	s->prefix = ep->prefix_cache > 0;
	s->pool_pages = engine_kv_pool_pages(e);
	s->n_regimes = engine_regime_count(e);
	if (s->n_regimes > SCHED_MAX_REGIMES)
		s->n_regimes = SCHED_MAX_REGIMES;
	const char *def = engine_default_regime(e);
	for (int32_t i = 0; i < s->n_regimes; i++) {
		snprintf(s->regimes[i], sizeof s->regimes[i], "%s", engine_regime_name(e, i));
		sched_regime_totals *g = &s->m.regimes[i];
		snprintf(g->name, sizeof g->name, "%s", s->regimes[i]);
		/* every window the regime may count, from the start (at 0): a counter series that appears only with its
		 * first increase loses that increase to Prometheus's rate() */
		engine_regime_layout lay;
		if (engine_regime_layout_get(e, i, &lay) == 0)
			for (int32_t w = 0; w < lay.n_usage_windows; w++)
				aah_tally_window(&g->aah, lay.usage_windows[w]);
		histogram_init(&g->ttft, ttft_bounds, (int32_t)(sizeof ttft_bounds / sizeof *ttft_bounds));
		histogram_init(&g->inter_token, itl_bounds, (int32_t)(sizeof itl_bounds / sizeof *itl_bounds));
		histogram_init(&g->duration, duration_bounds, (int32_t)(sizeof duration_bounds / sizeof *duration_bounds));
		if (def && !strcmp(def, s->regimes[i]))
			s->default_regime = i;
	}
	s->m.n_regimes = s->n_regimes;
	/* speculative decoding's server defaults (scheduler.h) */
	s->regime_drafts = engine_seqs >= 2 * s->p.max_seqs;
	if (s->p.spec.regime) {
		bool found = false;
		for (int32_t i = 0; i < s->n_regimes && !found; i++)
			if (!strcmp(s->regimes[i], s->p.spec.regime)) {
				s->p.spec.regime = s->regimes[i];   /* the scheduler's copy of the name */
				found = true;
			}
		if (!found) {
			snprintf(err, err_len, "scheduler: unknown draft regime '%s'", s->p.spec.regime);
			free(s);
			return -1;
		}
	}
	if ((s->p.spec.draft == SCHED_DRAFT_MODEL && !s->p.draft) ||
	    (s->p.spec.draft == SCHED_DRAFT_REGIME && (!s->p.spec.regime || !s->regime_drafts))) {
		snprintf(err, err_len, "scheduler: the default draft '%s' needs %s", sched_draft_name(s->p.spec.draft),
		         s->p.spec.draft == SCHED_DRAFT_MODEL ? "a draft model" :
		         "a draft regime and an engine with two sequences a slot");
		free(s);
		return -1;
	}
	s->m.kv_bytes_capacity = s->pool_pages * s->page_bytes;
	histogram_init(&s->m.ttft, ttft_bounds, (int32_t)(sizeof ttft_bounds / sizeof *ttft_bounds));
	histogram_init(&s->m.inter_token, itl_bounds, (int32_t)(sizeof itl_bounds / sizeof *itl_bounds));
	histogram_init(&s->m.duration, duration_bounds, (int32_t)(sizeof duration_bounds / sizeof *duration_bounds));
	static const double mask_bounds[] = { 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 0.1 };
	histogram_init(&s->m.grammar_mask, mask_bounds, (int32_t)(sizeof mask_bounds / sizeof *mask_bounds));

	/* Logits rows per step: one per slot, plus the rows of prompt chunks that want every position (echo with
	 * logprobs), which get about 64 MiB of logits. */
	int64_t lp_rows = ((int64_t)64 << 20) / ((int64_t)s->vocab * (int64_t)sizeof(float));
	s->prompt_logit_rows = lp_rows < 16 ? 16 : lp_rows > s->p.step_tokens ? s->p.step_tokens : (int32_t)lp_rows;
	/* and the verify rows of speculating slots: the server's k for each slot, at least one slot's largest draft (a
	 * step cuts the drafts to fit: spec_draft) */
	if (s->p.spec.k <= 0)
		s->p.spec.k = 4;
	if (s->p.spec.k > SCHED_MAX_SPEC_K)
		s->p.spec.k = SCHED_MAX_SPEC_K;
	if (s->p.spec.draft == SCHED_DRAFT_DEFAULT)
		s->p.spec.draft = SCHED_DRAFT_OFF;
	if (s->p.spec.adaptive < 0)
		s->p.spec.adaptive = 1;
	s->spec_rows = s->p.max_seqs * s->p.spec.k;
	if (s->spec_rows < SCHED_MAX_SPEC_K)
		s->spec_rows = SCHED_MAX_SPEC_K;
	int64_t logit_rows = (int64_t)s->p.max_seqs + s->prompt_logit_rows + s->spec_rows;
	/* a draft proposes ids both models have (a draft model's embedding may be padded otherwise) */
	int32_t dv = s->p.draft ? engine_config(s->p.draft)->vocab_size : 0;
	s->d_vocab = dv > 0 && dv < s->vocab ? dv : s->vocab;
	int32_t d_width = dv > s->vocab ? dv : s->vocab;
	s->d_items = calloc((size_t)s->p.max_seqs, sizeof *s->d_items);
	s->d_slot = calloc((size_t)s->p.max_seqs, sizeof *s->d_slot);
	s->d_rows = calloc((size_t)s->p.max_seqs, sizeof *s->d_rows);
	s->d_ids = calloc((size_t)s->p.max_seqs, sizeof *s->d_ids);
	s->d_logits = malloc((size_t)s->p.max_seqs * (size_t)d_width * sizeof *s->d_logits);
	s->d_feed = malloc((size_t)s->p.max_seqs * (size_t)s->p.step_tokens * sizeof *s->d_feed);
	s->slots = calloc((size_t)s->p.max_seqs, sizeof *s->slots);
	s->order = calloc((size_t)s->p.max_seqs, sizeof *s->order);
	s->items = calloc((size_t)s->p.max_seqs, sizeof *s->items);
	s->item_slot = calloc((size_t)s->p.max_seqs, sizeof *s->item_slot);
	s->greedy_rows = calloc((size_t)s->p.max_seqs, sizeof *s->greedy_rows);
	s->greedy_ids = calloc((size_t)s->p.max_seqs, sizeof *s->greedy_ids);
	s->greedy_item = calloc((size_t)s->p.max_seqs, sizeof *s->greedy_item);
	s->admitted = calloc((size_t)s->p.max_seqs, sizeof *s->admitted);
	s->queue = calloc((size_t)s->p.queue_length, sizeof *s->queue);
	s->dropped = calloc((size_t)s->p.queue_length, sizeof *s->dropped);
	s->logits = malloc((size_t)logit_rows * (size_t)s->vocab * sizeof *s->logits);
	const size_t top_cells = (size_t)s->p.max_seqs * AAH_LOGITS_TOP_MAX;
	s->top_stats = calloc((size_t)s->p.max_seqs, sizeof *s->top_stats);
	s->top_ids = calloc(top_cells, sizeof *s->top_ids);
	s->top_logits = calloc(top_cells, sizeof *s->top_logits);
	s->top_temp = calloc((size_t)s->p.max_seqs, sizeof *s->top_temp);
	s->row_fetched = calloc((size_t)s->p.max_seqs, sizeof *s->row_fetched);
	s->lp_ids = calloc(AAH_LOGITS_TOP_MAX, sizeof *s->lp_ids);
	s->lp_logits = calloc(AAH_LOGITS_TOP_MAX, sizeof *s->lp_logits);
	if (p->tok)
		s->text_room = stop_text_room_max(p->tok);
	/* Device sampling where the logits are not in host memory (a device), unless AAH_DEVICE_SAMPLING=0; =1 takes it
	 * on the CPU too (the tests: it must give the host path's tokens bit for bit there). */
	const char *dev_env = getenv("AAH_DEVICE_SAMPLING");
	bool dev_want = dev_env && *dev_env ? strcmp(dev_env, "0") != 0 : !engine_backend(e)->iface.host_memory;
	s->device = dev_want && engine_logits_top_available(e);
	s->m.device_sampling = s->device;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_mutex_init(&s->metrics_mu, NULL);
	atomic_init(&s->epoch, 1);
	if (!s->slots || !s->order || !s->items || !s->item_slot || !s->greedy_rows || !s->greedy_ids || !s->greedy_item ||
	    !s->admitted || !s->queue || !s->dropped || !s->logits || !s->top_stats || !s->top_ids || !s->top_logits ||
	    !s->top_temp || !s->row_fetched || !s->lp_ids || !s->lp_logits || !s->d_items || !s->d_slot || !s->d_rows ||
	    !s->d_ids || !s->d_logits || !s->d_feed) {
		snprintf(err, err_len, "scheduler: out of memory");
		sched_free(s);
		return -1;
	}
	if (pthread_create(&s->thread, NULL, engine_main, s) != 0) {
		snprintf(err, err_len, "scheduler: cannot start the engine thread");
		sched_free(s);
		return -1;
	}
	s->thread_started = true;
	*out = s;
	return 0;
}

void sched_free(sched *s)
{
	if (!s)
		return;
	if (s->thread_started) {
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->thread, NULL);
	}
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->metrics_mu);
	free(s->slots);
	free(s->order);
	free(s->items);
	free(s->item_slot);
	free(s->greedy_rows);
	free(s->greedy_ids);
	free(s->greedy_item);
	free(s->admitted);
	free(s->queue);
	free(s->dropped);
	free(s->logits);
	free(s->top_stats);
	free(s->top_ids);
	free(s->top_logits);
	free(s->top_temp);
	free(s->row_fetched);
	free(s->lp_ids);
	free(s->lp_logits);
	free(s->d_items);
	free(s->d_slot);
	free(s->d_rows);
	free(s->d_ids);
	free(s->d_logits);
	free(s->d_feed);
	free(s);
}
