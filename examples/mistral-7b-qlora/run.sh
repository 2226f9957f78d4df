#!/usr/bin/env bash
# QLoRA fine-tune of Mistral 7B on a chat dataset with Sovai, then serve the adapter behind an
# OpenAI-compatible URL. README.md explains each setting and the memory and time to expect.
#
#   sovai login --url https://sovai.example.eu --token -      # once
#   MODEL_DIR=~/models/Mistral-7B-Instruct-v0.3 DATA=chat.jsonl ./run.sh
#
# This file holds Mistral 7B's defaults; the steps and the other settings (MODEL_DIR, DATA,
# REGION, FLAVOR, EPOCHS, SEQ_LEN, ...) are in ../lib/peft_recipe.sh, shared with the other
# examples. Every setting can be given in the environment. STEPS picks the steps to run, in order:
#   upload  the model directory and the dataset into the bucket
#   train   the fine-tune as a job of the built-in image sovai/finetune, following its log
#   deploy  the adapter as an app (sovai/serve) on its base model
#   call    the app with curl and with the openai Python client
# e.g. STEPS=deploy,call ./run.sh after a finished training job. Each command is printed (+ ...)
# before it runs; the first failure stops the script.
set -euo pipefail

BUCKET=${BUCKET:-mistral-7b-qlora}
APP=${APP:-mistral-7b-chat}               # the app's name; clients send it as "model"
LABEL=${LABEL:-example=mistral-7b-qlora}  # on the app; the client token selects it
JOB_NAME=${JOB_NAME:-$APP-qlora}
# Hyperparameters (README.md, "Hyperparameters").
LEARNING_RATE=${LEARNING_RATE:-2e-4}
BATCH_ROWS=${BATCH_ROWS:-2}
GRAD_ACCUM=${GRAD_ACCUM:-8}

# Fixed for this example (not read from the environment).
RECIPE_METHOD=qlora                       # NF4 base, r=16, alpha=32, all seven projections
RECIPE_METHOD_NAME=QLoRA
RECIPE_MAX_GRAD_NORM=0.3
RECIPE_MODEL_TYPE=mistral                 # config.json's "model_type"; another gets a note
RECIPE_MODEL_NAME="Mistral 7B"
RECIPE_MODEL_DIR_NAME=Mistral-7B-Instruct-v0.3
# upload skips what the engine does not read: a full repository download also holds
# consolidated.safetensors (the same 14.5 GB in Mistral's own layout), which would double it.

# shellcheck source-path=SCRIPTDIR source=../lib/peft_recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/peft_recipe.sh"
