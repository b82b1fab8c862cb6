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

/* Waits until the scheduler is idle or the deadline passes; a second signal ends the wait at once. */
static bool drain_wait(sched *sch, double deadline)
{
	while (sched_busy(sch) > 0) {
		if (aah_now_s() >= deadline)
			return false;
		int sig = signals_wait(50);
		if (sig) {
			log_msg(LOG_WARN, NULL, "second signal %d: not waiting for the grace period", sig);
			return false;
		}
	}
	return true;
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
	srv->api_key = env_key && *env_key ? env_key : *cfg->api_key ? cfg->api_key : NULL;
	atomic_init(&srv->draining, false);

	engine_params ep = { 0 };
	ep.backend = cfg->backend;   /* auto, cpu, cuda: the load line below says which one runs */
	ep.n_threads = (int32_t)cfg->threads;
	ep.max_seqs = (int32_t)cfg->max_batch;
	ep.ctx_len = (int32_t)cfg->ctx_len;
	ep.max_batch_tokens = (int32_t)(cfg->prefill_chunk + cfg->max_batch);   /* a whole step is one chunk */
	ep.kv_dtype = dtype_of(cfg->kv_dtype);
	ep.kv_budget_bytes = cfg->kv_budget_bytes;
	ep.checkpoint_step = cfg->checkpoint_step;
	ep.aah_path = *cfg->aah ? cfg->aah : NULL;

	char err[1024], dir[4096];
	int rc = 1;
	engine *e = NULL;
	http_server *http = NULL;
	double t0 = aah_now_s();
	log_msg(LOG_INFO, NULL, "loading %s", cfg->model);
	if (aah_resolve_model_dir(cfg->model, cfg->checkpoint_step > 0 ? cfg->checkpoint_step : -1, dir, sizeof dir, err,
	                          sizeof err) != 0 ||
	    engine_init(&e, cfg->model, &ep, err, sizeof err) != 0) {
		log_msg(LOG_ERROR, NULL, "cannot load the model: %s", err);
		goto done;
	}
	srv->tok = tokenizer_load(dir, err, sizeof err);
	if (!srv->tok) {
		log_msg(LOG_ERROR, NULL, "cannot load the tokenizer: %s", err);
		goto done;
	}
	const model_config *mc = engine_config(e);
	srv->ctx_len = engine_ctx_len(e);
	srv->vocab = mc->vocab_size;
	srv->max_prompt_tokens = cfg->max_prompt_tokens > 0 && cfg->max_prompt_tokens < srv->ctx_len
	                                 ? (int32_t)cfg->max_prompt_tokens : srv->ctx_len;
	srv->max_tokens = cfg->max_tokens > 0 && cfg->max_tokens < srv->ctx_len ? (int32_t)cfg->max_tokens : srv->ctx_len;
	eos_add(srv, tokenizer_eos(srv->tok));
	eos_add(srv, mc->eos_token_id);
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

	sched_params sp = { 0 };
	sp.max_seqs = (int32_t)cfg->max_batch;
	sp.queue_length = (int32_t)cfg->queue_length;
	sp.step_tokens = (int32_t)cfg->prefill_chunk;
	sp.tok = srv->tok;   /* stop strings are matched on the engine thread */
	const char *delay = getenv("AAHD_TEST_STEP_DELAY_US");   /* tests only: long-lived requests to cancel */
	sp.step_delay_us = delay ? atoi(delay) : 0;
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
	        strchr(cfg->host, ':') ? "]" : "", http_server_port(http), srv->api_key ? " (API key required)" : "");
	sd_notifyf(0, "READY=1\nSTATUS=serving %s on %s port %u", srv->model_name, cfg->host, http_server_port(http));

	int sig = signals_wait(-1);
	log_msg(LOG_INFO, NULL, "signal %d: draining (up to %llds for %d requests)", sig,
	        (long long)cfg->shutdown_grace_seconds, sched_busy(srv->sch));
	sd_notify(0, "STOPPING=1\nSTATUS=draining");
	atomic_store(&srv->draining, true);
	http_server_quiesce(http);
	sched_drain(srv->sch);
	if (!drain_wait(srv->sch, aah_now_s() + (double)cfg->shutdown_grace_seconds)) {
		log_msg(LOG_WARN, NULL, "cancelling %d unfinished requests", sched_busy(srv->sch));
		sched_cancel_all(srv->sch);
		drain_wait(srv->sch, aah_now_s() + 10);
	}
	rc = 0;
done:
	http_server_stop(http);   /* joins the connection threads: they have their answers by now */
	sched_free(srv->sch);
	engine_free(e);
	tokenizer_free(srv->tok);
	free(srv);
	if (rc == 0)
		log_msg(LOG_INFO, NULL, "stopped");
	return rc;
}
