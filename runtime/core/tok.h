/* tok.h — a Hugging Face tokenizer.json, for decoding (prefix tok_): the
 * trainer's --sample prints text with it.
 *
 * What is read (with cJSON): the model's vocabulary ("BPE" and "WordLevel":
 * {token: id}; "Unigram": [[token, score], ...], ids in order), the
 * added_tokens ({id, content}), the decoder, and the post_processor's
 * template (for the first token of a sample).  Decoding follows the
 * tokenizers library's decoders:
 *   ByteLevel      GPT-2's byte-level BPE: every character of a token stands
 *                  for one byte (bytes_to_unicode); others stay as they are
 *   Metaspace      the replacement character (U+2581 "▁") becomes a space;
 *                  the first token loses its leading space unless
 *                  prepend_scheme is "never" (or add_prefix_space is false)
 *   Replace        a String pattern replaced by the content (Llama's ▁ -> " ")
 *   ByteFallback   a token <0xHH> is the byte HH (Llama's unknown characters)
 *   Fuse           joins the tokens: a Strip after it acts on the whole text
 *   Strip          removes up to `start` leading `content` characters (of
 *                  each token, or after Fuse of the text: Llama's leading
 *                  space); `stop` > 0 only before Fuse
 *   Sequence       the above in order
 * and anything else is refused by name.  A token decodes to its bytes as
 * they are: where they are not valid UTF-8 (a character cut between tokens,
 * a lone <0xHH>), tokenizers' decode would show U+FFFD instead.  An id no
 * token has decodes to nothing, as in tokenizers.
 *
 * Depends on libc and cJSON.
 */
#ifndef SHARDRT_TOK_H
#define SHARDRT_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tok tok;

/* Reads path; every id must be below vocab (the model's vocabulary): 0, or
 * -1 with a message naming the file (and the token or decoder at fault). */
int tok_open(tok **out, const char *path, int64_t vocab, char *err, size_t errlen);
void tok_close(tok *t);
/* The token a sample starts from: the first special token of the
 * post_processor's template (Llama's <s>), else the first special added token
 * (GPT-2's <|endoftext|>); -1 when there is none. */
int64_t tok_bos(const tok *t);
/* How many ids the tokenizer knows (the largest id + 1). */
int64_t tok_size(const tok *t);

/* Decoding a sequence one token at a time (the state of the decoders that
 * look at the whole text: Metaspace's first token, Strip after Fuse). */
typedef struct tok_stream { const tok *t; bool started; int64_t strip_left; } tok_stream;
void tok_stream_begin(tok_stream *s, const tok *t);
/* The bytes of the next token id: *len bytes at the returned pointer (valid
 * until the next call). */
const char *tok_stream_next(tok_stream *s, int64_t id, size_t *len);

#endif
