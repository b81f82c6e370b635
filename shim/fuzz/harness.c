/*
 * libFuzzer harness for the native shim (cnichain-shim.c, #included below and built with
 * -DCNICHAIN_FUZZ, see hooks.h), under AddressSanitizer and UndefinedBehaviorSanitizer.
 *
 * One input is one exec of the shim.  It is cut into: modes (how stdin, stdout and stderr are
 * connected: a memory file, an empty file, a pipe fed by a thread, a non-blocking pipe fed in
 * dribs), the agent socket the shim is pointed at (the harness's fake agent, disabled spellings, a
 * missing or too long path, an unterminated config field), the cold launcher (safe, unsafe, missing,
 * a directory, relative), whether memfd_create exists, the embedded config block (structured or
 * raw bytes), argv, the environment, stdin (up to 4 MiB), and a script the fake agent plays on the
 * connection: wait until the shim has sent n bytes (so the socket can close at every step of the
 * exchange), send raw bytes, a well-formed ACK or RESULT, a header with any kind/version/length, a
 * large RESULT (up to ~1 MiB of output, which overflows a pipe), a half-close; the script's end
 * closes the connection.  The layout, byte by byte: README.md.
 *
 * Besides the sanitizers' findings, the harness checks the outcome against a model of the protocol
 * (common/shim.py's docstring): the agent's answer relayed exactly (stdout, stderr, exit code) when
 * the bytes the fake agent sent make one, otherwise the cold path with the same argv (argv[0] the
 * launcher), environment and every stdin byte, or the shim's own CNI error JSON, byte for byte,
 * when the launcher is missing or unsafe or the copy is not configured.  A mismatch aborts, which
 * libFuzzer reports like any crash.
 */
#define _GNU_SOURCE
#include "../cnichain-shim.c"
#undef realloc
#undef free
#undef main

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_ARGS 16
#define MAX_ENV 64
#define MAX_CAPTURE (8u << 20)
#define AGENT_WAIT_MS 20000 /* a safety net only: every wait below ends on bytes or end-of-stream */

/* ---------------------------------------------------------------------------------------------- */
/* small tools */

static void cleanup(void);

static _Noreturn void finding(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cnichain shim fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    cleanup(); /* abort() skips atexit */
    abort();
}

static void grow(struct buf *b, const void *p, size_t n) {
    if (!n) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        b->data = realloc(b->data, cap);
        if (!b->data) abort();
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void drop(struct buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

struct reader {
    const uint8_t *p;
    size_t n;
};

static unsigned take8(struct reader *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

static unsigned take16(struct reader *r) {
    unsigned hi = take8(r);
    return hi << 8 | take8(r);
}

static uint32_t take32(struct reader *r) {
    uint32_t hi = take16(r);
    return hi << 16 | take16(r);
}

static size_t take_blob(struct reader *r, const uint8_t **out) {
    size_t len = take16(r);
    if (len > r->n) len = r->n;
    *out = r->p;
    r->p += len;
    r->n -= len;
    return len;
}

/* ---------------------------------------------------------------------------------------------- */
/* the heap the shim allocates from: tracked, so a run that "exited" holding buffers frees them */

static void *live[256];
static size_t n_live;

void *cnichain_fuzz_realloc(void *p, size_t n) {
    void *q = realloc(p, n);
    if (!q) return NULL;
    for (size_t i = 0; p && i < n_live; i++)
        if (live[i] == p) {
            live[i] = q;
            return q;
        }
    if (p) finding("realloc of a pointer the shim never allocated");
    if (n_live == sizeof live / sizeof live[0]) finding("the shim holds more than %zu buffers", n_live);
    live[n_live++] = q;
    return q;
}

void cnichain_fuzz_free(void *p) {
    if (!p) return;
    for (size_t i = 0; i < n_live; i++)
        if (live[i] == p) {
            live[i] = live[--n_live];
            free(p);
            return;
        }
    finding("free of a pointer the shim never allocated");
}

static void free_live(void) {
    while (n_live) free(live[--n_live]);
}

/* ---------------------------------------------------------------------------------------------- */
/* the machine the shim runs on: a private directory with the fake agent's socket and launchers */

static char dir[64], sock_path[96], cold_safe[96], cold_unsafe[96], cold_missing[96], cold_dir[96];
static int listen_fd = -1, cancel_fd = -1;

static void cleanup(void) {
    unlink(sock_path);
    unlink(cold_safe);
    unlink(cold_unsafe);
    rmdir(cold_dir);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN); /* a feeder writing into a stdin the shim replaced */
    strcpy(dir, "/tmp/cnichain-shim-fuzz.XXXXXX");
    if (!mkdtemp(dir)) abort();
    snprintf(sock_path, sizeof sock_path, "%s/a.sock", dir);
    snprintf(cold_safe, sizeof cold_safe, "%s/cold", dir);
    snprintf(cold_unsafe, sizeof cold_unsafe, "%s/cold-unsafe", dir);
    snprintf(cold_missing, sizeof cold_missing, "%s/cold-missing", dir);
    snprintf(cold_dir, sizeof cold_dir, "%s/cold-dir", dir);
    atexit(cleanup);
    int fd = open(cold_safe, O_CREAT | O_WRONLY | O_TRUNC, 0755);
    if (fd < 0 || fchmod(fd, 0755)) abort();
    close(fd);
    fd = open(cold_unsafe, O_CREAT | O_WRONLY | O_TRUNC, 0755);
    if (fd < 0 || fchmod(fd, 0777)) abort();
    close(fd);
    if (mkdir(cold_dir, 0755)) abort();
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, sock_path);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0); /* poll decides */
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sa, sizeof sa) || listen(listen_fd, 16)) abort();
    cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (cancel_fd < 0) abort();
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* the fake agent: accepts one connection and plays the input's script on it */

