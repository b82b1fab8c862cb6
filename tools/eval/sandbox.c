/* tools/eval/sandbox.c — the sandbox modes (see sandbox.h). bwrap: the child of fork() sets the resource limits,
 * drops to the slot's uid when root, asks to die with its parent and execs bwrap; bwrap builds the namespaces, the
 * read-only /usr, a fresh /dev (and /proc unless bwrap-noproc), the tmpfs /sandbox holding main.py (copied from a
 * memfd), applies the seccomp filter (from another memfd) and execs Python with code_eval's driver. process / none:
 * the child enters a private directory made for it, sets the limits, uid and seccomp filter (process) and execs the
 * driver. The parent reads the output and the driver's result (descriptor 6 in the child), and at the wall limit
 * kills the process group (bwrap's init, whose PID namespace takes every sandboxed process with it; in process
 * mode every process of the slot's uid). */
#include "tools/eval/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "tools/eval/util.h"

#if defined(__x86_64__)
#define SANDBOX_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SANDBOX_ARCH AUDIT_ARCH_AARCH64
#else
#error "the sandbox's seccomp filter knows x86-64 and AArch64"
#endif

#define RESULT_FD 6   /* the driver's result, in the child */

void eval_sandbox_set_timeout(eval_sandbox_limits *l, double timeout_seconds)
{
	l->timeout_seconds = timeout_seconds;
	/* code_eval gives up at timeout + 1; the sandbox's and Python's start-up (numpy's import for a program that
	 * uses it) come on top, generously: only a program that silences the alarm or blocks in C code waits for it */
	l->wall_seconds = timeout_seconds + 1 + 10;
	l->cpu_seconds = (int32_t)ceil(l->wall_seconds) + 1;
}

void eval_sandbox_default_limits(eval_sandbox_limits *l)
{
	l->mode = EVAL_SANDBOX_AUTO;
	l->seccomp = true;
	eval_sandbox_set_timeout(l, 3);
	l->memory_bytes = 1ll << 30;
	l->processes = 32;
	l->disk_bytes = 64ll << 20;
	l->open_files = 64;
	l->python = "/usr/bin/python3";
	l->bwrap = NULL;
}

static const char *const MODE_NAMES[] = {"bwrap", "bwrap-noproc", "process", "none", "auto"};

const char *eval_sandbox_mode_name(eval_sandbox_mode m)
{
	return m >= EVAL_SANDBOX_BWRAP && m <= EVAL_SANDBOX_AUTO ? MODE_NAMES[m] : "?";
}

int eval_sandbox_mode_parse(const char *name, eval_sandbox_mode *out)
{
	for (int i = 0; i <= EVAL_SANDBOX_AUTO; i++)
		if (!strcmp(name, MODE_NAMES[i])) {
			*out = (eval_sandbox_mode)i;
			return 0;
		}
	return -1;
}

const char *eval_sandbox_status_name(eval_sandbox_status s)
{
	switch (s) {
	case EVAL_SANDBOX_PASSED: return "passed";
	case EVAL_SANDBOX_FAILED: return "failed";
	case EVAL_SANDBOX_TIMEOUT: return "timed out";
	default: return "killed by a signal";
	}
}

/* socket() and socketpair() fail with EACCES; a foreign architecture's system calls kill the process; x32 calls
 * fail (they would bypass the numbers checked). */
static const struct sock_filter SECCOMP_FILTER[] = {
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SANDBOX_ARCH, 1, 0),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
	BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
#endif
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 1),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socketpair, 0, 1),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};

