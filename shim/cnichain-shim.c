/*
 * cnichain-shim: the native front of an installed cnichain plugin.
 *
 * A runtime execs this once per pod per command.  It hands the request to the node agent over its
 * root-only unix socket and prints the agent's answer, exactly as common/shim.py's forward() does
 * -- that module's docstring is the wire protocol's specification -- but without starting an
 * interpreter (13-17 ms on some nodes, versus well under 1 ms for this static binary).  Whenever
 * the agent cannot run the request (no socket, a refusal, no ACK in time, end-of-stream after GO,
 * any frame it does not understand) it execs the cold path instead: the Python launcher the
 * installer wrote for the same plugin type, with the same argv, environment and stdin bytes, so
 * the output is byte-for-byte what a cold exec prints.
 *
 * Nothing here comes from the caller that decides *what* runs: the plugin type, the default socket
 * and the cold launcher's absolute path are baked into the binary by `cnichain install`, which
 * patches the `cnichain_shim_config` block below (found by its magic) in each installed copy.
 * The caller only supplies what a cold exec would also get: environment and stdin.
 *
 * libc only, no heap growth beyond the request and the answer, every wait bounded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The fuzz build (shim/fuzz/build.sh) links this file into a libFuzzer harness that calls main as
 * cnichain_shim_main, many times in one process: leaving the process, exec'ing the cold launcher,
 * fds 1 and 2, and the heap become the harness's hooks (shim/fuzz/harness.c).  Everywhere else
 * the names below are the plain libc ones, so the production build is this file as it reads. */
#ifdef CNICHAIN_FUZZ
#include "fuzz/hooks.h"
#else
#define SHIM_EXIT _exit
#define SHIM_MEMFD_CREATE(name, flags) (int)syscall(SYS_memfd_create, name, flags)
#define SHIM_EXECVE execve
#define SHIM_OUT 1
#define SHIM_ERR 2
#endif

/* --- the baked configuration (written by node/native_shim.py; keep the layouts in step) --- */
struct shim_config {
    char magic[32];     /* "CNICHAIN-SHIM-CONFIG/1", the installer's anchor */
    char type[64];      /* plugin type sent to the agent, e.g. "host-local" */
    char socket[128];   /* the agent socket unless $CNICHAIN_AGENT_SOCKET says otherwise */
    char fallback[512]; /* absolute path of the cold Python launcher */
};
/* Not static and marked used: the compiler must neither drop it nor fold its (patched) bytes. */
__attribute__((used)) volatile struct shim_config cnichain_shim_config = {"CNICHAIN-SHIM-CONFIG/1", "", "", ""};

/* --- the protocol (common/shim.py) --- */
enum { REQUEST = 1, ACK = 2, GO = 3, RESULT = 4, REFUSED = 5 };
#define VERSION 1
#define HEADER_SIZE 12
#define MAX_RESULT (64u << 20)
#define MAX_STDIN (64u << 20) /* far above the agent's own 4 MiB request limit */
#define ENV_SOCKET "CNICHAIN_AGENT_SOCKET"

/* Defaults as in common/shim.py (CONNECT_TIMEOUT, ACK_TIMEOUT, RESULT_GRACE), in ms. */
#define CONNECT_MS 1000
#define ACK_MS 3000
#define GRACE_MS 10000

static char type_buf[64], socket_buf[128], fallback_buf[512];
static int agent_fd = -1; /* closed before the cold path, so no feeder child holds it open */

struct buf {
    unsigned char *data;
    size_t len, cap;
};

/* --- small helpers --- */
static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int buf_reserve(struct buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len) return -1;
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap = cap > SIZE_MAX / 2 ? b->len + extra : cap * 2;
    unsigned char *p = realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

