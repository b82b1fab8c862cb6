/* server/http_front.c — see http_front.h. One epoll thread; every connection is a state machine whose states are
 * named, each with one handler (conn_steps), and whose deadlines are named timers, each with one rule for when it is
 * due (timer_due) and one handler for when it passes (conn_timers), as nginx's phase handlers and event timers are:
 *
 *   accept ─▶ FRESH ──first bytes──▶ SERVE (a slot free, nobody waiting) | WAIT_HEAD (the end of the line)
 *     FRESH holds no slot and no buffers; TIMER_IDLE closes it, and past FRESH_PER_SLOT per slot the oldest makes
 *     room for a new one: a flood of silent connections costs little and keeps no one out.
 *   WAIT_HEAD ──head in──▶ WAIT_SLOT ──a slot frees (admit_held; a probe: a probe slot)──▶ SERVE
 *   WAIT_* ──TIMER_WAIT (request_timeout from the first byte): 503──▶ ANSWER
 *   SERVE: one request at a time, by phase: IDLE → HEAD → BODY → WAIT → IDLE …; DISCARD when libmicrohttpd answered
 *     before the body was in (the rest is dropped, and it closes)
 *   SERVE ──framing error, TIMER_REQUEST (408), libmicrohttpd closed unanswered (503)──▶ ANSWER
 *   SERVE ──its last request answered (Connection: close, a probe, quiesce, the client's EOF)──▶ FLUSH
 *   ANSWER ──the earlier answers through──▶ FLUSH ──all written, write side shut──▶ LINGER ──EOF, TIMER_LINGER*──▶ DEAD
 *   any ──a reset, TIMER_IDLE, TIMER_SEND (a client not reading)──▶ DEAD
 *
 * The next request is parsed only after libmicrohttpd completed the last, so that every byte from it belongs to a
 * known request, and the front may answer one itself once earlier answers are through. LINGER is a lingering close:
 * a client still sending a body reads the answer instead of a reset (one cut for trickling lingers a second only).
 * What the sockets have said (the client's EOF or reset, libmicrohttpd's close) is kept apart from the state. */
#include "server/http_front.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "base/clock.h"
#include "server/http_answer.h"
#include "server/http_framing.h"
#include "server/http_front_burst.h"
#include "server/log.h"
#include "server/log_limit.h"

#define IN_CAP 8192                      /* client bytes read, not yet parsed */
#define FWD_CAP HTTP_FRAMING_OUT_MIN     /* canonical bytes for libmicrohttpd; a head is parsed only into an empty one */
#define OUT_CAP 32768                    /* bytes for the client */
#define ANSWER_ROOM 1024                 /* kept free in out for an answer of the front's own */
#define LINGER_TIME_S 30.0               /* a lingering close lasts at most this long (nginx's lingering_time) */
#define LINGER_IDLE_S 5.0                /* … and ends when the client sends nothing for this long (lingering_timeout) */
#define LINGER_BYTES ((uint64_t)64 << 20)/* … or has sent this much */
#define LINGER_SHORT_S 1.0               /* … or this long for a client cut for being slow (which would linger on) */
#define IDLE_RECLAIM_S 1.0               /* a connection idle this long between requests may give its slot up */
#define FRESH_PER_SLOT 8                 /* FRESH connections kept per slot; past it the oldest is closed for a new one */
#define FRESH_MIN_AGE_S 1.0              /* … once it is this old: a younger one's first bytes may be on their way */

struct http_front_link {
	atomic_int refs;                  /* the front's and libmicrohttpd's */
	atomic_bool answered;             /* a response was queued for the current request */
	atomic_uint completed;            /* requests libmicrohttpd has completed */
	atomic_int refused;               /* the front answered the request libmicrohttpd had begun (its status) */
	atomic_bool closed;               /* the front closed the socketpair */
	bool probe;
	int fd;                           /* libmicrohttpd's end of the socketpair */
	http_front *front;
	http_front_link *next;            /* in front->pending until taken */
};

typedef enum conn_state {
	CONN_FRESH,                       /* accepted, nothing sent yet: no slot, no place in line, no buffers */
	CONN_WAIT_HEAD,                   /* no slot: its first head is read (not passed on) */
	CONN_WAIT_SLOT,                   /* no slot, its head is in: it waits for one, oldest first */
	CONN_SERVE,                       /* a slot and libmicrohttpd's socketpair: requests pass, by phase */
	CONN_ANSWER,                      /* the front answers the current request, once earlier answers are through */
	CONN_FLUSH,                       /* closing: the last answer is written */
	CONN_LINGER,                      /* closing: the write side shut, the client's bytes read and dropped */
	CONN_DEAD,                        /* closed; freed at the end of the loop's turn */
	N_CONN_STATES
} conn_state;

typedef enum req_phase { REQ_IDLE, REQ_HEAD, REQ_BODY, REQ_WAIT, REQ_DISCARD } req_phase;

/* What the client's socket has said, in order: a later fact implies the earlier ones. */
typedef enum peer_status {
	PEER_OPEN,
	PEER_SHUT,                        /* it shut its write side (RDHUP); bytes may still be unread */
	PEER_EOF,                         /* every byte of it is read */
	PEER_GONE,                        /* a reset, or an error on it */
} peer_status;

/* libmicrohttpd's side of the socketpair. */
typedef enum inner_status {
	INNER_NONE,                       /* no socketpair (ifd -1) */
	INNER_OPEN,
	INNER_HUP,                        /* libmicrohttpd closed its end: what is left is read, then EOF */
	INNER_EOF,
} inner_status;

typedef enum slot_kind { SLOT_NONE, SLOT_SERVE, SLOT_PROBE } slot_kind;

/* The connection's deadlines, each a timer of its own: when it is due (INFINITY: not armed) and what its passing
 * does (the timer table below). */
typedef enum conn_timer {
	TIMER_WAIT,                       /* WAIT_*: a slot within request_timeout of its first byte, or 503 */
	TIMER_REQUEST,                    /* SERVE, HEAD and BODY: the request within request_timeout, or 408 */
	TIMER_IDLE,                       /* FRESH, or SERVE and IDLE with nothing read: a request within
	                                   * connection_timeout, or a plain close */
	TIMER_SEND,                       /* an answer leaving: the client reads some within connection_timeout */
	TIMER_LINGER,                     /* LINGER: lasts LINGER_TIME_S (LINGER_SHORT_S for a slow client) … */
	TIMER_LINGER_IDLE,                /* … and LINGER_IDLE_S without a byte */
	N_CONN_TIMERS
} conn_timer;