/* A sealed-size memfd holding data, positioned at 0 (bwrap reads it to its end). */
static int memfd_with(const char *name, const void *data, size_t n)
{
	int fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	const char *p = data;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			close(fd);
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	if (lseek(fd, 0, SEEK_SET) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static char *find_bwrap(const eval_sandbox_limits *l)
{
	if (l->bwrap)
		return access(l->bwrap, X_OK) == 0 ? xstrdup(l->bwrap) : NULL;
	const char *path = getenv("PATH");
	char *copy = xstrdup(path && *path ? path : "/usr/bin:/bin");
	char *found = NULL;
	char *save;
	for (char *dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
		char *c = xasprintf("%s/bwrap", dir);
		if (access(c, X_OK) == 0)
			found = c;
		else
			free(c);
	}
	free(copy);
	return found;
}

/* A top-level link of the merged-/usr layout (/lib → usr/lib) is recreated as a link, a real directory bound
 * read-only, an absent one skipped. */
static void add_root_entry(const char **argv, int *n, const char *path, char *target, size_t cap)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return;
	if (S_ISLNK(st.st_mode)) {
		ssize_t k = readlink(path, target, cap - 1);
		if (k <= 0)
			return;
		target[k] = 0;
		argv[(*n)++] = "--symlink";
		argv[(*n)++] = target;
		argv[(*n)++] = path;
	} else if (S_ISDIR(st.st_mode)) {
		argv[(*n)++] = "--ro-bind";
		argv[(*n)++] = path;
		argv[(*n)++] = path;
	}
}

static void set_limit2(int what, rlim_t soft, rlim_t hard)
{
	struct rlimit r = {soft, hard};
	setrlimit(what, &r);
}

static void set_limit(int what, rlim_t v)
{
	set_limit2(what, v, v);
}

/* Tasks (threads) whose real uid is uid: what RLIMIT_NPROC counts. */
static int64_t count_user_tasks(uid_t uid)
{
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	int64_t n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		char path[300], line[256];
		snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		long real = -1, threads = 0;
		while (fgets(line, sizeof line, f)) {
			if (!strncmp(line, "Uid:", 4))
				real = strtol(line + 4, NULL, 10);
			else if (!strncmp(line, "Threads:", 8))
				threads = strtol(line + 8, NULL, 10);
		}
		fclose(f);
		if (real == (long)uid)
			n += threads;
	}
	closedir(d);
	return n;
}

/* This process's block of slot uids (sandbox.h): the first block whose lock file no other process holds. The lock's
 * descriptor stays open (and locked) until exit; the kernel drops it then, whatever way the process ends. */
static pthread_mutex_t uid_block_mu = PTHREAD_MUTEX_INITIALIZER;
static int uid_block = -1;

uint32_t eval_sandbox_slot_uid(int32_t slot)
{
	pthread_mutex_lock(&uid_block_mu);
	for (int b = 0; uid_block < 0 && b < (int)EVAL_SANDBOX_UID_BLOCKS; b++) {
		char path[64];
		snprintf(path, sizeof path, "/tmp/aah-eval-uids.%d.lock", b);
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			uid_block = b;   /* fd is kept: the lock is the claim */
		else
			close(fd);
	}
	const int b = uid_block;
	pthread_mutex_unlock(&uid_block_mu);
	return b < 0 ? (uint32_t)-1 : EVAL_SANDBOX_UID_BASE + 256u * (uint32_t)b + (uint32_t)(slot & 0xff);
}

/* The limits every confined mode sets in the child before exec (only async-signal-safe calls). */
static void child_limits(const eval_sandbox_limits *l, bool root, int64_t own_tasks)
{
	/* SIGXCPU at the limit (reported as a timeout), SIGKILL a second later for a program that ignores it */
	set_limit2(RLIMIT_CPU, (rlim_t)l->cpu_seconds, (rlim_t)l->cpu_seconds + 1);
	set_limit(RLIMIT_AS, (rlim_t)l->memory_bytes);
	set_limit(RLIMIT_FSIZE, (rlim_t)l->disk_bytes);
	set_limit(RLIMIT_NOFILE, (rlim_t)l->open_files);
	set_limit(RLIMIT_CORE, 0);
	/* as root a uid no other process has: the process limit counts this sandbox's processes only; unprivileged the
	 * limit counts every task of this user, so leave room for the ones running now */
	set_limit(RLIMIT_NPROC, (rlim_t)(root ? l->processes : own_tasks + l->processes));
}

/* Moves the child's descriptors into place: 0 /dev/null, 1 and 2 the output pipe, 3.. the extra ones (-1: none),
 * RESULT_FD the result pipe; everything else closed. Every descriptor goes above 9 first, so that no dup2 below is
 * onto itself (which would keep CLOEXEC) or onto another one still needed. 0, or -1. */
