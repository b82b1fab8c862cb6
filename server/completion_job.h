/* server/completion_job.h — one /v1/completions request on its way through the scheduler: its prompts
 * (tokenized), its choices (one scheduler request each, n per prompt), the text each choice has so far, and the
 * JSON pieces both response shapes share (logprobs, usage, aah). Used by completions.c and completion_stream.c. */
#ifndef AAH_SERVER_COMPLETION_JOB_H
#define AAH_SERVER_COMPLETION_JOB_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "engine/scheduler.h"
#include "server/choice_text.h"
#include "server/completion_request.h"
#include "server/http.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"

typedef struct cmpl_prompt {
	int32_t *ids;                     /* n_ids, owned */
	int32_t n_ids;
	char *echo;                       /* its text, for echo: the string as given, or the ids decoded; owned */
	size_t echo_len;
	size_t echo_chars;                /* in code points */
	int32_t *tok_chars;               /* (n_ids) text offset of each prompt token, code points; echo+logprobs only */
	int32_t lp_choice;                /* the choice whose scheduler request computes this prompt's log-probabilities */
} cmpl_prompt;

typedef struct cmpl_choice {
	int32_t index;                    /* in the response: prompt · n + sample */
	int32_t prompt;
	sched_request *r;
	choice_text text;
	bool ended;
	const char *finish_reason;        /* "stop", "length", "abort" */
	bool head_sent;                   /* streaming: the shape's head event (chat: the role) is out */
	sched_result result;              /* once ended */
	/* streaming progress */
	bool echo_sent;
	size_t sent;                      /* text bytes sent */
	int32_t lp_sent;                  /* generated tokens whose log-probabilities were sent */
	bool final_sent;
	reasoning_split split;            /* chat streaming: the reasoning/content split of the text sent so far */
	tool_parser *tools;               /* chat streaming with tools: the tool calls in that content; owned, or NULL */
} cmpl_choice;

typedef struct cmpl_job {
	atomic_int refs;                  /* the HTTP side's, plus one per choice until the engine's last notification */
	pthread_mutex_t mu;               /* guards version and waiter */
	uint64_t version;                 /* bumped by every notification of the engine thread */
	http_request *waiter;             /* woken by every notification (cmpl_job_watch); NULL: nobody */
	server_ctx *srv;
	char id[64];                      /* "cmpl-…", "chatcmpl-…" */
	time_t created;
	completion_request req;
	int32_t regime;
	int32_t max_tokens;
	cmpl_prompt *prompts;             /* req.n_prompts */
	cmpl_choice *choices;
	int32_t n_choices;
	bool chat;                        /* /v1/chat/completions: the prompt is a rendered template (no special tokens
	                                   * added when tokenizing it) and max_tokens defaults to the cap */
	reasoning_start reasoning;        /* chat: how each answer begins (server/reasoning.h); OFF for /v1/completions */
	tool_format tools;                /* chat with tools: the format their calls are parsed out of the content as;
	                                   * NONE: no parsing (no tools, tool_choice none, tool_call_parser none) */
	bool tool_parallel;               /* parallel_tool_calls: false returns the first call only */
	const char *const *markers;       /* chat with tools: the texts of the special tokens the tool parser reads (static
	                                   * storage; choice_text_markers), n_markers of them; none otherwise */
	int32_t n_markers;
	uint64_t seed;                    /* the request's seed, or the one drawn for it (submit): tool-call ids too */
	char *owned_text;                 /* text a prompt of req points into that the job owns (chat: the rendered
	                                   * template), or NULL; freed with the job */
	struct grammar *grammar;          /* the compiled constraint of req, or NULL; a reference */
	int fail_status;                  /* with failed: 500, or 400 when the request's own grammar failed (a bound) */
	bool failed;                      /* the engine refused a choice, or its text could not grow (err says which) */
	char err[320];
} cmpl_job;

/* Parses, validates, tokenizes and submits. On success *out is the job (release with cmpl_job_release) and the
 * return value is MHD_YES; otherwise *out is NULL and the error was answered (the return value is MHD's). */
