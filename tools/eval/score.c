/* tools/eval/score.c — the harness's scoring arithmetic (see score.h). */
#include "tools/eval/score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/eval/pytext.h"
#include "tools/eval/util.h"

size_t eval_pair_context_len(const char *context)
{
	/* n_spaces = len(context) - len(context.rstrip()); continuation = context[-n_spaces:] + continuation */
	return py_rstrip_len(context, strlen(context));
}

void eval_ll_request(const int32_t *ctx, int64_t n_ctx, const int32_t *cont, int64_t n_cont, int64_t max_len,
                     int32_t *out, int64_t *n_out, int64_t *ctxlen)
{
	int64_t total = n_ctx + n_cont;
	int64_t drop = total > max_len ? total - max_len : 0;
	int64_t n = 0;
	for (int64_t i = drop; i < total; i++)
		out[n++] = i < n_ctx ? ctx[i] : cont[i - n_ctx];
	*n_out = n;
	*ctxlen = n_ctx - drop;
}

int eval_ll_parse(const json_t *lp, int64_t ctxlen, int64_t n_prompt, double *ll, bool *greedy, char *err,
                  size_t errlen)
{
	const json_t *tl = json_object_get(lp, "token_logprobs");
	const json_t *top = json_object_get(lp, "top_logprobs");
	if (!json_is_array(tl) || !json_is_array(top)) {
		snprintf(err, errlen, "the response has no logprobs.token_logprobs / top_logprobs (does the server echo prompt "
		         "log-probabilities?)");
		return -1;
	}
	if ((int64_t)json_array_size(tl) < n_prompt || (int64_t)json_array_size(top) < n_prompt) {
		snprintf(err, errlen, "the response has %zu prompt log-probabilities for a prompt of %lld tokens",
		         json_array_size(tl), (long long)n_prompt);
		return -1;
	}
	if (ctxlen < 1) {
		snprintf(err, errlen, "a log-likelihood request without context (ctxlen %lld)", (long long)ctxlen);
		return -1;
	}
	double sum = 0;
	bool g = true;
	for (int64_t i = ctxlen; i < n_prompt; i++) {
		const json_t *v = json_array_get(tl, (size_t)i);
		if (!json_is_number(v)) {
			snprintf(err, errlen, "token_logprobs[%lld] is not a number", (long long)i);
			return -1;
		}
		double x = json_number_value(v);
		sum += x;
		const json_t *t = json_array_get(top, (size_t)i);
		if (!json_is_object(t) || json_object_size(t) == 0) {
			snprintf(err, errlen, "top_logprobs[%lld] is not an object of log-probabilities", (long long)i);
			return -1;
		}
		double best = -INFINITY;
		const char *key;
		json_t *val;
		json_object_foreach((json_t *)t, key, val)
			if (json_is_number(val) && json_number_value(val) > best)
				best = json_number_value(val);
		if (x != best)   /* tok != max(top.values()) */
			g = false;
	}
	*ll = sum;
	*greedy = g;
	return 0;
}

/* numpy's argmax over x[0..n): the first maximum; a NaN wins at once. */
static int32_t argmax(const double *x, int32_t n)
{
	int32_t best = 0;
	for (int32_t i = 0; i < n; i++) {
		if (isnan(x[i]))
			return i;
		if (x[i] > x[best])
			best = i;
	}
	return best;
}

void eval_score_mc(const double *ll, char *const *choices, int32_t n, int32_t gold, eval_mc_score *out)
{
	double *norm = xmalloc((size_t)(n ? n : 1) * sizeof *norm);
	for (int32_t i = 0; i < n; i++)
		norm[i] = ll[i] / (double)py_len(choices[i], strlen(choices[i]));   /* / 0 as numpy: ±inf or nan */
	out->pred = n ? argmax(ll, n) : -1;
	out->pred_norm = n ? argmax(norm, n) : -1;
	out->acc = out->pred == gold ? 1.0 : 0.0;
	out->acc_norm = out->pred_norm == gold ? 1.0 : 0.0;
	free(norm);
}

char *eval_cut_at_stops(const char *text, const char *const *until, const char *eos)
{
	size_t cut = strlen(text);
	for (int32_t i = 0; until && until[i]; i++) {
		const char *p = *until[i] ? strstr(text, until[i]) : NULL;
		if (p && (size_t)(p - text) < cut)
			cut = (size_t)(p - text);
	}
	if (eos && *eos) {
		const char *p = strstr(text, eos);
		if (p && (size_t)(p - text) < cut)
			cut = (size_t)(p - text);
	}
	return xstrndup(text, cut);
}

