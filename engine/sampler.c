/* engine/sampler.c — token selection (see sampler.h). Filters apply in the order of llama.cpp and vLLM:
 * penalties, temperature, top-k, then top-p over the sorted remainder, then min-p; then a draw. */
#include "engine/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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
	if (!s->probs || !s->idx || !s->counts) {
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
	s->probs = NULL;
	s->idx = NULL;
	s->counts = NULL;
}

void sampler_accept(sampler *s, int32_t token)
{
	if (token >= 0 && token < s->n_vocab) {
		s->counts[token]++;
		s->n_accepted++;
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
	if (s->p.temperature > 0 || s->p.presence_penalty != 0 || s->p.frequency_penalty != 0)
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

int32_t sampler_sample(sampler *s, const float *logits)
{
	const int32_t n = s->p.vocab_limit > 0 && s->p.vocab_limit < s->n_vocab ? s->p.vocab_limit : s->n_vocab;
	float *p = s->probs;
	const sampler_params *sp = &s->p;
	for (int32_t i = 0; i < n; i++) {
		float l = logits[i];
		if (s->counts[i] > 0)
			l -= sp->presence_penalty + sp->frequency_penalty * (float)s->counts[i];
		p[i] = l;
	}
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
	const sampler_params *sp = &s->p;
	const int32_t n = sp->vocab_limit > 0 && sp->vocab_limit < s->n_vocab ? sp->vocab_limit : s->n_vocab;
	const int32_t nt = t->n;
	if (t->n_cols != n || nt < 1 || nt > n || isnan(t->max) || !isfinite(t->sum) || !(t->sum > 0))
		return -1;
	if (s->n_accepted > 0 && (sp->presence_penalty != 0 || sp->frequency_penalty != 0))
		return -1;   /* the penalties move logits the candidates were chosen without */
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
