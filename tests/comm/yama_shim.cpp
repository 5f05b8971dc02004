// LD_PRELOAD shim for comm.multiproc.yama_ptracer_*: this kernel has no Yama,
// so the shim plays Yama's ptrace_scope 1. Opening
// /proc/sys/kernel/yama/ptrace_scope opens $MERAK_TEST_YAMA_SCOPE_FILE
// instead, and prctl(PR_SET_PTRACER, arg) succeeds and appends
// "<pid> <arg as a signed number>" to $MERAK_TEST_PRCTL_LOG (PR_SET_PTRACER_ANY
// is -1, a withdrawal 0). Every other call goes to libc.
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

namespace {

const char kyama[] = "/proc/sys/kernel/yama/ptrace_scope";

const char* redirect(const char* path) {
  const char* f = getenv("MERAK_TEST_YAMA_SCOPE_FILE");
  return f && path && strcmp(path, kyama) == 0 ? f : path;
}

mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

}  // namespace

#define REAL(name, type) (reinterpret_cast<type>(dlsym(RTLD_NEXT, name)))

extern "C" {

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return REAL("open", int (*)(const char*, int, ...))(redirect(path), flags, mode);
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return REAL("open64", int (*)(const char*, int, ...))(redirect(path), flags, mode);
}

int __open_2(const char* path, int flags) {
  return REAL("__open_2", int (*)(const char*, int))(redirect(path), flags);
}

int __open64_2(const char* path, int flags) {
  return REAL("__open64_2", int (*)(const char*, int))(redirect(path), flags);
}

int openat(int dir, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return REAL("openat", int (*)(int, const char*, int, ...))(dir, redirect(path), flags, mode);
}

FILE* fopen(const char* path, const char* how) {
  return REAL("fopen", FILE * (*)(const char*, const char*))(redirect(path), how);
}

FILE* fopen64(const char* path, const char* how) {
  return REAL("fopen64", FILE * (*)(const char*, const char*))(redirect(path), how);
}

int prctl(int option, ...) noexcept {
  va_list ap;
  va_start(ap, option);
  const unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long),
                      a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
  va_end(ap);
  if (option != PR_SET_PTRACER) return REAL("prctl", int (*)(int, ...))(option, a2, a3, a4, a5);
  const char* log = getenv("MERAK_TEST_PRCTL_LOG");
  if (log) {
    const int fd =
        REAL("open", int (*)(const char*, int, ...))(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) {
      char line[64];
      const int n = snprintf(line, sizeof line, "%ld %ld\n", static_cast<long>(getpid()),
                             static_cast<long>(a2));
      if (n > 0 && write(fd, line, static_cast<size_t>(n)) < 0) {
      }
      close(fd);
    }
  }
  return 0;
}

}  // extern "C"
