/* cc.c — the build driver of `shardc build`: compiles the C the emitter
 * wrote (emit.c) with the system C compiler (mpicc, or $CC with MPI's flags)
 * and links it against the runtime (libshardrt_cpu.a, or libshardrt_cuda.a
 * with the link line its build wrote), a user-defined op's source beside it
 * (its CUDA source through nvcc), into a trainer.  The trainer is written
 * under a temporary name and renamed at the end: a failed build leaves
 * nothing behind.
 */
#include "emit.h"
#include "catalog.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Is path an existing regular file? */
static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The directory shardc runs from (its build tree), or NULL. */
static const char *exe_dir(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return NULL;
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash) return NULL;
    *slash = 0;
    return arena_strdup(&g_arena, buf);
}

/* The first of root/sub/name that exists for the sub-folders given, or NULL. */
static const char *find_under(const char *root, const char *const *subs, const char *name)
{
    if (!root) return NULL;
    for (int i = 0; subs[i]; i++) {
        const char *p = arena_printf(&g_arena, "%s%s%s/%s", root, subs[i][0] ? "/" : "", subs[i], name);
        if (is_file(p)) return p;
    }
    return NULL;
}

/* Looks for a runtime file: under --runtime DIR only when given, else the
 * build tree this shardc runs from, else (headers) its source tree. */
static const char *find_runtime_file(const char *dir, const char *const *subs, const char *name, const char *src_root)
{
    if (dir) return find_under(dir, subs, name);
    const char *p = find_under(exe_dir(), subs, name);
    if (!p && src_root) p = find_under(src_root, subs, name);
    return p;
}

/* A runtime file (a library, shardrt_calibrate) where shardc build looks for
 * its libraries: under dir when given, else the build tree shardc runs from. */
const char *cc_runtime_file(const char *dir, const char *name)
{
    static const char *const subs[] = {"", "lib", "runtime", "bin", NULL};
    return find_runtime_file(dir, subs, name, NULL);
}

/* Runs argv (a NULL-terminated list), its output into *out; returns the exit
 * status (-1 when it could not start or died of a signal). */
static int run_captured(char *const *argv, char **out)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char *text = NULL, buf[4096];
    size_t len = 0;
    FILE *s = open_memstream(&text, &len);
    if (!s) die("cc: open_memstream failed");
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0) fwrite(buf, 1, (size_t)n, s);
    fclose(s);
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    *out = arena_strdup(&g_arena, text ? text : "");
    free(text);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Is an executable called name on the PATH? */
static bool on_path(const char *name)
{
    const char *path = getenv("PATH");
    if (strchr(name, '/')) return access(name, X_OK) == 0;
    for (const char *p = path ? path : ""; *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *full = arena_printf(&g_arena, "%.*s/%s", (int)len, p, name);
        if (access(full, X_OK) == 0) return true;
        if (!end) break;
        p = end + 1;
    }
    return false;
}

typedef struct Argv { char *v[256]; int n; } Argv;

/* Appends one argument. */
static void arg(Argv *a, const char *s)
{
    if (a->n >= (int)(sizeof a->v / sizeof a->v[0]) - 1) die("cc: too many compiler arguments");
    a->v[a->n++] = (char *)s;
    a->v[a->n] = NULL;
}

/* Appends the words of text (mpicc --showme output). */
static void args_split(Argv *a, const char *text)
{
    char *t = arena_strdup(&g_arena, text);
    for (char *w = strtok(t, " \t\n"); w; w = strtok(NULL, " \t\n")) arg(a, w);
}

/* The compiler and the MPI flags: mpicc, or $CC with mpicc's flags. */
static bool compiler_args(Argv *a, Argv *link)
{
    const char *cc = getenv("CC");
    if (!on_path("mpicc")) {
        fprintf(stderr, "shardc build: error: mpicc (Open MPI) was not found on the PATH: the CPU runtime needs MPI\n"
                        "hint: install Open MPI (scripts/install-deps), or build with --emit-c only\n");
        return false;
    }
    if (!cc || !*cc) {
        arg(a, "mpicc");
        return true;
    }
    char *flags;
    char *show_c[] = {"mpicc", "--showme:compile", NULL}, *show_l[] = {"mpicc", "--showme:link", NULL};
    if (run_captured(show_c, &flags) != 0) {
        fprintf(stderr, "shardc build: error: `mpicc --showme:compile` failed: %s\n", flags);
        return false;
    }
    args_split(a, cc);
    args_split(a, flags);
    if (run_captured(show_l, &flags) != 0) {
        fprintf(stderr, "shardc build: error: `mpicc --showme:link` failed: %s\n", flags);
        return false;
    }
    args_split(link, flags);
    return true;
}

