#include "cli/client/console.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

namespace sovai::cli::client {

void StdConsole::Out(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void StdConsole::Err(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

bool StdConsole::ErrIsTerminal() const { return isatty(STDERR_FILENO) == 1; }

int StdConsole::ErrColumns() const {
  winsize size{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

std::string StdConsole::ReadStdinLine() {
  std::string line;
  for (int c = std::fgetc(stdin); c != EOF && c != '\n'; c = std::fgetc(stdin)) {
    line.push_back(static_cast<char>(c));
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

}  // namespace sovai::cli::client