char *eval_filter_apply(const eval_filter *f, const char *resp)
{
	if (f->strip)
		return py_strip(resp);   /* remove_whitespace: resp.strip() (extraction.py WhitespaceFilter) */
	if (!f->regex)
		return xstrdup(resp);
	char err[256];
	py_regex *re = py_regex_compile(f->regex, err, sizeof err);
	if (!re)
		return xstrdup("[invalid]");
	char *out = py_regex_filter(re, resp, f->group_select, "[invalid]");
	py_regex_free(re);
	return out;
}

/* HF evaluate exact_match's normalisation of one string. */
static char *normalise(const eval_match_rules *m, const char *s)
{
	char *cur = xstrdup(s);
	for (int32_t i = 0; m->ignore_regexes[i]; i++) {
		char err[256];
		py_regex *re = py_regex_compile(m->ignore_regexes[i], err, sizeof err);
		if (!re)
			continue;
		char *next = py_regex_sub(re, cur, "");
		py_regex_free(re);
		free(cur);
		cur = next;
	}
	if (m->ignore_case) {
		char *next = py_lower(cur);
		free(cur);
		cur = next;
	}
	if (m->ignore_punctuation) {
		char *next = py_remove_punctuation(cur);
		free(cur);
		cur = next;
	}
	return cur;
}

double eval_exact_match(const eval_match_rules *m, const char *pred, const json_t *target)
{
	char *p = normalise(m, pred);
	double score = 0;
	size_t n = json_is_array(target) ? json_array_size(target) : 1;
	for (size_t i = 0; i < n && score == 0; i++) {
		const json_t *t = json_is_array(target) ? json_array_get(target, i) : target;
		if (!json_is_string(t))
			continue;
		char *r = normalise(m, json_string_value(t));
		score = !strcmp(p, r) ? 1.0 : 0.0;
		free(r);
	}
	free(p);
	return score;
}

int64_t eval_rolling_windows(int64_t n_tokens, int64_t max_seq_len, eval_window **out)
{
	*out = NULL;
	if (n_tokens <= 0 || max_seq_len < 1)
		return 0;
	int64_t cap = n_tokens / max_seq_len + 2, n = 0;
	eval_window *w = xmalloc((size_t)cap * sizeof *w);
	/* first window: [prefix] + tokens[:first-1] predicting tokens[:first]; disjoint: context [prefix] */
	int64_t first = n_tokens < max_seq_len ? n_tokens : max_seq_len;
	w[n++] = (eval_window){true, 0, 0, 0, first};
	int64_t predicted = first;
	while (predicted < n_tokens) {
		int64_t len = n_tokens - predicted < max_seq_len ? n_tokens - predicted : max_seq_len;
		int64_t end = predicted + len;
		/* input tokens[end - max_seq_len - 1 : end - 1], prediction tokens[end - len : end]; the disjoint context is
		 * the input's first len(input) - (len - 1) tokens */
		int64_t in_from = end - max_seq_len - 1;
		if (in_from < 0)
			in_from = 0;
		int64_t in_len = (end - 1) - in_from;
		w[n++] = (eval_window){false, in_from, in_from + in_len - (len - 1), end - len, end};
		predicted += len;
	}
	*out = w;
	return n;
}

int64_t eval_count_words(const char *text)
{
	char err[128];
	py_regex *re = py_regex_compile("\\s+", err, sizeof err);
	int64_t n = re ? py_regex_split_count(re, text) : 1;
	py_regex_free(re);
	return n;
}

double eval_mean(const double *x, int64_t n)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++)
		s += x[i];
	return n ? s / (double)n : NAN;
}

double eval_stderr(const double *x, int64_t n)
{
	if (n < 2)
		return NAN;
	double mu = eval_mean(x, n), ss = 0;
	for (int64_t i = 0; i < n; i++)
		ss += (x[i] - mu) * (x[i] - mu);
	return sqrt(ss / (double)(n - 1)) / sqrt((double)n);
}

double eval_mcnemar_p(int64_t b, int64_t c)
{
	int64_t n = b + c;
	if (n == 0)
		return 1.0;
	int64_t lo = b < c ? b : c;
	/* 2 * P(X <= lo), X ~ Binomial(n, 1/2), summed in logs */
	double p = 0;
	for (int64_t i = 0; i <= lo; i++)
		p += exp(lgamma((double)n + 1) - lgamma((double)i + 1) - lgamma((double)(n - i) + 1) - (double)n * log(2.0));
	p *= 2;
	return p > 1 ? 1 : p;
}

int64_t eval_gen_prompt_start(int64_t n_ctx, int64_t max_length, int64_t max_gen_toks)
{
	int64_t n = (max_length - 1) - max_gen_toks;
	if (n > 0)
		return n_ctx > n ? n_ctx - n : 0;
	return -n < n_ctx ? -n : n_ctx;
}
