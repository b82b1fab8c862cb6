/* server/prompt_cli.c — the command-line prompt runner (see prompt_cli.h): tokenise or parse ids, prefill in
 * one forward call, then decode token by token with the sampler, timing both phases. */
#include "server/prompt_cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/parse_num.h"
#include "models/aah_config.h"
#include "models/tokenizer.h"

/* Parses "1,2,3" into a malloc'd array (caller frees). Returns the count, or -1 with a message. */
static int64_t parse_ids(const char *s, int32_t **out, char *err, size_t err_len)
{
	int64_t n = aah_parse_int_list(s, false, 0, INT32_MAX, NULL, 0);
	if (n < 0) {
		snprintf(err, err_len, "--prompt-ids: '%s' is not a list of token ids", s);
		return -1;
	}
	int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
	if (!ids)
		return -1;
	aah_parse_int_list(s, false, 0, INT32_MAX, ids, n);
	*out = ids;
	return n;
}

int prompt_cli_run(const prompt_cli_args *a)
{
	char err[512] = "", dir[4096];
	/* In a run directory the tokenizer is the chosen checkpoint's, as its weights are (the engine resolves the same). */
	if (aah_resolve_model_dir(a->model_dir, a->engine.checkpoint_step > 0 ? a->engine.checkpoint_step : -1, dir,
	                          sizeof dir, err, sizeof err) != 0) {
		fprintf(stderr, "aahd: %s\n", err);
		return 1;
	}
	tokenizer *tok = tokenizer_load(dir, err, sizeof err);
	if (!tok && a->prompt_text) {
		fprintf(stderr, "aahd: %s\n", err);
		return 1;
	}
	int32_t *prompt = NULL;
	int64_t n_prompt;
	if (a->prompt_ids) {
		n_prompt = parse_ids(a->prompt_ids, &prompt, err, sizeof err);
	} else {
		size_t len = strlen(a->prompt_text);
		int64_t cap = (int64_t)len + 8;
		prompt = malloc((size_t)cap * sizeof *prompt);
		n_prompt = prompt ? tokenizer_encode(tok, a->prompt_text, len, true, prompt, cap, err, sizeof err) : -1;
	}
	if (n_prompt <= 0) {
		fprintf(stderr, "aahd: %s\n", n_prompt == 0 ? "the prompt is empty" : err);
		free(prompt);
		tokenizer_free(tok);
		return 2;
	}

	engine *e;
	if (engine_init(&e, a->model_dir, &a->engine, err, sizeof err) != 0) {
		fprintf(stderr, "aahd: %s\n", err);
		free(prompt);
		tokenizer_free(tok);
		return 1;
	}
	if (tok && model_config_check_tokenizer(engine_config(e), tok, err, sizeof err) != 0) {
		fprintf(stderr, "aahd: %s\n", err);
		engine_free(e);
		free(prompt);
		tokenizer_free(tok);
		return 1;
	}
	const int32_t vocab = engine_config(e)->vocab_size;
	float *logits = malloc((size_t)vocab * sizeof *logits);
	int32_t *out = malloc(((size_t)a->n_predict + 1) * sizeof *out);
	sampler smp;
	int rc = 1;
	sampler_params sp = a->sampling;
	if (tok && (sp.vocab_limit == 0 || tokenizer_vocab_size(tok) < sp.vocab_limit))
		sp.vocab_limit = tokenizer_vocab_size(tok);   /* never draw an id the tokenizer cannot spell */
	if (!logits || !out || sampler_init(&smp, &sp, vocab) != 0) {
		fprintf(stderr, "aahd: out of memory\n");
		goto done;
	}
	int32_t seq = engine_seq_open(e, a->regime, err, sizeof err);
	if (seq < 0) {
		fprintf(stderr, "aahd: %s\n", err);
		rc = 2;
		goto done_sampler;
	}
	double t0 = aah_now_s();
	engine_item it = { seq, prompt, (int32_t)n_prompt, false, false, false };
	if (engine_forward(e, &it, 1, logits, err, sizeof err) != 0) {
		fprintf(stderr, "aahd: %s\n", err);
		rc = 2;
		goto done_sampler;
	}
	double t1 = aah_now_s();
	int32_t n_out = 0;
	while (n_out < a->n_predict) {
		int32_t id = sampler_sample(&smp, logits);
		sampler_accept(&smp, id);
		out[n_out++] = id;
		if (n_out == a->n_predict)
			break;
		engine_item step = { seq, &id, 1, false, false, false };
		if (engine_forward(e, &step, 1, logits, err, sizeof err) != 0) {
			fprintf(stderr, "aahd: stopped after %d tokens: %s\n", n_out, err);
			break;
		}
	}
	double t2 = aah_now_s();
	for (int32_t i = 0; i < n_out; i++)
		printf("%s%d", i ? "," : "", out[i]);
	printf("\n");
	if (!a->quiet) {
		if (tok) {
			int64_t n = tokenizer_decode(tok, out, n_out, false, NULL, 0);
			char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
			if (text) {
				tokenizer_decode(tok, out, n_out, false, text, n);
				text[n] = 0;
				printf("%s\n", text);
				free(text);
			}
		}
		fflush(stdout);
		fprintf(stderr, "aahd: %s; prompt %lld tokens in %.3f s (%.1f tokens/s); %d generated in %.3f s (%.1f tokens/s)\n",
		        engine_backend_desc(e), (long long)n_prompt, t1 - t0, (double)n_prompt / (t1 - t0), n_out, t2 - t1,
		        n_out > 1 ? (double)(n_out - 1) / (t2 - t1) : 0.0);
		engine_seq_stats st;
		if (engine_seq_stats_get(e, seq, &st) == 0) {
			fprintf(stderr, "aahd: regime %s: ACR %.4f; attention work ratio %.4f (%llu of %llu query-key products); "
			                "KV %lld bytes at peak, memory ratio %.4f\n",
			        st.regime, st.acr, st.attn_products_full ? (double)st.attn_products / (double)st.attn_products_full : 1.0,
			        (unsigned long long)st.attn_products, (unsigned long long)st.attn_products_full,
			        (long long)st.kv_bytes_peak,
			        st.kv_bytes_full_peak ? (double)st.kv_bytes_peak / (double)st.kv_bytes_full_peak : 1.0);
			fprintf(stderr, "aahd: branch usage:");
			for (int32_t i = 0; i < st.n_usage; i++)
				fprintf(stderr, " W=%d: %.4f", st.usage_window[i], st.usage[i] / st.branch_usage_total);
			fprintf(stderr, " (T = %d)\n", st.context_length);
		}
	}
	rc = 0;
done_sampler:
	sampler_free(&smp);
done:
	free(logits);
	free(out);
	free(prompt);
	engine_free(e);
	tokenizer_free(tok);
	return rc;
}
