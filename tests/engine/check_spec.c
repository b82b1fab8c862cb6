/* tests/engine/check_spec.c — Check suite for speculative decoding in the scheduler (engine/sched_spec.c): the output of
 * a speculating request is the output without speculation, token for token — greedy and seeded, n-gram, regime and
 * model drafts, under full attention, a static windowed regime whose rings wrap and an adaptive one that probes, f32
 * and f16 KV, to the end of the context — and so are its ACR, branch usage and attention products; a draft from the
 * model itself is accepted whole; sampled tokens keep the target distribution (chi-square over thousands of draws);
 * draft sequences give their pages back; what cannot run is refused at submit. No HTTP. */
#include "tests/engine/sched_test.h"

#define SPEC_SLOTS 4

/* qwen3-small-a with three regimes: full_attention, "st" (static windows of 16 and 32: rings wrap every few dozen
 * positions) and "ad" (adaptive, probes every 3 decode steps). */
static void make_spec_dir(char *dir, size_t n)
{
	make_model_dir(dir, n, "spec", "qwen3-small-a",
	               "{\"version\":1,\"context_length\":256,\"candidate_windows\":[16,32,64,128],\"default_regime\":\"st\","
	               "\"regimes\":{"
	               "\"st\":{\"policy\":{\"kind\":\"static\"},\"layers\":["
	               "{\"groups\":[{\"kv_heads\":[0],\"window\":16},{\"kv_heads\":[1],\"window\":32}]},"
	               "{\"groups\":[{\"kv_heads\":[0,1],\"window\":16}]}]},"
	               "\"ad\":{\"policy\":{\"kind\":\"adaptive\",\"control_interval\":3,\"feature_ema\":0.5,"
	               "\"resolution_ema\":0.5,\"coverage\":0.6},\"layers\":["
	               "{\"groups\":[{\"kv_heads\":[0],\"window\":32,\"capacity\":64},{\"kv_heads\":[1],\"window\":64,\"capacity\":128}]},"
	               "{\"groups\":[{\"kv_heads\":[0,1],\"window\":16,\"capacity\":32}]}]}}}");
}

/* A scheduler over the model in dir, with every kind of draft available: regime drafts (two sequences a slot) under
 * draft_regime, and the model in draft_dir (NULL: none) as the draft model. */
typedef struct spec_rig {
	engine *e, *draft;
	sched *s;
} spec_rig;

static void rig_start(spec_rig *g, const char *dir, aah_dtype kv, const char *draft_regime, const char *draft_dir,
                      int32_t step_delay_us)
{
	char err[512];
	engine_params ep = eparams();
	ep.kv_dtype = kv;
	ep.max_seqs = 2 * SPEC_SLOTS;
	ep.rollback = ENGINE_MAX_ROLLBACK;
	ck_assert_msg(engine_init(&g->e, dir, &ep, err, sizeof err) == 0, "%s", err);
	g->draft = NULL;
	if (draft_dir) {
		engine_params dp = ep;
		dp.max_seqs = SPEC_SLOTS;
		ck_assert_msg(engine_init(&g->draft, draft_dir, &dp, err, sizeof err) == 0, "%s", err);
	}
	sched_params sp = { .max_seqs = SPEC_SLOTS, .queue_length = 64, .step_tokens = 64, .step_delay_us = step_delay_us };
	sp.spec = (sched_spec){ SCHED_DRAFT_OFF, 4, 1, draft_regime };
	sp.draft = g->draft;
	ck_assert_msg(sched_init(&g->s, g->e, &ep, &sp, err, sizeof err) == 0, "%s", err);
}

/* Every request has ended by then: every sequence closed with its request, draft sequences included, and nothing
 * holds a page (the prefix cache is off). */
static void rig_stop(spec_rig *g)
{
	sched_free(g->s);
	ck_assert_int_eq(engine_kv_pages_used(g->e), 0);
	if (g->draft)
		ck_assert_int_eq(engine_kv_pages_used(g->draft), 0);
	engine_free(g->draft);
	engine_free(g->e);
}

