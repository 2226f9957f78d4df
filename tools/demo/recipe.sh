# The demo's fine-tuning recipe, as variables for tools/demo.sh (source it). The measurements
# behind every number are in tools/demo/README.md.
#
#   source tools/demo/recipe.sh
#   python3 tools/demo/make_dataset.py "${DEMO_DATASET_ARGS[@]}" "$dir"
#   sovai-engine train --model models/sovai-tiny-llama --data "$dir/train.jsonl" \
#     --output "$out" "${DEMO_TRAIN_ARGS[@]}"                    # writes $out/model (full)
#   sovai-engine eval --model models/sovai-tiny-llama --data "$dir/test.jsonl" "${DEMO_EVAL_ARGS[@]}"
#   sovai-engine eval --model "$out/model" --data "$dir/test.jsonl" "${DEMO_EVAL_ARGS[@]}"

# tools/demo/make_dataset.py: 6,000 training conversations (about 1.7 passes at the step count
# below), 100 for validation, 200 for the test; seeded. The task has no GPU count: this budget
# does not learn it (tools/demo/README.md), and a score made of lucky counts is not robust.
DEMO_DATASET_ARGS=(--seed 20261130 --train 6000 --validation 100 --test 200)

# Full fine-tuning: LoRA (rank 16, lr 2e-3) learned the command's shape but never started reading
# the request within the budget. One row of 512 tokens per step (about five conversations) gives
# twice the updates of two rows for the same tokens, which is what breaks the plateau sooner.
DEMO_TRAIN_METHOD=full
DEMO_TRAIN_STEPS=2000
DEMO_TRAIN_ARGS=(--method "$DEMO_TRAIN_METHOD" --max-steps "$DEMO_TRAIN_STEPS" --seq-len 512
  --batch-rows 1 --learning-rate 2e-3 --warmup-steps 20 --schedule cosine --eval-fraction 0
  --threads 2 --log-interval 50 --seed 42)

# The job saves a checkpoint every 500 steps (four in all; the engine keeps the newest two on its
# disk): through the live output volume each reaches the bucket during training, which is what
# the demo shows. Saving reads the weights and optimizer state and changes no number.
DEMO_CHECKPOINT_INTERVAL=500

# Answers are 82-92 tokens; 128 leaves room and bounds what the base model rambles. f32 weights:
# 2.5-3x faster than q8_0 on this 4M model (about 5 s for 200 examples on idle cores), same score
# within 1-2.
DEMO_EVAL_ARGS=(--max-tokens 128 --threads 2 --dtype f32)

# Measured (tools/demo/README.md, 2026-12-01, AMD EPYC): test exact match, base -> fine-tuned as
# `make demo` prints it (--seed 42 through the job, OpenBLAS SkylakeX kernels), the spread over
# seeds and sgemm kernels, and the training's CPU time. train_trainer_test pins the numerics
# under these figures; when it has to change, re-measure them. tests/e2e/demo_test.py fails below
# 110/200.
DEMO_EXPECTED_BASE_EXACT_MATCH="0/200"
DEMO_EXPECTED_FINETUNED_EXACT_MATCH="147/200"  # 73.5 %; 147-185 over seeds and sgemm kernels
DEMO_EXPECTED_TRAIN_CPU_S=400                  # user CPU on 2 threads: ~4 min wall on idle cores
