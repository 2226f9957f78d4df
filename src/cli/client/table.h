// Human output of the CLI: column tables, "key  value" blocks and the small formats they use
// (ages, sizes, shell-quoted commands). `-o json` bypasses all of this.
//
//   Table table({"ID", "STATE", "AGE"});
//   table.AddRow({job_id, "RUNNING", "5m"});
//   console.Out(table.Render());
//
// Column widths count UTF-8 characters, not bytes, so names with accents line up. Cells are
// rendered as given, except that control characters (a newline in a job name) are shown as '?'
// so that one cell can never break the table's lines.
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sovai::cli::client {

class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  // A row with fewer cells than headers is padded with empty cells; extra cells are a bug.
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }
  // The header line and one line per row; columns are separated by two spaces and the last
  // column is not padded. No trailing spaces.
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// "Key:    value" lines with the values aligned; a value with newlines continues on indented lines.
std::string RenderKeyValues(const std::vector<std::pair<std::string, std::string>>& pairs);

// Number of UTF-8 characters (code points) in `s`; invalid bytes count one each.
size_t DisplayWidth(std::string_view s);
// `s` with control characters replaced by '?'.
std::string SanitizeCell(std::string_view s);

// "45s", "12m", "3h", "5d" for how long ago `then` was (micros); "-" for 0 (unknown).
std::string FormatAge(int64_t now_unix_micros, int64_t then_unix_micros);
// "2026-11-29 14:03:05" (UTC), or "-" for 0.
std::string FormatTime(int64_t unix_micros);
// argv as a POSIX shell would need it typed: words with special characters in single quotes.
std::string ShellJoin(const std::vector<std::string>& argv);

}  // namespace sovai::cli::client
