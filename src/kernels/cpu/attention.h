// Private to the cpu backend: causal grouped-query attention (backend.h's AttentionForward and
// AttentionBackward), blocked in tiles of kAttentionTile query rows by kAttentionTile key columns.
//
// Forward (flash-attention style): each (sequence, query head, query tile) task walks the key
// tiles its rows may see with an online softmax, so no more than a tile of scores exists at a
// time; it writes out and the row log-sum-exps.
// Backward: recomputes each probability tile from the saved log-sum-exp. When there are enough
// (sequence, key/value head) pairs to keep every thread busy, each such pair is one task that
// produces dq, dk and dv of its heads in one pass (no two tasks write the same element). Otherwise
// the work is split finer in two passes: (sequence, kv head, key tile) tasks produce dk and dv,
// then (sequence, query head, query tile) tasks produce dq, recomputing the tiles once more.
//
// Tiles that no query may see (future keys, keys beyond the window, keys of other segments by the
// range of segment ids) are skipped; masks are evaluated per element only on tiles that need them.
//
// Thread-safety: as Context.
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/context.h"

namespace sovai::kernels::cpu {

inline constexpr int64_t kAttentionTile = 64;

void AttentionForward(Context& context, float* out, float* lse, const float* q, const float* k,
                      const float* v, const int32_t* segment, const Backend::AttentionShape& shape);

void AttentionBackward(Context& context, float* dq, float* dk, float* dv, const float* dout,
                       const float* out, const float* lse, const float* q, const float* k,
                       const float* v, const int32_t* segment,
                       const Backend::AttentionShape& shape);

}  // namespace sovai::kernels::cpu
