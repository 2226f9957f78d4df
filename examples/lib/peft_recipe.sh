# shellcheck shell=bash
# The fine-tune-and-serve recipe shared by examples/*/run.sh: upload a Hugging Face model and a
# chat dataset into a bucket, train a (Q)LoRA adapter with the built-in image sovai/finetune, serve
# it as an app (sovai/serve) on its base model, and call it with curl and the openai client. Each
# run.sh holds only its model's defaults and ends with
#
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib/peft_recipe.sh"
#
# This file is sourced, not executed: it runs the steps named in STEPS as it is read. The caller has
# already run `set -euo pipefail` and has set:
#
#   BUCKET, APP, LABEL, JOB_NAME   names (each ${X:-default}, so the environment overrides them)
#   LEARNING_RATE, BATCH_ROWS, GRAD_ACCUM
#                                  hyperparameters sized for the model (same, overridable)
#   RECIPE_METHOD                  --method of sovai/finetune: qlora or lora
#   RECIPE_METHOD_NAME             how the progress line names it: QLoRA, LoRA
#   RECIPE_MAX_GRAD_NORM           --max-grad-norm
#   RECIPE_MODEL_TYPE              the "model_type" config.json should hold (a note if not)
#   RECIPE_MODEL_NAME              the model in messages: Mistral 7B
#   RECIPE_MODEL_DIR_NAME          the folder under ~/models that the MODEL_DIR hint names
#
# The RECIPE_* values are fixed by each example, not read from the environment. Everything else
# below is a setting with a default that the environment overrides (the READMEs list them all).
#
# The steps, each a function, run in this order when STEPS names them:
#   upload  checks MODEL_DIR and DATA, creates the bucket if needed, copies the model (only the
#           files the engine reads when the directory holds others) and the dataset into it
#   train   prices the job (job run --dry-run), runs it with --follow, lists the output
#   deploy  starts the app on the adapter and its base model, or reuses (restarts, waits for) an
#           existing app of that name
#   call    creates the client token once (TOKEN_FILE), then calls the app with curl and, when it
#           is installed, the openai Python client
# Each command is printed (+ ...) before it runs; the first failure stops the script.

: "${BUCKET:?is set by run.sh before it sources peft_recipe.sh}"
: "${APP:?is set by run.sh before it sources peft_recipe.sh}"
: "${LABEL:?is set by run.sh before it sources peft_recipe.sh}"
: "${JOB_NAME:?is set by run.sh before it sources peft_recipe.sh}"
: "${LEARNING_RATE:?is set by run.sh before it sources peft_recipe.sh}"
: "${BATCH_ROWS:?is set by run.sh before it sources peft_recipe.sh}"
: "${GRAD_ACCUM:?is set by run.sh before it sources peft_recipe.sh}"
: "${RECIPE_METHOD:?is set by run.sh before it sources peft_recipe.sh}"
: "${RECIPE_METHOD_NAME:?is set by run.sh before it sources peft_recipe.sh}"
: "${RECIPE_MAX_GRAD_NORM:?is set by run.sh before it sources peft_recipe.sh}"
: "${RECIPE_MODEL_TYPE:?is set by run.sh before it sources peft_recipe.sh}"
: "${RECIPE_MODEL_NAME:?is set by run.sh before it sources peft_recipe.sh}"
: "${RECIPE_MODEL_DIR_NAME:?is set by run.sh before it sources peft_recipe.sh}"

# --- settings, besides those run.sh sets -------------------------------------------------------
SOVAI=${SOVAI:-sovai}
STEPS=${STEPS:-upload,train,deploy,call}
MODEL_DIR=${MODEL_DIR:-}                  # required by upload: a Hugging Face model directory
DATA=${DATA:-}                            # required by upload: a chat .jsonl file (or a folder)
REGION=${REGION:-EU-WEST-LOCAL}
OUTPUT=${OUTPUT:-output}                  # the job's output prefix in the bucket
FLAVOR=${FLAVOR:-h100-1-gpu}
GPUS=${GPUS:-1}
JOB_TIMEOUT=${JOB_TIMEOUT:-3h}            # SIGTERM then: a checkpoint is saved, RESUME=1 goes on
RESUME=${RESUME:-0}                       # 1: continue from the newest checkpoint under OUTPUT
# Hyperparameters (each example's README.md, "Hyperparameters").
EPOCHS=${EPOCHS:-1}
MAX_STEPS=${MAX_STEPS:-0}                 # > 0 overrides EPOCHS
SEQ_LEN=${SEQ_LEN:-2048}
EVAL_FRACTION=${EVAL_FRACTION:-0.05}
EVAL_INTERVAL=${EVAL_INTERVAL:-200}
CHECKPOINT_INTERVAL=${CHECKPOINT_INTERVAL:-50}
# The client token, created once (mode 600) beside the CLI's config, out of any source tree.
TOKEN_FILE=${TOKEN_FILE:-${XDG_CONFIG_HOME:-$HOME/.config}/sovai/$APP.token}
QUESTION=${QUESTION:-Write a haiku about fine-tuning a language model.}