/* Prompts whose outputs copy from them: a random phrase, repeated (prompt lookup finds it), then random tokens. */
static void copy_prompt(int32_t *p, int32_t n, uint32_t seed)
{
	int32_t phrase[12];
	make_prompt(phrase, 12, seed);
	for (int32_t i = 0; i < n; i++)
		p[i] = phrase[i % 12];
	if (n > 40)
		make_prompt(p + 36, n - 36, seed * 7u + 1);
}

typedef struct outcome {
	int32_t n, tokens[CTX];
	sched_result res;
} outcome;

/* Submits the requests together and waits for them all. */
static void run_all(sched *s, const sched_request_params *rp, int32_t n, outcome *out)
{
	char err[512];
	sched_request *r[16];
	ck_assert_int_le(n, 16);
	for (int32_t i = 0; i < n; i++)
		ck_assert_msg(sched_submit(s, &rp[i], 1, &r[i], err, sizeof err) == SCHED_OK, "%s", err);
	for (int32_t i = 0; i < n; i++) {
		out[i].res = wait_end(r[i]);
		out[i].n = out[i].res.n_tokens;
		memcpy(out[i].tokens, sched_request_tokens(r[i]), (size_t)out[i].n * sizeof(int32_t));
		sched_request_release(r[i]);
	}
}

/* What must not change with speculation: the tokens, the finish, and the AAH figures as if decoded one by one. */
static void same_outcome(const outcome *a, const outcome *b, const char *what)
{
	ck_assert_msg(a->n == b->n && !memcmp(a->tokens, b->tokens, (size_t)a->n * sizeof(int32_t)),
	              "%s: %d tokens with speculation, %d without, or other ones", what, b->n, a->n);
	ck_assert_int_eq(a->res.finish, b->res.finish);
	const engine_seq_stats *x = &a->res.stats, *y = &b->res.stats;
	ck_assert_msg(x->n_positions == y->n_positions && x->attn_products == y->attn_products &&
	              x->attn_products_full == y->attn_products_full, "%s: positions or attention products differ "
	              "(%lld/%llu vs %lld/%llu)", what, (long long)y->n_positions, (unsigned long long)y->attn_products,
	              (long long)x->n_positions, (unsigned long long)x->attn_products);
	ck_assert_int_eq(x->n_usage, y->n_usage);
	ck_assert_msg(!memcmp(x->usage_window, y->usage_window, (size_t)x->n_usage * sizeof *x->usage_window) &&
	              !memcmp(x->usage, y->usage, (size_t)x->n_usage * sizeof *x->usage) && x->acr == y->acr,
	              "%s: branch usage or ACR differ (%.9f vs %.9f)", what, y->acr, x->acr);
}

/* Greedy and seeded, every draft kind, three regimes, f32 and f16 KV: the same output as without speculation. Loop
 * index: KV type × target regime. */