static int child_fds(int out_fd, int result_fd, const int *extra, int n_extra)
{
	int devnull = open("/dev/null", O_RDONLY);
	int in = fcntl(devnull, F_DUPFD, 10), o = fcntl(out_fd, F_DUPFD, 10), res = fcntl(result_fd, F_DUPFD, 10);
	int moved[3];
	if (devnull < 0 || in < 0 || o < 0 || res < 0)
		return -1;
	for (int i = 0; i < n_extra; i++)
		if ((moved[i] = fcntl(extra[i], F_DUPFD, 10)) < 0)
			return -1;
	if (dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(o, 2) < 0 || dup2(res, RESULT_FD) < 0)
		return -1;
	for (int i = 0; i < n_extra; i++)
		if (dup2(moved[i], 3 + i) < 0)
			return -1;
	syscall(SYS_close_range, (unsigned)RESULT_FD + 1, ~0u, 0u);
	for (int fd = 3 + n_extra; fd < RESULT_FD; fd++)
		close(fd);
	return 0;
}

static void append_output(eval_sandbox_result *out, const char *buf, size_t k)
{
	size_t room = sizeof out->output - 1 - out->output_len;
	size_t take = k < room ? k : room;
	memcpy(out->output + out->output_len, buf, take);
	out->output_len += take;
}

/* What a run's parent watches: the output and result pipes, bwrap's info (the PID of the sandbox's init, opened as a
 * pidfd at once, so that no later PID reuse can confuse it), until the child exits. kill_all(ctx) ends every
 * process of the run (at the wall limit). */
typedef struct watch {
	pid_t pid;
	int out_fd, result_fd, info_fd;
	double deadline;
	bool timed_out;
	int status;
	int init_fd;
	char result[sizeof ((eval_sandbox_result *)0)->result];
	size_t result_len;
	void (*kill_all)(struct watch *w);
	uid_t uid;   /* process mode as root: the slot's uid */
	bool sweep_uid;
} watch;