enum { OP_WAIT, OP_RAW, OP_ACK, OP_RESULT, OP_HEADER, OP_BIG, OP_SHUTDOWN, OP_CLOSE, N_OPS };

struct agent {
    struct reader script;
    pthread_t thread;
    int fd;            /* the accepted connection, -1 before */
    int accepted;      /* the shim connected */
    struct buf sent;   /* every byte sent successfully, in order */
    size_t received;   /* bytes received from the shim */
    size_t req_len;    /* the REQUEST frame's length once its header arrived, else 0 */
    int peer_gone;     /* the shim closed its end */
};

/* The frame at ``off`` of ``s``: 1 whole (kind, payload), 0 not (all) there or not ours. */
static int frame_at(const struct buf *s, size_t off, unsigned *kind, const unsigned char **payload, uint32_t *len) {
    if (s->len < off + HEADER_SIZE) return 0;
    const unsigned char *h = s->data + off;
    if (memcmp(h, "CNIA", 4) || h[4] != VERSION) return 0;
    *len = (uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 | (uint32_t)h[10] << 8 | h[11];
    if (*len > MAX_RESULT || s->len - off - HEADER_SIZE < *len) return 0;
    *kind = h[5];
    *payload = h + HEADER_SIZE;
    return 1;
}

/* Whether what the agent sent so far starts with a well-formed ACK: then the shim will send GO. */
static int acked(const struct buf *sent) {
    unsigned kind;
    const unsigned char *p;
    uint32_t len;
    return frame_at(sent, 0, &kind, &p, &len) && kind == ACK && len == 4;
}

/* How many bytes the shim will have sent by now: its REQUEST, and GO after a good ACK. */
static size_t shim_will_send(const struct agent *a) {
    if (!a->req_len) return a->received > HEADER_SIZE ? a->received : HEADER_SIZE;
    return a->req_len + (acked(&a->sent) ? HEADER_SIZE : 0);
}

static void agent_wait(struct agent *a, size_t target) {
    unsigned char chunk[65536], head[HEADER_SIZE];
    while (!a->peer_gone) {
        size_t want = shim_will_send(a);
        if (a->received >= (target < want ? target : want)) return;
        struct pollfd p = {a->fd, POLLIN, 0};
        if (poll(&p, 1, AGENT_WAIT_MS) <= 0) return;
        ssize_t k = recv(a->fd, chunk, sizeof chunk, 0);
        if (k <= 0) {
            a->peer_gone = 1;
            return;
        }
        size_t before = a->received;
        a->received += (size_t)k;
        if (before < HEADER_SIZE) {
            static unsigned char got[HEADER_SIZE];
            size_t n = (size_t)k < HEADER_SIZE - before ? (size_t)k : HEADER_SIZE - before;
            memcpy(got + before, chunk, n);
            if (a->received >= HEADER_SIZE) {
                memcpy(head, got, HEADER_SIZE);
                if (memcmp(head, "CNIA", 4) || head[5] != REQUEST) finding("the shim's first frame is not a REQUEST");
                a->req_len = HEADER_SIZE + get_be32(head + 8);
            }
        }
    }
}

static void agent_send(struct agent *a, const void *p, size_t n) {
    const unsigned char *c = p;
    while (n && !a->peer_gone) {
        ssize_t k = send(a->fd, c, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            a->peer_gone = 1;
            return;
        }
        grow(&a->sent, c, (size_t)k);
        c += k;
        n -= (size_t)k;
    }
}

static void agent_header(struct agent *a, unsigned version, unsigned kind, uint32_t len) {
    unsigned char h[HEADER_SIZE] = {'C', 'N', 'I', 'A', (unsigned char)version, (unsigned char)kind, 0, 0,
                                    (unsigned char)(len >> 24), (unsigned char)(len >> 16), (unsigned char)(len >> 8),
                                    (unsigned char)len};
    agent_send(a, h, HEADER_SIZE);
}

static void agent_u32(struct agent *a, uint32_t v) {
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8), (unsigned char)v};
    agent_send(a, b, 4);
}

