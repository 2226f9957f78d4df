#include "control/row_version.h"

#include <algorithm>

namespace sovai::control {

base::Result<int64_t> NextRowVersion(base::Database& sql, std::string_view table,
                                     std::string_view kind, const std::string& id, int64_t expected,
                                     bool check, int64_t now_unix_micros) {
  SOVAI_ASSIGN_OR_RETURN(
      base::Statement current,
      sql.Prepare("SELECT updated_at FROM " + std::string(table) + " WHERE id = ?1"));
  current.Bind(1, id);
  SOVAI_ASSIGN_OR_RETURN(bool exists, current.Step());
  const int64_t stored = exists ? current.ColumnInt(0) : 0;
  if (check && stored != expected) {
    return base::AbortedError(std::string(kind) + " " + id +
                              " was changed by another server at the same moment; try again");
  }
  return std::max(now_unix_micros, stored + 1);
}

}  // namespace sovai::control