struct conn;
typedef struct ep_tag {
	int kind;                         /* TAG_CLIENT, TAG_INNER, TAG_LISTEN, TAG_WAKE */
	struct conn *c;
} ep_tag;
enum { TAG_CLIENT, TAG_INNER, TAG_LISTEN, TAG_WAKE };

typedef struct conn {
	struct conn *prev, *next;         /* every connection */
	struct conn *hold_next;           /* WAIT_*: the waiting ones, oldest first; FRESH: the fresh ones, oldest first */
	struct conn *dead_next;
	ep_tag tag_c, tag_i;
	int cfd, ifd;                     /* the client; our end of the socketpair (-1: none) */
	uint32_t ev_c, ev_i;              /* epoll interest now (ev_i 0 and !in_epoll: not registered) */
	bool in_epoll;
	struct sockaddr_storage addr;
	socklen_t addr_len;
	char peer_name[64];
	conn_state state;
	req_phase phase;
	peer_status peer;
	inner_status inner;
	slot_kind slot;
	bool last_request;                /* close once the current request is answered */
	bool urgent_sent;                 /* the urgent byte that tells a half-closed client from a gone one */
	double linger_s;                  /* how long LINGER may last */
	int32_t ans_status, ans_retry;    /* ANSWER: the front's own answer */
	const char *ans_type, *ans_code;
	char ans_msg[200];
	http_front_link *link;
	unsigned seen;                    /* completions taken */
	uint64_t owed;                    /* bytes of earlier answers still in the socketpair */
	uint64_t resp_bytes;              /* bytes read from it for the current request */
	uint64_t discarded;
	double t_accept, t_wait, t_phase, t_progress, t_linger, t_read;
	/* one allocation, made when it leaves FRESH (NULL before: a connection that sends nothing costs little) */
	http_framing *fr;
	char *in, *fwd, *out;             /* IN_CAP, FWD_CAP, OUT_CAP */
	size_t in_len, fwd_off, fwd_len, out_off, out_len;
} conn;

struct http_front {
	http_front_params p;
	struct sockaddr_storage laddr;
	int lfd, epfd, wfd;
	uint16_t port;
	pthread_t th;
	bool started;
	pthread_mutex_t mu;               /* pending */
	http_front_link *pending;         /* admitted, not yet taken by libmicrohttpd */
	atomic_bool quiesce_req, stop_req;
	atomic_int busy;                  /* connections with a request in progress or an answer still leaving */
	/* the front thread's own */
	ep_tag tag_listen, tag_wake;
	bool listening, quiesced;
	double accept_pause_until, last_tick;
	conn *all, *hold_head, *hold_tail, *fresh_head, *fresh_tail, *dead;
	int32_t n_active, n_probe, n_hold, n_fresh, n_total;
	http_front_burst burst;           /* the current burst over the limit, for one log line */
	log_limit log;                    /* lines that could repeat (accept failing for want of descriptors) */
};