static void watch_run(watch *w, eval_sandbox_result *out)
{
	bool eof = false, res_eof = false, info_eof = w->info_fd < 0, reaped = false;
	char info[1024];
	size_t info_len = 0;
	w->init_fd = -1;
	while (!eof || !reaped) {
		double left = w->deadline - aah_now_s();
		if (left <= 0 && !w->timed_out) {
			w->timed_out = true;
			w->kill_all(w);
		}
		struct pollfd p[3] = {{eof ? -1 : w->out_fd, POLLIN, 0}, {res_eof ? -1 : w->result_fd, POLLIN, 0},
		                      {info_eof ? -1 : w->info_fd, POLLIN, 0}};
		int ms = w->timed_out ? 100 : (int)(left * 1000) + 1;
		if (ms > 200)
			ms = 200;
		if (!eof || !res_eof || !info_eof) {
			if (poll(p, 3, ms) > 0) {
				char buf[4096];
				if (p[0].revents) {
					ssize_t k = read(w->out_fd, buf, sizeof buf);
					if (k > 0)
						append_output(out, buf, (size_t)k);
					else if (k == 0 || (errno != EINTR && errno != EAGAIN))
						eof = true;
				}
				if (p[1].revents) {
					ssize_t k = read(w->result_fd, buf, sizeof buf);
					if (k > 0) {
						size_t room = sizeof w->result - 1 - w->result_len;
						size_t take = (size_t)k < room ? (size_t)k : room;
						memcpy(w->result + w->result_len, buf, take);
						w->result_len += take;
					} else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
						res_eof = true;
					}
				}
				if (p[2].revents) {
					ssize_t k = read(w->info_fd, info + info_len, sizeof info - 1 - info_len);
					if (k > 0)
						info_len += (size_t)k;
					if (k <= 0 || info_len == sizeof info - 1) {
						info_eof = true;
						info[info_len] = 0;
						const char *c = strstr(info, "\"child-pid\":");
						long child = c ? strtol(c + 12, NULL, 10) : 0;
						if (child > 0)
							w->init_fd = (int)syscall(SYS_pidfd_open, (pid_t)child, 0);
						if (w->init_fd >= 0 && w->timed_out)
							syscall(SYS_pidfd_send_signal, w->init_fd, SIGKILL, NULL, 0);
					}
				}
			}
		} else {
			struct timespec ts = {0, 10 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
		if (!reaped) {
			pid_t r = waitpid(w->pid, &w->status, WNOHANG);
			if (r == w->pid)
				reaped = true;
			else if (r < 0 && errno != EINTR) {
				reaped = true;
				w->status = 0;
			}
		}
		if (reaped && (!eof || !res_eof) && w->timed_out)
			break;   /* a descendant kept a pipe past the kill: stop reading */
	}
	/* the result of a program whose descendants keep the result pipe open is complete once the driver has exited */
	w->result[w->result_len] = 0;
	out->output[out->output_len] = 0;
}

/* The outcome from the driver's result (code_eval's string) and how the process ended. */
static void set_outcome(eval_sandbox_result *out, const watch *w)
{
	if (WIFEXITED(w->status))
		out->exit_code = WEXITSTATUS(w->status);
	else if (WIFSIGNALED(w->status))
		out->exit_code = 128 + WTERMSIG(w->status);
	if (w->result_len > 0) {
		snprintf(out->result, sizeof out->result, "%s", w->result);
		out->passed = !strcmp(w->result, "passed");
		out->status = out->passed ? EVAL_SANDBOX_PASSED
		              : !strncmp(w->result, "timed out", 9) ? EVAL_SANDBOX_TIMEOUT
		                                                    : EVAL_SANDBOX_FAILED;
		return;
	}
	/* no result: code_eval's empty result list, which it records as "timed out" and counts as a failure */
	snprintf(out->result, sizeof out->result, "timed out");
	out->passed = false;
	if (w->timed_out || out->exit_code == 128 + SIGXCPU || out->exit_code == 128 + SIGKILL)
		out->status = w->timed_out || out->exit_code == 128 + SIGXCPU ? EVAL_SANDBOX_TIMEOUT : EVAL_SANDBOX_SIGNALED;
	else if (out->exit_code > 128)
		out->status = EVAL_SANDBOX_SIGNALED;
	else
		out->status = EVAL_SANDBOX_FAILED;
}

static void kill_bwrap(watch *w)
{
	if (w->init_fd >= 0)
		syscall(SYS_pidfd_send_signal, w->init_fd, SIGKILL, NULL, 0);
	kill(-w->pid, SIGKILL);
	kill(w->pid, SIGKILL);
}

static int run_bwrap(const eval_sandbox_limits *l, int32_t slot, const char *program, eval_sandbox_result *out,
                     char *err, size_t errlen)
{
	char *bwrap = find_bwrap(l);
	if (!bwrap) {
		snprintf(err, errlen, "sandbox: bwrap not found%s%s (Debian package bubblewrap)", l->bwrap ? " at " : "",
		         l->bwrap ? l->bwrap : " in PATH");
		return -1;
	}
	if (strncmp(l->python, "/usr/", 5) != 0) {
		snprintf(err, errlen, "sandbox: the interpreter must live under /usr (the sandbox's only system tree): %s",
		         l->python);
		free(bwrap);
		return -1;
	}
	int seccomp_fd = memfd_with("aah-seccomp", SECCOMP_FILTER, sizeof SECCOMP_FILTER);
	int program_fd = memfd_with("aah-program", program, strlen(program));
	int pipefd[2] = {-1, -1}, infofd[2] = {-1, -1}, resfd[2] = {-1, -1};
	if (seccomp_fd < 0 || program_fd < 0 || pipe2(pipefd, O_CLOEXEC) != 0 || pipe2(infofd, O_CLOEXEC) != 0 ||
	    pipe2(resfd, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "sandbox: cannot prepare its files: %m");
		goto fail;
	}

	char size[32], timeout[32], result_fd[8], t_lib[256], t_lib64[256], t_bin[256], t_sbin[256];
	snprintf(size, sizeof size, "%lld", (long long)l->disk_bytes);
	snprintf(timeout, sizeof timeout, "%.17g", l->timeout_seconds);
	snprintf(result_fd, sizeof result_fd, "%d", RESULT_FD);
	const char *argv[72];
	int n = 0;
	argv[n++] = bwrap;
	argv[n++] = "--unshare-all";   /* user, PID, network, IPC, UTS, cgroup namespaces */
	argv[n++] = "--die-with-parent";
	argv[n++] = "--new-session";
	argv[n++] = "--cap-drop";
	argv[n++] = "ALL";
	argv[n++] = "--ro-bind";
	argv[n++] = "/usr";
	argv[n++] = "/usr";
	add_root_entry(argv, &n, "/lib", t_lib, sizeof t_lib);
	add_root_entry(argv, &n, "/lib64", t_lib64, sizeof t_lib64);
	add_root_entry(argv, &n, "/bin", t_bin, sizeof t_bin);
	add_root_entry(argv, &n, "/sbin", t_sbin, sizeof t_sbin);
	/* Debian's alternatives: links under /usr point into it (libblas.so.3, which numpy loads, is one) */
	argv[n++] = "--ro-bind-try";
	argv[n++] = "/etc/alternatives";
	argv[n++] = "/etc/alternatives";
	if (l->mode != EVAL_SANDBOX_BWRAP_NO_PROC) {
		argv[n++] = "--proc";
		argv[n++] = "/proc";
	}
	argv[n++] = "--dev";
	argv[n++] = "/dev";
	argv[n++] = "--remount-ro";
	argv[n++] = "/dev";
	argv[n++] = "--size";
	argv[n++] = size;
	argv[n++] = "--perms";
	argv[n++] = "0700";
	argv[n++] = "--tmpfs";
	argv[n++] = "/sandbox";
	argv[n++] = "--file";
	argv[n++] = "4";
	argv[n++] = "/sandbox/main.py";
	argv[n++] = "--remount-ro";
	argv[n++] = "/";
	argv[n++] = "--chdir";
	argv[n++] = "/sandbox";
	argv[n++] = "--clearenv";
	argv[n++] = "--setenv";
	argv[n++] = "PATH";
	argv[n++] = "/usr/bin:/bin";
	argv[n++] = "--setenv";
	argv[n++] = "HOME";
	argv[n++] = "/sandbox";
	argv[n++] = "--setenv";
	argv[n++] = "TMPDIR";
	argv[n++] = "/sandbox";
	argv[n++] = "--setenv";
	argv[n++] = "LANG";
	argv[n++] = "C.UTF-8";
	argv[n++] = "--setenv";
	argv[n++] = "PYTHONDONTWRITEBYTECODE";
	argv[n++] = "1";
	argv[n++] = "--seccomp";
	argv[n++] = "3";
	argv[n++] = "--info-fd";   /* the PID of the sandbox's init: we wait for it, and so for its whole namespace */
	argv[n++] = "5";
	argv[n++] = l->python;
	argv[n++] = "-I";   /* isolated: no user site, no environment */
	argv[n++] = "-c";
	argv[n++] = eval_code_eval_driver;
	argv[n++] = "/sandbox/main.py";
	argv[n++] = timeout;
	argv[n++] = result_fd;
	argv[n] = NULL;

	/* orphans of the sandbox (its init, once bwrap has exited) become our children, so that we can reap them */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	bool root = geteuid() == 0;
	int64_t own_tasks = root ? 0 : count_user_tasks(getuid());
	uid_t uid = (uid_t)eval_sandbox_slot_uid(slot);
	if (root && uid == (uid_t)-1) {
		snprintf(err, errlen, "sandbox: every block of sandbox uids is taken (%u processes sandboxing at once)",
		         EVAL_SANDBOX_UID_BLOCKS);
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "sandbox: fork: %m");
		goto fail;
	}
	if (pid == 0) {
		/* the child: only async-signal-safe calls until exec */
		setpgid(0, 0);
		int extra[3] = {seccomp_fd, program_fd, infofd[1]};
		if (child_fds(pipefd[1], resfd[1], extra, 3) != 0)
			_exit(125);
		child_limits(l, root, own_tasks);
		if (root && (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 || setuid(uid) != 0))
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);   /* after setuid, which clears it */
		execv(bwrap, (char *const *)argv);
		_exit(127);
	}
	close(pipefd[1]);
	close(infofd[1]);
	close(resfd[1]);
	pipefd[1] = infofd[1] = resfd[1] = -1;
	close(seccomp_fd);
	close(program_fd);
	seccomp_fd = program_fd = -1;

	watch w = {.pid = pid, .out_fd = pipefd[0], .result_fd = resfd[0], .info_fd = infofd[0],
	           .deadline = aah_now_s() + l->wall_seconds, .kill_all = kill_bwrap};
	watch_run(&w, out);
	/* bwrap may exit before its init has torn the PID namespace down; the init's exit is the end of every process
	 * in it (the kernel reaps them all first), so wait for that, killing it if it lingers */
	if (w.init_fd >= 0) {
		struct pollfd q = {w.init_fd, POLLIN, 0};
		if (poll(&q, 1, 5000) <= 0) {
			syscall(SYS_pidfd_send_signal, w.init_fd, SIGKILL, NULL, 0);
			poll(&q, 1, 10000);
		}
		/* bwrap's exit made us its init's parent (we are a subreaper): reap it, so not even a zombie is left */
		siginfo_t si;
		waitid(P_PIDFD, (id_t)w.init_fd, &si, WEXITED | WNOHANG);
		close(w.init_fd);
	}
	close(infofd[0]);
	close(pipefd[0]);
	close(resfd[0]);
	free(bwrap);
	set_outcome(out, &w);
	if (w.result_len == 0 && !w.timed_out && strstr(out->output, "bwrap") &&
	    (out->exit_code == 1 || out->exit_code == 125 || out->exit_code == 126 || out->exit_code == 127)) {
		snprintf(err, errlen, "sandbox: bwrap could not start the sandbox (exit %d): %.400s", out->exit_code,
		         out->output);
		return -1;
	}
	return 0;
