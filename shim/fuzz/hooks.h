/*
 * What cnichain-shim.c becomes under -DCNICHAIN_FUZZ (shim/fuzz/build.sh): a function the libFuzzer
 * harness (harness.c, which #includes the shim's source) calls once per input, in one long-lived
 * process.  So the few things a one-shot process may do and a library call may not are hooks the
 * harness implements: leaving (_exit), exec'ing the cold launcher (execve), memfd_create (so an input can take it away, as an old kernel
 * does, and the replay go through a pipe and a feeder child), writing the answer to
 * fds 1 and 2 (the harness's pipes instead, so sanitizer reports still reach the real stderr), and
 * the heap (realloc/free tracked, so whatever a run still held when it "exited" is freed before the
 * next one).  The production build never sees this file.
 */
#ifndef CNICHAIN_SHIM_FUZZ_HOOKS_H
#define CNICHAIN_SHIM_FUZZ_HOOKS_H
#include <stddef.h>

_Noreturn void cnichain_fuzz_exit(int code);
int cnichain_fuzz_memfd_create(const char *name, unsigned flags);
_Noreturn void cnichain_fuzz_execve(const char *path, char *const argv[], char *const envp[]);
void *cnichain_fuzz_realloc(void *p, size_t n);
void cnichain_fuzz_free(void *p);
extern int cnichain_fuzz_out, cnichain_fuzz_err;

#define SHIM_EXIT cnichain_fuzz_exit
#define SHIM_EXECVE cnichain_fuzz_execve
#define SHIM_MEMFD_CREATE cnichain_fuzz_memfd_create
#define SHIM_OUT cnichain_fuzz_out
#define SHIM_ERR cnichain_fuzz_err
#define realloc cnichain_fuzz_realloc
#define free cnichain_fuzz_free
#define main cnichain_shim_main
#endif