START_TEST(test_same_output)
{
	static const aah_dtype kvs[] = { AAH_DTYPE_F32, AAH_DTYPE_F16 };
	static const char *const regimes[] = { "full_attention", "st", "ad" };
	const aah_dtype kv = kvs[_i / 3];
	const char *regime = regimes[_i % 3];
	char dir[256];
	make_spec_dir(dir, sizeof dir);
	/* regime drafts from a regime other than the target's; the draft model is qwen3-small-b (other weights) */
	const char *dreg = !strcmp(regime, "st") ? "ad" : "st";
	char other[1024];
	snprintf(other, sizeof other, "%s/qwen3-small-b", testdata());
	spec_rig g;
	rig_start(&g, dir, kv, dreg, other, 0);
	enum { N = 7 };
	static int32_t prompts[N][200];
	static const int32_t lens[N] = { 40, 60, 24, 90, 50, 200, 30 };
	static const sampler_bias loop = { 300, 100 };   /* request 6 repeats itself: prompt lookup's drafts are taken */
	sched_request_params base[N];
	for (int32_t i = 0; i < N; i++) {
		copy_prompt(prompts[i], lens[i], 100u + (uint32_t)i);
		base[i] = req_params(prompts[i], lens[i], i == 5 ? CTX - lens[i] : 48);   /* the last to the context's end */
		base[i].regime = regime;
		if (i == 6) {
			base[i].sampling.bias = &loop;
			base[i].sampling.n_bias = 1;
		}
		if (i % 2 == 1) {   /* seeded draws */
			base[i].sampling.temperature = 0.9f;
			base[i].sampling.top_k = 12;
			base[i].sampling.seed = 7 + (uint64_t)i;
		}
	}
	static outcome off[N], on[N];
	run_all(g.s, base, N, off);
	static const sched_draft kinds[] = { SCHED_DRAFT_NGRAM, SCHED_DRAFT_REGIME, SCHED_DRAFT_MODEL };
	for (size_t k = 0; k < 3; k++) {
		int64_t drafted = 0, accepted = 0;
		sched_request_params rp[N];
		for (int32_t i = 0; i < N; i++) {
			rp[i] = base[i];
			rp[i].spec = (sched_spec){ kinds[k], 1 + (int32_t)((k + (size_t)i) % 6), i % 3 != 0, NULL };
		}
		run_all(g.s, rp, N, on);
		for (int32_t i = 0; i < N; i++) {
			char what[128];
			snprintf(what, sizeof what, "kv %s, regime %s, draft %s, request %d", aah_dtype_name(kv), regime,
			         sched_draft_name(kinds[k]), i);
			same_outcome(&off[i], &on[i], what);
			ck_assert_int_eq(on[i].res.draft, kinds[k]);
			ck_assert_int_le(on[i].res.spec_accepted, on[i].res.spec_drafted);
			drafted += on[i].res.spec_drafted;
			accepted += on[i].res.spec_accepted;
		}
		/* a draft model of other random weights may never agree with the target: it must draft, not be taken */
		ck_assert_msg(drafted > 0 && (accepted > 0 || kinds[k] == SCHED_DRAFT_MODEL), "%s: nothing was drafted (%lld) "
		              "or accepted (%lld)", sched_draft_name(kinds[k]), (long long)drafted, (long long)accepted);
	}
	sched_metrics m;
	sched_metrics_get(g.s, &m);
	for (int32_t d = 0; d < SCHED_N_DRAFTS; d++)
		ck_assert(m.spec_accepted[d] <= m.spec_drafted[d]);
	ck_assert(m.spec_draft_steps[SCHED_DRAFT_REGIME - SCHED_DRAFT_NGRAM] > 0);
	ck_assert(m.spec_draft_steps[SCHED_DRAFT_MODEL - SCHED_DRAFT_NGRAM] > 0);
	ck_assert(m.spec_draft_steps[0] == 0);   /* prompt lookup runs no model */
	rig_stop(&g);
	remove_model_dir(dir);
}
END_TEST

/* The draft model is the target itself: every greedy draft token is the target's own, so every one is accepted, and
 * the verify passes produce k + 1 tokens each — which fails if a verify row were not exactly a decode step's. */
