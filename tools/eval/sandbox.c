/* tools/eval/sandbox.c — the bubblewrap sandbox (see sandbox.h). The child of fork() sets the resource limits,
 * drops to the slot's uid when root, asks to die with its parent and execs bwrap; bwrap builds the namespaces, the
 * read-only /usr, a fresh /dev and /proc, the tmpfs /sandbox holding main.py (copied from a memfd), applies the
 * seccomp filter (from another memfd) and execs Python. The parent reads the output, and at the wall limit kills
 * bwrap's process group; bwrap's --die-with-parent and the PID namespace take every sandboxed process with it. */
#include "tools/eval/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

void eval_sandbox_default_limits(eval_sandbox_limits *l)
{
	l->cpu_seconds = 3;
	l->wall_seconds = 20;
	l->memory_bytes = 1ll << 30;
	l->processes = 32;
	l->disk_bytes = 64ll << 20;
	l->open_files = 64;
	l->python = "/usr/bin/python3";
	l->bwrap = NULL;
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
		return xstrdup(l->bwrap);
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

int eval_sandbox_run(const eval_sandbox_limits *l, int32_t slot, const char *program, eval_sandbox_result *out,
                     char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	char *bwrap = find_bwrap(l);
	if (!bwrap) {
		snprintf(err, errlen, "sandbox: bwrap not found (Debian package bubblewrap)");
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
	int pipefd[2] = {-1, -1}, infofd[2] = {-1, -1};
	if (seccomp_fd < 0 || program_fd < 0 || pipe2(pipefd, O_CLOEXEC) != 0 || pipe2(infofd, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "sandbox: cannot prepare its files: %m");
		goto fail;
	}

	char size[32], t_lib[256], t_lib64[256], t_bin[256], t_sbin[256];
	snprintf(size, sizeof size, "%lld", (long long)l->disk_bytes);
	const char *argv[64];
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
	argv[n++] = "--proc";
	argv[n++] = "/proc";
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
	argv[n++] = "/sandbox/main.py";
	argv[n] = NULL;

	/* orphans of the sandbox (its init, once bwrap has exited) become our children, so that we can reap them */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	bool root = geteuid() == 0;
	int64_t own_tasks = root ? 0 : count_user_tasks(getuid());
	uid_t uid = (uid_t)(EVAL_SANDBOX_UID_BASE + (uint32_t)(slot & 0xffff));
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "sandbox: fork: %m");
		goto fail;
	}
	if (pid == 0) {
		/* the child: only async-signal-safe calls until exec */
		setpgid(0, 0);
		/* move every descriptor above 9 first, so that no dup2 below is onto itself (which would keep CLOEXEC) or
		 * onto another one still needed */
		int devnull = open("/dev/null", O_RDONLY);
		int in = fcntl(devnull, F_DUPFD, 10), o = fcntl(pipefd[1], F_DUPFD, 10);
		int sc = fcntl(seccomp_fd, F_DUPFD, 10), pr = fcntl(program_fd, F_DUPFD, 10);
		int inf = fcntl(infofd[1], F_DUPFD, 10);
		if (devnull < 0 || in < 0 || o < 0 || sc < 0 || pr < 0 || inf < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 ||
		    dup2(o, 2) < 0 || dup2(sc, 3) < 0 || dup2(pr, 4) < 0 || dup2(inf, 5) < 0)
			_exit(125);
		syscall(SYS_close_range, 6u, ~0u, 0u);
		/* SIGXCPU at the limit (reported as a timeout), SIGKILL a second later for a program that ignores it */
		set_limit2(RLIMIT_CPU, (rlim_t)l->cpu_seconds, (rlim_t)l->cpu_seconds + 1);
		set_limit(RLIMIT_AS, (rlim_t)l->memory_bytes);
		set_limit(RLIMIT_FSIZE, (rlim_t)l->disk_bytes);
		set_limit(RLIMIT_NOFILE, (rlim_t)l->open_files);
		set_limit(RLIMIT_CORE, 0);
		if (root) {
			/* a uid no other process has: the process limit counts this sandbox's processes only */
			set_limit(RLIMIT_NPROC, (rlim_t)l->processes);
			if (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 || setuid(uid) != 0)
				_exit(126);
		} else {
			/* unprivileged: the limit counts every task of this user; leave room for the ones running now */
			set_limit(RLIMIT_NPROC, (rlim_t)(own_tasks + l->processes));
		}
		prctl(PR_SET_PDEATHSIG, SIGKILL);   /* after setuid, which clears it */
		execv(bwrap, (char *const *)argv);
		_exit(127);
	}
	close(pipefd[1]);
	close(infofd[1]);
	pipefd[1] = infofd[1] = -1;
	close(seccomp_fd);
	close(program_fd);
	seccomp_fd = program_fd = -1;

	/* Read the output and bwrap's info (the init's PID, opened as a pidfd at once, so that no later PID reuse can
	 * confuse it) until bwrap exits; at the wall limit kill bwrap and the init, which takes the namespace with it. */
	double deadline = aah_now_s() + l->wall_seconds;
	bool timed_out = false, eof = false, info_eof = false, reaped = false;
	int status = 0, init_fd = -1;
	char info[1024];
	size_t info_len = 0;
	while (!eof || !reaped) {
		double left = deadline - aah_now_s();
		if (left <= 0 && !timed_out) {
			timed_out = true;
			if (init_fd >= 0)
				syscall(SYS_pidfd_send_signal, init_fd, SIGKILL, NULL, 0);
			kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
		}
		struct pollfd p[2] = {{eof ? -1 : pipefd[0], POLLIN, 0}, {info_eof ? -1 : infofd[0], POLLIN, 0}};
		int ms = timed_out ? 100 : (int)(left * 1000) + 1;
		if (ms > 200)
			ms = 200;
		if (!eof || !info_eof) {
			if (poll(p, 2, ms) > 0) {
				char buf[4096];
				if (p[0].revents) {
					ssize_t k = read(pipefd[0], buf, sizeof buf);
					if (k > 0) {
						size_t room = sizeof out->output - 1 - out->output_len;
						size_t take = (size_t)k < room ? (size_t)k : room;
						memcpy(out->output + out->output_len, buf, take);
						out->output_len += take;
					} else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
						eof = true;
					}
				}
				if (p[1].revents) {
					ssize_t k = read(infofd[0], info + info_len, sizeof info - 1 - info_len);
					if (k > 0)
						info_len += (size_t)k;
					if (k <= 0 || info_len == sizeof info - 1) {
						info_eof = true;
						info[info_len] = 0;
						const char *c = strstr(info, "\"child-pid\":");
						long child = c ? strtol(c + 12, NULL, 10) : 0;
						if (child > 0)
							init_fd = (int)syscall(SYS_pidfd_open, (pid_t)child, 0);
						if (init_fd >= 0 && timed_out)
							syscall(SYS_pidfd_send_signal, init_fd, SIGKILL, NULL, 0);
					}
				}
			}
		} else {
			struct timespec ts = {0, 10 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
		if (!reaped) {
			pid_t w = waitpid(pid, &status, WNOHANG);
			if (w == pid)
				reaped = true;
			else if (w < 0 && errno != EINTR) {
				reaped = true;
				status = 0;
			}
		}
		if (reaped && !eof && timed_out)
			break;   /* a descendant kept the pipe past the kill: stop reading */
	}
	/* bwrap may exit before its init has torn the PID namespace down; the init's exit is the end of every process
	 * in it (the kernel reaps them all first), so wait for that, killing it if it lingers */
	if (init_fd >= 0) {
		struct pollfd q = {init_fd, POLLIN, 0};
		if (poll(&q, 1, 5000) <= 0) {
			syscall(SYS_pidfd_send_signal, init_fd, SIGKILL, NULL, 0);
			poll(&q, 1, 10000);
		}
		/* bwrap's exit made us its init's parent (we are a subreaper): reap it, so not even a zombie is left */
		siginfo_t si;
		waitid(P_PIDFD, (id_t)init_fd, &si, WEXITED | WNOHANG);
		close(init_fd);
	}
	close(infofd[0]);
	out->output[out->output_len] = 0;
	close(pipefd[0]);
	free(bwrap);
	if (WIFEXITED(status))
		out->exit_code = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		out->exit_code = 128 + WTERMSIG(status);
	if (timed_out || out->exit_code == 128 + SIGXCPU)
		out->status = EVAL_SANDBOX_TIMEOUT;
	else if (out->exit_code == 0)
		out->status = EVAL_SANDBOX_PASSED;
	else if (out->exit_code > 128)
		out->status = EVAL_SANDBOX_SIGNALED;
	else
		out->status = EVAL_SANDBOX_FAILED;
	if (!timed_out && (out->exit_code == 125 || out->exit_code == 126 || out->exit_code == 127) &&
	    strstr(out->output, "bwrap")) {
		snprintf(err, errlen, "sandbox: bwrap could not start the sandbox (exit %d): %.300s", out->exit_code,
		         out->output);
		return -1;
	}
	if (!timed_out && out->exit_code == 1 && !strncmp(out->output, "bwrap:", 6)) {
		snprintf(err, errlen, "sandbox: %.400s", out->output);
		return -1;
	}
	return 0;
fail:
	if (seccomp_fd >= 0)
		close(seccomp_fd);
	if (program_fd >= 0)
		close(program_fd);
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	if (infofd[0] >= 0)
		close(infofd[0]);
	if (infofd[1] >= 0)
		close(infofd[1]);
	free(bwrap);
	return -1;
}

int eval_sandbox_check(const eval_sandbox_limits *l, char *err, size_t errlen)
{
	eval_sandbox_result r;
	if (eval_sandbox_run(l, 0, "import sys\nsys.exit(0 if 2 + 2 == 4 else 1)\n", &r, err, errlen) != 0)
		return -1;
	if (r.status != EVAL_SANDBOX_PASSED) {
		snprintf(err, errlen, "sandbox: a trial program %s (exit %d): %.300s", eval_sandbox_status_name(r.status),
		         r.exit_code, r.output);
		return -1;
	}
	return 0;
}
