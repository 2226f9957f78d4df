#include "control/row_version.h"

#include <algorithm>
#include <set>

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

base::Result<std::vector<std::string>> RowsToReload(base::Database& sql, std::string_view table,
                                                    const std::map<std::string, int64_t>& versions,
                                                    const std::vector<std::string>& held) {
  SOVAI_ASSIGN_OR_RETURN(base::Statement st,
                         sql.Prepare("SELECT id, updated_at FROM " + std::string(table) +
                                     " WHERE state != 'DELETED'"));
  std::vector<std::string> load;
  std::set<std::string> live;
  for (;;) {
    SOVAI_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    std::string id = st.ColumnText(0);
    auto known = versions.find(id);
    if (known == versions.end() || st.ColumnInt(1) > known->second) load.push_back(id);
    live.insert(std::move(id));
  }
  for (const std::string& id : held) {
    if (!live.contains(id)) load.push_back(id);  // deleted by another server
  }
  return load;
}

}  // namespace sovai::control