START_TEST(test_self_draft_accepted_whole)
{
	char dir[256];
	make_spec_dir(dir, sizeof dir);
	spec_rig g;
	rig_start(&g, dir, AAH_DTYPE_F32, NULL, dir, 0);
	int32_t prompt[30];
	make_prompt(prompt, 30, 99);
	sched_request_params rp[3];
	for (int32_t i = 0; i < 3; i++) {
		rp[i] = req_params(prompt, 30 - i, 81);
		rp[i].regime = i == 0 ? "full_attention" : "st";   /* the draft engine's is its default, st */
		rp[i].spec = (sched_spec){ SCHED_DRAFT_MODEL, 4, 0, NULL };
	}
	outcome on[3];
	run_all(g.s, rp, 3, on);
	/* st drafts for st: accepted whole; full attention is drafted by st's windows: some are not. The first token comes
	 * from the prompt, the other 80 from passes of k + 1 = 5 tokens */
	for (int32_t i = 1; i < 3; i++) {
		ck_assert_int_eq(on[i].n, 81);
		ck_assert_int_eq(on[i].res.spec_passes, 16);
		ck_assert_int_eq(on[i].res.spec_drafted, 64);
		ck_assert_int_eq(on[i].res.spec_accepted, 64);
	}
	rig_stop(&g);
	remove_model_dir(dir);
}
END_TEST

/* p ∝ exp(logit) over the top_k largest logits (temperature 1), as the sampler draws. */
static void topk_probs(const float *x, int32_t vocab, int32_t k, int32_t *ids, double *p)
{
	for (int32_t j = 0; j < k; j++) {
		int32_t best = -1;
		for (int32_t v = 0; v < vocab; v++) {
			bool taken = false;
			for (int32_t q = 0; q < j; q++)
				taken |= ids[q] == v;
			if (!taken && (best < 0 || x[v] > x[best]))
				best = v;
		}
		ids[j] = best;
	}
	double sum = 0;
	for (int32_t j = 0; j < k; j++)
		sum += p[j] = exp((double)x[ids[j]] - (double)x[ids[0]]);
	for (int32_t j = 0; j < k; j++)
		p[j] /= sum;
}

static int32_t index_of(const int32_t *ids, int32_t n, int32_t id)
{
	for (int32_t i = 0; i < n; i++)
		if (ids[i] == id)
			return i;
	return -1;
}

/* The rejection rule keeps the target distribution: 3-token outputs at temperature 1, top_k 4, drafted by the model
 * itself (its greedy token, which the draw keeps with probability p(d)); the first token is drawn from the prompt's
 * row, the second from the verify pass's first row, the third from its second row when the draft was kept. Each
 * against the probabilities computed from the model's logits: chi-square, below the 0.001 critical value. */
