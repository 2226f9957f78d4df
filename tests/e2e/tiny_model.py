"""A tiny Llama model made on the spot for end-to-end tests: a byte-level BPE tokenizer trained
by `sovai-engine tokenizer train` on generated sentences, then a few steps of full training from
random weights. Seconds on two cores; small enough to upload to a bucket in a test."""
import json
import os
import subprocess

WORDS = ("the quick brown fox jumps over a lazy dog while seven sovereign clouds train small "
         "models on buckets of text and every step makes the loss fall a little further").split()


def engine(binary, *args, check=True, **kwargs):
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError("sovai-engine %s failed (%d):\n%s\n%s" % (
            " ".join(args), result.returncode, result.stdout, result.stderr))
    return result


def sentences(count=400):
    out = []
    for i in range(count):
        words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(6 + i % 5)]
        out.append(" ".join(words).capitalize() + ".")
    return out


def write_chat_data(path, count=60):
    """Conversations whose answer is always the same: an adapter learns it in a few steps."""
    with open(path, "w") as f:
        for i in range(count):
            a, b = WORDS[i % len(WORDS)], WORDS[(i * 5 + 1) % len(WORDS)]
            f.write(json.dumps({"messages": [
                {"role": "user", "content": "Repeat: %s %s" % (a, b)},
                {"role": "assistant", "content": "sure, done"}]}) + "\n")


def make_base(binary, workdir):
    """An untrained tiny Llama (its tokenizer trained on sentences()) and its text data: returns
    (base_dir, text_jsonl)."""
    corpus = os.path.join(workdir, "corpus.txt")
    text = sentences()
    with open(corpus, "w") as f:
        f.write("\n".join(text))
    base = os.path.join(workdir, "base")
    engine(binary, "tokenizer", "train", "--vocab-size", "320", "--input", corpus, "--output", base)
    with open(os.path.join(base, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "vocab_size": 320, "hidden_size": 64, "intermediate_size": 128,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                   "tie_word_embeddings": True, "torch_dtype": "float32"}, f)
    data = os.path.join(workdir, "text.jsonl")
    with open(data, "w") as f:
        for s in text:
            f.write(json.dumps({"text": s}) + "\n")
    return base, data


def make_tiny_model(binary, workdir, steps=30):
    """Returns (base_dir, pretrained_output_dir, train_stdout); the model is <pretrained>/model."""
    base, data = make_base(binary, workdir)
    pretrained = os.path.join(workdir, "pretrained")
    out = engine(binary, "train", "--model", base, "--data", data, "--output", pretrained,
                 "--method", "full", "--from-scratch", "--max-steps", str(steps), "--seq-len", "64",
                 "--batch-rows", "4", "--learning-rate", "1e-2", "--eval-fraction", "0.05",
                 "--log-interval", "10")
    return base, pretrained, out.stdout


def upload_tiny_model(binary, workdir, s3, bucket, model_prefix, data_prefix, steps=5):
    """make_tiny_model + write_chat_data, uploaded to s3://bucket/<model_prefix>/ and
    s3://bucket/<data_prefix>/chat.jsonl (boto3 client `s3`): returns (model_dir, data_path), the
    local copies."""
    _, pretrained, _ = make_tiny_model(binary, workdir, steps=steps)
    model_dir = os.path.join(pretrained, "model")
    for name in os.listdir(model_dir):
        s3.upload_file(os.path.join(model_dir, name), bucket, model_prefix + "/" + name)
    data = os.path.join(workdir, "chat.jsonl")
    write_chat_data(data)
    s3.upload_file(data, bucket, data_prefix + "/chat.jsonl")
    return model_dir, data
