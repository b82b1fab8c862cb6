/* server/http_framing.h — where each HTTP/1.x request on a connection begins and ends, read strictly before
 * libmicrohttpd sees a byte of it (http_front.c), and re-emitted in one canonical form so that the two never disagree
 * on a boundary: the request line, `Name: value` header lines with one Content-Length, CRLF line ends, chunks
 * re-framed without extensions or trailers. Bytes in, bytes out: no I/O, no allocation. */
#ifndef AAH_SERVER_HTTP_FRAMING_H
#define AAH_SERVER_HTTP_FRAMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A head (request line and headers) longer than this is refused (414 for the request line, else 431), and so is one
 * of more header fields than HTTP_FRAMING_FIELDS_MAX (431): libmicrohttpd keeps a head and its index in 64 KiB. */
#define HTTP_FRAMING_HEAD_MAX 16384
#define HTTP_FRAMING_FIELDS_MAX 100
/* The room in out that a call needs while a head may complete: its canonical form is written at once and is at most
 * twice the head as received. */
#define HTTP_FRAMING_OUT_MIN (2 * HTTP_FRAMING_HEAD_MAX + 64)

typedef enum http_framing_event {
	HTTP_FRAMING_MORE,      /* the input is used up, or out is full: call again with more of either */
	HTTP_FRAMING_HEAD,      /* a head is complete, its canonical form written to out; f->req describes it */
	HTTP_FRAMING_END,       /* the request, head and body, is complete: the next byte starts another */
	HTTP_FRAMING_ERROR,     /* refused: f->status and f->message; nothing more is read (close the connection) */
} http_framing_event;

/* What a head said. */
typedef struct http_framing_request {
	char method[16];
	char path[256];               /* the target up to '?', cut at 255 bytes */
	int32_t minor;                /* HTTP/1.minor: 0 or 1 */
	bool chunked;                 /* Transfer-Encoding: chunked */
	uint64_t length;              /* Content-Length (0 without one) */
	bool expect_continue;         /* Expect: 100-continue */
} http_framing_request;

typedef struct http_framing {
	uint64_t max_body;            /* a body past this (declared, or chunks so far) is 413 at once */
	int32_t state;
	bool started;                 /* a byte of the current request has come (the request's clock runs) */
	char head[HTTP_FRAMING_HEAD_MAX];
	size_t head_len;
	int32_t blank_lines;          /* empty lines before a request line (ignored, a few at most) */
	bool cr;                      /* the last byte was a CR: an LF must follow */
	uint64_t remaining;           /* body bytes (Content-Length) or chunk bytes left */
	uint64_t total;               /* chunk bytes so far */
	uint64_t chunk_size;
	int32_t chunk_digits;
	size_t line_len;              /* bytes of the current chunk-size or trailer line */
	size_t trailer_len;
	bool trailer_named;           /* the current trailer line's colon has come */
	http_framing_request req;
	int32_t status;               /* after HTTP_FRAMING_ERROR: 400, 413, 414, 431, 501, 505 */
	char message[192];
} http_framing;

void http_framing_init(http_framing *f, uint64_t max_body);

/* Reads up to n bytes of in and appends what to forward to out[*out_len, out_cap). Returns the bytes of in used;
 * *ev says why it stopped (it stops after every HEAD, END and ERROR). Needs HTTP_FRAMING_OUT_MIN bytes of room while
 * a head may complete (else it waits: HTTP_FRAMING_MORE with nothing used) and a few dozen in a body. */
size_t http_framing_feed(http_framing *f, const char *in, size_t n, char *out, size_t out_cap, size_t *out_len,
                         http_framing_event *ev);

/* True while the head of the current request is still coming (nothing of it forwarded yet). */
bool http_framing_in_head(const http_framing *f);

#endif