fail:
	if (seccomp_fd >= 0)
		close(seccomp_fd);
	if (program_fd >= 0)
		close(program_fd);
	for (int i = 0; i < 2; i++) {
		if (pipefd[i] >= 0)
			close(pipefd[i]);
		if (infofd[i] >= 0)
			close(infofd[i]);
		if (resfd[i] >= 0)
			close(resfd[i]);
	}
	free(bwrap);
	return -1;
}

/* Installs the socket() filter on the calling thread (after PR_SET_NO_NEW_PRIVS, which an unprivileged filter
 * needs). 0, or -1 with errno. Async-signal-safe. */
static int install_seccomp(void)
{
	struct sock_fprog prog = {(unsigned short)(sizeof SECCOMP_FILTER / sizeof *SECCOMP_FILTER),
	                          (struct sock_filter *)SECCOMP_FILTER};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

/* Every process of uid (as root): a child that becomes uid signals all it may, which is exactly those. */
static void kill_uid(uid_t uid)
{
	pid_t k = fork();
	if (k == 0) {
		if (setgroups(0, NULL) == 0 && setgid((gid_t)uid) == 0 && setuid(uid) == 0)
			kill(-1, SIGKILL);
		_exit(0);
	}
	if (k > 0)
		waitpid(k, NULL, 0);
}

static void kill_direct(watch *w)
{
	kill(-w->pid, SIGKILL);
	if (w->sweep_uid)
		kill_uid(w->uid);
}

/* Our children left over from a direct run (orphans of its process group, or of the slot's uid, reparented to us as
 * subreaper): reaped, so that not even a zombie is left. */
static void reap_leftovers(const watch *w)
{
	for (int round = 0; round < 50; round++) {
		int left = 0;
		DIR *d = opendir("/proc");
		if (!d)
			return;
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] < '0' || e->d_name[0] > '9')
				continue;
			char path[300], line[512];
			snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
			FILE *f = fopen(path, "r");
			if (!f)
				continue;
			size_t k = fread(line, 1, sizeof line - 1, f);
			fclose(f);
			line[k] = 0;
			const char *rp = strrchr(line, ')');   /* comm may hold spaces and parentheses */
			char state;
			long ppid, pgrp;
			if (!rp || sscanf(rp + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3 || ppid != (long)getpid())
				continue;
			struct stat st;
			snprintf(path, sizeof path, "/proc/%s", e->d_name);
			bool mine = pgrp == (long)w->pid || (w->sweep_uid && stat(path, &st) == 0 && st.st_uid == w->uid);
			if (!mine)
				continue;
			pid_t p = (pid_t)strtol(e->d_name, NULL, 10);
			if (state != 'Z')
				kill(p, SIGKILL);
			if (waitpid(p, NULL, WNOHANG) != p)
				left++;
		}
		closedir(d);
		if (!left)
			return;
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

/* process and none: a plain child in a private directory (TMPDIR or /tmp), with the limits, uid and seccomp filter
 * of process mode, or none of them. */
static int run_direct(const eval_sandbox_limits *l, int32_t slot, const char *program, eval_sandbox_result *out,
                      char *err, size_t errlen)
{
	bool confined = l->mode == EVAL_SANDBOX_PROCESS;
	bool root = geteuid() == 0;
	uid_t uid = confined && root ? (uid_t)eval_sandbox_slot_uid(slot) : getuid();
	if (uid == (uid_t)-1) {
		snprintf(err, errlen, "sandbox: every block of sandbox uids is taken (%u processes sandboxing at once)",
		         EVAL_SANDBOX_UID_BLOCKS);
		return -1;
	}
	const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char *dir = xasprintf("%s/aah-sandbox-XXXXXX", tmp);
	if (!mkdtemp(dir)) {
		snprintf(err, errlen, "sandbox: cannot make a private directory in %s: %m", tmp);
		free(dir);
		return -1;
	}
	char *main_py = xasprintf("%s/main.py", dir);
	int pipefd[2] = {-1, -1}, resfd[2] = {-1, -1};
	FILE *f = fopen(main_py, "w");
	bool wrote = f && fputs(program, f) >= 0;
	if (f && fclose(f) != 0)
		wrote = false;
	if (!wrote || (confined && root && (chown(dir, uid, (gid_t)uid) != 0 || chown(main_py, uid, (gid_t)uid) != 0)) ||
	    pipe2(pipefd, O_CLOEXEC) != 0 || pipe2(resfd, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "sandbox: cannot prepare %s: %m", main_py);
		goto fail;
	}
	char timeout[32], result_fd[8], home[600], tmpdir[600];
	snprintf(timeout, sizeof timeout, "%.17g", l->timeout_seconds);
	snprintf(result_fd, sizeof result_fd, "%d", RESULT_FD);
	snprintf(home, sizeof home, "HOME=%s", dir);
	snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", dir);
	const char *argv[] = {l->python, "-I", "-c", eval_code_eval_driver, main_py, timeout, result_fd, NULL};
	const char *envp[] = {"PATH=/usr/bin:/bin", home, tmpdir, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", NULL};
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	int64_t own_tasks = root ? 0 : count_user_tasks(getuid());
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "sandbox: fork: %m");
		goto fail;
	}
	if (pid == 0) {
		setpgid(0, 0);
		if (child_fds(pipefd[1], resfd[1], NULL, 0) != 0 || chdir(dir) != 0)
			_exit(125);
		if (confined) {
			child_limits(l, root, own_tasks);
			if (root && (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 || setuid(uid) != 0))
				_exit(126);
			if (l->seccomp && install_seccomp() != 0)
				_exit(124);
		}
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execve(l->python, (char *const *)argv, (char *const *)envp);
		_exit(127);
	}
	close(pipefd[1]);
	close(resfd[1]);
	pipefd[1] = resfd[1] = -1;
	watch w = {.pid = pid, .out_fd = pipefd[0], .result_fd = resfd[0], .info_fd = -1,
	           .deadline = aah_now_s() + l->wall_seconds, .kill_all = kill_direct, .uid = uid,
	           .sweep_uid = confined && root};
	watch_run(&w, out);
	kill_direct(&w);   /* what the program left running in its group (or under its uid) ends with it */
	reap_leftovers(&w);
	close(pipefd[0]);
	close(resfd[0]);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(main_py);
	free(dir);
	set_outcome(out, &w);
	if (w.result_len == 0 && !w.timed_out && out->exit_code >= 124 && out->exit_code <= 127) {
		snprintf(err, errlen, "sandbox: the %s child could not start the program (exit %d%s)",
		         eval_sandbox_mode_name(l->mode), out->exit_code,
		         out->exit_code == 124 ? ": no seccomp filter" : out->exit_code == 126 ? ": setuid" : "");
		return -1;
	}
	return 0;
fail:
	for (int i = 0; i < 2; i++) {
		if (pipefd[i] >= 0)
			close(pipefd[i]);
		if (resfd[i] >= 0)
			close(resfd[i]);
	}
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(main_py);
	free(dir);
	return -1;
}