START_TEST(test_chi_square)
{
	enum { K = 4 };
	const int32_t draws = test_rounds(4000);
	char dir[256], err[512];
	make_spec_dir(dir, sizeof dir);
	spec_rig g;
	rig_start(&g, dir, AAH_DTYPE_F32, NULL, model_dir(), 0);   /* the draft: the model under full attention */
	const int32_t V = engine_config(g.e)->vocab_size;
	int32_t prompt[20];
	make_prompt(prompt, 20, 4242);
	/* the expected distributions, from a reference engine: p1 after the prompt; p2 after each first token; p3 after
	 * each first token and the greedy second one (the kept draft) */
	engine_params ep = eparams();
	engine *ref;
	ck_assert_msg(engine_init(&ref, dir, &ep, err, sizeof err) == 0, "%s", err);
	float *x = malloc((size_t)V * sizeof *x);
	int32_t id1[K], id2[K][K], id3[K][K];
	double p1[K], p2[K][K], p3[K][K];
	int32_t greedy2[K];
	int32_t seq = engine_seq_open(ref, "full_attention", err, sizeof err);
	engine_item it = { seq, prompt, 20, false, false, false };
	ck_assert(engine_forward(ref, &it, 1, x, err, sizeof err) == 0);
	engine_seq_close(ref, seq);
	topk_probs(x, V, K, id1, p1);
	for (int32_t a = 0; a < K; a++) {
		int32_t pp[22];
		memcpy(pp, prompt, sizeof prompt);
		pp[20] = id1[a];
		seq = engine_seq_open(ref, "full_attention", err, sizeof err);
		it = (engine_item){ seq, pp, 21, false, false, false };
		ck_assert(engine_forward(ref, &it, 1, x, err, sizeof err) == 0);
		engine_seq_close(ref, seq);
		topk_probs(x, V, K, id2[a], p2[a]);
		greedy2[a] = id2[a][0];
		pp[21] = greedy2[a];
		seq = engine_seq_open(ref, "full_attention", err, sizeof err);
		it = (engine_item){ seq, pp, 22, false, false, false };
		ck_assert(engine_forward(ref, &it, 1, x, err, sizeof err) == 0);
		engine_seq_close(ref, seq);
		topk_probs(x, V, K, id3[a], p3[a]);
	}
	engine_free(ref);
	free(x);

	static int32_t c1[K], c2[K][K], c3[K][K];
	memset(c1, 0, sizeof c1);
	memset(c2, 0, sizeof c2);
	memset(c3, 0, sizeof c3);
	int64_t drafted = 0, accepted = 0;
	for (int32_t d0 = 0; d0 < draws; d0 += 16) {
		sched_request_params rp[16];
		outcome *o = malloc(16 * sizeof *o);
		int32_t n = draws - d0 < 16 ? draws - d0 : 16;
		for (int32_t i = 0; i < n; i++) {
			rp[i] = req_params(prompt, 20, 3);
			rp[i].regime = "full_attention";
			rp[i].sampling.temperature = 1;
			rp[i].sampling.top_k = K;
			rp[i].sampling.seed = 1000 + (uint64_t)(d0 + i);
			rp[i].spec = (sched_spec){ SCHED_DRAFT_MODEL, 2, 0, NULL };
		}
		run_all(g.s, rp, n, o);
		for (int32_t i = 0; i < n; i++) {
			ck_assert_int_eq(o[i].n, 3);
			int32_t a = index_of(id1, K, o[i].tokens[0]);
			ck_assert_int_ge(a, 0);
			c1[a]++;
			int32_t b = index_of(id2[a], K, o[i].tokens[1]);
			ck_assert_int_ge(b, 0);
			c2[a][b]++;
			if (o[i].tokens[1] == greedy2[a]) {
				int32_t c = index_of(id3[a], K, o[i].tokens[2]);
				ck_assert_int_ge(c, 0);
				c3[a][c]++;
			}
			drafted += o[i].res.spec_drafted;
			accepted += o[i].res.spec_accepted;
		}
		free(o);
	}
	/* the draft was checked, and the greedy second token kept about as often as its probability says */
	ck_assert_msg(drafted > 0 && accepted > 0 && accepted < drafted, "drafted %lld, accepted %lld", (long long)drafted,
	              (long long)accepted);
	double chi = 0;
	int32_t dof = 0;
	for (int32_t a = 0; a < K; a++) {
		chi += (c1[a] - draws * p1[a]) * (c1[a] - draws * p1[a]) / (draws * p1[a]);
		int32_t n2 = 0, n3 = 0;
		for (int32_t b = 0; b < K; b++) {
			n2 += c2[a][b];
			n3 += c3[a][b];
		}
		for (int32_t b = 0; b < K && n2 >= 20; b++)
			chi += (c2[a][b] - n2 * p2[a][b]) * (c2[a][b] - n2 * p2[a][b]) / (n2 * p2[a][b]);
		for (int32_t c = 0; c < K && n3 >= 20; c++)
			chi += (c3[a][c] - n3 * p3[a][c]) * (c3[a][c] - n3 * p3[a][c]) / (n3 * p3[a][c]);
		dof += (n2 >= 20 ? K - 1 : 0) + (n3 >= 20 ? K - 1 : 0);
	}
	dof += K - 1;
	/* chi-square critical values at p = 0.001 for 3 … 27 degrees of freedom (every 3) */
	static const double crit[] = { 16.27, 22.46, 27.88, 32.91, 37.70, 42.31, 46.80, 51.18, 55.48 };
	ck_assert_int_ge(dof, 6);
	ck_assert_msg(chi < crit[dof / 3 - 1], "chi-square %.2f over %d degrees of freedom (critical %.2f): the draws "
	              "do not follow the model's distribution", chi, dof, crit[dof / 3 - 1]);
	/* the same seed, the same output, with speculation as without */
	sched_request_params a = req_params(prompt, 20, 3), b;
	a.regime = "full_attention";
	a.sampling.temperature = 1;
	a.sampling.top_k = K;
	a.sampling.seed = 1000;
	b = a;
	b.spec = (sched_spec){ SCHED_DRAFT_MODEL, 2, 0, NULL };
	outcome oa, ob;
	run_all(g.s, &a, 1, &oa);
	run_all(g.s, &b, 1, &ob);
	ck_assert(oa.n == 3 && ob.n == 3 && !memcmp(oa.tokens, ob.tokens, sizeof(int32_t) * 3));
	rig_stop(&g);
	remove_model_dir(dir);
}
END_TEST

