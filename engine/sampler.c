/* engine/sampler.c — token selection (see sampler.h). Filters apply in the order of llama.cpp and vLLM's V0 sampler:
 * the per-request adjustments (sampler_adjust: mask, logit_bias, min_tokens, penalties), temperature, top-k, then
 * top-p over the sorted remainder, then min-p; then a draw. */
#include "engine/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bits.h"
#include "kernels/argmax.h"

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(uint64_t *s)
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

/* The repetition penalty is on: 0 and 1 both mean off, so that a zeroed sampler_params has none. */
static bool repetition_on(const sampler_params *p)
{
	return p->repetition_penalty > 0 && p->repetition_penalty != 1;
}

/* min_tokens still holds the stop ids back for the next draw. */
static bool ban_on(const sampler *s)
{
	return s->p.n_min_tokens_ids > 0 && s->n_accepted < s->p.min_tokens;
}

int sampler_params_check(const sampler_params *p, int32_t n_vocab, char *err, size_t err_len)
{
	if (p->n_bias < 0 || p->n_bias > SAMPLER_MAX_BIAS || (p->n_bias > 0 && !p->bias)) {
		snprintf(err, err_len, "%d logit_bias entries (at most %d)", p->n_bias, SAMPLER_MAX_BIAS);
		return -1;
	}
	for (int32_t i = 0; i < p->n_bias; i++)
		if (p->bias[i].id < 0 || p->bias[i].id >= n_vocab || !isfinite(p->bias[i].bias)) {
			snprintf(err, err_len, "logit_bias entry %d: token id %d (of [0, %d)) with bias %g", i, p->bias[i].id,
			         n_vocab, (double)p->bias[i].bias);
			return -1;
		}
	if (p->n_min_tokens_ids < 0 || p->n_min_tokens_ids > SAMPLER_MAX_STOP_IDS ||
	    (p->n_min_tokens_ids > 0 && !p->min_tokens_ids) || p->min_tokens < 0) {
		snprintf(err, err_len, "min_tokens %d with %d ids to hold back (at most %d)", p->min_tokens,
		         p->n_min_tokens_ids, SAMPLER_MAX_STOP_IDS);
		return -1;
	}
	for (int32_t i = 0; i < p->n_min_tokens_ids; i++)
		if (p->min_tokens_ids[i] < 0 || p->min_tokens_ids[i] >= n_vocab) {
			snprintf(err, err_len, "stop token id %d is out of range [0, %d)", p->min_tokens_ids[i], n_vocab);
			return -1;
		}
	if (!isfinite(p->repetition_penalty) || p->repetition_penalty < 0) {
		snprintf(err, err_len, "repetition_penalty %g (0 or 1: off; else > 0)", (double)p->repetition_penalty);
		return -1;
	}
	return 0;
}

static int cmp_bias(const void *a, const void *b)
{
	int32_t x = ((const sampler_bias *)a)->id, y = ((const sampler_bias *)b)->id;
	return x < y ? -1 : x > y;
}

