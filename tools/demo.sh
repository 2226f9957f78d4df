#!/usr/bin/env bash
# `make demo`: Sovai's main job on the embedded defaults, as a user lives it with the `sovai` CLI
# (docs/quickstart.md walks through its output):
#   1. start `sovai server` in a fresh data directory and log the CLI in;
#   2. put a dataset and the shipped base model in a bucket (`sovai bucket cp`);
#   3. fine-tune with the built-in image sovai/finetune, the bucket mounted as volumes, following
#      the job's live log;
#   4. score the base and the fine-tuned model on the held-out test split;
#   5. deploy the output with `sovai app run` and ask it a question with curl and the `openai`
#      client;
#   6. show the bill, the model card and how to stop; Ctrl-C at any point leaves nothing running.
#
# Environment (for the e2e test, tests/e2e/demo_test.py; a user sets none of them):
#   DEMO_QUICK=1        a small dataset and a short LoRA run instead of the recipe
#   DEMO_DIR=DIR        the working directory (default: a fresh temporary one, removed at the end)
#   DEMO_KEEP_SERVER=1  leave the server running at the end; DIR/demo.env says where it is
#   SOVAI_BINARY, SOVAI_ENGINE  the binaries (default: build/src/cli/sovai, build/src/engine/sovai-engine)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
source tools/demo/recipe.sh

sovai=${SOVAI_BINARY:-$repo/build/src/cli/sovai}
engine=${SOVAI_ENGINE:-$repo/build/src/engine/sovai-engine}
region=EU-WEST-LOCAL
bucket=demo
app_name=sovai-commands
base_model=models/sovai-tiny-llama

if [[ ${DEMO_QUICK:-0} == 1 ]]; then
  dataset_args=(--seed 20261130 --train 400 --validation 20 --test 20)
  train_args=(--method lora --max-steps 40 --seq-len 256 --batch-rows 2 --learning-rate 2e-3
    --warmup-steps 5 --schedule cosine --eval-fraction 0 --threads 2 --log-interval 10 --seed 42)
  eval_args=(--max-tokens 32 --threads 2 --dtype f32)
  checkpoint_interval=20
else
  dataset_args=("${DEMO_DATASET_ARGS[@]}")
  train_args=("${DEMO_TRAIN_ARGS[@]}")
  eval_args=("${DEMO_EVAL_ARGS[@]}")
  checkpoint_interval=$DEMO_CHECKPOINT_INTERVAL
fi

if [[ -n ${DEMO_DIR:-} ]]; then
  work=$DEMO_DIR
  mkdir -p "$work"
  remove_work=0
else
  work=$(mktemp -d -t sovai-demo-XXXXXX)
  # mktemp makes it 0700; the jobs' sandbox user must traverse it to reach their directories.
  chmod 0711 "$work"
  remove_work=1
fi
data_dir=$work/server
log=$work/server.log
server_pid=
finished=0

stop_server() {
  [[ -n $server_pid ]] || return 0
  if kill -0 "$server_pid" 2>/dev/null; then
    # SIGTERM stops the jobs and the app's replicas first; SIGKILL only if that hangs.
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$server_pid" 2>/dev/null; then kill -KILL "$server_pid" 2>/dev/null || true; fi
  fi
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if ((finished)) && [[ ${DEMO_KEEP_SERVER:-0} == 1 ]]; then exit "$status"; fi
  if [[ -n $server_pid ]]; then
    echo
    echo "== stopping the server, its job and the app's replicas"
    stop_server
  fi
  if ((status != 0)) && [[ -f $log ]]; then
    echo "demo: failed (exit $status); the last lines of the server's log ($log):" >&2
    tail -n 20 "$log" >&2
  fi
  if ((remove_work)) && ((status == 0)); then rm -rf "$work"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted"; exit 130' INT TERM

# Each step's wall time, for the summary at the end (tools/demo/README.md quotes it).
stage_times=()
stage_started=
step() {
  if [[ -n $stage_started ]]; then stage_times+=("$((SECONDS - stage_started))"); fi
  stage_started=$SECONDS
  printf '\n\033[1m== %s\033[0m\n' "$*"
}
show() { echo "\$ $*"; }
run() {
  show "sovai $(printf '%q ' "$@")"
  "$sovai" "$@"
}
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }
json_value() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$@"; }
started=$SECONDS