int eval_sandbox_run(const eval_sandbox_limits *l, int32_t slot, const char *program, eval_sandbox_result *out,
                     char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	switch (l->mode) {
	case EVAL_SANDBOX_BWRAP:
	case EVAL_SANDBOX_BWRAP_NO_PROC:
		return run_bwrap(l, slot, program, out, err, errlen);
	case EVAL_SANDBOX_PROCESS:
	case EVAL_SANDBOX_NONE:
		return run_direct(l, slot, program, out, err, errlen);
	default:
		snprintf(err, errlen, "sandbox: no mode chosen (eval_sandbox_detect first)");
		return -1;
	}
}

int eval_sandbox_check(const eval_sandbox_limits *l, char *err, size_t errlen)
{
	eval_sandbox_result r;
	if (eval_sandbox_run(l, 0, "assert 2 + 2 == 4\n", &r, err, errlen) != 0)
		return -1;
	if (!r.passed) {
		snprintf(err, errlen, "sandbox (%s): a trial program %s (%s; exit %d): %.300s", eval_sandbox_mode_name(l->mode),
		         eval_sandbox_status_name(r.status), r.result, r.exit_code, r.output);
		return -1;
	}
	return 0;
}

/* The cause in bwrap's words, shortened to its first line. */
static void first_line(char *s)
{
	char *nl = strchr(s, '\n');
	if (nl)
		*nl = 0;
}