static void agent_result(struct agent *a, int32_t code, const uint8_t *out, size_t n_out, const uint8_t *err,
                         size_t n_err) {
    agent_header(a, VERSION, RESULT, (uint32_t)(12 + n_out + n_err));
    agent_u32(a, (uint32_t)code);
    agent_u32(a, (uint32_t)n_out);
    agent_u32(a, (uint32_t)n_err);
    agent_send(a, out, n_out);
    agent_send(a, err, n_err);
}

static void *agent_main(void *arg) {
    struct agent *a = arg;
    struct pollfd p[2] = {{listen_fd, POLLIN, 0}, {cancel_fd, POLLIN, 0}};
    if (poll(p, 2, 60000) <= 0 || !(p[0].revents & POLLIN)) return NULL;
    a->fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (a->fd < 0) return NULL;
    a->accepted = 1;
    struct reader *s = &a->script;
    while (s->n && !a->peer_gone) {
        unsigned op = take8(s) % N_OPS;
        const uint8_t *blob, *blob2;
        size_t n, n2;
        if (op == OP_WAIT) {
            agent_wait(a, take16(s));
        } else if (op == OP_RAW) {
            n = take_blob(s, &blob);
            agent_send(a, blob, n);
        } else if (op == OP_ACK) {
            agent_header(a, VERSION, ACK, 4);
            agent_u32(a, take32(s) % 100000);
        } else if (op == OP_RESULT) {
            int32_t code = (int32_t)take32(s);
            n = take_blob(s, &blob);
            n2 = take_blob(s, &blob2);
            agent_result(a, code, blob, n, blob2, n2);
        } else if (op == OP_HEADER) {
            unsigned version = take8(s), kind = take8(s);
            uint32_t len = take32(s);
            agent_header(a, version, kind, len);
            n = take_blob(s, &blob);
            agent_send(a, blob, n);
        } else if (op == OP_BIG) {
            size_t n_out = take8(s) * (size_t)4099, n_err = take8(s) * (size_t)1031;
            unsigned char *big = malloc(n_out + n_err + 1);
            if (!big) abort();
            for (size_t i = 0; i < n_out + n_err; i++) big[i] = (unsigned char)(i * 7 + n_out);
            agent_result(a, (int32_t)take8(s), big, n_out, big + n_out, n_err);
            free(big);
        } else if (op == OP_SHUTDOWN) {
            shutdown(a->fd, SHUT_WR);
        } else {
            break;
        }
    }
    close(a->fd); /* the script's end: the socket closes here, whatever step that is */
    a->fd = -1;
    return NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* stdin, stdout and stderr */

struct drain {
    pthread_t thread;
    int fd; /* read end */
    struct buf got;
};

static void *drain_main(void *arg) {
    struct drain *d = arg;
    unsigned char chunk[65536];
    for (;;) {
        ssize_t k = read(d->fd, chunk, sizeof chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        if (d->got.len + (size_t)k <= MAX_CAPTURE) grow(&d->got, chunk, (size_t)k);
    }
    close(d->fd);
    return NULL;
}

/* A pipe whose write end the shim gets (non-blocking when asked) and a thread drains. */
static int start_drain(struct drain *d, int nonblocking) {
    int p[2];
    if (pipe2(p, O_CLOEXEC)) abort();
    if (nonblocking) fcntl(p[1], F_SETFL, fcntl(p[1], F_GETFL) | O_NONBLOCK);
    d->fd = p[0];
    d->got = (struct buf){0};
    if (pthread_create(&d->thread, NULL, drain_main, d)) abort();
    return p[1];
}

struct feed {
    pthread_t thread;
    int fd; /* write end */
    int dribble;
    const uint8_t *data;
    size_t len;
};

static void *feed_main(void *arg) {
    struct feed *f = arg;
    size_t off = 0, step = 1;
    while (off < f->len) {
        if (f->dribble && off && step < 32) usleep(100); /* a non-blocking read meets an empty pipe midway */
        size_t n = f->dribble && step < 32 ? 1 + (step * 37) % 997 : f->len - off;
        if (n > f->len - off) n = f->len - off;
        ssize_t k = write(f->fd, f->data + off, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break; /* the shim replaced fd 0 (the cold replay) or finished */
        off += (size_t)k;
        step++;
    }
    close(f->fd);
    return NULL;
}

enum { STDIN_MEMFD, STDIN_EMPTY, STDIN_PIPE, STDIN_NONBLOCK };

/* Whatever can still be read from fd 0, to its end (how the cold launcher would see it). */
static void read_rest_of_stdin(struct buf *out) {
    unsigned char chunk[65536];
    for (;;) {
        ssize_t k = read(0, chunk, sizeof chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EAGAIN) {
            struct pollfd p = {0, POLLIN, 0};
            poll(&p, 1, AGENT_WAIT_MS);
            continue;
        }
        if (k <= 0) return;
        grow(out, chunk, (size_t)k);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* one run */

static jmp_buf back;
enum { GONE_EXIT = 1, GONE_EXEC = 2 };
int cnichain_fuzz_out = -1, cnichain_fuzz_err = -1;

static struct {
    int code;                      /* from the exit hook */
    char path[sizeof fallback_buf]; /* from the exec hook */
    int argv_ok, envp_ok;
    struct buf cold_stdin;
    char **argv, **envp; /* what the shim was given */
    int argc;
    char *argv_copy[MAX_ARGS + 1]; /* the caller's pointers, before the shim set argv[0] */
} run;

static int no_memfd; /* this input's kernel has no memfd_create */

int cnichain_fuzz_memfd_create(const char *name, unsigned flags) {
    if (no_memfd) {
        errno = ENOSYS;
        return -1;
    }
    return memfd_create(name, flags);
}

_Noreturn void cnichain_fuzz_exit(int code) {
    run.code = code;
    longjmp(back, GONE_EXIT);
}

_Noreturn void cnichain_fuzz_execve(const char *path, char *const argv[], char *const envp[]) {
    snprintf(run.path, sizeof run.path, "%s", path);
    run.argv_ok = 1;
    if (run.argc == 0) {
        run.argv_ok = argv[0] && !strcmp(argv[0], path) && !argv[1];
    } else {
        run.argv_ok = argv == run.argv && !strcmp(argv[0], path);
        for (int i = 1; run.argv_ok && i <= run.argc; i++) run.argv_ok = argv[i] == run.argv_copy[i];
    }
    run.envp_ok = envp == run.envp;
    read_rest_of_stdin(&run.cold_stdin);
    longjmp(back, GONE_EXEC);
}

/* The shim's error JSON, as the skeleton's error_json lays it out (json.dumps(indent=4)); strings
 * escaped the shim's way (every control and non-ASCII byte as \u00XX): the same JSON value. */
static void json_str(struct buf *b, const char *s) {
    grow(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            grow(b, esc, 2);
        } else if (c < 0x20 || c >= 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            grow(b, esc, 6);
        } else {
            grow(b, s, 1);
        }
    }
    grow(b, "\"", 1);
}

static void error_json(struct buf *b, const char *msg, const char *details) {
    const char *head = "{\n    \"code\": 999,\n    \"msg\": ";
    grow(b, head, strlen(head));
    json_str(b, msg);
    if (details && *details) {
        grow(b, ",\n    \"details\": ", 17);
        json_str(b, details);
    }
    grow(b, "\n}\n", 3);
}

static int same(const struct buf *b, const void *p, size_t n) {
    return b->len == n && (!n || !memcmp(b->data, p, n));
}

static int valid_type_model(const char *t) {
    if (!*t) return 0;
    for (const char *c = t; *c; c++) {
        int ok = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || (c != t && strchr("._-", *c));
        if (!ok) return 0;
    }
    return 1;
}

static void field_model(char *dst, const volatile char *src, size_t size) {
    size_t i;
    for (i = 0; i < size && src[i]; i++) dst[i] = src[i];
    if (i == size) i = 0; /* unterminated: "" */
    dst[i] = 0;
}

/* Split ``n`` bytes at NULs into at most ``max`` strings (copied into ``store``). */
static int split(const uint8_t *p, size_t n, char *store, char **out, int max) {
    int count = 0;
    if (!n) return 0;
    memcpy(store, p, n);
    store[n] = 0;
    char *s = store, *end = store + n;
    while (count < max && s <= end) {
        out[count++] = s;
        s += strlen(s) + 1;
        if (s > end) break;
    }
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct reader r = {data, size};
    unsigned modes = take8(&r), socket_sel = take8(&r) % 8, fallback_byte = take8(&r);
    unsigned fallback_sel = (fallback_byte & 7) % 5, stdin_scale = fallback_byte >> 3 & 3;
    no_memfd = fallback_byte >> 7;
    unsigned stdin_mode = modes & 3, raw_config = modes >> 4 & 1, no_argv = modes >> 5 & 1, command_sel = modes >> 6;
    const uint8_t *type_p, *argv_p, *env_p, *in_p;
    size_t type_n = take_blob(&r, &type_p), argv_n = take_blob(&r, &argv_p), env_n = take_blob(&r, &env_p);
    size_t in_n = take_blob(&r, &in_p);
    /* A large stdin: the blob repeated (up to 4 MiB), more than a pipe or the socket buffer holds. */
    static struct buf big_in;
    size_t repeat = (size_t)1 << (3 * stdin_scale);
    while (repeat > 1 && in_n * repeat > (4u << 20)) repeat /= 2;
    if (repeat > 1 && in_n) {
        big_in.len = 0;
        for (size_t i = 0; i < repeat; i++) grow(&big_in, in_p, in_n);
        in_p = big_in.data;
        in_n = big_in.len;
    }

    /* the embedded config block */
    volatile char *cfg = (volatile char *)&cnichain_shim_config;
    for (size_t i = 0; i < sizeof cnichain_shim_config; i++) cfg[i] = 0;
    const char *fallback_paths[5] = {cold_safe, cold_unsafe, cold_missing, cold_dir, "relative/cold"};
    if (raw_config) {
        for (size_t i = 0; i < type_n && i < sizeof cnichain_shim_config; i++) cfg[i] = (char)type_p[i];
    } else {
        for (size_t i = 0; i < 22; i++) cnichain_shim_config.magic[i] = "CNICHAIN-SHIM-CONFIG/1"[i];
        for (size_t i = 0; i < type_n && i < sizeof cnichain_shim_config.type - 1; i++)
            cnichain_shim_config.type[i] = (char)type_p[i];
        const char *fb = fallback_paths[fallback_sel];
        for (size_t i = 0; fb[i]; i++) cnichain_shim_config.fallback[i] = fb[i];
    }
    /* the socket field never names anything but the fake agent (or nothing) */
    for (size_t i = 0; i < sizeof cnichain_shim_config.socket; i++)
        cnichain_shim_config.socket[i] = socket_sel == 7 ? 'A' : (i < strlen(sock_path) ? sock_path[i] : 0);

    char want_type[64], want_fallback[sizeof fallback_buf];
    field_model(want_type, cnichain_shim_config.type, sizeof want_type);
    field_model(want_fallback, cnichain_shim_config.fallback, sizeof want_fallback);
    int configured = valid_type_model(want_type) && want_fallback[0] == '/';

    /* argv */
    static char argv_store[65536 + 1], env_store[65536 + 1];
    char *argv[MAX_ARGS + 1] = {0};
    int argc = no_argv ? 0 : split(argv_p, argv_n, argv_store, argv, MAX_ARGS);
    if (!no_argv && argc == 0) argv[argc++] = "probe";
    argv[argc] = NULL;

    /* the environment: the harness's socket choice first (getenv takes the first), then the input's */
    static const char *socket_env[8] = {NULL, NULL, "CNICHAIN_AGENT_SOCKET=off", "CNICHAIN_AGENT_SOCKET=",
                                        "CNICHAIN_AGENT_SOCKET=NoNe", NULL, NULL, NULL};
    static char env_sock[128], env_missing[128], env_long[200];
    snprintf(env_sock, sizeof env_sock, "CNICHAIN_AGENT_SOCKET=%s", sock_path);
    snprintf(env_missing, sizeof env_missing, "CNICHAIN_AGENT_SOCKET=%s/absent.sock", dir);
    snprintf(env_long, sizeof env_long, "CNICHAIN_AGENT_SOCKET=%s/%0120d", dir, 0);
    static const char *commands[4] = {NULL, "CNI_COMMAND=ADD", "CNI_COMMAND=VERSION", "CNI_COMMAND=DEL"};
    char *env_in[MAX_ENV], *envp[MAX_ENV + 4];
    int n_in = split(env_p, env_n, env_store, env_in, MAX_ENV), envc = 0;
    const char *sock_entry = socket_sel == 0 ? env_sock : socket_sel == 5 ? env_missing : socket_sel == 6 ? env_long
                                                                                                         : socket_env[socket_sel];
    if (sock_entry) envp[envc++] = (char *)sock_entry;
    if (commands[command_sel]) envp[envc++] = (char *)commands[command_sel];
    for (int i = 0; i < n_in; i++) {
        if (!sock_entry && !strncmp(env_in[i], "CNICHAIN_AGENT_SOCKET=", 22)) continue;
        envp[envc++] = env_in[i];
    }
    envp[envc] = NULL;
    const char *command = NULL;
    for (int i = 0; i < envc && !command; i++)
        if (!strncmp(envp[i], "CNI_COMMAND=", 12)) command = envp[i] + 12;
    int is_version = command && !strcmp(command, "VERSION");
    int reaches_agent = configured && (socket_sel == 0 || socket_sel == 1);

    /* stdin */
    struct feed feed = {0};
    int had_feeder = 0;
    if (stdin_mode == STDIN_MEMFD || stdin_mode == STDIN_EMPTY) {
        int fd = memfd_create("fuzz-stdin", MFD_CLOEXEC);
        if (fd < 0) abort();
        if (stdin_mode == STDIN_EMPTY) in_n = 0;
        if (in_n && write(fd, in_p, in_n) != (ssize_t)in_n) abort();
        lseek(fd, 0, SEEK_SET);
        dup2(fd, 0);
        close(fd);
    } else {
        int p[2];
        if (pipe2(p, O_CLOEXEC)) abort();
        if (stdin_mode == STDIN_NONBLOCK) fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
        dup2(p[0], 0);
        close(p[0]);
        feed = (struct feed){.fd = p[1], .dribble = stdin_mode == STDIN_NONBLOCK, .data = in_p, .len = in_n};
        if (pthread_create(&feed.thread, NULL, feed_main, &feed)) abort();
        had_feeder = 1;
    }

    struct drain out, err;
    cnichain_fuzz_out = start_drain(&out, modes >> 2 & 1);
    cnichain_fuzz_err = start_drain(&err, modes >> 3 & 1);

    struct agent agent = {.script = r, .fd = -1};
    if (pthread_create(&agent.thread, NULL, agent_main, &agent)) abort();

    /* the exec */
    memset(&run, 0, sizeof run);
    run.argv = argv;
    run.envp = envp;
    run.argc = argc;
    memcpy(run.argv_copy, argv, sizeof run.argv_copy);
    char **saved_environ = environ;
    environ = envp;
    int how = setjmp(back);
    if (how == 0) {
        cnichain_shim_main(argc, argv);
        finding("the shim's main returned");
    }
    environ = saved_environ;

    /* the exec is over: let every helper finish */
    if (agent_fd >= 0) close(agent_fd); /* as the process's exit would */
    agent_fd = -1;
    uint64_t one = 1;
    if (write(cancel_fd, &one, sizeof one) != sizeof one) abort();
    pthread_join(agent.thread, NULL);
    if (read(cancel_fd, &one, sizeof one) < 0) abort();
    for (int stale; (stale = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0;) close(stale);
    close(cnichain_fuzz_out);
    close(cnichain_fuzz_err);
    pthread_join(out.thread, NULL);
    pthread_join(err.thread, NULL);
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    dup2(devnull, 0);
    close(devnull);
    if (had_feeder) pthread_join(feed.thread, NULL);
    while (waitpid(-1, NULL, __WALL) > 0) /* the shim's stdin feeder, without memfd_create */
        ;
    free_live();

    /* ----- the verdict ----- */
    if (!reaches_agent && agent.accepted) finding("the shim talked to the agent it should not have reached");

    /* what the model expects from the agent's bytes: a RESULT to relay, or cold */
    unsigned kind;
    const unsigned char *pl = NULL;
    uint32_t len = 0;
    int relay = 0, go = 0;
    const unsigned char *res = NULL;
    uint32_t res_len = 0;
    if (reaches_agent && frame_at(&agent.sent, 0, &kind, &pl, &len)) {
        if (kind == RESULT) {
            res = pl, res_len = len;
        } else if (kind == ACK && len == 4) {
            go = 1;
            if (frame_at(&agent.sent, HEADER_SIZE + 4, &kind, &pl, &len) && kind == RESULT) res = pl, res_len = len;
        }
    }
    if (res && res_len >= 12 && (uint64_t)12 + get_be32(res + 4) + get_be32(res + 8) == res_len) relay = 1;
    /* The shim may also go cold when the agent closed before taking all it had to send. */
    int all_taken = agent.req_len && agent.received >= agent.req_len + (go ? HEADER_SIZE : 0);

    struct buf want = {0};
    const char *cold_msg = NULL;
    if (!configured) {
        cold_msg = "cnichain shim: this copy was not configured by 'cnichain install'";
        error_json(&want, cold_msg, "");
    } else {
        struct stat st;
        if (stat(want_fallback, &st) != 0)
            cold_msg = "cnichain shim: the cold launcher is missing";
        else if (!S_ISREG(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & 022))
            cold_msg = "cnichain shim: refusing an unsafe cold launcher";
        if (cold_msg) error_json(&want, cold_msg, want_fallback);
    }

    int relayed = 0;
    if (relay && how == GONE_EXIT) {
        uint32_t n_out = get_be32(res + 4), n_err = get_be32(res + 8);
        relayed = run.code == (int32_t)get_be32(res) && same(&out.got, res + 12, n_out) &&
                  same(&err.got, res + 12 + n_out, n_err);
        if (!relayed && !cold_msg)
            finding("the agent's RESULT was not relayed exactly: exit %d (want %d), stdout %zu bytes (want %u), "
                    "stderr %zu bytes (want %u)",
                    run.code, (int32_t)get_be32(res), out.got.len, n_out, err.got.len, n_err);
    }
    if (relay && all_taken && configured && !relayed) finding("a well-formed RESULT was not relayed (went cold)");
    if (!relayed) { /* then it must be the cold path, exactly */
        if (cold_msg) {
            if (how != GONE_EXIT || run.code != 1 || !same(&out.got, want.data, want.len) || err.got.len)
                finding("expected the shim's error JSON for \"%s\"; got exit %d, %zu bytes of stdout: %.*s", cold_msg,
                        run.code, out.got.len, (int)(out.got.len > 300 ? 300 : out.got.len),
                        out.got.data ? (char *)out.got.data : "");
        } else {
            if (how != GONE_EXEC) finding("expected the cold path; the shim exited %d", run.code);
            if (strcmp(run.path, want_fallback)) finding("exec'd %s, not the cold launcher", run.path);
            if (!run.argv_ok) finding("the cold launcher did not get the caller's argv");
            if (!run.envp_ok) finding("the cold launcher did not get the caller's environment");
            if (out.got.len || err.got.len) finding("the shim wrote before going cold");
            int stdin_ok = same(&run.cold_stdin, in_p, in_n) || (is_version && run.cold_stdin.len == 0);
            if (!stdin_ok)
                finding("the cold launcher's stdin is %zu bytes, not the caller's %zu", run.cold_stdin.len, in_n);
        }
    }
    drop(&want);
    drop(&agent.sent);
    drop(&out.got);
    drop(&err.got);
    drop(&run.cold_stdin);
    return 0;
}
