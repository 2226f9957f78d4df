// Where CLI commands write: stdout for results (tables, JSON, logs), stderr for errors, notes and
// the progress bar. Commands never call printf directly, so tests capture both streams.
//
// Thread-safety: not thread-safe; commands run on one thread.
#pragma once

#include <string>
#include <string_view>

namespace sovai::cli::client {

class Console {
 public:
  virtual ~Console() = default;
  virtual void Out(std::string_view text) = 0;
  virtual void Err(std::string_view text) = 0;
  // Whether stderr is a terminal: progress bars are drawn only then.
  virtual bool ErrIsTerminal() const = 0;
  // The width of the terminal on stderr, in columns (80 when unknown).
  virtual int ErrColumns() const { return 80; }
  // The first line of stdin without its newline ("" at end of input), for `--token -`.
  virtual std::string ReadStdinLine() = 0;
};

// The process's stdout, stderr and stdin. Output is flushed after every write, so that
// interleaved stdout and stderr keep their order on a terminal and log lines appear live.
class StdConsole : public Console {
 public:
  void Out(std::string_view text) override;
  void Err(std::string_view text) override;
  bool ErrIsTerminal() const override;
  int ErrColumns() const override;
  std::string ReadStdinLine() override;
};

// Collects everything in strings, for tests.
class BufferConsole : public Console {
 public:
  void Out(std::string_view text) override { out_.append(text); }
  void Err(std::string_view text) override { err_.append(text); }
  bool ErrIsTerminal() const override { return terminal_; }
  std::string ReadStdinLine() override { return stdin_line_; }

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  void Clear() {
    out_.clear();
    err_.clear();
  }
  void set_terminal(bool terminal) { terminal_ = terminal; }
  void set_stdin_line(std::string line) { stdin_line_ = std::move(line); }

 private:
  std::string out_;
  std::string err_;
  std::string stdin_line_;
  bool terminal_ = false;
};

}  // namespace sovai::cli::client
