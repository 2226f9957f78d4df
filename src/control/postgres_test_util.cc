#include "control/postgres_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>

#include "base/env.h"
#include "base/postgres.h"
#include "base/strings.h"

namespace sovai::control::testing {

namespace {

constexpr char kSuperuser[] = "sovai";
constexpr char kDebianBinRoot[] = "/usr/lib/postgresql";

bool Executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// The newest /usr/lib/postgresql/<version>/bin with initdb and pg_ctl (or $SOVAI_POSTGRES_BIN).
base::Result<std::string> FindBinDir() {
  if (const char* bin = std::getenv("SOVAI_POSTGRES_BIN"); bin != nullptr && *bin != '\0') {
    if (Executable(std::string(bin) + "/initdb") && Executable(std::string(bin) + "/pg_ctl")) {
      return std::string(bin);
    }
    return base::FailedPreconditionError(
        std::string("the PostgreSQL tests need initdb and pg_ctl in SOVAI_POSTGRES_BIN=") + bin);
  }
  std::string best;
  int best_version = -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kDebianBinRoot, ec)) {
    const std::string bin = entry.path().string() + "/bin";
    const int version = std::atoi(entry.path().filename().c_str());
    if (version > best_version && Executable(bin + "/initdb") && Executable(bin + "/pg_ctl")) {
      best = bin;
      best_version = version;
    }
  }
  if (best.empty()) {
    return base::FailedPreconditionError(
        "the PostgreSQL tests need a PostgreSQL server: no initdb and pg_ctl in " +
        std::string(kDebianBinRoot) +
        "/<version>/bin (install the Debian package postgresql, tools/bootstrap.sh, or set "
        "SOVAI_POSTGRES_BIN)");
  }
  return best;
}

base::Result<int> FreeTcpPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return base::UnavailableError("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return base::UnavailableError("no free TCP port on 127.0.0.1");
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

std::string Tail(const std::string& path) {
  auto text = base::Env::Default().ReadFile(path);
  if (!text.ok()) return "";
  return text->size() > 2000 ? text->substr(text->size() - 2000) : *text;
}

class Server {
 public:
  ~Server() {
    admin_.reset();
    if (!dir_.empty()) {
      std::system((as_ + bin_ + "/pg_ctl -D " + dir_ +
                   "/data -m immediate -w stop >/dev/null 2>&1; " + "rm -rf " + dir_)
                      .c_str());
    }
  }

  base::Status Start() {
    SOVAI_ASSIGN_OR_RETURN(bin_, FindBinDir());
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (uid == 0) {
      const passwd* pw = getpwnam("postgres");
      if (pw == nullptr) {
        return base::FailedPreconditionError(
            "the PostgreSQL tests run as root, and initdb refuses root: there is no 'postgres' "
            "user to run the server as (install the Debian package postgresql)");
      }
      if (!Executable("/usr/sbin/runuser") && !Executable("/sbin/runuser")) {
        return base::FailedPreconditionError(
            "the PostgreSQL tests run as root and need runuser (util-linux) to start the server "
            "as 'postgres'");
      }
      uid = pw->pw_uid;
      gid = pw->pw_gid;
      as_ = "runuser -u postgres -- ";
    }
    char tmpl[] = "/tmp/sovai-pg-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return base::InternalError("mkdtemp failed");
    dir_ = tmpl;
    if (chown(dir_.c_str(), uid, gid) != 0) return base::InternalError("chown " + dir_);

    // The watchdog: stops and removes the server once this process is gone, however it ended.
    std::system(("setsid sh -c 'while kill -0 " + std::to_string(getpid()) +
                 " 2>/dev/null; do sleep 0.5; done; " + as_ + bin_ + "/pg_ctl -D " + dir_ +
                 "/data -m immediate stop; rm -rf " + dir_ + "' </dev/null >/dev/null 2>&1 &")
                    .c_str());

    const std::string initdb = as_ + bin_ + "/initdb -D " + dir_ + "/data -A trust -U " +
                               kSuperuser + " -E UTF8 --locale=C --no-sync --no-instructions >" +
                               dir_ + "/initdb.log 2>&1";
    if (std::system(initdb.c_str()) != 0) {
      return base::InternalError("initdb failed: " + Tail(dir_ + "/initdb.log"));
    }
    // A free port may be taken between the probe and the start: try a few.
    for (int attempt = 0;; ++attempt) {
      SOVAI_ASSIGN_OR_RETURN(port_, FreeTcpPort());
      const std::string start = as_ + bin_ + "/pg_ctl -D " + dir_ + "/data -l " + dir_ +
                                "/server.log -w -t 60 -o \"" +
                                "-c listen_addresses=127.0.0.1 -c port=" + std::to_string(port_) +
                                " -c unix_socket_directories=" + dir_ +
                                " -c fsync=off -c full_page_writes=off -c synchronous_commit=off"
                                " -c max_connections=200\" start >" +
                                dir_ + "/pg_ctl.log 2>&1";
      if (std::system(start.c_str()) == 0) break;
      if (attempt == 3) {
        return base::InternalError("pg_ctl start failed: " + Tail(dir_ + "/pg_ctl.log") +
                                   Tail(dir_ + "/server.log"));
      }
    }
    SOVAI_ASSIGN_OR_RETURN(admin_, base::OpenPostgres(Url("", /*tcp=*/false)));
    return base::Status();
  }

  base::Result<std::string> NewSchemaUrl(bool tcp) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string schema = "s" + std::to_string(++schemas_);
    SOVAI_RETURN_IF_ERROR(admin_->Exec("CREATE SCHEMA " + schema));
    return Url(schema, tcp);
  }

 private:
  std::string Url(const std::string& schema, bool tcp) const {
    const std::string options = schema.empty() ? "" : "options=-csearch_path%3D" + schema;
    if (tcp) {
      return std::string("postgres://") + kSuperuser + "@127.0.0.1:" + std::to_string(port_) +
             "/postgres" + (options.empty() ? "" : "?" + options);
    }
    return std::string("postgresql://") + kSuperuser + "@/postgres?host=" + dir_ +
           "&port=" + std::to_string(port_) + (options.empty() ? "" : "&" + options);
  }

  std::string bin_;
  std::string as_;   // "runuser -u postgres -- " as root, else ""
  std::string dir_;  // data, socket and logs
  int port_ = 0;
  std::mutex mu_;                          // guards admin_ and schemas_
  std::unique_ptr<base::Database> admin_;  // creates the schemas
  int schemas_ = 0;
};

// The process's server, started at the first call; destroyed (stopped) at exit.
base::Result<Server*> SharedServer() {
  struct Holder {
    Holder() {
      server = std::make_unique<Server>();
      status = server->Start();
    }
    std::unique_ptr<Server> server;
    base::Status status;
  };
  static Holder holder;
  if (!holder.status.ok()) return holder.status;
  return holder.server.get();
}

}  // namespace

bool PostgresStateRequested() {
  const char* state = std::getenv("SOVAI_TEST_STATE");
  return state != nullptr && std::string_view(state) == "postgres";
}

base::Result<std::string> NewPostgresStateUrl(bool tcp) {
  SOVAI_ASSIGN_OR_RETURN(Server * server, SharedServer());
  return server->NewSchemaUrl(tcp);
}

base::Result<std::string> TestStateLocation(const std::string& dir) {
  if (!PostgresStateRequested()) return base::JoinPath(dir, "control.db");
  return NewPostgresStateUrl();
}

}  // namespace sovai::control::testing