int sampler_init(sampler *s, const sampler_params *p, int32_t n_vocab)
{
	memset(s, 0, sizeof *s);
	s->p = *p;
	s->n_vocab = n_vocab;
	uint64_t x = p->seed;
	for (int i = 0; i < 4; i++)
		s->rng[i] = splitmix64(&x);
	s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
	s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
	s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
	bool ok = s->probs && s->idx && s->counts;
	/* the lists as this sampler keeps them: in range, the biases by id with an id given twice summed (so that
	 * sampler_adjust can recompute a biased id from its raw logit in one go) */
	int32_t nb = 0, ns = 0;
	if (ok && p->n_bias > 0 && (ok = (s->bias = malloc((size_t)p->n_bias * sizeof *s->bias)) != NULL)) {
		for (int32_t i = 0; i < p->n_bias; i++)
			if (p->bias[i].id >= 0 && p->bias[i].id < n_vocab)
				s->bias[nb++] = p->bias[i];
		qsort(s->bias, (size_t)nb, sizeof *s->bias, cmp_bias);
		int32_t k = 0;
		for (int32_t i = 0; i < nb; i++) {
			if (k > 0 && s->bias[k - 1].id == s->bias[i].id)
				s->bias[k - 1].bias += s->bias[i].bias;
			else
				s->bias[k++] = s->bias[i];
		}
		nb = k;
	}
	if (ok && p->n_min_tokens_ids > 0 &&
	    (ok = (s->min_tokens_ids = malloc((size_t)p->n_min_tokens_ids * sizeof *s->min_tokens_ids)) != NULL))
		for (int32_t i = 0; i < p->n_min_tokens_ids; i++)
			if (p->min_tokens_ids[i] >= 0 && p->min_tokens_ids[i] < n_vocab)
				s->min_tokens_ids[ns++] = p->min_tokens_ids[i];
	if (ok && repetition_on(p))
		ok = (s->seen = calloc((size_t)bits_words(n_vocab), sizeof *s->seen)) != NULL;
	s->p.bias = s->bias;
	s->p.n_bias = nb;
	s->p.min_tokens_ids = s->min_tokens_ids;
	s->p.n_min_tokens_ids = ns;
	if (!ok) {
		sampler_free(s);
		return -1;
	}
	return 0;
}

void sampler_free(sampler *s)
{
	free(s->probs);
	free(s->idx);
	free(s->counts);
	free(s->bias);
	free(s->min_tokens_ids);
	free(s->seen);
	s->probs = NULL;
	s->idx = NULL;
	s->counts = NULL;
	s->bias = NULL;
	s->min_tokens_ids = NULL;
	s->seen = NULL;
	s->p.bias = NULL;
	s->p.n_bias = 0;
	s->p.min_tokens_ids = NULL;
	s->p.n_min_tokens_ids = 0;
}

void sampler_prompt(sampler *s, const int32_t *ids, int32_t n)
{
	for (int32_t i = 0; s->seen && i < n; i++)
		if (ids[i] >= 0 && ids[i] < s->n_vocab)
			bits_set(s->seen, ids[i]);
}

void sampler_accept(sampler *s, int32_t token)
{
	if (token >= 0 && token < s->n_vocab) {
		s->counts[token]++;
		s->n_accepted++;
		if (s->seen)
			bits_set(s->seen, token);
	}
}

int32_t sampler_argmax(const float *logits, int32_t n)
{
	return aah_argmax(logits, n);
}

void sampler_logprobs(const float *x, int32_t n_cols, int32_t id, int32_t n_lp, float *logprob, int32_t *ids,
                      float *lps)
{
	double m = -INFINITY;
	for (int32_t v = 0; v < n_cols; v++)
		if (x[v] > m)
			m = x[v];
	double sum = 0;
	for (int32_t v = 0; v < n_cols; v++)
		sum += exp((double)x[v] - m);
	double lse = m + log(sum);
	*logprob = (float)((double)x[id] - lse);
	int32_t k = 0;
	/* insertion into a sorted list of n_lp: strictly greater moves up, so equal values keep the lower id first */
	for (int32_t v = 0; v < n_cols && n_lp > 0; v++) {
		if (k == n_lp && !(x[v] > x[ids[n_lp - 1]]))
			continue;
		int32_t j = k < n_lp ? k++ : n_lp - 1;
		while (j > 0 && x[v] > x[ids[j - 1]]) {
			ids[j] = ids[j - 1];
			j--;
		}
		ids[j] = v;
	}
	for (int32_t j = 0; j < n_lp; j++)
		lps[j] = (float)((double)x[ids[j]] - lse);
}

int32_t sampler_greedy_cols(const sampler *s)
{
	if (s->p.temperature > 0 || s->p.presence_penalty != 0 || s->p.frequency_penalty != 0 || s->p.n_bias > 0 ||
	    repetition_on(&s->p) || ban_on(s))
		return 0;
	return s->p.vocab_limit > 0 && s->p.vocab_limit < s->n_vocab ? s->p.vocab_limit : s->n_vocab;
}