enum MHD_Result cmpl_job_start(http_request *req, cmpl_job **out);
/* The two halves of cmpl_job_start, for an endpoint that fills j->req itself (chat_completions.c). _new: a job of
 * req with id id_prefix + the request's id (NULL when out of memory; free an unsubmitted one with cmpl_job_discard).
 * _submit: checks j->req's model, regime and n against the server, tokenizes its prompts, submits every choice; it
 * takes j whatever happens — on success *out is j, otherwise j is freed, *out is NULL and the error was answered. */
cmpl_job *cmpl_job_new(http_request *req, const char *id_prefix);
void cmpl_job_discard(cmpl_job *j);
enum MHD_Result cmpl_job_submit(http_request *req, cmpl_job *j, cmpl_job **out);
/* The server's bounds for a request's n and max_tokens. */
completion_limits cmpl_job_limits(const server_ctx *s);
/* From now on every notification of the engine wakes req (http_request_wake); NULL: none does. The HTTP side calls it
 * before its first cmpl_job_wait; cmpl_job_release ends it. */
void cmpl_job_watch(cmpl_job *j, http_request *req);
/* Takes what the engine published into each choice's text; a choice ends once its scheduler request has (the engine
 * thread ends one at the token that completes a stop string) and its tokens are taken. Returns true once every choice
 * has ended. */
bool cmpl_job_poll(cmpl_job *j);
/* Waits for news from the engine without holding a thread, after a cmpl_job_poll that found the job unfinished.
 * Returns 1: req is parked (http_request_park): the caller returns (MHD_YES, or 0 bytes from a content reader) and is
 * called again once there is news. 0: there is news already; poll again. -1: the client is gone or the server stops;
 * the caller ends the request. */
int cmpl_job_wait(cmpl_job *j, http_request *req);
/* A non-streaming request's job across libmicrohttpd's calls: cmpl_job_of gives the job cmpl_job_attach made the
 * request's state (NULL on the first call: start one); attach also watches it, and the request's end releases it (an
 * aborted request cancels it first). cmpl_job_await polls and waits until every choice has ended: 1 done, 0 parked
 * (the handler returns MHD_YES and is called again), -1 the client went away (the job cancelled, the request's note
 * says so; the handler returns MHD_NO). */
cmpl_job *cmpl_job_of(http_request *req);
void cmpl_job_attach(cmpl_job *j, http_request *req);
int cmpl_job_await(cmpl_job *j, http_request *req);
/* Cancels every choice that has not ended. */
void cmpl_job_cancel(cmpl_job *j);
/* Drops the HTTP side's reference (cancelling what still runs); the job is freed once the engine is done with it. */
void cmpl_job_release(cmpl_job *j);

/* The legacy logprobs object for choice c: the prompt's tokens when with_echo, then generated tokens [from, to). */
json_t *cmpl_job_logprobs(const cmpl_job *j, const cmpl_choice *c, bool with_echo, int32_t from, int32_t to);
/* Generated tokens of c that count: all the engine generated for it — up to the one that completes a stop string, or
 * up to and with a stop token (EOS). */
int32_t cmpl_job_completion_tokens(const cmpl_choice *c);
/* A token's own text as a JSON string (special tokens spelled out; an id the tokenizer lacks: ""; a partial
 * character: U+FFFD), and a log-probability as JSON (-inf, which JSON cannot spell, as -9999, as vLLM sends). */
json_t *cmpl_job_token_string(const tokenizer *t, int32_t id);
json_t *cmpl_job_logprob_json(float lp);
/* The usage object, and the aah object of one choice or (c NULL) of the whole request. */
json_t *cmpl_job_usage(const cmpl_job *j);
/* The job's token totals: its prompts' tokens and its choices' completion tokens (cmpl_job_completion_tokens): the
 * one place usage and the request log add them up. */
void cmpl_job_token_totals(const cmpl_job *j, int64_t *prompt, int64_t *completion);
/* The name of the job's regime. */
const char *cmpl_job_regime_name(const cmpl_job *j);
json_t *cmpl_job_aah(const cmpl_job *j, const cmpl_choice *c);

#endif
