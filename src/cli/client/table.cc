#include "cli/client/table.h"

#include <algorithm>

#include "base/check.h"
#include "base/strings.h"
#include "base/time.h"

namespace sovai::cli::client {
namespace {

constexpr char kColumnGap[] = "  ";

}  // namespace

size_t DisplayWidth(std::string_view s) {
  size_t width = 0;
  for (unsigned char c : s) {
    // Continuation bytes (10xxxxxx) belong to the character before them.
    if ((c & 0xC0) != 0x80) ++width;
  }
  return width;
}

std::string SanitizeCell(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = '?';
  }
  return out;
}

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::AddRow(std::vector<std::string> cells) {
  SOVAI_CHECK(cells.size() <= headers_.size())
      << "row of " << cells.size() << " cells for " << headers_.size() << " columns";
  cells.resize(headers_.size());
  for (std::string& cell : cells) cell = SanitizeCell(cell);
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> widths(headers_.size(), 0);
  for (size_t i = 0; i < headers_.size(); ++i) widths[i] = DisplayWidth(headers_[i]);
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(row[i]));
  }
  auto render_line = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i > 0) line += kColumnGap;
      line += cells[i];
      if (i + 1 < cells.size()) line.append(widths[i] - DisplayWidth(cells[i]), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line + "\n";
  };
  std::string out = render_line(headers_);
  for (const auto& row : rows_) out += render_line(row);
  return out;
}

std::string RenderKeyValues(const std::vector<std::pair<std::string, std::string>>& pairs) {
  size_t width = 0;
  for (const auto& [key, value] : pairs) width = std::max(width, DisplayWidth(key) + 1);
  std::string out;
  for (const auto& [key, value] : pairs) {
    std::string head = key + ":";
    head.append(width - DisplayWidth(head) + 2, ' ');
    const std::string indent(width + 2, ' ');
    size_t start = 0;
    bool first = true;
    for (;;) {
      size_t end = value.find('\n', start);
      std::string_view line = std::string_view(value).substr(
          start, end == std::string::npos ? std::string::npos : end - start);
      std::string text = (first ? head : indent) + SanitizeCell(line);
      while (!text.empty() && text.back() == ' ') text.pop_back();
      out += text + "\n";
      first = false;
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  return out;
}

std::string FormatAge(int64_t now_unix_micros, int64_t then_unix_micros) {
  if (then_unix_micros <= 0) return "-";
  int64_t s = std::max<int64_t>(0, (now_unix_micros - then_unix_micros) / base::kMicrosPerSecond);
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m";
  if (s < 48 * 3600) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

std::string FormatTime(int64_t unix_micros) {
  if (unix_micros <= 0) return "-";
  std::string text = base::FormatRfc3339(unix_micros, 0);  // 2026-11-29T14:03:05Z
  text[10] = ' ';
  text.pop_back();
  return text;
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& arg : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !arg.empty();
    for (char c : arg) {
      const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') ||
                        std::string_view("-_./=:,+@%").find(c) != std::string_view::npos;
      plain = plain && safe;
    }
    if (plain) {
      out += arg;
      continue;
    }
    out += base::ShellQuote(arg);
  }
  return out;
}

}  // namespace sovai::cli::client