/* Requests cancelled while they speculate give back every page, their draft sequences' included. */
START_TEST(test_cancel)
{
	char dir[256], err[512];
	make_spec_dir(dir, sizeof dir);
	spec_rig g;
	rig_start(&g, dir, AAH_DTYPE_F16, "ad", dir, 2000);
	int32_t prompt[60];
	copy_prompt(prompt, 60, 5);
	sched_request *r[6];
	static const sched_draft kinds[] = { SCHED_DRAFT_NGRAM, SCHED_DRAFT_REGIME, SCHED_DRAFT_MODEL };
	for (int32_t i = 0; i < 6; i++) {
		sched_request_params rp = req_params(prompt, 60, 150);
		rp.regime = "st";
		rp.spec = (sched_spec){ kinds[i % 3], 3, 1, NULL };
		ck_assert_msg(sched_submit(g.s, &rp, 1, &r[i], err, sizeof err) == SCHED_OK, "%s", err);
	}
	sched_view v = { 0 };
	while (v.n_tokens < 10)
		sched_request_wait(r[0], v.version, 5000, &v);
	for (int32_t i = 0; i < 6; i++)
		sched_request_cancel(r[i]);
	for (int32_t i = 0; i < 6; i++) {
		sched_result res = wait_end(r[i]);
		ck_assert(res.finish == SCHED_FINISH_CANCELLED || res.finish == SCHED_FINISH_LENGTH);
		sched_request_release(r[i]);
	}
	rig_stop(&g);
	remove_model_dir(dir);
}
END_TEST

