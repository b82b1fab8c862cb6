/* server/server.c — the daemon's life: load the model and tokenizer, start the engine thread and the HTTP
 * server, tell systemd it is ready, wait for SIGTERM/SIGINT, then drain within the grace period and exit. */
#include "server/server.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include "base/clock.h"
#include "engine/engine.h"
#include "models/aah_config.h"
#include "server/chat_template.h"
#include "server/http.h"
#include "server/log.h"
#include "server/signals.h"

int32_t server_regime_index(const server_ctx *ctx, const char *name)
{
	for (int32_t i = 0; name && i < ctx->n_regimes; i++)
		if (!strcmp(ctx->regimes[i], name))
			return i;
	return -1;
}

static aah_dtype dtype_of(const char *s)   /* the configuration checked the name */
{
	aah_dtype t = AAH_DTYPE_F32;
	aah_dtype_from_name(s, &t);
	return t;
}

static void eos_add(server_ctx *s, int32_t id)
{
	if (id < 0 || id >= s->vocab || s->n_eos == SCHED_MAX_STOP_IDS)
		return;
	for (int32_t i = 0; i < s->n_eos; i++)
		if (s->eos_ids[i] == id)
			return;
	s->eos_ids[s->n_eos++] = id;
}

/* Waits until busy(arg) is 0 or the deadline passes; a second signal (*hurry from then on) ends the wait at once,
 * and every wait after it. Returns true when busy reached 0. */
static bool wait_until(int (*busy)(void *), void *arg, double deadline, bool *hurry, int poll_ms)
{
	while (busy(arg) > 0) {
		if (*hurry || aah_now_s() >= deadline)
			return false;
		int sig = signals_wait(poll_ms);
		if (sig) {
			log_msg(LOG_WARN, NULL, "second signal %d: exiting now", sig);
			*hurry = true;
		}
	}
	return true;
}

/* The HTTP server a stop past its time leaves running (its threads may still use it, so it is never freed): kept
 * reachable from here so that LeakSanitizer (SAN=1) does not call it a leak at the exit and turn its 0 into 1. */
static http_server *volatile http_left_running;

static int sched_busy_of(void *s) { return sched_busy(s); }
static int http_busy_of(void *h) { return http_server_busy(h); }
static int http_running_of(void *h) { return !http_server_stopped(h); }

/* The draft model of model speculation: its own engine (its default regime, no prefix cache, room for every slot's
 * sequence), whose tokenizer must be the target's — the same tokens, text for text, and the same end — or its ids
 * would mean other text. */
static int draft_open(const aahd_config *cfg, const engine_params *tp, const tokenizer *tok, engine **out, char *err,
                      size_t err_len)
{
	char dir[4096];
	engine_params ep = *tp;
	ep.max_seqs = (int32_t)cfg->max_batch;
	ep.kv_budget_bytes = 0;
	ep.prefix_cache = 0;
	ep.aah_path = NULL;
	ep.checkpoint_step = 0;
	*out = NULL;
	if (aah_resolve_model_dir(cfg->model_draft, -1, dir, sizeof dir, err, err_len) != 0 ||
	    engine_init(out, cfg->model_draft, &ep, err, err_len) != 0)
		return -1;
	char terr[512];
	tokenizer *dt = tokenizer_load(dir, terr, sizeof terr);
	int rc = -1;
	if (!dt) {
		snprintf(err, err_len, "%s: cannot load its tokenizer: %s", cfg->model_draft, terr);
	} else if (tokenizer_vocab_size(dt) != tokenizer_vocab_size(tok) || tokenizer_eos(dt) != tokenizer_eos(tok)) {
		snprintf(err, err_len, "%s: its tokenizer is not the model's (%d tokens, end %d; the model's: %d, end %d)",
		         cfg->model_draft, tokenizer_vocab_size(dt), tokenizer_eos(dt), tokenizer_vocab_size(tok),
		         tokenizer_eos(tok));
	} else {
		rc = 0;
		for (int32_t i = 0; i < tokenizer_vocab_size(tok) && rc == 0; i++) {
			const char *a = tokenizer_token_text(tok, i), *b = tokenizer_token_text(dt, i);
			if (strcmp(a ? a : "", b ? b : "") != 0) {
				snprintf(err, err_len, "%s: its tokenizer is not the model's: token %d is '%.40s' there, '%.40s' here",
				         cfg->model_draft, i, b ? b : "", a ? a : "");
				rc = -1;
			}
		}
	}
	if (dt)
		tokenizer_free(dt);
	if (rc == 0)
		rc = model_config_check_tokenizer(engine_config(*out), tok, err, err_len);
	if (rc != 0) {
		engine_free(*out);
		*out = NULL;
		return -1;
	}
	log_msg(LOG_INFO, NULL, "draft model %s: %s, %d layers", cfg->model_draft, engine_backend_desc(*out),
	        engine_config(*out)->n_layers);
	return 0;
}

