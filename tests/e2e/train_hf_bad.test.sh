#!/usr/bin/env bash
# Bad Hugging Face input to the trainer (--init, --tokenizer): every case is
# an error on every rank (2 ranks here) naming the file and the tensor (or
# token, or decoder), exit 1, and nothing trained: no step line, no log
# record, no checkpoint.  The weights are a good export of tiny-gpt made bad
# one way each (tests/e2e/hf_bad.py): a missing tensor, an extra one (a layer
# past the model's; another family's), a wrong shape (with the spec key that
# disagrees), an unsupported dtype, a truncated file, a header whose offsets
# overlap, an index naming a shard that is not there, a path that is not there.
set -u
. "$(dirname "$0")/train_lib.sh"
B=tests/e2e/hf_bad.py
fail=0
train_build bad -D parallel.dp=2 -D cluster.gpus_per_node=2
if ! train_run 2 bad --data "$DATA" --steps 1 --ckpt-dir "$T/good.ck" ||
   ! "$SHARDC" export "$T/good.ck" -o "$T/good" > /dev/null ||
   ! "$SHARDC" export "$T/good.ck" -o "$T/sharded" --max-shard-size 50KB > /dev/null; then
    echo "FAIL: the good weights:"; cat "$T/bad.err"; exit 1
fi
GOOD=$T/good/model.safetensors

# refused NAME MESSAGE [trainer options]: exit 1, MESSAGE on both ranks, nothing trained
refused() {
    local name=$1 msg=$2
    shift 2
    train_run 2 bad --data "$DATA" --steps 2 --ckpt-dir "$T/$name.ck" --log "$T/$name.jsonl" "$@"
    local rc=$? why=""
    [ $rc = 1 ] || why="exit $rc, not 1"
    for r in 0 1; do
        grep -qF "shardrt: rank $r: error: $msg" "$T/bad.err" || why="${why:+$why; }rank $r does not say it"
    done
    grep -q '^step 1' "$T/bad.out" && why="${why:+$why; }it trained"
    [ -s "$T/$name.jsonl" ] && why="${why:+$why; }the log has records"
    ls "$T/$name.ck" 2> /dev/null | grep -q step- && why="${why:+$why; }a checkpoint was written"
    if [ -n "$why" ]; then
        echo "FAIL: $name: $why"; echo "  expected: $msg"; sed 's/^/  /' "$T/bad.err" | head -8; fail=1
    else
        echo "ok: $name: $msg"
    fi
}

bad() { "$PY" $B "$GOOD" "$T/$1.safetensors" "${@:2}" || { echo "FAIL: hf_bad.py $*"; exit 1; }; }
bad missing missing transformer.h.1.ln_2.weight
refused missing "$T/missing.safetensors: tensor 'transformer.h.1.ln_2.weight' is missing (this model's h.1.ln_2.weight)" \
    --init "$T/missing.safetensors"
bad extra extra transformer.h.2.ln_1.weight
refused extra "$T/extra.safetensors: tensor 'transformer.h.2.ln_1.weight' is not one of this model's (the file has layer 2; this model has 2: model.layers)" \
    --init "$T/extra.safetensors"
bad llama extra model.embed_tokens.weight
refused family "$T/llama.safetensors: these are Llama weights, but this model is a GPT (model gpt in the spec)" \
    --init "$T/llama.safetensors"
bad shape shape transformer.h.0.mlp.c_fc.weight 64 512
refused shape "$T/shape.safetensors: tensor 'transformer.h.0.mlp.c_fc.weight' is [64, 512] there but [64, 256] in this model (GPT-2's Conv1D: [in, out]): its dimension 1 is model.ffn_hidden, 256 in the spec" \
    --init "$T/shape.safetensors"
bad dtype dtype transformer.h.0.ln_1.weight
refused dtype "$T/dtype.safetensors: tensor 'transformer.h.0.ln_1.weight' is F64; shardc reads F32, BF16 and F16 weights" \
    --init "$T/dtype.safetensors"
bad truncated truncate 100
refused truncated "$T/truncated.safetensors: tensor 'transformer.ln_f.bias': its data end at byte" \
    --init "$T/truncated.safetensors"
bad overlap overlap
refused overlap "$T/overlap.safetensors: tensor 'transformer.wpe.weight': its data starts at byte 65532 of the data, not at 65536" \
    --init "$T/overlap.safetensors"
rm "$T/sharded/model-00002-of-"*.safetensors
refused shard "$T/sharded/model-00002-of-" --init "$T/sharded"
refused nothing "$T/nothing: cannot open: No such file or directory" --init "$T/nothing"

# tokenizers: an id past the model's vocabulary of 256, a decoder shardc does not know
head -c 20000 "$DATA" > "$T/src.txt"
"$PY" tests/e2e/hf_tokenizer.py write gpt2 "$T/src.txt" 10 "$T/tok.json" || { echo "FAIL: hf_tokenizer.py"; exit 1; }
refused token "$T/tok.json: token 'Ġt' has id 256, but the model's vocabulary has 256 tokens (model.vocab)" \
    --tokenizer "$T/tok.json" --sample 4
"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); d["model"]["vocab"] = {k: v for k, v in d["model"]["vocab"].items() if v < 256}; d["added_tokens"] = []; d["decoder"] = {"type": "WordPiece", "prefix": "##"}; json.dump(d, open(sys.argv[2], "w"))' \
    "$T/tok.json" "$T/wp.json"
refused decoder "$T/wp.json: decoder 'WordPiece' is not supported" --tokenizer "$T/wp.json"
[ $fail = 0 ] && echo PASS
exit $fail
