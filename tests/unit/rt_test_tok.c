/* rt_test_tok.c — tokenizer.json decoding (runtime/core/tok.c) on small files:
 *  - GPT-2's byte-level BPE (ByteLevel: characters for bytes, a two-byte
 *    character over two tokens' characters), its <|endoftext|> as the start;
 *  - Llama's SentencePiece style (Replace ▁, ByteFallback <0xHH>, Fuse, a
 *    Strip of the text's first space), its template's <s> as the start;
 *  - Metaspace (the first token's ▁ dropped unless prepend_scheme is never),
 *    a Strip per token without Fuse, no decoder (tokens joined by spaces),
 *    Unigram's vocabulary list, an id without a token;
 *  - refusals: an id past the model's vocabulary, an unknown decoder, a Regex
 *    Replace, a Strip from the end after Fuse, no vocabulary, not JSON. */
#include "tok.h"
#include "check.h"

#include <unistd.h>

static char dir[64];

/* Writes text to a file of the test's directory; returns its path. */
static const char *file(const char *name, const char *text)
{
    static char buf[8][256];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 256, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    return p;
}

/* The decoded bytes of ids[0..n), as one string. */
static const char *decode(const tok *t, const int64_t *ids, int n)
{
    static char out[256];
    size_t at = 0, len;
    tok_stream s;
    tok_stream_begin(&s, t);
    for (int i = 0; i < n; i++) {
        const char *b = tok_stream_next(&s, ids[i], &len);
        memcpy(out + at, b, len);
        at += len;
    }
    out[at] = 0;
    return out;
}

