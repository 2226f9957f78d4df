#!/usr/bin/env bash
# LoRA fine-tune of Llama 3 8B on a chat dataset with Sovai, then serve the adapter behind an
# OpenAI-compatible URL. README.md explains each setting and the memory and time to expect.
#
#   sovai login --url https://sovai.example.eu --token -      # once
#   MODEL_DIR=~/models/Meta-Llama-3-8B-Instruct DATA=chat.jsonl ./run.sh
#
# This file holds Llama 3 8B's defaults; the steps and the other settings (MODEL_DIR, DATA,
# REGION, FLAVOR, EPOCHS, SEQ_LEN, ...) are in ../lib/peft_recipe.sh, shared with the other
# examples. Every setting can be given in the environment. STEPS picks the steps to run, in order:
#   upload  the model directory and the dataset into the bucket
#   train   the fine-tune as a job of the built-in image sovai/finetune, following its log
#   deploy  the adapter as an app (sovai/serve) on its base model
#   call    the app with curl and with the openai Python client
# e.g. STEPS=deploy,call ./run.sh after a finished training job. Each command is printed (+ ...)
# before it runs; the first failure stops the script.
set -euo pipefail

BUCKET=${BUCKET:-llama-3-8b-lora}
APP=${APP:-llama-3-8b-chat}               # the app's name; clients send it as "model"
LABEL=${LABEL:-example=llama-3-8b-lora}   # on the app; the client token selects it
JOB_NAME=${JOB_NAME:-$APP-lora}
# Hyperparameters (README.md, "Hyperparameters").
LEARNING_RATE=${LEARNING_RATE:-1e-4}
BATCH_ROWS=${BATCH_ROWS:-1}
GRAD_ACCUM=${GRAD_ACCUM:-16}

# Fixed for this example (not read from the environment).
RECIPE_METHOD=lora                        # r=16, alpha=32, all seven projections, f32 base
RECIPE_METHOD_NAME=LoRA
RECIPE_MAX_GRAD_NORM=1.0
RECIPE_MODEL_TYPE=llama                   # config.json's "model_type"; another gets a note
RECIPE_MODEL_NAME="Llama 3 8B"
RECIPE_MODEL_DIR_NAME=Meta-Llama-3-8B-Instruct
# upload skips what the engine does not read: a full repository download also holds original/
# (the same 16 GB as consolidated.00.pth, Meta's own layout), which would double it.

# shellcheck source-path=SCRIPTDIR source=../lib/peft_recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/peft_recipe.sh"