static int buf_put(struct buf *b, const void *p, size_t n) {
    if (!n) return 0; /* an empty buffer's data may be NULL: memcpy(_, NULL, 0) is undefined */
    if (buf_reserve(b, n)) return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static int put_be(struct buf *b, uint64_t v, int bytes) {
    unsigned char tmp[8];
    for (int i = 0; i < bytes; i++) tmp[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
    return buf_put(b, tmp, (size_t)bytes);
}

static uint32_t get_be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Wait until fd is ready for ``events``, as a blocking read or write would: the caller may have
 * handed us a non-blocking stdin or stdout (O_NONBLOCK belongs to the open file, which we share). */
static int wait_ready(int fd, short events) {
    struct pollfd p = {fd, events, 0};
    while (poll(&p, 1, -1) < 0)
        if (errno != EINTR) return -1;
    return 0;
}

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_ready(fd, POLLOUT) == 0) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* A CNI error on stdout, shaped like the skeleton's error_json (json.dumps(indent=4)). */
static void json_string(struct buf *b, const char *s) {
    buf_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf_put(b, "\\", 1);
            buf_put(b, s, 1);
        } else if (c < 0x20 || c >= 0x7f) {
            static const char hex[] = "0123456789abcdef";
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            buf_put(b, esc, 6);
        } else {
            buf_put(b, s, 1);
        }
    }
    buf_put(b, "\"", 1);
}

/* A string literal's bytes, counted by the compiler (a hand count once dropped a space). */
#define PUT_LITERAL(b, s) buf_put(b, s, sizeof s - 1)

static _Noreturn void fail(const char *msg, const char *details) {
    struct buf b = {0};
    PUT_LITERAL(&b, "{\n    \"code\": 999,\n    \"msg\": ");
    json_string(&b, msg);
    if (details && *details) {
        PUT_LITERAL(&b, ",\n    \"details\": ");
        json_string(&b, details);
    }
    PUT_LITERAL(&b, "\n}\n");
    if (b.data) write_all(SHIM_OUT, b.data, b.len);
    SHIM_EXIT(1);
}

/* Copy a NUL-terminated field out of the volatile block; "" when it is not terminated. */
static void load_field(char *dst, const volatile char *src, size_t size) {
    size_t i;
    for (i = 0; i < size; i++) {
        dst[i] = src[i];
        if (!src[i]) return;
    }
    dst[0] = 0;
}

static int valid_type(const char *t) {
    if (!((t[0] >= 'a' && t[0] <= 'z') || (t[0] >= '0' && t[0] <= '9'))) return 0;
    for (; *t; t++)
        if (!((*t >= 'a' && *t <= 'z') || (*t >= '0' && *t <= '9') || *t == '.' || *t == '_' || *t == '-')) return 0;
    return 1;
}

/* --- the cold path --- */

/* Put ``data`` behind fd 0: an anonymous memory file, or a pipe fed by a child when that fails. */
static int replay_stdin(const struct buf *data) {
    int fd = SHIM_MEMFD_CREATE("cnichain-stdin", 1u /* MFD_CLOEXEC */);
    if (fd >= 0) {
        if ((!data->len || write_all(fd, data->data, data->len) == 0) && lseek(fd, 0, SEEK_SET) == 0 &&
            dup2(fd, 0) == 0) {
            close(fd);
            return 0;
        }
        close(fd);
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC)) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(p[0]);
        _exit(data->len && write_all(p[1], data->data, data->len) ? 1 : 0);
    }
    close(p[1]);
    if (dup2(p[0], 0) != 0) return -1;
    close(p[0]);
    return 0;
}