/* Runs a compiler command; on failure prints what and its output, removes
 * the file it was making and returns non-zero. */
static int run_tool(const Argv *a, const char *making, const char *what)
{
    char *output;
    if (run_captured(a->v, &output) == 0) return 0;
    unlink(making);
    fprintf(stderr, "shardc build: internal error: %s\n ", what);
    for (int i = 0; i < a->n; i++) fprintf(stderr, " %s", a->v[i]);
    fprintf(stderr, "\n%s", output);
    return 1;
}

/* The CUDA runtime's link arguments, one a line in shardrt_cuda.link beside
 * libshardrt_cuda.a (runtime/cuda/CMakeLists.txt writes it: the kernels,
 * cuBLASLt, cuDNN, NCCL with their rpaths), and its "nvcc=PATH" line. */
static bool cuda_link_args(const char *rtlib, Argv *out, const char **nvcc)
{
    const char *path = arena_printf(&g_arena, "%.*s/shardrt_cuda.link", (int)(strrchr(rtlib, '/') - rtlib), rtlib);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "shardc build: error: %s is missing (it comes with libshardrt_cuda.a): %s\n", path,
                strerror(errno));
        return false;
    }
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!*line) continue;
        if (strncmp(line, "nvcc=", 5) == 0) *nvcc = arena_strdup(&g_arena, line + 5);
        else arg(out, arena_strdup(&g_arena, line));
    }
    fclose(f);
    return true;
}

/* Compiles and links the generated source at c_path into out (through a
 * temporary file renamed at the end, so no partial trainer is left). */