static bool again(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

static void wake(http_front *f)
{
	uint64_t one = 1;
	ssize_t w = write(f->wfd, &one, sizeof one);
	(void)w;   /* a full counter wakes the thread as well */
}

/* ---- links: libmicrohttpd's side ---- */

static void link_unref(http_front_link *l)
{
	if (l && atomic_fetch_sub(&l->refs, 1) == 1)
		free(l);
}

http_front_link *http_front_link_take(http_front *f, int fd)
{
	pthread_mutex_lock(&f->mu);
	http_front_link **p = &f->pending;
	while (*p && (*p)->fd != fd)
		p = &(*p)->next;
	http_front_link *l = *p;
	if (l)
		*p = l->next;
	pthread_mutex_unlock(&f->mu);
	return l;
}

void http_front_link_release(http_front_link *l) { link_unref(l); }
void http_front_link_answered(http_front_link *l, bool answered) { atomic_store(&l->answered, answered); }
bool http_front_link_probe(const http_front_link *l) { return l->probe; }
bool http_front_link_closed(const http_front_link *l) { return atomic_load(&l->closed); }
int http_front_link_refused(http_front_link *l) { return atomic_load(&l->refused); }

void http_front_wake(http_front *f) { wake(f); }

void http_front_link_completed(http_front_link *l)
{
	atomic_fetch_add(&l->completed, 1);
	wake(l->front);
}

/* ---- connections: plumbing ---- */

static bool waiting(const conn *c) { return c->state == CONN_WAIT_HEAD || c->state == CONN_WAIT_SLOT; }
static bool closing(const conn *c) { return c->state >= CONN_FLUSH; }
static bool out_pending(const conn *c) { return c->out_off < c->out_len; }
static bool answered_by_mhd(const conn *c) { return c->link && atomic_load(&c->link->answered); }

static void epoll_set(http_front *f, int fd, ep_tag *tag, uint32_t *cur, bool *registered, uint32_t want)
{
	if (fd < 0)
		return;
	struct epoll_event ev = { .events = want, .data.ptr = tag };
	if (registered && !*registered) {
		if (epoll_ctl(f->epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
			*registered = true;
		*cur = want;
		return;
	}
	if (want != *cur && epoll_ctl(f->epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
		*cur = want;
}

/* Closes the socketpair and gives the slot back. */
static void inner_close(http_front *f, conn *c)
{
	if (c->ifd < 0)
		return;
	if (c->in_epoll)
		epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->ifd, NULL);
	c->in_epoll = false;
	if (c->link)   /* before the close, so that a request parking now sees it (http_request_park) */
		atomic_store(&c->link->closed, true);
	close(c->ifd);
	c->ifd = -1;
	c->inner = INNER_NONE;
	c->owed = 0;
	if (c->link && f->p.link_closed)
		f->p.link_closed(f->p.ctx, c->link);
	if (c->slot == SLOT_PROBE)
		f->n_probe--;
	else if (c->slot == SLOT_SERVE)
		f->n_active--;
	c->slot = SLOT_NONE;
}

/* The two lines, oldest first, through hold_next: the waiting (WAIT_*) and the fresh. */
static void queue_append(conn **head, conn **tail, int32_t *n, conn *c)
{
	if (*tail)
		(*tail)->hold_next = c;
	else
		*head = c;
	*tail = c;
	(*n)++;
}

static void queue_remove(conn **head, conn **tail, int32_t *n, conn *c)
{
	conn **p = head, *prev = NULL;
	while (*p && *p != c) {
		prev = *p;
		p = &(*p)->hold_next;
	}
	if (!*p)
		return;
	*p = c->hold_next;
	if (*tail == c)
		*tail = prev;
	c->hold_next = NULL;
	(*n)--;
}

/* libmicrohttpd can take another connection now (http_front_params.room); while it cannot, connections wait. */
static bool inner_room(http_front *f) { return !f->p.room || f->p.room(f->p.ctx); }

static void hold_append(http_front *f, conn *c) { queue_append(&f->hold_head, &f->hold_tail, &f->n_hold, c); }
static void hold_remove(http_front *f, conn *c) { queue_remove(&f->hold_head, &f->hold_tail, &f->n_hold, c); }

/* Leaving FRESH: the parser and the buffers of a connection that has sent something. */
static bool conn_buffers(http_front *f, conn *c)
{
	if (c->fr)
		return true;
	char *m = malloc(sizeof(http_framing) + IN_CAP + FWD_CAP + OUT_CAP);
	if (!m)
		return false;
	c->fr = (http_framing *)m;
	http_framing_init(c->fr, f->p.max_body_bytes);
	c->in = m + sizeof(http_framing);
	c->fwd = c->in + IN_CAP;
	c->out = c->fwd + FWD_CAP;
	return true;
}

/* Every transition goes through here: it leaves the old state (a waiting one leaves the queue) and runs the new
 * one's entry action. */
static void conn_goto(http_front *f, conn *c, conn_state next, double now)
{
	if (c->state == CONN_DEAD || next == c->state)
		return;
	if (c->state == CONN_FRESH) {
		queue_remove(&f->fresh_head, &f->fresh_tail, &f->n_fresh, c);
		if (next != CONN_DEAD && !conn_buffers(f, c))
			next = CONN_DEAD;   /* out of memory: it cannot even be answered */
	}
	if (waiting(c) && next != CONN_WAIT_SLOT)
		hold_remove(f, c);
	c->state = next;
	switch (next) {
	case CONN_FLUSH:
		inner_close(f, c);
		c->in_len = 0;
		break;
	case CONN_LINGER:
		shutdown(c->cfd, SHUT_WR);
		c->t_linger = c->t_read = now;
		break;
	case CONN_DEAD:
		inner_close(f, c);
		if (c->cfd >= 0) {
			epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->cfd, NULL);
			close(c->cfd);
			c->cfd = -1;
		}
		link_unref(c->link);
		c->link = NULL;
		if (c->prev)
			c->prev->next = c->next;
		else
			f->all = c->next;
		if (c->next)
			c->next->prev = c->prev;
		f->n_total--;
		c->dead_next = f->dead;   /* freed at the end of the loop's turn: an event of this turn may still name it */
		f->dead = c;
		break;
	default:
		break;
	}
}

/* Appends the front's own answer to out (http_answer.h). */
static void answer_write(conn *c)
{
	if (c->out_off > 0) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	c->out_len += http_answer_format(c->out + c->out_len, OUT_CAP - c->out_len, c->ans_status, c->ans_type,
	                                 c->ans_code, c->ans_retry, c->ans_msg);
}

/* The front answers the current request itself (ANSWER). Where libmicrohttpd has already answered it, its answer
 * stands and the connection closes after it (DISCARD). */
static void conn_refuse(http_front *f, conn *c, int status, const char *type, const char *code, int retry,
                        const char *msg, double now)
{
	if (c->state == CONN_ANSWER || closing(c))
		return;
	if (!conn_buffers(f, c)) {   /* (a FRESH one refused at once has none yet) */
		conn_goto(f, c, CONN_DEAD, now);
		return;
	}
	if (c->state == CONN_SERVE && c->link && c->phase >= REQ_BODY && (answered_by_mhd(c) || c->resp_bytes > 0)) {
		c->phase = REQ_DISCARD;
		c->last_request = true;
		return;
	}
	/* one line per request answered, as for libmicrohttpd's (the connection limit's refusals go into the burst's
	 * line instead) */
	const bool limit = status == 429 || (status == 503 && !strcmp(code, "server_busy"));
	log_msg(limit ? LOG_DEBUG : LOG_INFO, NULL, "%s %s %d from %s (answered by the front): %s",
	        *c->fr->req.method ? c->fr->req.method : "-", *c->fr->req.path ? c->fr->req.path : "-", status, c->peer_name,
	        msg);
	if (c->link)   /* libmicrohttpd may have begun it: its completion then neither counts nor logs it again */
		atomic_store(&c->link->refused, status);
	if (f->p.answered)
		f->p.answered(f->p.ctx, status);
	c->ans_status = status;
	c->ans_type = type;
	c->ans_code = code;
	c->ans_retry = retry;
	snprintf(c->ans_msg, sizeof c->ans_msg, "%s", msg);
	conn_goto(f, c, CONN_ANSWER, now);
}

static conn *conn_new(http_front *f, int fd, const struct sockaddr_storage *a, socklen_t al, double now)
{
	conn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->cfd = fd;
	c->ifd = -1;
	c->addr = *a;
	c->addr_len = al;
	c->tag_c = (ep_tag){ TAG_CLIENT, c };
	c->tag_i = (ep_tag){ TAG_INNER, c };
	c->t_accept = c->t_wait = c->t_progress = c->t_phase = now;
	c->linger_s = LINGER_TIME_S;
	c->state = CONN_FRESH;
	queue_append(&f->fresh_head, &f->fresh_tail, &f->n_fresh, c);
	if (a->ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr, c->peer_name, sizeof c->peer_name);
	else if (a->ss_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, c->peer_name, sizeof c->peer_name);
	else
		snprintf(c->peer_name, sizeof c->peer_name, "?");
	c->next = f->all;
	if (f->all)
		f->all->prev = c;
	f->all = c;
	f->n_total++;
	c->ev_c = EPOLLIN | EPOLLRDHUP;
	struct epoll_event ev = { .events = c->ev_c, .data.ptr = &c->tag_c };
	epoll_ctl(f->epfd, EPOLL_CTL_ADD, fd, &ev);
	return c;
}

/* Gives c a slot (a probe slot when probe) and a socketpair to libmicrohttpd: SERVE. */
static void conn_admit(http_front *f, conn *c, bool probe, double now)
{
	if (waiting(c) && !probe) {
		f->burst.waited++;
		if (now - c->t_wait > f->burst.longest)
			f->burst.longest = now - c->t_wait;
	}
	int sv[2];
	http_front_link *l = calloc(1, sizeof *l);
	if (!l || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
		free(l);
		conn_refuse(f, c, 503, "server_error", "server_busy", 1, "no socket for the connection; retry", now);
		return;
	}
	atomic_init(&l->refs, 2);
	atomic_init(&l->answered, false);
	atomic_init(&l->completed, 0);
	atomic_init(&l->refused, 0);
	atomic_init(&l->closed, false);
	l->probe = probe;
	l->fd = sv[1];
	l->front = f;
	pthread_mutex_lock(&f->mu);
	for (http_front_link **p = &f->pending; *p;) {   /* the same fd number again: that one was never taken */
		if ((*p)->fd == sv[1]) {
			http_front_link *stale = *p;
			*p = stale->next;
			link_unref(stale);
		} else {
			p = &(*p)->next;
		}
	}
	l->next = f->pending;
	f->pending = l;
	pthread_mutex_unlock(&f->mu);
	conn_goto(f, c, CONN_SERVE, now);
	c->slot = probe ? SLOT_PROBE : SLOT_SERVE;
	if (probe)
		f->n_probe++;
	else
		f->n_active++;
	c->ifd = sv[0];
	c->inner = INNER_OPEN;
	c->link = l;
	c->in_epoll = false;
	c->ev_i = 0;
	c->t_progress = now;   /* (a request's clock runs from its first byte, also while it waited) */
	if (f->p.admit(f->p.ctx, sv[1], (const struct sockaddr *)&c->addr, c->addr_len) != 0) {
		http_front_link *taken = http_front_link_take(f, sv[1]);
		link_unref(taken);
		inner_close(f, c);
		conn_refuse(f, c, 503, "server_error", "server_busy", 1, "the server could not take the connection; retry",
		            now);
	}
}

static bool held_probe(const conn *c)
{
	const http_framing_request *r = &c->fr->req;
	return c->state == CONN_WAIT_SLOT && !strcmp(r->method, "GET") &&
	       (!strcmp(r->path, "/health") || !strcmp(r->path, "/metrics"));
}

/* A probe that waits takes a probe slot when one is free; it serves that one request. */
static void probe_admit(http_front *f, conn *c, double now)
{
	if (held_probe(c) && f->n_probe < f->p.probe_connections && !f->quiesced && inner_room(f)) {
		conn_admit(f, c, true, now);
		c->last_request = true;
		f->burst.probes++;
	}
}

/* Parses what the client sent into fwd: the phases IDLE → HEAD → BODY → WAIT. */
static bool conn_parse(http_front *f, conn *c, double now)
{
	if (c->fwd_off > 0) {
		memmove(c->fwd, c->fwd + c->fwd_off, c->fwd_len - c->fwd_off);
		c->fwd_len -= c->fwd_off;
		c->fwd_off = 0;
	}
	bool progress = false;
	size_t off = 0;
	/* also with no input left: a head without a body ends its request at once (HTTP_FRAMING_END next) */
	while ((c->state == CONN_WAIT_HEAD || c->state == CONN_SERVE) && c->phase <= REQ_BODY &&
	       !(c->phase == REQ_IDLE && c->last_request)) {
		bool was_started = c->fr->started;
		http_framing_event ev;
		size_t k = http_framing_feed(c->fr, c->in + off, c->in_len - off, c->fwd, FWD_CAP, &c->fwd_len, &ev);
		off += k;
		progress |= k > 0;
		if (!was_started && c->fr->started && c->phase == REQ_IDLE) {
			c->phase = REQ_HEAD;
			c->t_phase = now;
		}
		if (ev == HTTP_FRAMING_HEAD) {
			c->phase = REQ_BODY;
			c->resp_bytes = 0;
			progress = true;
			if (c->state == CONN_WAIT_HEAD) {
				conn_goto(f, c, CONN_WAIT_SLOT, now);
				probe_admit(f, c, now);
			}
		} else if (ev == HTTP_FRAMING_END) {
			c->phase = REQ_WAIT;
			progress = true;
		} else if (ev == HTTP_FRAMING_ERROR) {
			const int s = c->fr->status;
			conn_refuse(f, c, s, "invalid_request_error",
			            s == 413 ? "request_too_large" : s == 414 || s == 431 ? "header_too_large"
			            : s == 501 ? "not_implemented" : s == 505 ? "http_version_not_supported" : "bad_request",
			            0, c->fr->message, now);
			progress = true;
		} else {
			break;   /* more input wanted, or fwd full */
		}
	}
	if (off > 0) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
	}
	return progress;
}

/* Moves bytes: client → in (or dropped), in → fwd, fwd → libmicrohttpd, it → out, out → client. */
static bool conn_pump(http_front *f, conn *c, double now)
{
	bool any = false, progress;
	do {
		progress = false;
		if (c->cfd >= 0 && c->peer < PEER_EOF) {
			ssize_t r = 0;
			const bool drop = closing(c) || c->phase == REQ_DISCARD;
			char junk[16384];
			if (drop)
				r = recv(c->cfd, junk, sizeof junk, 0);
			else if (c->in && c->in_len < IN_CAP && c->state != CONN_WAIT_SLOT)
				r = recv(c->cfd, c->in + c->in_len, IN_CAP - c->in_len, 0);
			else
				r = -2;
			if (r > 0) {
				if (drop) {
					c->discarded += (uint64_t)r;
					c->in_len = 0;
				} else {
					c->in_len += (size_t)r;
				}
				c->t_read = now;
				progress = true;
			} else if (r == 0) {
				c->peer = PEER_EOF;
				progress = true;
			} else if (r == -1 && !again()) {
				c->peer = PEER_GONE;
			}
		}
		progress |= conn_parse(f, c, now);
		if (c->inner == INNER_OPEN && c->fwd_off < c->fwd_len) {
			ssize_t w = send(c->ifd, c->fwd + c->fwd_off, c->fwd_len - c->fwd_off, MSG_NOSIGNAL);
			if (w > 0) {
				c->fwd_off += (size_t)w;
				if (c->fwd_off == c->fwd_len)
					c->fwd_off = c->fwd_len = 0;
				progress = true;
			} else if (w < 0 && !again()) {
				c->inner = INNER_HUP;
			}
		}
		if (c->inner == INNER_OPEN || c->inner == INNER_HUP) {
			if (c->out_off > 0) {
				memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
				c->out_len -= c->out_off;
				c->out_off = 0;
			}
			size_t room = OUT_CAP - ANSWER_ROOM > c->out_len ? OUT_CAP - ANSWER_ROOM - c->out_len : 0;
			if (c->state == CONN_ANSWER && room > c->owed)
				room = (size_t)c->owed;   /* earlier answers only: what comes after is dropped with the socketpair */
			if (room > 0) {
				ssize_t r = recv(c->ifd, c->out + c->out_len, room, 0);
				if (r > 0) {
					c->out_len += (size_t)r;
					if (c->owed >= (uint64_t)r) {
						c->owed -= (uint64_t)r;
					} else {
						c->resp_bytes += (uint64_t)r - c->owed;
						c->owed = 0;
					}
					progress = true;
				} else if (r == 0 || !again() || c->inner == INNER_HUP) {
					c->inner = INNER_EOF;   /* closed, and nothing left to read */
					progress = true;
				}
			}
		}
		if (c->cfd >= 0 && c->peer != PEER_GONE && out_pending(c)) {
			ssize_t w = send(c->cfd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
			if (w > 0) {
				c->out_off += (size_t)w;
				if (c->out_off == c->out_len)
					c->out_off = c->out_len = 0;
				c->t_progress = now;
				progress = true;
			} else if (w < 0 && !again()) {
				c->peer = PEER_GONE;
			}
		}
		any |= progress;
	} while (progress && c->peer != PEER_GONE);
	return any;
}

/* libmicrohttpd completed requests: WAIT → IDLE, and the next may be parsed; one completed before its body was in
 * was answered early (DISCARD). Returns true when it had. */
static bool conn_completions(http_front *f, conn *c, double now)
{
	if (!c->link)
		return false;
	unsigned done = atomic_load(&c->link->completed);
	bool any = c->seen != done;
	while (c->seen != done) {
		c->seen++;
		if (c->phase == REQ_WAIT) {
			c->phase = REQ_IDLE;
			atomic_store(&c->link->answered, false);
			atomic_store(&c->link->refused, 0);
			int q = 0;
			if (c->ifd >= 0 && ioctl(c->ifd, FIONREAD, &q) == 0 && q > 0)
				c->owed = (uint64_t)q;   /* its answer's tail, not read yet: all of it is in, and nothing after */
			c->resp_bytes = 0;
			c->t_progress = now;
		} else if (c->phase == REQ_HEAD || c->phase == REQ_BODY) {
			c->phase = REQ_DISCARD;   /* answered before its body came; it closes next */
			c->last_request = true;
		}
	}
	return any;
}

/* ---- connections: one handler per state, after the bytes moved ---- */

/* Its first bytes are here: a slot if one is free and nobody waits, else the end of the line. */
static void conn_place(http_front *f, conn *c, double now)
{
	if (!conn_buffers(f, c)) {
		conn_goto(f, c, CONN_DEAD, now);
		return;
	}
	c->t_wait = c->t_progress = now;   /* its place in line, and its idle clock, run from its first byte */
	if (f->n_active < f->p.max_connections && !f->hold_head && inner_room(f)) {
		conn_admit(f, c, false, now);
	} else {
		conn_goto(f, c, CONN_WAIT_HEAD, now);
		hold_append(f, c);
		http_front_burst_note(&f->burst, now);
	}
}

static bool step_fresh(http_front *f, conn *c, double now)
{
	char b;
	ssize_t r = recv(c->cfd, &b, 1, MSG_PEEK);
	if (r < 0 && again())
		return false;
	if (r <= 0)
		conn_goto(f, c, CONN_DEAD, now);   /* gone without a word */
	else
		conn_place(f, c, now);
	return true;
}

static bool step_wait(http_front *f, conn *c, double now)
{
	if (c->state == CONN_WAIT_HEAD && c->peer >= PEER_EOF) {
		conn_goto(f, c, CONN_DEAD, now);   /* gone before its request was in */
		return true;
	}
	return false;
}

static bool step_serve(http_front *f, conn *c, double now)
{
	if (c->inner == INNER_EOF) {
		/* libmicrohttpd closed: a request it left unanswered gets an answer here */
		const bool owed = c->phase != REQ_IDLE && c->phase != REQ_DISCARD && !answered_by_mhd(c) &&
		                  c->resp_bytes == 0;
		inner_close(f, c);
		if (owed)
			conn_refuse(f, c, 503, "server_error", "server_busy", 1, "the request could not be served; retry", now);
		else
			conn_goto(f, c, CONN_FLUSH, now);
		return true;
	}
	bool changed = false;
	/* a client that shut its side while its request runs: one byte of TCP urgent data tells a half-close from a
	 * close. A socket that is still open (SO_OOBINLINE is off everywhere by default) takes it out of band, so that
	 * nothing of it reaches the bytes of the response (no interim 1xx the client did not ask for); a socket that is
	 * closed answers a data segment with a reset, which cancels the request. Sent once a connection. */
	if (c->phase == REQ_WAIT && c->peer >= PEER_SHUT && !c->urgent_sent && !answered_by_mhd(c)) {
		static const char mark = 0;
		if (send(c->cfd, &mark, 1, MSG_OOB | MSG_NOSIGNAL) < 0 && !again())
			c->peer = PEER_GONE;
		c->urgent_sent = true;
		changed = true;
	}
	if (c->peer >= PEER_EOF && c->in_len == 0) {
		if (c->phase == REQ_HEAD || c->phase == REQ_BODY) {
			conn_goto(f, c, CONN_DEAD, now);   /* its request can never be complete */
			return true;
		}
		if (c->phase == REQ_IDLE && !c->last_request) {
			c->last_request = true;
			changed = true;
		}
	}
	if (c->last_request && c->phase == REQ_IDLE && c->owed == 0 && !out_pending(c) && c->fwd_len == 0) {
		conn_goto(f, c, c->peer >= PEER_EOF ? CONN_DEAD : CONN_FLUSH, now);
		return true;
	}
	return changed;
}

static bool step_answer(http_front *f, conn *c, double now)
{
	if (c->ifd >= 0 && c->inner != INNER_EOF && c->owed > 0)
		return false;   /* earlier answers still coming through */
	conn_goto(f, c, CONN_FLUSH, now);
	answer_write(c);
	return true;
}

static bool step_flush(http_front *f, conn *c, double now)
{
	if (out_pending(c))
		return false;
	conn_goto(f, c, CONN_LINGER, now);
	return true;
}

static bool step_linger(http_front *f, conn *c, double now)
{
	if (c->peer < PEER_EOF && c->discarded <= LINGER_BYTES)
		return false;
	conn_goto(f, c, CONN_DEAD, now);
	return true;
}

static bool step_dead(http_front *f, conn *c, double now) { return false; }

static bool (*const conn_steps[N_CONN_STATES])(http_front *, conn *, double) = {
	[CONN_FRESH] = step_fresh,    [CONN_WAIT_HEAD] = step_wait, [CONN_WAIT_SLOT] = step_wait, [CONN_SERVE] = step_serve,
	[CONN_ANSWER] = step_answer,  [CONN_FLUSH] = step_flush,    [CONN_LINGER] = step_linger,
	[CONN_DEAD] = step_dead,
};

/* ---- connections: one timer per deadline ---- */

/* When timer t of c is due: one rule per deadline (INFINITY: not armed). */
static double timer_due(const http_front *f, const conn *c, conn_timer t)
{
	const double rt = f->p.request_timeout_s, idle = f->p.idle_timeout_s;
	const bool serve = c->state == CONN_SERVE, linger = c->state == CONN_LINGER;
	switch (t) {
	case TIMER_WAIT: return waiting(c) ? c->t_wait + rt : INFINITY;
	case TIMER_REQUEST: return serve && (c->phase == REQ_HEAD || c->phase == REQ_BODY) ? c->t_phase + rt : INFINITY;
	case TIMER_IDLE:
		return c->state == CONN_FRESH || (serve && c->phase == REQ_IDLE && c->in_len == 0) ? c->t_progress + idle
		                                                                                   : INFINITY;
	case TIMER_SEND:   /* (an ANSWER waits on earlier answers leaving: the same deadline) */
		return out_pending(c) || c->state == CONN_ANSWER ? c->t_progress + idle : INFINITY;
	case TIMER_LINGER: return linger ? c->t_linger + c->linger_s : INFINITY;
	case TIMER_LINGER_IDLE: return linger ? c->t_read + LINGER_IDLE_S : INFINITY;
	default: return INFINITY;
	}
}

static void expire_wait(http_front *f, conn *c, double now)
{
	f->burst.n_503++;
	if (c->state == CONN_WAIT_HEAD)
		c->linger_s = LINGER_SHORT_S;   /* not even its head in: it trickles */
	conn_refuse(f, c, 503, "server_error", "server_busy", 1,
	            "every connection slot stayed busy: retry later (max_connections)", now);
}

static void expire_request(http_front *f, conn *c, double now)
{
	char msg[128];
	snprintf(msg, sizeof msg, "the request's head and body did not arrive within request_timeout (%gs)",
	         f->p.request_timeout_s);
	c->linger_s = LINGER_SHORT_S;
	conn_refuse(f, c, 408, "invalid_request_error", "request_timeout", 0, msg, now);
}

/* idle between requests, a client not reading its answer, a lingering close that has lasted: a plain close */
static void expire_close(http_front *f, conn *c, double now) { conn_goto(f, c, CONN_DEAD, now); }

/* What the passing of each timer does. */
static void (*const conn_timers[N_CONN_TIMERS])(http_front *, conn *, double) = {
	[TIMER_WAIT] = expire_wait,   [TIMER_REQUEST] = expire_request, [TIMER_IDLE] = expire_close,
	[TIMER_SEND] = expire_close,  [TIMER_LINGER] = expire_close,    [TIMER_LINGER_IDLE] = expire_close,
};

static double conn_due(const http_front *f, const conn *c)
{
	double d = INFINITY;
	for (int t = 0; t < N_CONN_TIMERS; t++)
		d = fmin(d, timer_due(f, c, (conn_timer)t));
	return d;
}

/* The state's handler, then the first timer that is due. Returns true when it changed something that may let more
 * bytes move. */
static bool conn_step(http_front *f, conn *c, double now)
{
	if (c->peer == PEER_GONE) {
		conn_goto(f, c, CONN_DEAD, now);
		return false;
	}
	bool changed = conn_completions(f, c, now);
	changed |= conn_steps[c->state](f, c, now);
	for (int t = 0; t < N_CONN_TIMERS && c->state != CONN_DEAD; t++)
		if (now >= timer_due(f, c, (conn_timer)t)) {
			conn_timers[t](f, c, now);
			changed = true;
			break;
		}
	return changed && c->state != CONN_DEAD;
}

static void conn_interest(http_front *f, conn *c)
{
	if (c->state == CONN_DEAD)
		return;
	uint32_t want_c = 0;
	if (c->peer < PEER_EOF && (closing(c) || c->phase == REQ_DISCARD ||
	                           (c->in_len < IN_CAP && c->state != CONN_WAIT_SLOT)))
		want_c |= EPOLLIN;
	if (c->peer < PEER_SHUT)
		want_c |= EPOLLRDHUP;
	if (out_pending(c))
		want_c |= EPOLLOUT;
	bool reg = true;
	epoll_set(f, c->cfd, &c->tag_c, &c->ev_c, &reg, want_c);
	if (c->ifd < 0)
		return;
	if (c->inner >= INNER_HUP) {   /* whatever is left is read as out drains: no more events wanted (a HUP repeats) */
		if (c->in_epoll)
			epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->ifd, NULL);
		c->in_epoll = false;
		return;
	}
	uint32_t want_i = EPOLLRDHUP;
	if (c->out_len < OUT_CAP - ANSWER_ROOM)
		want_i |= EPOLLIN;
	if (c->fwd_off < c->fwd_len)
		want_i |= EPOLLOUT;
	epoll_set(f, c->ifd, &c->tag_i, &c->ev_i, &c->in_epoll, want_i);
}

static void conn_run(http_front *f, conn *c, double now)
{
	for (int i = 0; i < 16 && c->state != CONN_DEAD; i++) {
		bool moved = conn_pump(f, c, now);
		bool changed = conn_step(f, c, now);
		if (!moved && !changed)
			break;
	}
	conn_interest(f, c);
}

/* ---- the thread ---- */

static int32_t same_peer(const http_front *f, const conn *c)
{
	int32_t n = 0;
	for (const conn *o = f->all; o; o = o->next)
		if (o != c && !closing(o) && !strcmp(o->peer_name, c->peer_name))
			n++;
	return n;
}

/* The connection that has sent nothing for longest makes room for a new one, so that a flood of silent connections
 * can neither fill the front nor keep a client that speaks out. One whose bytes turn out to be here is placed
 * instead, and one younger than FRESH_MIN_AGE_S is left alone. Returns true when a connection left FRESH; false when
 * the oldest is too young (*retry_at: when it will not be). */
static bool evict_fresh(http_front *f, double now, double *retry_at)
{
	while (f->fresh_head) {
		conn *c = f->fresh_head;
		if (step_fresh(f, c, now)) {   /* it spoke, or left, after all */
			conn_run(f, c, now);
			return true;
		}
		if (now - c->t_accept < FRESH_MIN_AGE_S) {
			*retry_at = c->t_accept + FRESH_MIN_AGE_S;
			return false;
		}
		http_front_burst_note(&f->burst, now);
		f->burst.evicted++;
		conn_goto(f, c, CONN_DEAD, now);
		return true;
	}
	*retry_at = now + 0.1;
	return false;
}

static void accept_all(http_front *f, double now)
{
	/* FRESH connections have a cap of their own: they hold no slot and little memory */
	const int32_t cap = 3 * f->p.max_connections + f->p.probe_connections;
	const int32_t fresh_cap = FRESH_PER_SLOT * (f->p.max_connections + f->p.probe_connections);
	while (f->listening && f->n_total - f->n_fresh < cap && now >= f->accept_pause_until) {
		double retry_at;
		if (f->n_fresh >= fresh_cap && !evict_fresh(f, now, &retry_at)) {
			f->accept_pause_until = retry_at;   /* the rest wait in the listen backlog meanwhile */
			break;
		}
		struct sockaddr_storage a;
		socklen_t al = sizeof a;
		int fd = accept4(f->lfd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if ((errno == EMFILE || errno == ENFILE) && evict_fresh(f, now, &retry_at))
				continue;   /* its descriptor for this one */
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				log_limit_msg(&f->log, "accept", LOG_WARN, "connections: ",
				              errno == EMFILE || errno == ENFILE ? "cannot accept (out of descriptors): pausing 100 ms"
				                                                 : "cannot accept (out of memory): pausing 100 ms");
				f->accept_pause_until = now + 0.1;
			}
			if (errno == ECONNABORTED || errno == EINTR)
				continue;
			break;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);   /* an SSE event leaves at once */
		conn *c = conn_new(f, fd, &a, al, now);
		if (!c) {
			close(fd);
			continue;
		}
		if (f->p.per_ip_connections > 0 && same_peer(f, c) >= f->p.per_ip_connections) {
			http_front_burst_note(&f->burst, now);
			f->burst.n_429++;
			conn_refuse(f, c, 429, "rate_limit_error", "too_many_connections", 1,
			            "too many connections from this address (per_ip_connections)", now);
		}
		conn_run(f, c, now);   /* FRESH until its first bytes (step_fresh) */
	}
	bool want = f->lfd >= 0 && !f->quiesced && f->n_total - f->n_fresh < cap && now >= f->accept_pause_until;
	if (f->lfd >= 0 && want != f->listening) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &f->tag_listen };
		epoll_ctl(f->epfd, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, f->lfd, &ev);
		f->listening = want;
	}
}