/* Exec the cold launcher in our place; ``replay`` is the stdin already read (NULL: fd 0 untouched). */
static _Noreturn void run_cold(char **argv, const struct buf *replay) {
    struct stat st;
    if (agent_fd >= 0) close(agent_fd);
    agent_fd = -1;
    if (stat(fallback_buf, &st) != 0) fail("cnichain shim: the cold launcher is missing", fallback_buf);
    /* Only a launcher root (or whoever runs us) owns and nobody else can rewrite. */
    if (!S_ISREG(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & 022))
        fail("cnichain shim: refusing an unsafe cold launcher", fallback_buf);
    if (replay && replay_stdin(replay)) fail("cnichain shim: cannot replay stdin to the cold launcher", strerror(errno));
    char *bare[2] = {fallback_buf, NULL};
    if (argv[0]) argv[0] = fallback_buf; /* the launcher's own path, as if exec'd directly */
    SHIM_EXECVE(fallback_buf, argv[0] ? argv : bare, environ);
    fail("cnichain shim: cannot run the cold launcher", strerror(errno));
}

/* --- talking to the agent --- */

/* Wait for ``events`` on fd until ``deadline`` (monotonic ms): 1 ready, 0 timed out or failed. */
static int wait_fd(int fd, short events, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) return 0;
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, left > 60000 ? 60000 : (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return 0;
        if (r > 0) return 1;
    }
}

static int send_all(int fd, const unsigned char *p, size_t n, int64_t deadline) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
        } else if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (errno == EAGAIN && !wait_fd(fd, POLLOUT, deadline)) return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

static int recv_exact(int fd, unsigned char *p, size_t n, int64_t deadline) {
    while (n) {
        ssize_t k = recv(fd, p, n, 0);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
        } else if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (errno == EAGAIN && !wait_fd(fd, POLLIN, deadline)) return -1;
        } else {
            return -1; /* end-of-stream or an error */
        }
    }
    return 0;
}

/* One message: its kind, payload in ``out``; -1 for anything that is not a well-formed frame. */
static int recv_message(int fd, struct buf *out, int64_t deadline) {
    unsigned char h[HEADER_SIZE];
    if (recv_exact(fd, h, HEADER_SIZE, deadline)) return -1;
    if (memcmp(h, "CNIA", 4) != 0 || h[4] != VERSION) return -1;
    uint32_t len = get_be32(h + 8);
    if (len > MAX_RESULT) return -1;
    out->len = 0;
    if (buf_reserve(out, len ? len : 1)) return -1;
    if (recv_exact(fd, out->data, len, deadline)) return -1;
    out->len = len;
    return h[5];
}

/* RESULT payload: exit code (i32), stdout length, stderr length, the bytes; -1 when inconsistent. */
static int print_result(const struct buf *r) {
    if (r->len < 12) return -1;
    uint32_t n_out = get_be32(r->data + 4), n_err = get_be32(r->data + 8);
    if ((uint64_t)12 + n_out + n_err != r->len) return -1;
    int code = (int32_t)get_be32(r->data);
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is an error to report, not a reason to die */
    if (write_all(SHIM_OUT, r->data + 12, n_out) || write_all(SHIM_ERR, r->data + 12 + n_out, n_err)) SHIM_EXIT(1);
    SHIM_EXIT(code);
}

/* The environment as posix.environ sees it: records with '=', the first of duplicate keys. */
static int env_block(struct buf *b) {
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        size_t klen = (size_t)(eq - *e);
        int dup = 0;
        for (char **f = environ; f < e && !dup; f++)
            dup = strncmp(*f, *e, klen + 1) == 0;
        if (!dup && buf_put(b, *e, strlen(*e) + 1)) return -1;
    }
    return 0;
}

static int read_stdin(struct buf *b) {
    for (;;) {
        if (b->len >= MAX_STDIN) fail("cnichain shim: network configuration too large", "");
        if (buf_reserve(b, 65536)) return -1;
        ssize_t k = read(0, b->data + b->len, 65536);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_ready(0, POLLIN) == 0) continue;
        if (k < 0) return -1;
        if (k == 0) return 0;
        b->len += (size_t)k;
    }
}

