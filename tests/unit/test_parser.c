/* test_parser.c — the AST of the ARCHITECTURE example, every value form,
 * includes (spliced at their position, in order), limits and recovery. */
#include "shardc.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Parses text with fresh diagnostics. */
static Item *parse(const char *text)
{
    capture();
    return spec_parse_text("t.tspec", text, strlen(text));
}

/* The item called key in a list, or NULL. */
static Item *find(Item *list, const char *key)
{
    for (Item *it = list; it; it = it->next)
        if (strcmp(it->key, key) == 0) return it;
    return NULL;
}

/* The value of key in a list, or NULL. */
static Value *val(Item *list, const char *key)
{
    Item *it = find(list, key);
    return it && it->kind == I_ASSIGN ? it->value : NULL;
}

/* Number of items in a list. */
static int count(Item *list)
{
    int n = 0;
    for (; list; list = list->next) n++;
    return n;
}

static const char example[] =
    "model gpt {                      # gpt | llama\n"
    "  layers = 12  hidden = 768  heads = 12  vocab = 50257  seq_len = 1024\n"
    "}\n"
    "parallel { tp = 2  pp = 2  dp = 2  sequence_parallel = on  schedule = 1f1b  microbatches = 8 }\n"
    "zero {\n"
    "  stage = 3  overlap_comm = on  contiguous_gradients = on\n"
    "  reduce_bucket = 5e8  allgather_bucket = 5e8  prefetch_bucket = 5e7    # elements, as DeepSpeed\n"
    "  param_persistence_threshold = 1e5  max_live_parameters = 1e9\n"
    "}\n"
    "offload { optimizer = cpu { pin_memory = on }  params = nvme { path = \"/local_nvme\" } }\n"
    "precision { dtype = bf16  master_weights = fp32 }   # fp16 adds loss_scale = dynamic { window = 1000 ... }\n"
    "checkpointing { activations = selective  every = 1  partition_activations = off  cpu = off }\n"
    "train {\n"
    "  global_batch = 512  micro_batch = 4  steps = 10000  grad_clip = 1.0  seed = 1337\n"
    "  optimizer = adamw { lr = 6e-4  betas = (0.9, 0.95)  eps = 1e-8  weight_decay = 0.1 }\n"
    "  lr_schedule = cosine { warmup = 700  min_lr = 6e-5 }\n"
    "}\n"
    "data { train = \"data/train_*.bin\"  val = \"data/val_*.bin\"  format = llmc }\n"
    "cluster { nodes = 4  gpus_per_node = 8  gpu = h100_sxm_80gb\n"
    "          intra_node = 450GB/s  inter_node = 50GB/s  host_memory = 2TiB  nvme = 3.5GB/s }\n";