/* Whether this process may install a seccomp filter: tried in a child. */
static bool seccomp_works(void)
{
	pid_t p = fork();
	if (p == 0)
		_exit(install_seccomp() == 0 ? 0 : 1);
	int st = 0;
	return p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int eval_sandbox_detect(eval_sandbox_limits *l, char *note, size_t notelen, char *err, size_t errlen)
{
	note[0] = 0;
	if (l->mode == EVAL_SANDBOX_NONE) {
		snprintf(note, notelen, "sandbox: none (--sandbox none): the code tasks' programs run unconfined, under "
		         "code_eval's own guard and time limit only, as the harness runs them");
		return 0;
	}
	if (l->mode != EVAL_SANDBOX_AUTO) {
		if (l->mode == EVAL_SANDBOX_PROCESS)
			l->seccomp = seccomp_works();
		if (eval_sandbox_check(l, err, errlen) != 0)
			return -1;
		snprintf(note, notelen, "sandbox: %s (--sandbox %s)%s", eval_sandbox_mode_name(l->mode),
		         eval_sandbox_mode_name(l->mode),
		         l->mode == EVAL_SANDBOX_PROCESS && !l->seccomp ? ", without a seccomp filter (not allowed here)" : "");
		return 0;
	}
	char why_bwrap[1024] = "", why_noproc[1024] = "";
	l->mode = EVAL_SANDBOX_BWRAP;
	if (eval_sandbox_check(l, why_bwrap, sizeof why_bwrap) == 0) {
		snprintf(note, notelen, "sandbox: bwrap (namespaces, a fresh /proc, no network, seccomp, limits)");
		return 0;
	}
	first_line(why_bwrap);
	l->mode = EVAL_SANDBOX_BWRAP_NO_PROC;
	if (eval_sandbox_check(l, why_noproc, sizeof why_noproc) == 0) {
		snprintf(note, notelen, "sandbox: bwrap-noproc: bubblewrap cannot mount a fresh /proc here (%s); the programs "
		         "run in bubblewrap's namespaces without /proc", why_bwrap);
		return 0;
	}
	first_line(why_noproc);
	l->mode = EVAL_SANDBOX_PROCESS;
	l->seccomp = seccomp_works();
	char why_process[1024] = "";
	if (eval_sandbox_check(l, why_process, sizeof why_process) == 0) {
		snprintf(note, notelen, "sandbox: process: bubblewrap cannot make its namespaces here (%s); the programs run "
		         "as plain processes in a private directory with resource limits%s%s", why_noproc,
		         l->seccomp ? ", socket() refused by seccomp" : ", without seccomp (not allowed here)",
		         geteuid() == 0 ? ", under a uid of their own" : ", under this user's uid");
		return 0;
	}
	first_line(why_process);
	snprintf(err, errlen, "no sandbox works here: %s; without /proc: %s; as a plain process: %s (--sandbox none runs "
	         "the programs unconfined)", why_bwrap, why_noproc, why_process);
	l->mode = EVAL_SANDBOX_AUTO;
	return -1;
}