step "1/6  Starting sovai server in $data_dir"
"$sovai" server --data-dir "$data_dir" --listen-api 127.0.0.1:0 --listen-s3 127.0.0.1:0 --listen-registry 127.0.0.1:0 \
  --engine "$engine" >"$log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  [[ -f $data_dir/server.json ]] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "demo: the server exited at start" >&2; exit 1; }
  sleep 0.1
done
[[ -f $data_dir/server.json ]] || { echo "demo: the server did not start in 30 s" >&2; exit 1; }
api_url=$(json_field "$data_dir/server.json" api_url)
s3_url=$(json_field "$data_dir/server.json" s3_url)
echo "REST API and OpenAI endpoints: $api_url    S3: $s3_url"
export SOVAI_CONFIG=$work/cli-config.json
# The bootstrap admin's token, which `sovai server` wrote (mode 0600) into its data directory.
show "sovai login --url $api_url --token \$(jq -r .api_token $data_dir/admin.json)"
"$sovai" login --url "$api_url" --token "$(json_field "$data_dir/admin.json" api_token)"
run flavor list

step "2/6  A dataset and the base model into a bucket"
show "python3 tools/demo/make_dataset.py $(printf '%q ' "${dataset_args[@]}") $work/dataset"
python3 tools/demo/make_dataset.py "${dataset_args[@]}" "$work/dataset"
echo "one training example (a request and the exact command it means):"
head -n 1 "$work/dataset/train.jsonl" | python3 -c '
import json, sys
m = json.loads(sys.stdin.readline())["messages"]
print("  user:      " + m[-2]["content"])
print("  assistant: " + m[-1]["content"])'
run bucket mb "$bucket"
run bucket cp -r "$work/dataset" "s3://$bucket/dataset"
run bucket cp -r "$base_model" "s3://$bucket/base-model"
run bucket ls -r "s3://$bucket"

step "3/6  Fine-tuning the base model as a job (sovai/finetune), following its log"
run job run --name demo-finetune --flavor ai1-1-cpu --cpu 2 \
  --volume "$bucket@$region/dataset:/workspace/data:ro" \
  --volume "$bucket@$region/base-model:/workspace/model:ro" \
  --volume "$bucket@$region/output:/workspace/output:rw" \
  --follow sovai/finetune -- --model /workspace/model --data /workspace/data/train.jsonl \
  --output /workspace/output "${train_args[@]}" --checkpoint-interval "$checkpoint_interval"
run bucket ls -r "s3://$bucket/output" | grep -v /checkpoints/ || true
# The output volume is live (sync=30s, the default): each checkpoint went up while the job still
# trained, a unit whose manifest (.sovai-unit.json) is written last. Their times say when.
echo "Checkpoints in the bucket (each uploaded during training, manifest last):"
run bucket ls -r "s3://$bucket/output/checkpoints/" | grep -E '^\$ |MODIFIED|\.sovai-unit\.json' || true

step "4/6  Scoring base vs fine-tuned on the held-out test split (exact match)"
run bucket cp -r "s3://$bucket/output" "$work/output" >/dev/null
finetuned=(--model "$work/output/model")
[[ -d $work/output/adapter ]] && finetuned=(--model "$base_model" --lora "$work/output/adapter")
show "sovai-engine eval --model $base_model --data $work/dataset/test.jsonl ${eval_args[*]}"
"$engine" eval --model "$base_model" --data "$work/dataset/test.jsonl" "${eval_args[@]}" \
  --output "$work/eval-base.jsonl" | tee "$work/eval-base.txt"
show "sovai-engine eval ${finetuned[*]} --data $work/dataset/test.jsonl ${eval_args[*]}"
"$engine" eval "${finetuned[@]}" --data "$work/dataset/test.jsonl" "${eval_args[@]}" \
  --output "$work/eval-finetuned.jsonl" | tee "$work/eval-finetuned.txt"
score() { grep -o 'exact match [0-9]*/[0-9]*' "$1" | awk '{print $3}'; }
base_score=$(score "$work/eval-base.txt")
tuned_score=$(score "$work/eval-finetuned.txt")
echo "base model: $base_score exact    fine-tuned: $tuned_score exact    (test split, never trained on)"