int server_run(const aahd_config *cfg)
{
	int lvl = log_level_parse(cfg->log_level);
	log_set_level(lvl < 0 ? LOG_INFO : (log_level)lvl);
	signals_block();   /* before any thread exists: they all inherit the mask */

	server_ctx *srv = calloc(1, sizeof *srv);
	if (!srv) {
		log_msg(LOG_ERROR, NULL, "out of memory");
		return 1;
	}
	srv->cfg = cfg;
	srv->created = time(NULL);
	const char *env_key = getenv("AAHD_API_KEY");
	const char *one_key = env_key && *env_key ? env_key : *cfg->api_key ? cfg->api_key : NULL;
	srv->cache_per_key = !strcmp(cfg->prefix_cache_scope, "key");
	atomic_init(&srv->draining, false);

	engine_params ep = { 0 };
	ep.backend = cfg->backend;   /* auto, cpu, cuda: the load line below says which one runs */
	ep.n_threads = (int32_t)cfg->threads;
	ep.max_seqs = (int32_t)cfg->max_batch;
	ep.ctx_len = (int32_t)cfg->ctx_len;
	ep.max_batch_tokens = (int32_t)(cfg->prefill_chunk + cfg->max_batch);   /* a whole step is one chunk */
	ep.kv_dtype = dtype_of(cfg->kv_dtype);
	ep.kv_budget_bytes = cfg->kv_budget_bytes;
	ep.prefix_cache = !strcmp(cfg->prefix_cache, "on");
	ep.prefix_cache_bytes = cfg->prefix_cache_bytes;
	ep.checkpoint_step = cfg->checkpoint_step;
	ep.aah_path = *cfg->aah ? cfg->aah : NULL;
	/* speculative decoding: any request may take positions back (a sequence that speculates holds a page more per
	 * windowed ring; the others nothing), and regime drafts need a draft sequence beside every slot in the same pool
	 * (without kv_budget_bytes the pool then has room for twice the slots' full contexts: memory the OS commits only
	 * as pages are written on the CPU) */
	ep.rollback = ENGINE_MAX_ROLLBACK;
	if (*cfg->draft_regime)
		ep.max_seqs *= 2;

	char err[1024], dir[4096];
	int rc = 1;
	engine *e = NULL, *draft = NULL;
	http_server *http = NULL;
	if (*cfg->api_keys && api_keys_load(&srv->keys, cfg->api_keys, err, sizeof err) != 0) {
		log_msg(LOG_ERROR, NULL, "api_keys: %s", err);
		goto done;
	}
	if (one_key) {   /* the single key beside the file's: named "default", or "api_key" when the file has a default */
		bool taken = false;
		for (int i = 0; i < srv->keys.n; i++)
			taken |= !strcmp(srv->keys.k[i].name, "default");
		if (strlen(one_key) > API_KEY_MAX ||
		    api_keys_add(&srv->keys, taken ? "api_key" : "default", one_key, err, sizeof err) != 0) {
			log_msg(LOG_ERROR, NULL, "api_key: %s", strlen(one_key) > API_KEY_MAX ? "longer than 256 bytes" : err);
			goto done;
		}
	}
	double t0 = aah_now_s();
	log_msg(LOG_INFO, NULL, "loading %s", cfg->model);
	if (aah_resolve_model_dir(cfg->model, cfg->checkpoint_step > 0 ? cfg->checkpoint_step : -1, dir, sizeof dir, err,
	                          sizeof err) != 0 ||
	    engine_init(&e, cfg->model, &ep, err, sizeof err) != 0) {
		log_msg(LOG_ERROR, NULL, "cannot load the model: %s", err);
		goto done;
	}
	srv->tok = tokenizer_load(dir, err, sizeof err);
	if (!srv->tok || model_config_check_tokenizer(engine_config(e), srv->tok, err, sizeof err) != 0) {
		log_msg(LOG_ERROR, NULL, "cannot load the tokenizer: %s", err);
		goto done;
	}
	if (chat_template_load(cfg->chat_template, dir, srv->tok, &srv->chat, err, sizeof err) != 0) {
		log_msg(LOG_ERROR, NULL, "%s", err);
		goto done;
	}
	/* A GGUF carries its template inside (tokenizer.chat_template); a configured file or one beside it wins. */
	const char *gguf_template = engine_chat_template(e);
	if (!srv->chat && gguf_template) {
		char origin[4200];
		snprintf(origin, sizeof origin, "%s: tokenizer.chat_template", cfg->model);
		int32_t bos = tokenizer_bos(srv->tok), eos = tokenizer_eos(srv->tok);
		srv->chat = chat_template_from_string(gguf_template, strlen(gguf_template), origin,
		                                      bos >= 0 ? tokenizer_token_text(srv->tok, bos) : NULL,
		                                      eos >= 0 ? tokenizer_token_text(srv->tok, eos) : NULL, err, sizeof err);
		if (!srv->chat) {
			log_msg(LOG_ERROR, NULL, "%s", err);
			goto done;
		}
	}
	log_msg(LOG_INFO, NULL, "chat template: %s", srv->chat ? chat_template_origin(srv->chat)
	                                                         : "none (chat requests get 400; see --chat-template)");
	/* auto: the format the template writes calls in. llama3_json's <|python_tag|> and mistral's [TOOL_CALLS] are
	 * special tokens, which the text skips; the tool parser gets them back as markers (chat_completions.c) */
	if (!strcmp(cfg->tool_call_parser, "auto"))
		srv->tool_fmt = srv->chat ? chat_template_tool_format(srv->chat) : TOOL_FORMAT_NONE;
	else
		srv->tool_fmt = tool_format_from_name(cfg->tool_call_parser);
	log_msg(LOG_INFO, NULL, "tool-call parser: %s (tool_call_parser = %s)", tool_format_name(srv->tool_fmt),
	        cfg->tool_call_parser);
	const model_config *mc = engine_config(e);
	srv->ctx_len = engine_ctx_len(e);
	srv->vocab = mc->vocab_size;
	srv->max_prompt_tokens = cfg->max_prompt_tokens > 0 && cfg->max_prompt_tokens < srv->ctx_len
	                                 ? (int32_t)cfg->max_prompt_tokens : srv->ctx_len;
	srv->max_tokens = cfg->max_tokens > 0 && cfg->max_tokens < srv->ctx_len ? (int32_t)cfg->max_tokens : srv->ctx_len;
	eos_add(srv, tokenizer_eos(srv->tok));
	eos_add(srv, mc->eos_token_id);
	/* constrained decoding: the tokens' bytes in a trie (about 50 ms for Qwen3's vocabulary), once */
	srv->gvocab = grammar_vocab_new(srv->tok, srv->vocab, err, sizeof err);
	srv->grammars = srv->gvocab ? grammar_cache_new(srv->gvocab, 64) : NULL;
	if (!srv->grammars) {
		log_msg(LOG_ERROR, NULL, "constrained decoding: %s", srv->gvocab ? "out of memory" : err);
		goto done;
	}
	srv->n_regimes = engine_regime_count(e) < SCHED_MAX_REGIMES ? engine_regime_count(e) : SCHED_MAX_REGIMES;
	for (int32_t i = 0; i < srv->n_regimes; i++)
		snprintf(srv->regimes[i], sizeof srv->regimes[i], "%s", engine_regime_name(e, i));
	const char *def = *cfg->regime ? cfg->regime : engine_default_regime(e);
	int32_t di = server_regime_index(srv, def);
	if (di < 0) {
		char names[1024] = "";
		for (int32_t i = 0; i < srv->n_regimes; i++)
			snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", srv->regimes[i]);
		log_msg(LOG_ERROR, NULL, "regime '%s' is not one of this model's: %s", def, names);
		goto done;
	}
	srv->default_regime = srv->regimes[di];
	if (*cfg->model_name) {
		snprintf(srv->model_name, sizeof srv->model_name, "%s", cfg->model_name);
	} else {
		char path[4096];
		snprintf(path, sizeof path, "%s", cfg->model);
		size_t n = strlen(path);
		while (n > 1 && path[n - 1] == '/')
			path[--n] = 0;
		snprintf(srv->model_name, sizeof srv->model_name, "%s", basename(path));
	}

	if (*cfg->model_draft && draft_open(cfg, &ep, srv->tok, &draft, err, sizeof err) != 0) {
		log_msg(LOG_ERROR, NULL, "model_draft: %s", err);
		goto done;
	}
	sched_params sp = { 0 };
	sp.max_seqs = (int32_t)cfg->max_batch;
	sp.queue_length = (int32_t)cfg->queue_length;
	sp.step_tokens = (int32_t)cfg->prefill_chunk;
	sp.tok = srv->tok;   /* stop strings are matched on the engine thread */
	const char *delay = getenv("AAHD_TEST_STEP_DELAY_US");   /* tests only: long-lived requests to cancel */
	sp.step_delay_us = delay ? atoi(delay) : 0;
	sched_draft_parse(cfg->speculation, &sp.spec.draft);   /* the table allows only the names */
	sp.spec.k = (int32_t)cfg->spec_k;
	sp.spec.adaptive = !strcmp(cfg->spec_adaptive, "on");
	sp.spec.regime = *cfg->draft_regime ? cfg->draft_regime : NULL;
	sp.draft = draft;
	if (sched_init(&srv->sch, e, &ep, &sp, err, sizeof err) != 0) {
		log_msg(LOG_ERROR, NULL, "%s", err);
		goto done;
	}
	snprintf(srv->backend, sizeof srv->backend, "%s", engine_backend_desc(e));
	srv->eng = e;
	engine_regime_layout lay;
	srv->acr_context_length = engine_regime_layout_get(e, 0, &lay) == 0 ? lay.context_length : srv->ctx_len;
	sched_metrics *m = malloc(sizeof *m);
	if (m)
		sched_metrics_get(srv->sch, m);
	log_msg(LOG_INFO, NULL, "model '%s' loaded in %.2fs: %s, context %d, %d regimes (default %s), %d slots, KV cache %.1f MiB",
	        srv->model_name, aah_now_s() - t0, engine_backend_desc(e), srv->ctx_len, srv->n_regimes, srv->default_regime,
	        (int)cfg->max_batch, m ? (double)m->kv_bytes_capacity / (1 << 20) : 0.0);
	free(m);

	http = http_server_start(srv, err, sizeof err);
	if (!http) {
		log_msg(LOG_ERROR, NULL, "%s", err);
		goto done;
	}
	log_msg(LOG_INFO, NULL, "listening on http://%s%s%s:%u%s", strchr(cfg->host, ':') ? "[" : "", cfg->host,
	        strchr(cfg->host, ':') ? "]" : "", http_server_port(http), srv->keys.n ? " (API key required)" : "");
	sd_notifyf(0, "READY=1\nSTATUS=serving %s on %s port %u", srv->model_name, cfg->host, http_server_port(http));

	int sig = signals_wait(-1);
	log_msg(LOG_INFO, NULL, "signal %d: draining (up to %llds for %d requests)", sig,
	        (long long)cfg->shutdown_grace_seconds, sched_busy(srv->sch));
	sd_notify(0, "STOPPING=1\nSTATUS=draining");
	atomic_store(&srv->draining, true);
	http_server_quiesce(http);
	sched_drain(srv->sch);
	/* The whole stop keeps within the grace and one second, whatever the connections do: the grace for the
	 * requests, then half a second for the cancelled ones to end, a fifth for the last answers to leave, and the rest
	 * for libmicrohttpd to stop; past that the process exits without it. A second signal skips every wait. */
	const double end = aah_now_s() + (double)cfg->shutdown_grace_seconds;
	bool hurry = false;
	if (!wait_until(sched_busy_of, srv->sch, end, &hurry, 50)) {
		log_msg(LOG_WARN, NULL, "cancelling %d unfinished requests", sched_busy(srv->sch));
		sched_cancel_all(srv->sch);
		wait_until(sched_busy_of, srv->sch, end + 0.5, &hurry, 10);
	}
	wait_until(http_busy_of, http, end + 0.7, &hurry, 10);
	http_server_stop_begin(http);
	if (!wait_until(http_running_of, http, end + 0.95, &hurry, 10)) {
		/* a stuck library must not keep the process: the engine and the model go with the exit */
		log_msg(LOG_ERROR, NULL, "the HTTP library did not stop in time: exiting without it");
		log_msg(LOG_INFO, NULL, "stopped");
		http_left_running = http;   /* not freed: its threads may still use it */
		return 0;
	}
	rc = 0;
done:
	http_server_stop(http);   /* (stopped already after a signal) */
	sched_free(srv->sch);
	engine_free(draft);
	engine_free(e);
	grammar_cache_free(srv->grammars);   /* after the scheduler: its requests held grammars */
	grammar_vocab_free(srv->gvocab);
	tokenizer_free(srv->tok);
	chat_template_free(srv->chat);
	api_keys_free(&srv->keys);
	free(srv);
	if (rc == 0)
		log_msg(LOG_INFO, NULL, "stopped");
	return rc;
}
