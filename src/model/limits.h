// Named limits of the model formats: safetensors files and their shard index, config.json,
// PEFT adapters and model directories (docs/formats/safetensors.md, model-config.md,
// peft-adapter.md). Every file these parsers read is untrusted input (downloaded from a hub or a
// bucket), so every size, count and length it declares is checked against one of these before it
// is acted on. Exceeding one is ResourceExhausted (or InvalidArgument for a model shape) with a
// message that names the limit and the file. Other parts of src/model keep their own limits
// beside their code (e.g. tokenizer_limits.h) and may add shared ones here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sovai::model {

// --- safetensors (safetensors.h) ---

// The JSON header of one file. The same bound as the reference library's MAX_HEADER_SIZE, so a
// file it reads is never refused for its header size here.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// Tensors in one file. A 100 MB header holds at most ~1.5 M minimal entries; real checkpoints
// hold a few thousand per shard.
inline constexpr size_t kMaxSafetensorsTensors = 1'000'000;
// Dimensions of one tensor (PyTorch allows 64; model weights use 1 to 4).
inline constexpr size_t kMaxTensorRank = 16;
// A tensor name (PEFT keys, the longest in practice, are ~90 bytes).
inline constexpr size_t kMaxTensorNameBytes = 1024;
// Entries of a file's "__metadata__" object.
inline constexpr size_t kMaxSafetensorsMetadataEntries = 65'536;
// Nesting of the header JSON: the format needs 3 levels; unknown fields of a tensor entry (which
// the reference library ignores) may nest up to this depth in total.
inline constexpr int kMaxSafetensorsHeaderDepth = 16;

// --- Sharded checkpoints (model.safetensors.index.json) ---

// The index JSON (a 90 k-tensor model's index is ~10 MB).
inline constexpr uint64_t kMaxSafetensorsIndexBytes = 64ull << 20;  // 64 MiB
// Shard files of one model (the largest public checkpoints have ~200). Each shard stays mapped
// while the model is open; its descriptor is closed after mapping.
inline constexpr size_t kMaxSafetensorsShards = 4096;
// A shard's file name as written in the index.
inline constexpr size_t kMaxShardFileNameBytes = 255;
// transformers' default max_shard_size ("5GB"), used when writing sharded checkpoints.
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;

// --- config.json (model_config.h) ---

inline constexpr uint64_t kMaxModelConfigBytes = 4u << 20;  // 4 MiB
// Sane upper bounds of a model's shape: well above every published Llama-family model, low
// enough that products of them (e.g. vocab_size * hidden_size elements) fit in 64 bits easily.
inline constexpr int64_t kMaxHiddenSize = 1 << 16;
inline constexpr int64_t kMaxIntermediateSize = 1 << 20;
inline constexpr int64_t kMaxHiddenLayers = 1024;
inline constexpr int64_t kMaxAttentionHeads = 1024;
inline constexpr int64_t kMaxHeadDim = 1024;
inline constexpr int64_t kMaxVocabSize = 1 << 22;
inline constexpr int64_t kMaxPositionEmbeddings = 1 << 24;
// Entries of an `eos_token_id` list.
inline constexpr size_t kMaxEosTokenIds = 64;

// --- PEFT adapters (peft_adapter.h) ---

inline constexpr uint64_t kMaxAdapterConfigBytes = 1u << 20;  // 1 MiB
// LoRA rank r.
inline constexpr int64_t kMaxLoraRank = 4096;

// --- Model directories (model_dir.h) ---

// Bytes copied per read when a model directory is written with extra files (tokenizer.json...).
inline constexpr size_t kModelDirCopyChunkBytes = 1u << 20;  // 1 MiB
// Buffer of the safetensors writer: tensor bytes produced in small pieces are gathered up to this
// size before they are appended to the file.
inline constexpr size_t kSafetensorsWriteBufferBytes = 1u << 20;  // 1 MiB

}  // namespace sovai::model