static void test_example(void)
{
    Item *items = parse(example);
    CHECK(diag_errors == 0);
    CHECK(count(items) == 9);
    const char *blocks[] = {"model", "parallel", "zero", "offload", "precision",
                            "checkpointing", "train", "data", "cluster"};
    Item *it = items;
    for (int i = 0; i < 9 && it; i++, it = it->next) CHECK(it->kind == I_BLOCK && strcmp(it->key, blocks[i]) == 0);

    Item *model = find(items, "model");
    CHECK(model && model->label && strcmp(model->label, "gpt") == 0);
    CHECK(model->loc.line == 1 && model->loc.col == 1 && model->loc.len == 5);
    CHECK(model->label_loc.line == 1 && model->label_loc.col == 7);
    CHECK(count(model->body) == 5);
    Value *v = val(model->body, "vocab");
    CHECK(v && v->kind == V_INT && v->i == 50257 && v->loc.line == 2);

    Item *par = find(items, "parallel");
    CHECK(par && !par->label);
    v = val(par->body, "sequence_parallel");
    CHECK(v && v->kind == V_BOOL && v->b);
    v = val(par->body, "schedule");
    CHECK(v && v->kind == V_IDENT && strcmp(v->s, "1f1b") == 0);

    v = val(find(items, "zero")->body, "reduce_bucket");
    CHECK(v && v->kind == V_INT && v->i == 500000000);
    v = val(find(items, "zero")->body, "param_persistence_threshold");
    CHECK(v && v->kind == V_INT && v->i == 100000);

    Item *off = find(items, "offload");
    v = val(off->body, "optimizer");
    CHECK(v && v->kind == V_IDENT && strcmp(v->s, "cpu") == 0 && v->has_block);
    CHECK(v->block && strcmp(v->block->key, "pin_memory") == 0 && v->block->value->b);
    v = val(off->body, "params");
    CHECK(v && v->has_block && val(v->block, "path")->kind == V_STRING);
    CHECK(strcmp(val(v->block, "path")->s, "/local_nvme") == 0);

    Item *train = find(items, "train");
    v = val(train->body, "grad_clip");
    CHECK(v && v->kind == V_INT && v->i == 1);      /* 1.0 is integral */
    Value *opt = val(train->body, "optimizer");
    CHECK(opt && opt->kind == V_IDENT && strcmp(opt->s, "adamw") == 0 && opt->has_block);
    v = val(opt->block, "lr");
    CHECK(v && v->kind == V_FLOAT && v->f == 6e-4);
    v = val(opt->block, "betas");
    CHECK(v && v->kind == V_TUPLE && v->n == 2);
    CHECK(v->elems[0]->kind == V_FLOAT && v->elems[0]->f == 0.9 && v->elems[1]->f == 0.95);
    CHECK(v->loc.line == 15);
    v = val(val(train->body, "lr_schedule")->block, "min_lr");
    CHECK(v && v->kind == V_FLOAT && v->f == 6e-5);

    Item *cl = find(items, "cluster");
    v = val(cl->body, "intra_node");
    CHECK(v && v->kind == V_BANDWIDTH && v->f == 450e9);
    v = val(cl->body, "host_memory");
    CHECK(v && v->kind == V_BYTES && v->i == 2199023255552);
    v = val(cl->body, "nvme");
    CHECK(v && v->kind == V_BANDWIDTH && v->f == 3.5e9);
    CHECK(v->loc.line == 20);
}

static void test_values(void)
{
    Item *items = parse("a = [1, -2 3] , b = []  c = ((1, 2), [x y])\n"
                        "d = extern \"sqrelu\" { header = \"x.h\" }  e = foo {}  f = extern \"g\"\n"
                        "g = 200Gb/s  h = 32MiB  i = \"s\\\"q\"  j = off  k = -0.5\n");
    CHECK(diag_errors == 0);
    Value *v = val(items, "a");
    CHECK(v && v->kind == V_LIST && v->n == 3 && v->elems[1]->i == -2 && v->elems[2]->i == 3);
    v = val(items, "b");
    CHECK(v && v->kind == V_LIST && v->n == 0);
    v = val(items, "c");
    CHECK(v && v->kind == V_TUPLE && v->n == 2 && v->elems[0]->kind == V_TUPLE && v->elems[1]->kind == V_LIST);
    CHECK(v->elems[1]->n == 2 && strcmp(v->elems[1]->elems[1]->s, "y") == 0);
    v = val(items, "d");
    CHECK(v && v->kind == V_IDENT && strcmp(v->s, "extern") == 0 && v->arg && v->arg->kind == V_STRING);
    CHECK(strcmp(v->arg->s, "sqrelu") == 0 && v->has_block && strcmp(val(v->block, "header")->s, "x.h") == 0);
    v = val(items, "e");
    CHECK(v && v->has_block && v->block == NULL);
    v = val(items, "f");
    CHECK(v && v->arg && !v->has_block);
    v = val(items, "g");
    CHECK(v && v->kind == V_BANDWIDTH && v->f == 25e9);
    v = val(items, "h");
    CHECK(v && v->kind == V_BYTES && v->i == 33554432);
    v = val(items, "i");
    CHECK(v && v->kind == V_STRING && strcmp(v->s, "s\"q") == 0);
    v = val(items, "j");
    CHECK(v && v->kind == V_BOOL && !v->b);
    v = val(items, "k");
    CHECK(v && v->kind == V_FLOAT && v->f == -0.5);

    /* Empty input parses to nothing, without an error. */
    CHECK(parse("") == NULL && diag_errors == 0);
    CHECK(parse("# nothing\n\n, ,\n") == NULL && diag_errors == 0);

    CHECK(strcmp(spec_valkind_name(V_BYTES), "byte size") == 0);
    CHECK(strcmp(spec_valkind_name(V_TUPLE), "tuple") == 0);
}