/* The connection idle longest between requests — it has had one, nothing of the next has come for a second, and
 * nothing is left to write — or NULL. (A connection that has not sent its first request yet is about to.) */
static conn *idle_victim(http_front *f, double now)
{
	conn *best = NULL;
	for (conn *c = f->all; c; c = c->next)
		if (c->state == CONN_SERVE && c->slot == SLOT_SERVE && c->phase == REQ_IDLE && !c->fr->started &&
		    c->seen > 0 && now - c->t_progress >= IDLE_RECLAIM_S && c->in_len == 0 && !out_pending(c) &&
		    c->fwd_len == 0 && c->owed == 0 && (!best || c->t_progress < best->t_progress)) {
			int q = 0;   /* not one whose next request is already here, unread */
			if (ioctl(c->cfd, FIONREAD, &q) == 0 && q == 0)
				best = c;
		}
	return best;
}

static void admit_held(http_front *f, double now)
{
	/* a waiting connection takes the slot of one idle between requests, as nginx reuses idle keep-alive
	 * connections: the limit is on connections at work (a client's pool reconnects a closed idle one) */
	while (f->hold_head && f->n_active >= f->p.max_connections && !f->quiesced) {
		conn *v = idle_victim(f, now);
		if (!v)
			break;
		conn_goto(f, v, CONN_DEAD, now);
		f->burst.idle_closed++;
	}
	while (f->hold_head && f->n_active < f->p.max_connections && !f->quiesced && inner_room(f)) {
		conn *c = f->hold_head;
		conn_admit(f, c, false, now);
		conn_run(f, c, now);
	}
	for (conn *c = f->hold_head, *next; c && f->n_probe < f->p.probe_connections && !f->quiesced; c = next) {
		next = c->hold_next;
		if (held_probe(c)) {
			probe_admit(f, c, now);
			conn_run(f, c, now);
		}
	}
}