static _Thread_local const float *cmp_probs;   /* the running sort's probabilities: one per thread */
/* Descending probability, then ascending id: a total order, so the result never depends on qsort. */
static int cmp_desc(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	float px = cmp_probs[x], py = cmp_probs[y];
	if (px != py)
		return px > py ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Sorts ids by (probs desc, id asc). qsort has no context argument in C11, so the comparison finds the probabilities
 * through a thread-local pointer: samplers on several threads (two engines, or a scheduler beside a lone run, as the
 * scheduler tests do) once sorted with each other's and drew differently now and then. */
static void sort_candidates(int32_t *ids, int32_t n, const float *probs)
{
	cmp_probs = probs;
	qsort(ids, (size_t)n, sizeof *ids, cmp_desc);
}

/* Steps 4 and 5 of sampler_adjust for one id: the repetition penalty, then presence and frequency. Without either the
 * logit is unchanged; with the old penalties alone it is the very expression the sampler always used, so that a
 * request without the new fields draws bit for bit what it drew before them. */
static inline float penalise(const sampler *s, int32_t i, float l)
{
	if (s->seen && bits_get(s->seen, i))   /* seen exists only with the repetition penalty on */
		l = l > 0 ? l / s->p.repetition_penalty : l * s->p.repetition_penalty;
	if (s->counts[i] > 0)
		l -= s->p.presence_penalty + s->p.frequency_penalty * (float)s->counts[i];
	return l;
}

/* Whether id may be drawn at all: the mask allows it and min_tokens does not hold it back. */
static bool allowed(const sampler *s, const uint32_t *mask, int32_t id)
{
	if (mask && !bits_get(mask, id))
		return false;
	if (ban_on(s))
		for (int32_t j = 0; j < s->p.n_min_tokens_ids; j++)
			if (s->p.min_tokens_ids[j] == id)
				return false;
	return true;
}

/* The per-request adjustments (sampler.h lists them, in order) of logits[0 … n) into p: the one place where a request
 * moves a logit before the draw, so that a new kind of adjustment goes here and every path (the greedy argmax, the
 * draw, and the candidate path that declines what it cannot replay) sees it. Done as passes that give the listed order:
 * the dense pass takes every id through the penalties; a biased id is then recomputed from its raw logit plus its
 * bias (bias before penalties); the ban and the mask write −inf, which no later step changes (−inf / p, −inf · p and
 * −inf − c stay −inf), so they may come last. Returns false when no finite logit is left (only a mask or the ban can
 * do that). */
static bool sampler_adjust(const sampler *s, const float *logits, const uint32_t *mask, float *p, int32_t n)
{
	for (int32_t i = 0; i < n; i++)
		p[i] = penalise(s, i, logits[i]);
	for (int32_t j = 0; j < s->p.n_bias; j++) {
		const int32_t id = s->p.bias[j].id;
		if (id < n)
			p[id] = penalise(s, id, logits[id] + s->p.bias[j].bias);
	}
	const bool ban = ban_on(s);
	for (int32_t j = 0; ban && j < s->p.n_min_tokens_ids; j++)
		if (s->p.min_tokens_ids[j] < n)
			p[s->p.min_tokens_ids[j]] = -INFINITY;
	if (mask)
		for (int32_t i = 0; i < n; i++)
			if (!bits_get(mask, i))
				p[i] = -INFINITY;
	if (!mask && !ban)
		return true;   /* what the row was before: a row of −inf draws as it always did */
	for (int32_t i = 0; i < n; i++)
		if (p[i] > -INFINITY)
			return true;
	return false;
}

int32_t sampler_sample(sampler *s, const float *logits)
{
	return sampler_sample_masked(s, logits, NULL);
}

int32_t sampler_sample_masked(sampler *s, const float *logits, const uint32_t *mask)
{
	const int32_t n = s->p.vocab_limit > 0 && s->p.vocab_limit < s->n_vocab ? s->p.vocab_limit : s->n_vocab;
	float *p = s->probs;
	const sampler_params *sp = &s->p;
	const bool excluding = mask || ban_on(s);
	if (!sampler_adjust(s, logits, mask, p, n))
		return -1;
	if (sp->temperature <= 0)
		return sampler_argmax(p, n);

	/* softmax(l / T) */
	float mx = p[sampler_argmax(p, n)];
	double sum = 0;
	for (int32_t i = 0; i < n; i++) {
		p[i] = expf((p[i] - mx) / sp->temperature);
		sum += p[i];
	}
	for (int32_t i = 0; i < n; i++)
		p[i] = (float)(p[i] / sum);

	/* Candidates: every id, unless top-k or top-p needs an order; then only the ids that can be in it. */
	int32_t nc = 0;
	if ((sp->top_k > 0 && sp->top_k < n) || (sp->top_p > 0 && sp->top_p < 1)) {
		/* Find a threshold t with the mass of {p ≥ t} ≥ top_p and |{p ≥ t}| ≥ top_k (when set), so the
		 * kept prefix of the sorted order lies inside it; then sort only that set. */
		float pmax = 1.0f / (float)n;
		for (int32_t i = 0; i < n; i++)
			if (p[i] > pmax)
				pmax = p[i];
		float t = pmax * 0.5f;
		for (;;) {
			double mass = 0;
			nc = 0;
			for (int32_t i = 0; i < n; i++)
				if (p[i] >= t) {
					s->idx[nc++] = i;
					mass += p[i];
				}
			bool mass_ok = !(sp->top_p > 0 && sp->top_p < 1) || mass >= sp->top_p;
			bool k_ok = !(sp->top_k > 0 && sp->top_k < n) || nc >= sp->top_k;
			if ((mass_ok && k_ok) || t == 0)
				break;
			t = t > 1e-30f ? t * 0.125f : 0;
		}
		sort_candidates(s->idx, nc, p);
		if (sp->top_k > 0 && nc > sp->top_k)
			nc = sp->top_k;
		if (sp->top_p > 0 && sp->top_p < 1) {
			double cum = 0, total = 0;
			for (int32_t i = 0; i < nc; i++)
				total += p[s->idx[i]];
			if (!(sp->top_k > 0 && sp->top_k < n))
				total = 1;   /* no top-k: the nucleus is a share of the whole distribution, not of the candidates */
			for (int32_t i = 0; i < nc; i++) {
				cum += p[s->idx[i]];
				if (cum >= sp->top_p * total) {
					nc = i + 1;
					break;
				}
			}
		}
	} else {
		for (int32_t i = 0; i < n; i++)
			s->idx[i] = i;
		nc = n;
	}
	if (sp->min_p > 0) {
		float best = 0;
		for (int32_t i = 0; i < nc; i++)
			if (p[s->idx[i]] > best)
				best = p[s->idx[i]];
		int32_t kept = 0;
		for (int32_t i = 0; i < nc; i++)
			if (p[s->idx[i]] >= sp->min_p * best)
				s->idx[kept++] = s->idx[i];
		nc = kept;
	}
	double total = 0;
	for (int32_t i = 0; i < nc; i++)
		total += p[s->idx[i]];
	double u = (double)(xoshiro_next(s->rng) >> 11) * (1.0 / 9007199254740992.0) * total;
	double cum = 0;
	for (int32_t i = 0; i < nc; i++) {
		cum += p[s->idx[i]];
		if (u < cum)
			return s->idx[i];
	}
	/* u rounded up to the total: the last candidate. An id the mask or the ban excluded has probability 0 and may sort
	 * last; it is never the answer (the largest probability is never 0, so one with more is left). */
	while (excluding && nc > 1 && p[s->idx[nc - 1]] == 0)
		nc--;
	return s->idx[nc - 1];
}

/* ---- the same draw from a row's candidates (sampler_top) ----
 * Candidates c_0 … c_{n-1} are the n largest logits; every other id has a logit ≤ that of c_{n-1}, so a probability
 * p ≤ p_last. Each step of sampler_sample above is replayed on them; where it would reach an id outside them (a top-k,
 * nucleus or min-p cut that does not close strictly above p_last, plain sampling over every id) the answer is "cannot
 * tell" (-1). Probabilities are computed with the very expressions used above, so that equal inputs give equal
 * floats, and sums run in the same order (ids ascending, or the sorted order). */

static int cmp_id(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return x < y ? -1 : x > y;
}

int32_t sampler_top_wanted(const sampler *s, int32_t cap)
{
	int32_t k = s->p.top_k > 0 && s->p.top_k < INT32_MAX - 1 ? s->p.top_k + 1 : 0;
	k = k > 64 ? k : 64;
	return k < cap ? k : cap;
}

int32_t sampler_sample_top(sampler *s, const sampler_top *t)
{
	return sampler_sample_top_masked(s, t, NULL);
}

int32_t sampler_sample_top_masked(sampler *s, const sampler_top *t, const uint32_t *mask)
{
	const sampler_params *sp = &s->p;
	const int32_t n = sp->vocab_limit > 0 && sp->vocab_limit < s->n_vocab ? sp->vocab_limit : s->n_vocab;
	const int32_t nt = t->n;
	if (t->n_cols != n || nt < 1 || nt > n || isnan(t->max) || !isfinite(t->sum) || !(t->sum > 0))
		return -1;
	if (s->n_accepted > 0 && (sp->presence_penalty != 0 || sp->frequency_penalty != 0))
		return -1;   /* the penalties move logits the candidates were chosen without */
	if (sp->n_bias > 0 || repetition_on(sp))
		return -1;   /* so do logit_bias (an outsider may rise past them) and the repetition penalty (from the start) */
	if (mask || ban_on(s)) {
		/* Excluded ids only fall out. Greedy: the first candidate allowed is the largest allowed logit, the lower id
		 * first among equals — unless it ties with the last candidate, where an outsider may tie too. A draw at a
		 * temperature needs the sum without the excluded ids, which t->sum does not give. */
		if (sp->temperature > 0)
			return -1;
		int32_t j = 0;
		while (j < nt && !allowed(s, mask, t->ids[j]))
			j++;
		if (j == nt || !(t->logits[j] > -INFINITY) || (nt < n && !(t->logits[j] > t->logits[nt - 1])))
			return -1;
		return t->ids[j];
	}
	if (sp->temperature <= 0)
		return t->ids[0];   /* the first index of the maximum, as sampler_argmax */

	float *p = s->probs;   /* by id, written for the candidates only */
	const float mx = t->max;
	for (int32_t j = 0; j < nt; j++)
		p[t->ids[j]] = (float)(expf((t->logits[j] - mx) / sp->temperature) / t->sum);
	const bool complete = nt == n;
	const float p_last = p[t->ids[nt - 1]];   /* no id outside the candidates is more probable */
	int32_t *idx = s->idx, nc = 0;
	const bool use_k = sp->top_k > 0 && sp->top_k < n, use_p = sp->top_p > 0 && sp->top_p < 1;
	if (use_k || use_p) {
		float pmax = 1.0f / (float)n;
		if (p[t->ids[0]] > pmax)
			pmax = p[t->ids[0]];
		float th = pmax * 0.5f;
		/* partial: the threshold has come down to p_last, where outsiders may join {p ≥ th}. The loop above stops
		 * there or lower, with every candidate in its set; and the set it stops with does not matter beyond that:
		 * with top-k it holds at least top_k ids (the loop's condition, or th = 0: all n) and its top_k are everyone's
		 * top_k; with top-p alone the nucleus is the same sorted prefix in any set that contains it. */
		bool partial = false;
		for (;;) {
			nc = 0;   /* the candidates in {p ≥ th}: a prefix, as p does not grow along them */
			while (nc < nt && p[t->ids[nc]] >= th)
				nc++;
			if (!complete && th <= p_last) {
				partial = true;
				break;
			}
			memcpy(idx, t->ids, (size_t)nc * sizeof *idx);
			qsort(idx, (size_t)nc, sizeof *idx, cmp_id);
			double mass = 0;   /* in id order, as above */
			for (int32_t i = 0; i < nc; i++)
				mass += p[idx[i]];
			bool mass_ok = !use_p || mass >= sp->top_p, k_ok = !use_k || nc >= sp->top_k;
			if ((mass_ok && k_ok) || th == 0)
				break;
			th = th > 1e-30f ? th * 0.125f : 0;
		}
		memcpy(idx, t->ids, (size_t)nc * sizeof *idx);
		sort_candidates(idx, nc, p);
		/* sure: the sorted prefix that no outsider can enter (an outsider equal to p_last may sort before a
		 * candidate of the same probability by id) */
		int32_t sure = nc;
		if (partial)
			for (sure = 0; sure < nc && p[idx[sure]] > p_last;)
				sure++;
		int32_t cut = nc;        /* sampler_sample's nc after the top-k cut */
		bool open = partial;     /* the set extends past the candidates by an unknown number */
		if (open ? use_k : sp->top_k > 0 && nc > sp->top_k) {   /* open: the set holds ≥ top_k ids (above) */
			cut = sp->top_k;
			open = false;
		}
		if (!open && cut > sure)
			return -1;
		if (use_p) {
			double cum = 0, total = 0;
			for (int32_t i = 0; i < cut; i++)
				total += p[idx[i]];
			if (!use_k)
				total = 1;
			const int32_t lim = open ? sure : cut;
			bool found = false;
			for (int32_t i = 0; i < lim; i++) {
				cum += p[idx[i]];
				if (cum >= sp->top_p * total) {
					cut = i + 1;
					found = true;
					break;
				}
			}
			if (!found && open)
				return -1;
		} else if (open) {
			return -1;
		}
		nc = cut;
	} else {
		/* every id is a candidate of sampler_sample: only min-p can leave the outsiders behind */
		const float best = p[t->ids[0]];
		if (!complete && !(sp->min_p > 0 && sp->min_p * best > p_last))
			return -1;
		memcpy(idx, t->ids, (size_t)nt * sizeof *idx);
		qsort(idx, (size_t)nt, sizeof *idx, cmp_id);
		nc = nt;
	}
	if (sp->min_p > 0) {
		float best = 0;
		for (int32_t i = 0; i < nc; i++)
			if (p[idx[i]] > best)
				best = p[idx[i]];
		int32_t kept = 0;
		for (int32_t i = 0; i < nc; i++)
			if (p[idx[i]] >= sp->min_p * best)
				idx[kept++] = idx[i];
		nc = kept;
	}
	double total = 0;
	for (int32_t i = 0; i < nc; i++)
		total += p[idx[i]];
	double u = (double)(xoshiro_next(s->rng) >> 11) * (1.0 / 9007199254740992.0) * total;
	double cum = 0;
	for (int32_t i = 0; i < nc; i++) {
		cum += p[idx[i]];
		if (u < cum)
			return idx[i];
	}
	return idx[nc - 1];
}

int sampler_logprobs_top(const sampler_top *t, double lse, int32_t id, int32_t n_lp, float *logprob,
                         int32_t *top_ids, float *top_logprobs)
{
	if (!isfinite(lse) || n_lp > t->n)
		return -1;
	int32_t at = 0;
	while (at < t->n && t->ids[at] != id)
		at++;
	if (at == t->n)
		return -1;
	*logprob = (float)((double)t->logits[at] - lse);
	for (int32_t j = 0; j < n_lp; j++) {
		top_ids[j] = t->ids[j];
		top_logprobs[j] = (float)((double)t->logits[j] - lse);
	}
	return 0;
}