static int build_trainer(const CcOpts *b, const char *c_path, const CatalogExtern *x)
{
    static const char *const lib_subs[] = {"", "lib", "runtime", "kernels/cpu", "kernels/cuda", NULL};
    static const char *const inc_subs[] = {"include", "runtime/include", NULL};
    bool cuda = strcmp(b->backend, "cuda") == 0;
    const char *src_root = NULL;
#ifdef SHARDC_SOURCE_DIR
    src_root = SHARDC_SOURCE_DIR;
#endif
    const char *rtlib = find_runtime_file(b->runtime, lib_subs, cuda ? "libshardrt_cuda.a" : "libshardrt_cpu.a", NULL);
    const char *klib = find_runtime_file(b->runtime, lib_subs, cuda ? "libshardk_cuda.a" : "libshardk_cpu.a", NULL);
    const char *hdr = find_runtime_file(b->runtime, inc_subs, "shardrt.h", src_root);
    const char *where = b->runtime ? b->runtime : "shardc's build tree";
    if (!rtlib || !hdr) {
        fprintf(stderr, "shardc build: error: the %s runtime (%s%s) was not found in %s\n", b->backend,
                !rtlib ? (cuda ? "libshardrt_cuda.a" : "libshardrt_cpu.a") : "include/shardrt.h", "", where);
        fprintf(stderr, "hint: %s, or point --runtime at the folder holding it\n",
                cuda ? "configure shardc where nvcc is found (the CUDA backend builds with it)"
                     : "build the runtime (cmake --build BUILD --target shardrt_cpu)");
        return EXIT_USER;
    }
    Argv a = {0}, link = {0};
    if (!compiler_args(&a, &link)) return EXIT_USER;
    const char *tmp = arena_printf(&g_arena, "%s.tmp.%ld", b->out, (long)getpid());
    const char *obj = arena_printf(&g_arena, "%s.tmp.%ld.o", b->out, (long)getpid());
    char *inc = arena_strndup(&g_arena, hdr, strlen(hdr) - strlen("/shardrt.h"));
    Argv cc = a;
    arg(&cc, "-std=gnu11");
    /* -O0: the generated C only calls the runtime in the schedule's order (every
     * FLOP is in the runtime, compiled -O2 and -O3); GCC's -O1 took 3.4x as long on
     * gpt3-175b's C (7.6 s of CPU against 2.2 s) for host code that calls ops of
     * milliseconds each. */
    arg(&cc, "-O0");
    /* an int constant expression that overflows is a shardc bug, never a warning
     * to scroll past: past 2 GiB of arena an offset once wrapped to a negative
     * one (GCC; clang calls it -Winteger-overflow and only warns here) */
    arg(&cc, "-Werror=overflow");
    arg(&cc, "-I");
    arg(&cc, inc);
    arg(&cc, "-c");
    arg(&cc, c_path);
    arg(&cc, "-o");
    arg(&cc, obj);
    if (run_tool(&cc, obj, "the C compiler failed on the generated code (a shardc bug)") != 0) return EXIT_INTERNAL;
    /* the CUDA runtime's link line and nvcc, as its build wrote them */
    Argv culink = {0};
    const char *nvcc = "nvcc";
    if (cuda && !cuda_link_args(rtlib, &culink, &nvcc)) {
        unlink(obj);
        return EXIT_USER;
    }
    /* the user's op: its C source (or, for the CUDA backend, its CUDA source
     * through nvcc for sm_90) beside the trainer's, its header's folder on the path */
    const char *uobj = NULL;
    if (x) {
        const char *src = util_abs_path(cuda ? x->cuda : x->cpu), *hdir = util_abs_path(x->header);
        hdir = arena_strndup(&g_arena, hdir, (size_t)(strrchr(hdir, '/') - hdir));
        uobj = arena_printf(&g_arena, "%s.tmp.%ld.user.o", b->out, (long)getpid());
        Argv uc = a;
        if (cuda) {
            uc = (Argv){0};
            arg(&uc, nvcc);
            arg(&uc, "-arch=sm_90");
        } else {
            arg(&uc, "-std=gnu11");
        }
        arg(&uc, "-O2");
        arg(&uc, "-I");
        arg(&uc, hdir);
        arg(&uc, "-c");
        arg(&uc, src);
        arg(&uc, "-o");
        arg(&uc, uobj);
        if (run_tool(&uc, uobj, arena_printf(&g_arena, "the %s compiler failed on %s, the user-defined %s",
                                             cuda ? "CUDA" : "C", src, x->name)) != 0) {
            unlink(obj);
            return EXIT_USER;
        }
    }
    arg(&a, obj);
    if (uobj) arg(&a, uobj);
    arg(&a, "-o");
    arg(&a, tmp);
    arg(&a, rtlib);
    if (klib) arg(&a, klib);
    if (cuda) {
        for (int i = 0; i < culink.n; i++) arg(&a, culink.v[i]);
    } else {
        static const char *const cpu[] = {"-lopenblas", "-luring", "-fopenmp", NULL};
        for (int i = 0; cpu[i]; i++) arg(&a, cpu[i]);
    }
    arg(&a, "-lcjson");   /* the core's checkpoints and metrics (srt_main) */
    arg(&a, "-lm");
    for (int i = 0; i < link.n; i++) arg(&a, link.v[i]);
    int rc = run_tool(&a, tmp, arena_printf(&g_arena, "linking the trainer against %s failed (a runtime built "
                                            "from other sources than this shardc?)", rtlib));
    unlink(obj);
    if (uobj) unlink(uobj);
    if (rc != 0) return EXIT_INTERNAL;
    if (rename(tmp, b->out) != 0) {
        fprintf(stderr, "shardc build: error: cannot write %s: %s\n", b->out, strerror(errno));
        unlink(tmp);
        return EXIT_USER;
    }
    return EXIT_OK;
}

/* Writes text to a new temporary .c file; its path, or NULL (after a message). */
static const char *temp_source(const char *text)
{
    const char *dir = getenv("TMPDIR");
    char *t = arena_printf(&g_arena, "%s/shardc-build-XXXXXX.c", dir && *dir ? dir : "/tmp");
    int fd = mkstemps(t, 2);
    if (fd < 0) {
        fprintf(stderr, "shardc build: error: cannot create a temporary file in %s: %s\n", dir && *dir ? dir : "/tmp",
                strerror(errno));
        return NULL;
    }
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            fprintf(stderr, "shardc build: error: cannot write %s: %s\n", t, strerror(errno));
            close(fd);
            unlink(t);
            return NULL;
        }
        off += (size_t)w;
    }
    close(fd);
    return t;
}

/* Compiles and links the trainer's C source (at c_path, or text written to a
 * temporary file when c_path is NULL) into o->out.  Returns the exit code. */
int cc_build(const CcOpts *o, const char *text, const char *c_path, const CatalogExtern *x)
{
    const char *path = c_path ? c_path : temp_source(text);
    if (!path) return EXIT_USER;
    int rc = build_trainer(o, path, x);
    if (!c_path) unlink(path);
    return rc;
}