static void quiesce(http_front *f, double now)
{
	f->quiesced = true;
	if (f->lfd >= 0) {
		if (f->listening)
			epoll_ctl(f->epfd, EPOLL_CTL_DEL, f->lfd, NULL);
		close(f->lfd);
		f->lfd = -1;
		f->listening = false;
	}
	for (conn *c = f->all, *next; c; c = next) {
		next = c->next;
		if (c->state == CONN_FRESH)
			conn_goto(f, c, CONN_DEAD, now);   /* nothing asked, nothing to answer */
		else if (waiting(c))
			conn_refuse(f, c, 503, "server_error", "shutting_down", 5, "the server is shutting down", now);
		else if (c->state == CONN_SERVE)
			c->last_request = true;
		conn_run(f, c, now);
	}
}

static void dead_free(http_front *f)
{
	while (f->dead) {
		conn *c = f->dead;
		f->dead = c->dead_next;
		free(c->fr);
		free(c);
	}
}

static void *front_main(void *arg)
{
	http_front *f = arg;
	struct epoll_event evs[128];
	for (;;) {
		double now = aah_now_s(), due = now + 1.0;
		for (conn *c = f->all; c; c = c->next)
			due = fmin(due, conn_due(f, c));
		if (f->accept_pause_until > now)
			due = fmin(due, f->accept_pause_until);
		int timeout = due <= now ? 0 : (int)ceil((due - now) * 1000.0);
		int n = epoll_wait(f->epfd, evs, 128, timeout);
		now = aah_now_s();
		bool woke = false, accept_ready = false;
		for (int i = 0; i < n; i++) {
			ep_tag *t = evs[i].data.ptr;
			uint32_t e = evs[i].events;
			if (t->kind == TAG_LISTEN) {
				accept_ready = true;
			} else if (t->kind == TAG_WAKE) {
				uint64_t v;
				ssize_t r = read(f->wfd, &v, sizeof v);
				(void)r;
				woke = true;
			} else if (t->c->state != CONN_DEAD) {
				conn *c = t->c;
				if (t->kind == TAG_CLIENT) {
					if (e & EPOLLRDHUP && c->peer < PEER_SHUT)
						c->peer = PEER_SHUT;
					if (e & EPOLLHUP)   /* both ways shut: a reset, or the end of a lingering close */
						c->peer = c->state == CONN_LINGER ? (c->peer > PEER_EOF ? c->peer : PEER_EOF) : PEER_GONE;
					if (e & EPOLLERR)
						c->peer = PEER_GONE;
				} else if (e & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
					if (c->inner == INNER_OPEN)
						c->inner = INNER_HUP;
				}
				conn_run(f, c, now);
			}
		}
		if (atomic_load(&f->stop_req))
			break;
		if (woke) {
			if (atomic_load(&f->quiesce_req) && !f->quiesced)
				quiesce(f, now);
			for (conn *c = f->all; c; c = c->next)
				if (c->link && atomic_load(&c->link->completed) != c->seen)
					conn_run(f, c, now);
		}
		for (conn *c = f->all; c; c = c->next)
			if (now >= conn_due(f, c))
				conn_run(f, c, now);
		admit_held(f, now);
		if (accept_ready || !f->listening)
			accept_all(f, now);
		http_front_burst_tick(&f->burst, now, f->n_hold > 0 || f->n_active >= f->p.max_connections,
		                      f->p.max_connections, f->p.per_ip_connections);
		int32_t busy = 0;
		for (conn *c = f->all; c; c = c->next)
			busy += out_pending(c) || c->state == CONN_ANSWER ||
			        (c->state == CONN_SERVE && (c->phase != REQ_IDLE || c->owed > 0));
		atomic_store(&f->busy, busy);
		if (now - f->last_tick >= 1.0) {
			f->last_tick = now;
			log_limit_flush(&f->log, false);
			if (f->p.tick)
				f->p.tick(f->p.ctx);
		}
		dead_free(f);
	}
	while (f->all)
		conn_goto(f, f->all, CONN_DEAD, aah_now_s());
	dead_free(f);
	return NULL;
}

