// The Sovai side of bench/http/run.sh: src/net serving the same small response nginx serves,
// from an inline handler (the path every cheap endpoint such as /health takes).
#include <signal.h>

#include <cstdio>

#include "base/flags.h"
#include "net/http.h"

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0";
  int64_t threads = 1;
  sovai::base::FlagSet flags("http_bench_server", "Serves 'hello, sovai' on every GET.");
  flags.String("listen", &listen, "HOST:PORT");
  flags.Int("threads", &threads, "I/O threads");
  if (auto s = flags.Parse({argv + 1, argv + argc}); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  sovai::net::Router router;
  router.Get("/",
             [](sovai::net::Request&) { return sovai::net::Response::Text(200, "hello, sovai\n"); },
             {.inline_handler = true});
  sovai::net::Server server(std::move(router));
  sovai::net::ServerOptions options;
  options.listen = listen;
  options.io_threads = static_cast<int>(threads);
  if (auto s = server.Start(options); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("listening on %s\n", server.address().c_str());
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&stop, &signal_number);
  server.Shutdown(std::chrono::milliseconds(1000));
  return 0;
}