note() { printf '\n== %s\n' "$*" >&2; }
show() { printf '+ %s\n' "$*" >&2; }
run() {
  show "$(printf '%q ' "$@")"
  "$@"
}
die() {
  printf 'run.sh: %s\n' "$*" >&2
  exit 1
}
wants() { [[ ",$STEPS," == *",$1,"* ]]; }

command -v "$SOVAI" >/dev/null || die "$SOVAI not found: install the sovai CLI or set SOVAI=/path/to/sovai"
command -v python3 >/dev/null || die "python3 is needed to read JSON"
run "$SOVAI" whoami >/dev/null

# --- 1. upload ---------------------------------------------------------------------------------
upload() {
  note "1/4  Model and dataset into s3://$BUCKET"
  [[ -n $MODEL_DIR ]] || die "set MODEL_DIR to a Hugging Face model directory (MODEL_DIR=~/models/$RECIPE_MODEL_DIR_NAME)"
  [[ -n $DATA ]] || die "set DATA to a chat .jsonl file (lines {\"messages\": [...]})"
  [[ -f $MODEL_DIR/config.json ]] || die "$MODEL_DIR has no config.json: not a Hugging Face model directory"
  [[ -f $MODEL_DIR/tokenizer.json ]] || die "$MODEL_DIR has no tokenizer.json (the engine reads the fast tokenizer)"
  [[ -f $MODEL_DIR/model.safetensors || -f $MODEL_DIR/model.safetensors.index.json ]] ||
    die "$MODEL_DIR has no model.safetensors or model.safetensors.index.json"
  [[ -e $DATA ]] || die "DATA=$DATA does not exist"
  grep -Eq "\"model_type\" *: *\"$RECIPE_MODEL_TYPE\"" "$MODEL_DIR/config.json" ||
    echo "run.sh: note: $MODEL_DIR/config.json is not a $RECIPE_MODEL_TYPE model; the recipe is sized for $RECIPE_MODEL_NAME" >&2
  grep -q '"chat_template"' "$MODEL_DIR/tokenizer_config.json" 2>/dev/null ||
    echo "run.sh: note: no chat_template in tokenizer_config.json: the engine renders chats with ChatML (README.md)" >&2

  if "$SOVAI" bucket ls "$BUCKET" >/dev/null 2>&1; then
    echo "bucket $BUCKET exists" >&2
  else
    run "$SOVAI" bucket mb "$BUCKET"
  fi

  # Only the files the engine reads: a full repository download also holds the same weights in the
  # vendor's own layout (run.sh names them), which would double the upload.
  local extra
  extra=$(find "$MODEL_DIR" -mindepth 1 -maxdepth 1 \( -name 'consolidated*' -o -name '*.pth' \
    -o -name '*.bin' -o -name '*.gguf' -o -name original \) -print -quit)
  if [[ -z $extra ]]; then
    run "$SOVAI" bucket cp -r "$MODEL_DIR" "s3://$BUCKET/model"
  else
    echo "run.sh: $MODEL_DIR holds files the engine does not read ($extra, ...): uploading the config, tokenizer and safetensors files one by one" >&2
    local f
    for f in "$MODEL_DIR"/{config.json,generation_config.json,tokenizer.json,tokenizer_config.json,special_tokens_map.json,model.safetensors,model.safetensors.index.json} \
      "$MODEL_DIR"/model-*.safetensors; do
      if [[ -f $f ]]; then run "$SOVAI" bucket cp "$f" "s3://$BUCKET/model/"; fi
    done
  fi

  if [[ -d $DATA ]]; then
    run "$SOVAI" bucket cp -r "$DATA" "s3://$BUCKET/dataset"
  else
    run "$SOVAI" bucket cp "$DATA" "s3://$BUCKET/dataset/"
  fi
  run "$SOVAI" bucket ls -r "$BUCKET/model/"
  run "$SOVAI" bucket ls -r "$BUCKET/dataset/"
}

