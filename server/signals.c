/* server/signals.c — see signals.h. sigtimedwait on a blocked set: the signal is a return value in the main loop. */
#include "server/signals.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <time.h>

static sigset_t stop_set(void)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGTERM);
	sigaddset(&s, SIGINT);
	return s;
}

void signals_block(void)
{
	sigset_t s = stop_set();
	pthread_sigmask(SIG_BLOCK, &s, NULL);
	/* a client that closes early must not kill the daemon through a write */
	signal(SIGPIPE, SIG_IGN);
}

int signals_wait(int timeout_ms)
{
	sigset_t s = stop_set();
	for (;;) {
		int sig;
		if (timeout_ms < 0) {
			sig = sigwaitinfo(&s, NULL);
		} else {
			struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L };
			sig = sigtimedwait(&s, NULL, &ts);
		}
		if (sig > 0)
			return sig;
		if (errno == EAGAIN)
			return 0;
		if (errno != EINTR)
			return 0;
	}
}