/* Writes text to path (or fails the test). */
static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_includes(void)
{
    char dir[] = "/tmp/shardc-test-parser-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[512], sub[512];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    CHECK(mkdir(sub, 0755) == 0);

    /* The included items take the include's place, so later ones override. */
    snprintf(path, sizeof path, "%s/main.tspec", dir);
    write_file(path, "a = 1\ninclude \"sub/common.tspec\"\nb = 3\n");
    snprintf(path, sizeof path, "%s/sub/common.tspec", dir);
    write_file(path, "b = 2\ninclude \"deeper.tspec\"\n");
    snprintf(path, sizeof path, "%s/sub/deeper.tspec", dir);
    write_file(path, "a = 9\nblk { x = 1 }\n");
    snprintf(path, sizeof path, "%s/main.tspec", dir);
    capture();
    Item *items = spec_parse_file(path);
    CHECK(diag_errors == 0);
    const char *order[] = {"a", "b", "a", "blk", "b"};
    const int64_t vals[] = {1, 2, 9, 0, 3};
    Item *it = items;
    for (int i = 0; i < 5; i++, it = it ? it->next : NULL) {
        CHECK(it && strcmp(it->key, order[i]) == 0);
        if (it && it->kind == I_ASSIGN) CHECK(it->value->i == vals[i]);
    }
    CHECK(it == NULL);
    /* Locations name the file each item came from. */
    CHECK(items && items->next && strstr(items->next->loc.file->path, "sub/common.tspec"));

    /* A cycle is an error at the include that closes it, with the chain. */
    snprintf(path, sizeof path, "%s/a.tspec", dir);
    write_file(path, "x = 1\ninclude \"b.tspec\"\n");
    snprintf(path, sizeof path, "%s/b.tspec", dir);
    write_file(path, "include \"a.tspec\"\n");
    snprintf(path, sizeof path, "%s/a.tspec", dir);
    capture();
    spec_parse_file(path);
    CHECK(diag_errors == 1 && strstr(captured(), "include cycle"));
    CHECK(strstr(captured(), "a.tspec -> ") && strstr(captured(), "b.tspec:1:9: error"));

    /* A missing file: the error is at the include's string. */
    capture();
    snprintf(path, sizeof path, "%s/missing.tspec", dir);
    write_file(path, "\n  include \"nope.tspec\"\n");
    spec_parse_file(path);
    CHECK(diag_errors == 1 && strstr(captured(), "missing.tspec:2:11: error: cannot read"));
    CHECK(strstr(captured(), "No such file or directory"));

    /* Inside a block an include is an error. */
    items = parse("m { include \"x.tspec\" }\n");
    CHECK(diag_errors == 1 && strstr(captured(), "include is only allowed at the top level"));

    /* Text in memory includes relative to the working directory... */
    char cwd[512];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(dir) == 0);
    items = parse("include \"sub/deeper.tspec\"\n");
    CHECK(diag_errors == 0 && count(items) == 2 && strcmp(items->key, "a") == 0);
    /* ...unless includes are turned off (the fuzzer). */
    spec_allow_include = false;
    items = parse("include \"sub/deeper.tspec\"\ny = 1\n");
    CHECK(diag_errors == 1 && count(items) == 1);
    spec_allow_include = true;
    CHECK(chdir(cwd) == 0);

    /* Depth: a chain of 17 includes is fine, 18 is one too many. */
    for (int i = 0; i <= 18; i++) {
        char text[64];
        snprintf(path, sizeof path, "%s/d%d.tspec", dir, i);
        snprintf(text, sizeof text, "k%d = %d\ninclude \"d%d.tspec\"\n", i, i, i + 1);
        write_file(path, i == 18 ? "end = 1\n" : text);
    }
    snprintf(path, sizeof path, "%s/d2.tspec", dir);
    capture();
    items = spec_parse_file(path);
    CHECK(diag_errors == 0 && count(items) == 17);
    snprintf(path, sizeof path, "%s/d1.tspec", dir);
    capture();
    items = spec_parse_file(path);
    CHECK(diag_errors == 1 && strstr(captured(), "includes nested deeper than 16 levels"));

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