/* ---- life cycle ---- */

http_front *http_front_start(const http_front_params *p, char *err, size_t err_len)
{
	http_front *f = calloc(1, sizeof *f);
	if (!f) {
		snprintf(err, err_len, "out of memory");
		return NULL;
	}
	f->p = *p;
	f->lfd = f->epfd = f->wfd = -1;
	pthread_mutex_init(&f->mu, NULL);
	log_limit_init(&f->log);
	atomic_init(&f->quiesce_req, false);
	atomic_init(&f->stop_req, false);
	f->tag_listen = (ep_tag){ TAG_LISTEN, NULL };
	f->tag_wake = (ep_tag){ TAG_WAKE, NULL };
	memcpy(&f->laddr, p->addr, p->addr_len);
	f->lfd = socket(p->addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (f->lfd >= 0) {
		setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (p->addr->sa_family == AF_INET6)   /* as libmicrohttpd did: an IPv6 address serves IPv6 only */
			setsockopt(f->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	}
	if (f->lfd < 0 || bind(f->lfd, p->addr, p->addr_len) != 0 || listen(f->lfd, SOMAXCONN) != 0) {
		snprintf(err, err_len, "%s", strerror(errno));
		goto fail;
	}
	struct sockaddr_storage bound;
	socklen_t bl = sizeof bound;
	getsockname(f->lfd, (struct sockaddr *)&bound, &bl);
	f->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
	                                            : ((struct sockaddr_in *)&bound)->sin_port);
	f->epfd = epoll_create1(EPOLL_CLOEXEC);
	f->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (f->epfd < 0 || f->wfd < 0) {
		snprintf(err, err_len, "epoll: %s", strerror(errno));
		goto fail;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &f->tag_wake };
	epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->wfd, &ev);
	ev.data.ptr = &f->tag_listen;
	epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->lfd, &ev);
	f->listening = true;
	if (pthread_create(&f->th, NULL, front_main, f) != 0) {
		snprintf(err, err_len, "cannot start the connection thread");
		goto fail;
	}
	f->started = true;
	return f;