static int connect_agent(const char *path) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n >= sizeof sa.sun_path) return -1; /* as CPython: "AF_UNIX path too long" */
    memcpy(sa.sun_path, path, n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1)) == 0) return fd;
    if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, now_ms() + CONNECT_MS)) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) return fd;
    }
    close(fd); /* absent, refused, permission, full backlog: all mean "run it here" */
    return -1;
}

static int disabled(const char *v) {
    return !*v || !strcasecmp(v, "off") || !strcasecmp(v, "none") || !strcmp(v, "0");
}

int main(int argc, char **argv) {
    (void)argc;
    load_field(type_buf, cnichain_shim_config.type, sizeof type_buf);
    load_field(socket_buf, cnichain_shim_config.socket, sizeof socket_buf);
    load_field(fallback_buf, cnichain_shim_config.fallback, sizeof fallback_buf);
    if (!valid_type(type_buf) || fallback_buf[0] != '/')
        fail("cnichain shim: this copy was not configured by 'cnichain install'", "");

    const char *path = getenv(ENV_SOCKET); /* first occurrence, as posix.environ keeps it */
    if (!path) path = socket_buf;
    if (disabled(path)) run_cold(argv, NULL);
    int fd = agent_fd = connect_agent(path);
    if (fd < 0) run_cold(argv, NULL);

    /* Only now read stdin: an absent agent leaves it untouched for the cold path. */
    struct buf in = {0}, req = {0}, msg = {0}, env = {0};
    const char *command = getenv("CNI_COMMAND");
    if (!(command && !strcmp(command, "VERSION")) && read_stdin(&in)) run_cold(argv, NULL);

    struct stat ns;
    if (stat("/proc/self/ns/net", &ns)) run_cold(argv, &in);
    mode_t mask = umask(022);
    umask(mask);
    size_t n_type = strlen(type_buf);
    if (env_block(&env) || env.len > UINT32_MAX || in.len > UINT32_MAX) run_cold(argv, &in);
    uint64_t payload = 8 + 8 + 4 + 2 + 4 + 4 + (uint64_t)n_type + env.len + in.len;
    if (payload > UINT32_MAX) run_cold(argv, &in);
    if (buf_put(&req, "CNIA", 4) || put_be(&req, VERSION, 1) || put_be(&req, REQUEST, 1) || put_be(&req, 0, 2) ||
        put_be(&req, payload, 4) || put_be(&req, (uint64_t)ns.st_dev, 8) || put_be(&req, (uint64_t)ns.st_ino, 8) ||
        put_be(&req, (uint64_t)mask, 4) || put_be(&req, n_type, 2) || put_be(&req, env.len, 4) ||
        put_be(&req, in.len, 4) || buf_put(&req, type_buf, n_type) || buf_put(&req, env.data, env.len) ||
        buf_put(&req, in.data, in.len))
        run_cold(argv, &in);
    free(env.data);

    if (send_all(fd, req.data, req.len, now_ms() + ACK_MS)) run_cold(argv, &in);
    free(req.data);
    int kind = recv_message(fd, &msg, now_ms() + ACK_MS);
    if (kind == RESULT) { /* answered without running anything (a rejected request) */
        print_result(&msg);
        run_cold(argv, &in);
    }
    if (kind != ACK || msg.len != 4) run_cold(argv, &in); /* REFUSED, silence, or not understood */
    int64_t limit_ms = get_be32(msg.data);

    /* GO: from here on the agent has been told to do the work, so wait for its answer (see
     * common/shim.py); only end-of-stream or garbage (the worker died too) sends us cold. */
    static const unsigned char go[HEADER_SIZE] = {'C', 'N', 'I', 'A', VERSION, GO, 0, 0, 0, 0, 0, 0};
    if (send_all(fd, go, HEADER_SIZE, now_ms() + ACK_MS)) run_cold(argv, &in);
    kind = recv_message(fd, &msg, now_ms() + limit_ms + GRACE_MS);
    if (kind == RESULT) print_result(&msg);
    run_cold(argv, &in);
}