# --- 2. train ----------------------------------------------------------------------------------
train() {
  note "2/4  $RECIPE_METHOD_NAME fine-tune on $FLAVOR (job $JOB_NAME), following its log"
  local job_args=(--name "$JOB_NAME" --flavor "$FLAVOR" --gpu "$GPUS" --timeout "$JOB_TIMEOUT"
    --volume "$BUCKET@$REGION/model:/workspace/model:ro:cache"
    --volume "$BUCKET@$REGION/dataset:/workspace/data:ro"
    --volume "$BUCKET@$REGION/$OUTPUT:/workspace/output:rw")
  local train_args=(--model /workspace/model --data /workspace/data --output /workspace/output
    --method "$RECIPE_METHOD" --rank 16 --alpha 32 --dropout 0.05
    --target-modules "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    --learning-rate "$LEARNING_RATE" --schedule cosine --warmup-ratio 0.03
    --weight-decay 0 --max-grad-norm "$RECIPE_MAX_GRAD_NORM"
    --epochs "$EPOCHS" --max-steps "$MAX_STEPS"
    --seq-len "$SEQ_LEN" --batch-rows "$BATCH_ROWS" --grad-accum "$GRAD_ACCUM"
    --eval-fraction "$EVAL_FRACTION" --eval-interval "$EVAL_INTERVAL"
    --checkpoint-interval "$CHECKPOINT_INTERVAL" --keep-checkpoints 3
    --log-interval 10 --seed 42)
  if [[ $RESUME == 1 ]]; then train_args+=(--resume); fi
  # The price at the timeout, and whether the project's budget allows it (exit 1 if not).
  run "$SOVAI" job run --dry-run "${job_args[@]}" sovai/finetune -- "${train_args[@]}"
  if ! run "$SOVAI" job run "${job_args[@]}" --follow sovai/finetune -- "${train_args[@]}"; then
    die "the training job did not finish. Its checkpoints are in s3://$BUCKET/$OUTPUT/checkpoints/; RESUME=1 STEPS=train,deploy,call $0 continues from the newest"
  fi
  run "$SOVAI" bucket ls "$BUCKET/$OUTPUT/"
}

# --- 3. deploy ---------------------------------------------------------------------------------
app_state() {
  "$SOVAI" app get "$APP" -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])'
}

deploy() {
  note "3/4  The adapter as app $APP on its base model"
  if "$SOVAI" app get "$APP" >/dev/null 2>&1; then
    echo "app $APP exists: using it (sovai app delete $APP, then STEPS=deploy,call, deploys the output again)" >&2
    local state waited=0
    state=$(app_state)
    if [[ $state == STOPPED || $state == FAILED ]]; then run "$SOVAI" app start "$APP"; fi
    while state=$(app_state) && [[ $state != RUNNING ]]; do
      [[ $state == FAILED ]] && die "app $APP FAILED: sovai app get $APP says why"
      ((waited < 1200)) || die "app $APP is still $state after 20 minutes"
      echo "app $APP: $state" >&2
      sleep 10
      waited=$((waited + 10))
    done
    return 0
  fi
  run "$SOVAI" app run --name "$APP" --model "$BUCKET@$REGION/$OUTPUT" \
    --base-model "$BUCKET@$REGION/model" --flavor "$FLAVOR" --gpu "$GPUS" --label "$LABEL" \
    --wait --timeout 20m
}

# --- 4. call -----------------------------------------------------------------------------------
call() {
  note "4/4  Calling $APP: curl, then the openai Python client"
  local app_url base_url token body
  app_url=$("$SOVAI" app get "$APP" -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["url"])')
  base_url=${app_url%/}/v1
  echo "OpenAI base URL: $base_url    model: \"$APP\" (fine-tuned), \"$APP-base\" (the base model)"
  if [[ -s $TOKEN_FILE ]]; then
    echo "token: $TOKEN_FILE" >&2
  else
    show "$(printf '%q ' "$SOVAI" token create --role read --label-selector "$LABEL" --name "$APP-client" --expires 30d) > $TOKEN_FILE"
    (umask 077 && mkdir -p "$(dirname "$TOKEN_FILE")" &&
      "$SOVAI" token create --role read --label-selector "$LABEL" --name "$APP-client" \
        --expires 30d >"$TOKEN_FILE")
  fi
  token=$(<"$TOKEN_FILE")
  body=$(python3 -c 'import json, sys
print(json.dumps({"model": sys.argv[1], "max_tokens": 256, "temperature": 0.7,
                  "messages": [{"role": "user", "content": sys.argv[2]}]}))' "$APP" "$QUESTION")
  show "curl -fsS $base_url/chat/completions -H \"Authorization: Bearer \$(cat $TOKEN_FILE)\" -H 'Content-Type: application/json' -d '$body'"
  curl -fsS "$base_url/chat/completions" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -d "$body"
  echo
  if python3 -c 'import openai' 2>/dev/null; then
    show "python3 (openai.OpenAI(base_url=\"$base_url\"), streamed)"
    OPENAI_BASE_URL=$base_url OPENAI_API_KEY=$token MODEL=$APP QUESTION=$QUESTION python3 - <<'PY'
import os
from openai import OpenAI

client = OpenAI()  # reads OPENAI_BASE_URL and OPENAI_API_KEY
stream = client.chat.completions.create(
    model=os.environ["MODEL"],
    messages=[{"role": "user", "content": os.environ["QUESTION"]}],
    max_tokens=256,
    temperature=0.7,
    stream=True,
)
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        print(chunk.choices[0].delta.content, end="", flush=True)
print()
PY
  else
    echo "(pip install openai to run the same request through the official Python client)" >&2
  fi
  echo "Stop the app when done (it is billed per started minute): $SOVAI app stop $APP" >&2
}

for step in upload train deploy call; do
  if wants "$step"; then "$step"; fi
done