fail:
	if (f->lfd >= 0)
		close(f->lfd);
	if (f->epfd >= 0)
		close(f->epfd);
	if (f->wfd >= 0)
		close(f->wfd);
	log_limit_flush(&f->log, true);
	log_limit_free(&f->log);
	pthread_mutex_destroy(&f->mu);
	free(f);
	return NULL;
}

uint16_t http_front_port(const http_front *f) { return f->port; }
int32_t http_front_busy(http_front *f) { return f ? atomic_load(&f->busy) : 0; }

void http_front_quiesce(http_front *f)
{
	atomic_store(&f->quiesce_req, true);
	wake(f);
}

void http_front_stop(http_front *f)
{
	if (!f || !f->started)
		return;
	atomic_store(&f->stop_req, true);
	wake(f);
	pthread_join(f->th, NULL);
	f->started = false;
	if (f->lfd >= 0)
		close(f->lfd);
	f->lfd = -1;
}

void http_front_free(http_front *f)
{
	if (!f)
		return;
	http_front_stop(f);
	close(f->epfd);
	close(f->wfd);
	while (f->pending) {   /* admitted, never taken: libmicrohttpd closed those sockets */
		http_front_link *l = f->pending;
		f->pending = l->next;
		link_unref(l);
	}
	log_limit_flush(&f->log, true);
	log_limit_free(&f->log);
	pthread_mutex_destroy(&f->mu);
	free(f);
}