/* What cannot run is refused at submit, naming why; a server default that cannot run is refused at init. */
START_TEST(test_refusals)
{
	char dir[256], err[512];
	make_spec_dir(dir, sizeof dir);
	int32_t prompt[10];
	make_prompt(prompt, 10, 1);
	/* one sequence a slot, no draft model */
	engine_params ep = eparams();
	ep.rollback = ENGINE_MAX_ROLLBACK;
	engine *e;
	ck_assert_msg(engine_init(&e, dir, &ep, err, sizeof err) == 0, "%s", err);
	sched *s;
	sched_params sp = { .max_seqs = SLOTS, .queue_length = 8, .step_tokens = 64 };
	sp.spec.draft = SCHED_DRAFT_MODEL;
	ck_assert_int_ne(sched_init(&s, e, &ep, &sp, err, sizeof err), 0);
	ck_assert_ptr_nonnull(strstr(err, "draft model"));
	sp.spec.draft = SCHED_DRAFT_REGIME;
	sp.spec.regime = "st";
	ck_assert_int_ne(sched_init(&s, e, &ep, &sp, err, sizeof err), 0);
	sp.spec = (sched_spec){ SCHED_DRAFT_NGRAM, 4, 1, "nosuch" };
	ck_assert_int_ne(sched_init(&s, e, &ep, &sp, err, sizeof err), 0);
	ck_assert_ptr_nonnull(strstr(err, "nosuch"));
	sp.spec = (sched_spec){ SCHED_DRAFT_OFF, 4, 1, NULL };
	ck_assert_msg(sched_init(&s, e, &ep, &sp, err, sizeof err) == 0, "%s", err);
	struct { sched_spec spec; const char *regime, *says; } bad[] = {
		{ { SCHED_DRAFT_MODEL, 0, -1, NULL }, NULL, "draft model" },
		{ { SCHED_DRAFT_REGIME, 0, -1, "ad" }, NULL, "regime drafts are off" },
		{ { SCHED_DRAFT_NGRAM, 16, -1, NULL }, NULL, "k outside" },
		{ { SCHED_DRAFT_NGRAM, -1, -1, NULL }, NULL, "k outside" },
		{ { (sched_draft)9, 0, -1, NULL }, NULL, "no such draft" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		sched_request_params rp = req_params(prompt, 10, 4);
		rp.spec = bad[i].spec;
		rp.regime = bad[i].regime;
		sched_request *r;
		ck_assert_int_eq(sched_submit(s, &rp, 1, &r, err, sizeof err), SCHED_ERR_SPEC);
		ck_assert_msg(strstr(err, bad[i].says), "case %zu: '%s'", i, err);
	}
	sched_free(s);
	engine_free(e);
	/* two sequences a slot: a draft regime that is the request's own, or unknown */
	ep.max_seqs = 2 * SLOTS;
	ck_assert_msg(engine_init(&e, dir, &ep, err, sizeof err) == 0, "%s", err);
	sp.spec = (sched_spec){ SCHED_DRAFT_OFF, 4, 1, "st" };
	ck_assert_msg(sched_init(&s, e, &ep, &sp, err, sizeof err) == 0, "%s", err);
	sched_request_params rp = req_params(prompt, 10, 4);
	rp.regime = "st";
	rp.spec = (sched_spec){ SCHED_DRAFT_REGIME, 0, -1, NULL };
	sched_request *r;
	ck_assert_int_eq(sched_submit(s, &rp, 1, &r, err, sizeof err), SCHED_ERR_SPEC);
	ck_assert_ptr_nonnull(strstr(err, "own regime"));
	rp.spec.regime = "nosuch";
	ck_assert_int_eq(sched_submit(s, &rp, 1, &r, err, sizeof err), SCHED_ERR_SPEC);
	rp.spec.regime = "ad";   /* and one that can run, runs */
	ck_assert_int_eq(sched_submit(s, &rp, 1, &r, err, sizeof err), SCHED_OK);
	sched_result res = wait_end(r);
	ck_assert_int_eq(res.n_tokens, 4);
	ck_assert_int_eq(res.draft, SCHED_DRAFT_REGIME);
	sched_request_release(r);
	sched_free(s);
	engine_free(e);
	/* an engine without rollback takes no speculating request */
	ep.rollback = 0;
	ck_assert_msg(engine_init(&e, dir, &ep, err, sizeof err) == 0, "%s", err);
	sp.spec = (sched_spec){ SCHED_DRAFT_OFF, 4, 1, NULL };
	ck_assert_msg(sched_init(&s, e, &ep, &sp, err, sizeof err) == 0, "%s", err);
	rp.spec = (sched_spec){ SCHED_DRAFT_NGRAM, 0, -1, NULL };
	ck_assert_int_eq(sched_submit(s, &rp, 1, &r, err, sizeof err), SCHED_ERR_SPEC);
	ck_assert_ptr_nonnull(strstr(err, "takes back"));
	sched_free(s);
	engine_free(e);
	remove_model_dir(dir);
}
END_TEST

static Suite *spec_suite(void)
{
	Suite *s = suite_create("speculative-decoding");
	TCase *tc = tcase_create("spec");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_same_output, 0, 6);
	tcase_add_test(tc, test_self_draft_accepted_whole);
	tcase_add_test(tc, test_chi_square);
	tcase_add_test(tc, test_cancel);
	tcase_add_test(tc, test_refusals);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(spec_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