static void test_errors(void)
{
    /* Several mistakes, one message each, and the rest still parses. */
    Item *items = parse("a 1\nb = 2\nc == 3\nd = 4\n= 5\ne = 6\n");
    CHECK(diag_errors == 3);
    CHECK(val(items, "b") && val(items, "d") && val(items, "e"));
    CHECK(strstr(captured(), "t.tspec:1:3: error: expected '=' or '{' after 'a', found '1'"));
    CHECK(strstr(captured(), "t.tspec:3:4: error: expected a value after '=', found '='"));
    CHECK(strstr(captured(), "t.tspec:5:1: error: expected a key, found '='"));

    /* A block left open: the error is at the end, the note at the '{'. */
    parse("model gpt {\n  layers = 12\n");
    CHECK(diag_errors == 1 && strstr(captured(), "t.tspec:2:14: error: expected a key or '}', found end of file"));
    CHECK(strstr(captured(), "t.tspec:1:11: note: this '{' is not closed"));

    parse("}\nx = 1\n");
    CHECK(diag_errors == 1 && strstr(captured(), "stray '}'"));

    /* `key =` then a new line: the value is missing, not the next key's '='. */
    items = parse("tp =\npp = 2\nq = 1\n");
    CHECK(diag_errors == 1 && strstr(captured(), "t.tspec:1:4: error: missing value after '='"));
    CHECK(val(items, "q"));

    /* An error inside a block does not lose the block's end. */
    items = parse("parallel { tp = 2 pp 4 dp = 2 }\nzero { stage = 1 }\n");
    CHECK(diag_errors == 1 && find(items, "parallel") && find(items, "zero"));

    /* A wrong closer closes the brackets it skips, once. */
    items = parse("m { x = [1, (2 }\ny = 1\n");
    CHECK(diag_errors == 1 && strstr(captured(), "this '(' is not closed") && val(items, "y"));

    /* A junk '{' value is skipped through its '}'. */
    items = parse("x = {\n  a = 1\n}\ny = 2\n");
    CHECK(diag_errors == 1 && val(items, "y") && !val(items, "a"));

    /* A lexer error is not echoed by the parser. */
    parse("tp = @\npp = 2\n");
    CHECK(diag_errors == 1 && strstr(captured(), "unexpected character '@'"));

    /* Nesting: 64 levels parse, 65 are one error. */
    char deep[1024];
    int n = 0;
    n += sprintf(deep + n, "x = ");
    for (int i = 0; i < 64; i++) deep[n++] = '[';
    for (int i = 0; i < 64; i++) deep[n++] = ']';
    deep[n] = 0;
    parse(deep);
    CHECK(diag_errors == 0);
    n = 0;
    for (int i = 0; i < 65; i++) n += sprintf(deep + n, "a{");
    parse(deep);
    CHECK(diag_errors == 1 && strstr(captured(), "t.tspec:1:130: error: nesting deeper than 64 levels"));

    /* Garbage stops the parse at the error limit... */
    char junk[4096];
    for (int i = 0; i < 4095; i++) junk[i] = "@x=}{;"[i % 6];
    junk[4095] = 0;
    parse(junk);
    CHECK(diag_errors > diag_max_errors && strstr(captured(), "too many errors"));
    /* ...but text without errors still parses after it (sema's defaults). */
    items = spec_parse_text("<default>", "x = \"\"", 6);
    CHECK(items && items->value->kind == V_STRING && items->value->s[0] == 0);

    /* A file over the size limit is one error and no parse. */
    size_t big = SPEC_MAX_FILE_BYTES + 1;
    char *text = malloc(big);
    memset(text, '#', big);
    capture();
    CHECK(spec_parse_text("big.tspec", text, big) == NULL);
    CHECK(diag_errors == 1 && strstr(captured(), "larger than 16 MiB"));
    free(text);
}

int main(void)
{
    test_example();
    test_values();
    test_includes();
    test_errors();
    fclose(diag_stream);
    diag_stream = NULL;
    free(diag_buf);
    arena_free(&g_arena);
    if (failures) {
        fprintf(stderr, "test_parser: %d failures\n", failures);
        return 1;
    }
    printf("test_parser: ok\n");
    return 0;
}
