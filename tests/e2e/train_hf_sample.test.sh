#!/usr/bin/env bash
# --sample with --tokenizer, for any vocabulary and layout.  Two small
# tokenizer.json files written for the test (tests/e2e/hf_tokenizer.py: the
# structure of GPT-2's byte-level BPE and of Llama's SentencePiece-style BPE
# with byte fallback and ▁, each with 10 merges learnt from the text) encode
# tiny Shakespeare into llm.c shards; tiny-gpt and tiny-llama with a
# vocabulary of 400 (padded to 512 in memory) train 10 steps on them.  Checks:
#  - the text printed with --tokenizer is the reference decoder's text of the
#    token ids the log records ({"sample": [...]}), and the sample starts at
#    the tokenizer's first token (<|endoftext|>, <s>);
#  - resumed from the same checkpoint, tp 2 and tp 2 x pp 2 with sequence
#    parallelism (the Llama: its 2 kv heads split over tp) sample the same ids;
#  - without --tokenizer the ids are printed, the ones the log records.
set -u
. "$(dirname "$0")/train_lib.sh"
K=tests/e2e/hf_tokenizer.py
head -c 20000 "$DATA" > "$T/src.txt"
head -c 60000 "$DATA" > "$T/text.txt"
fail=0

# sample_ids JSONL: the ids of the log's sample record, one line
sample_ids() { "$PY" -c 'import json, sys; print(*[o for o in map(json.loads, open(sys.argv[1])) if "sample" in o][-1]["sample"])' "$1"; }
# printed OUT: the bytes between the sample's header line and its end line
printed() { "$PY" -c 'import sys; t = open(sys.argv[1], "rb").read(); a = t.index(b"--- sample"); a = t.index(b"\n", a) + 1; sys.stdout.buffer.write(t[a:t.index(b"\n--- end of sample ---", a)])' "$1"; }

for kind in gpt2 llama; do
    tok=$T/$kind.json
    "$PY" $K write $kind "$T/src.txt" 10 "$tok" && "$PY" $K encode "$tok" "$T/text.txt" "$T/$kind.bin" > /dev/null ||
        { echo "FAIL: hf_tokenizer.py $kind"; fail=1; continue; }
    spec=specs/tiny-llama.tspec bos=1     # <s>
    [ $kind = gpt2 ] && spec=specs/tiny-gpt.tspec \
        bos=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["added_tokens"][0]["id"])' "$tok")
    d=(-D model.vocab=400 -D data.format=llmc)
    train_build_spec $spec "$kind.1" -D parallel.dp=1 -D cluster.gpus_per_node=1 "${d[@]}"
    train_build_spec $spec "$kind.tp" -D parallel.dp=1 -D parallel.tp=2 -D cluster.gpus_per_node=2 "${d[@]}"
    train_build_spec $spec "$kind.3d" -D parallel.dp=1 -D parallel.tp=2 -D parallel.pp=2 -D parallel.sequence_parallel=on \
        -D cluster.gpus_per_node=4 "${d[@]}"
    if ! train_run 1 "$kind.1" --data "$T/$kind.bin" --steps 10 --ckpt-dir "$T/$kind.ck" --log "$T/$kind.1.jsonl" \
         --sample 24 --tokenizer "$tok"; then
        echo "FAIL: $kind.1 did not train:"; tail -5 "$T/$kind.1.err"; fail=1; continue
    fi
    ids=$(sample_ids "$T/$kind.1.jsonl")
    # shellcheck disable=SC2086
    if "$PY" $K decode "$tok" $ids | cmp -s - <(printed "$T/$kind.1.out") &&
       grep -aq "^--- sample (24 tokens from token $bos," "$T/$kind.1.out"; then
        echo "ok: $kind: the printed text is the decoding of the sampled ids: $(printed "$T/$kind.1.out" | head -c 60 | tr -c '[:print:]' '.')"
    else
        echo "FAIL: $kind: the printed text is not the decoding of $ids (or it does not start at token $bos):"
        cat "$T/$kind.1.out"; fail=1
    fi
    for lay in tp:2 3d:4; do
        name=$kind.${lay%:*}
        if ! train_run "${lay#*:}" "$name" --data "$T/$kind.bin" --steps 10 --resume "$T/$kind.ck" \
             --log "$T/$name.jsonl" --sample 24 --tokenizer "$tok"; then
            echo "FAIL: $name:"; tail -5 "$T/$name.err"; fail=1
        elif [ "$(sample_ids "$T/$name.jsonl")" = "$ids" ]; then
            echo "ok: $name: the same ids as on one rank"
        else
            echo "FAIL: $name: ids $(sample_ids "$T/$name.jsonl"), one rank $ids"; fail=1
        fi
    done
    # without a tokenizer: the ids themselves, starting from the data's first token
    train_run 1 "$kind.1" --data "$T/$kind.bin" --steps 10 --resume "$T/$kind.ck" --log "$T/$kind.ids.jsonl" --sample 12
    if [ "$(printed "$T/$kind.1.out")" = "$(sample_ids "$T/$kind.ids.jsonl")" ]; then
        echo "ok: $kind: without --tokenizer the ids: $(printed "$T/$kind.1.out")"
    else
        echo "FAIL: $kind: without --tokenizer:"; cat "$T/$kind.1.out"; fail=1
    fi
done
[ $fail = 0 ] && echo PASS
exit $fail