step "5/6  Deploying the fine-tuned model as an OpenAI-compatible endpoint"
app_args=(--name "$app_name" --model "$bucket@$region/output" --flavor ai1-1-cpu --cpu 1
  --replicas 1 --label demo=commands --wait --timeout 5m)
[[ -d $work/output/adapter ]] && app_args+=(--base-model "$bucket@$region/base-model")
run app run "${app_args[@]}"
app_url=$("$sovai" app get "$app_name" -o json | python3 -c 'import json, sys
print(json.load(sys.stdin)["url"].rstrip("/") + "/v1")')
show "sovai token create --role read --label-selector demo=commands --name demo-client"
app_token=$("$sovai" token create --role read --label-selector demo=commands --name demo-client)
# Two held-out requests, so that the score reads as answers: one the evaluation scored right,
# asked again through the endpoint, and (below) one it scored wrong, as the evaluation answered.
right=$(python3 tools/demo/pick_example.py right "$work/eval-finetuned.jsonl")
question=$(json_value "$right" request)
expected=$(json_value "$right" reference)
if [[ $(json_value "$right" exact_match) == True ]]; then
  echo "A test request (never in training) that the evaluation scored right:"
else
  echo "The evaluation scored no test request right; the first one:"
fi
body=$(python3 -c 'import json, sys
print(json.dumps({"model": sys.argv[1], "max_tokens": 128, "temperature": 0,
                  "messages": [{"role": "user", "content": sys.argv[2]}]}))' "$app_name" "$question")
show "curl -s $app_url/chat/completions -H 'Authorization: Bearer \$TOKEN' -H 'Content-Type: application/json' -d '$body'"
curl -fsS "$app_url/chat/completions" -H "Authorization: Bearer $app_token" \
  -H 'Content-Type: application/json' -d "$body" >"$work/answer.json"
python3 -m json.tool "$work/answer.json"
answer=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["message"]["content"])' "$work/answer.json")
echo "asked:     $question"
echo "answered:  $answer"
echo "expected:  $expected"
if [[ $answer == "$expected" ]]; then
  echo "(exact)"
elif [[ $(json_value "$right" exact_match) == True ]]; then
  echo "(not exact: the endpoint serves q8_0 weights, the evaluation used f32)"
else
  echo "(not exact)"
fi
if [[ -f node_modules/openai/package.json ]]; then
  echo
  echo "The same through the official openai npm client (tools/demo/ask.mjs), streamed:"
  show "node tools/demo/ask.mjs $app_url \$TOKEN $app_name '$question'"
  node tools/demo/ask.mjs "$app_url" "$app_token" "$app_name" "$question" | tee "$work/answer-openai.txt"
fi
echo
python3 tools/demo/pick_example.py wrong "$work/eval-finetuned.jsonl"

step "6/6  What it cost, what it wrote, how to stop"
run billing usage --lines
run bucket cp "s3://$bucket/output/MODEL_CARD.md" "$work/MODEL_CARD.md"
head -n 30 "$work/MODEL_CARD.md"
echo "..."
echo
echo "Model card:        s3://$bucket/output/model_card.json (and MODEL_CARD.md beside it)"
echo "Fine-tuned model:  s3://$bucket/output/$([[ -d $work/output/adapter ]] && echo adapter || echo model)"
echo "Endpoint:          $app_url  (model \"$app_name\", token from sovai token create)"
if curl -fsS -o /dev/null "$api_url/" 2>/dev/null; then echo "Web panel:         $api_url/"; fi
echo "Stop the app:      sovai app stop $app_name    (delete it: sovai app delete $app_name)"
stage_times+=("$((SECONDS - stage_started))")
echo "Demo time:         $((SECONDS - started)) s (steps 1-6: ${stage_times[*]} s)"
cat >"$work/demo.env" <<EOF
api_url=$api_url
s3_url=$s3_url
server_pid=$server_pid
data_dir=$data_dir
sovai_config=$SOVAI_CONFIG
app_url=$app_url
app_token=$app_token
base_score=$base_score
finetuned_score=$tuned_score
EOF
finished=1
if [[ ${DEMO_KEEP_SERVER:-0} != 1 ]]; then
  echo "The demo stops the server now (it ran in $data_dir; Ctrl-C would have done the same)."
fi
