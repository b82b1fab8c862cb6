/* tools/eval/score.h — scoring as lm-evaluation-harness does it, as pure functions of the server's answers:
 * _encode_pair's split of a context and a continuation, the left truncation of a log-likelihood request and the
 * sum over its continuation (with is_greedy), acc / acc_norm, the rolling windows of loglikelihood_rolling,
 * generation filters and exact_match, and the statistics (mean, the harness's stderr, a paired flip test). */
#ifndef AAH_EVAL_SCORE_H
#define AAH_EVAL_SCORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/eval/tasks.h"

#ifdef __cplusplus
extern "C" {
#endif

/* _encode_pair, the text step: trailing whitespace of the context moves to the front of the continuation. The byte
 * length of the context to tokenize alone is returned; context[0..n) + continuation is what is tokenized whole. */
size_t eval_pair_context_len(const char *context);

/* A log-likelihood request as the harness's TemplateAPI sends it: inp = (ctx + cont)[-max_len:], and
 * ctxlen = len(ctx) - max(0, len(ctx) + len(cont) - max_len). The first *n_out ids of out[] (capacity n_ctx + n_cont)
 * are the prompt; the continuation starts at *ctxlen. */
void eval_ll_request(const int32_t *ctx, int64_t n_ctx, const int32_t *cont, int64_t n_cont, int64_t max_len,
                     int32_t *out, int64_t *n_out, int64_t *ctxlen);

/* The first prompt token a generation request keeps, as TemplateAPI slices it: x[-n:] with
 * n = (max_length - 1) - max_gen_toks, Python's slice: n > 0 the last n; n = 0 all of x (x[-0:] is x[0:]); n < 0
 * all but the first -n (empty when -n >= n_ctx). */
int64_t eval_gen_prompt_start(int64_t n_ctx, int64_t max_length, int64_t max_gen_toks);

/* parse_logprobs for one echoed choice: sum(token_logprobs[ctxlen:n_prompt]), and is_greedy (each of those equal to
 * the largest of its top_logprobs). 0, or -1 with err when the response lacks what that needs. */
int eval_ll_parse(const json_t *choice_logprobs, int64_t ctxlen, int64_t n_prompt, double *ll, bool *greedy, char *err,
                  size_t errlen);

typedef struct eval_mc_score {
	int32_t pred, pred_norm;
	double acc, acc_norm;
} eval_mc_score;
/* pred = argmax(ll), pred_norm = argmax(ll / len(choice)) with len in code points, as Python's len(str). */
void eval_score_mc(const double *ll, char *const *choices, int32_t n, int32_t gold, eval_mc_score *out);

/* The generation up to the earliest stop sequence (the harness's until, plus the EOS text when given): a server that
 * takes fewer stop strings than the task has still yields the same text. New string. */
char *eval_cut_at_stops(const char *text, const char *const *until, const char *eos);
/* One filter of a task applied to a generation: regex + take_first, remove_whitespace, or none. New string. */
char *eval_filter_apply(const eval_filter *f, const char *resp);
/* HF evaluate exact_match of one prediction against a reference string, or any of an array of them (TriviaQA's
 * aliases): 1.0 or 0.0. */
double eval_exact_match(const eval_match_rules *m, const char *pred, const json_t *target);

/* loglikelihood_rolling windows (utils.get_rolling_token_windows with context_len 1, then make_disjoint_window): each
 * window's context is the prefix token (first window) or tokens[ctx_from, ctx_to), its continuation
 * tokens[pred_from, pred_to); every window's prompt is at most max_seq_len + 1 tokens. */
typedef struct eval_window {
	bool prefix;
	int64_t ctx_from, ctx_to, pred_from, pred_to;
} eval_window;
int64_t eval_rolling_windows(int64_t n_tokens, int64_t max_seq_len, eval_window **out);   /* the caller frees */

/* The harness's word count of a text: len(re.split(r"\s+", text)). */
int64_t eval_count_words(const char *text);

/* Statistics over items. stderr is the harness's mean_stderr: sample standard deviation (n - 1) over sqrt(n); NAN
 * when n < 2 (the harness's "N/A"). */
double eval_mean(const double *x, int64_t n);
double eval_stderr(const double *x, int64_t n);
/* Exact two-sided McNemar (sign) test of b items lost against c gained: P(|X - n/2| >= |b - n/2|), X ~ B(b+c, 1/2). */
double eval_mcnemar_p(int64_t b, int64_t c);

#ifdef __cplusplus
}
#endif
#endif
