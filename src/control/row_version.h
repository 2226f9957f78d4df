// Optimistic versions of rows that several servers of one database may write (apps,
// notebooks; docs/state.md): `updated_at` is the version.
//
//   SOVAI_ASSIGN_OR_RETURN(int64_t version,
//                          NextRowVersion(sql, "apps", "app", id, expected, check, now));
//   ... write the row with updated_at = version ...
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/sqlite.h"
#include "base/status.h"

namespace sovai::control {

// Inside a write transaction: the version the row of `table` with this `id` gets now. With
// `check`, the row must still be at `expected` (0: absent), the version this process last read:
// another server's change since then is not overwritten (Aborted, naming `kind` and `id`; the
// caller's next refresh reads it). The new version is above the stored one even when the clocks
// of the servers disagree. `table` is a name from the code, never from input.
base::Result<int64_t> NextRowVersion(base::Database& sql, std::string_view table,
                                     std::string_view kind, const std::string& id, int64_t expected,
                                     bool check, int64_t now_unix_micros);

// Inside a read transaction: the ids of `table` to read again — live rows (state != 'DELETED')
// whose version is above `versions` (the ones this process last read or wrote) or that it has
// never seen, then the `held` ids (those it keeps live in memory) that have no live row any more.
// One query of ids and versions, so that a refresh reads whole rows only when they changed.
base::Result<std::vector<std::string>> RowsToReload(base::Database& sql, std::string_view table,
                                                    const std::map<std::string, int64_t>& versions,
                                                    const std::vector<std::string>& held);

}  // namespace sovai::control