#define DECODES(t, want, ...)                                                              \
    do {                                                                                   \
        int64_t ids_[] = {__VA_ARGS__};                                                    \
        const char *got_ = decode(t, ids_, (int)(sizeof ids_ / sizeof ids_[0]));          \
        if (strcmp(got_, want) != 0) {                                                     \
            fprintf(stderr, "%s:%d: decoded \"%s\", want \"%s\"\n", __FILE__, __LINE__, got_, want); \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

static void test_gpt2(void)
{
    /* "Ġ" is the space, "Ċ" the newline; "Ã" and "©" are the bytes C3 A9 of "é" */
    const char *p = file("gpt2.json",
        "{\"added_tokens\": [{\"id\": 4, \"content\": \"<|endoftext|>\", \"special\": true}],"
        " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true},"
        " \"post_processor\": {\"type\": \"ByteLevel\"},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"\xc4\xa0hello\": 0, \"\xc4\x8a\": 1, \"\xc3\x83\": 2, \"\xc2\xa9\": 3},"
        " \"merges\": []}}");
    tok *t;
    char err[256];
    CHECK_EQ(tok_open(&t, p, 5, err, sizeof err), 0);
    if (!t) return;
    CHECK_EQ(tok_bos(t), 4);
    CHECK_EQ(tok_size(t), 5);
    DECODES(t, " hello\n\xc3\xa9<|endoftext|>", 0, 1, 2, 3, 4);
    DECODES(t, "", 77);
    tok_close(t);
    CHECK_EQ(tok_open(&t, p, 4, err, sizeof err), -1);
    CHECK_HAS(err, "gpt2.json: token '<|endoftext|>' has id 4, but the model's vocabulary has 4 tokens (model.vocab)");
}

static void test_llama(void)
{
    const char *p = file("llama.json",
        "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
        " {\"id\": 1, \"content\": \"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
        " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\xe2\x96\x81\"},"
        " \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
        " {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
        " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\","
        " \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\","
        " \"ids\": [1], \"tokens\": [\"<s>\"]}}},"
        " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2,"
        " \"<0x0A>\": 3, \"\xe2\x96\x81Hello\": 4, \"\xe2\x96\x81world\": 5, \"<0xC3>\": 6, \"<0xa9>\": 7, \"\xe2\x96\x81\": 8}}}");
    tok *t;
    char err[256];
    CHECK_EQ(tok_open(&t, p, 32000, err, sizeof err), 0);
    if (!t) return;
    CHECK_EQ(tok_bos(t), 1);
    DECODES(t, "Hello world\n\xc3\xa9</s>", 4, 5, 3, 6, 7, 2);
    DECODES(t, " Hello", 8, 4);         /* one space stripped: the text's first */
    tok_close(t);
}

static void test_other_decoders(void)
{
    tok *t;
    char err[256];
    const char *vocab = "\"model\": {\"type\": \"BPE\", \"vocab\": {\"\xe2\x96\x81Hi\": 0, \"\xe2\x96\x81there\": 1, \"xabx\": 2}}";
    char text[512];
    snprintf(text, sizeof text, "{\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", "
             "\"prepend_scheme\": \"first\"}, %s}", vocab);
    CHECK_EQ(tok_open(&t, file("meta.json", text), 3, err, sizeof err), 0);
    if (t) DECODES(t, "Hi there", 0, 1);
    tok_close(t);
    snprintf(text, sizeof text, "{\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", "
             "\"prepend_scheme\": \"never\"}, %s}", vocab);
    CHECK_EQ(tok_open(&t, file("never.json", text), 3, err, sizeof err), 0);
    if (t) DECODES(t, " Hi there", 0, 1);
    tok_close(t);
    snprintf(text, sizeof text, "{\"decoder\": {\"type\": \"Strip\", \"content\": \"x\", \"start\": 1, \"stop\": 1}, %s}",
             vocab);
    CHECK_EQ(tok_open(&t, file("strip.json", text), 3, err, sizeof err), 0);
    if (t) DECODES(t, "abab", 2, 2);    /* each token stripped: no Fuse before the Strip */
    tok_close(t);
    snprintf(text, sizeof text, "{\"decoder\": null, %s}", vocab);
    CHECK_EQ(tok_open(&t, file("none.json", text), 3, err, sizeof err), 0);
    if (t) DECODES(t, "xabx xabx", 2, 2);
    tok_close(t);
    CHECK_EQ(tok_open(&t, file("unigram.json", "{\"decoder\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"Unigram\","
                                               " \"vocab\": [[\"<unk>\", 0], [\"\xe2\x96\x81" "a\", -1.5], [\"b\", -2]]}}"),
                      3, err, sizeof err), 0);
    if (t) DECODES(t, "ab a", 1, 2, 1);
    tok_close(t);
}

static void test_refusals(void)
{
    tok *t;
    char err[256];
    const char *vocab = "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}";
    char text[512];
    snprintf(text, sizeof text, "{\"decoder\": {\"type\": \"WordPiece\", \"prefix\": \"##\"}, %s}", vocab);
    CHECK_EQ(tok_open(&t, file("wp.json", text), 3, err, sizeof err), -1);
    CHECK_HAS(err, "wp.json: decoder 'WordPiece' is not supported");
    snprintf(text, sizeof text, "{\"decoder\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \" +\"}, \"content\": \" \"}, %s}",
             vocab);
    CHECK_EQ(tok_open(&t, file("regex.json", text), 3, err, sizeof err), -1);
    CHECK_HAS(err, "regex.json: decoder Replace: only a \"String\" pattern is supported");
    snprintf(text, sizeof text, "{\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, {\"type\": "
             "\"Strip\", \"content\": \" \", \"start\": 0, \"stop\": 1}]}, %s}", vocab);
    CHECK_EQ(tok_open(&t, file("stop.json", text), 3, err, sizeof err), -1);
    CHECK_HAS(err, "stop.json: decoder Strip after Fuse: only a leading strip is supported");
    CHECK_EQ(tok_open(&t, file("novocab.json", "{\"model\": {\"type\": \"BPE\"}}"), 3, err, sizeof err), -1);
    CHECK_HAS(err, "novocab.json: no model.vocab");
    CHECK_EQ(tok_open(&t, file("notjson.json", "vocab = 3"), 3, err, sizeof err), -1);
    CHECK_HAS(err, "notjson.json: not a JSON object");
    CHECK_EQ(tok_open(&t, "/nonexistent/tokenizer.json", 3, err, sizeof err), -1);
    CHECK_HAS(err, "/nonexistent/tokenizer.json: cannot read: No such file or directory");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/rt_test_tok.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_gpt2();
    test_llama();
    test_other_decoders();
    test_refusals();
    const char *names[] = {"gpt2.json", "llama.json", "meta.json", "never.json", "strip.json", "none.json",
                           "unigram.json", "wp.json", "regex.json", "stop.json", "novocab.json", "notjson.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) unlink(file(names[i], ""));
    rmdir(dir);
    if (!failures) printf("rt_test_tok: ok\n");
    return failures != 0;
}
