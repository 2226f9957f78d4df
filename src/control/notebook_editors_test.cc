#include "control/notebook_editors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/env.h"

namespace sovai::control {
namespace {

NotebookSpec Spec(std::string editor) {
  NotebookSpec spec;
  spec.editor = std::move(editor);
  spec.flavor = "ai1-1-cpu";
  spec.volumes = {"data@EU-WEST-LOCAL/w:/workspace/w:rw"};
  spec.env = {{"HF_HUB_OFFLINE", "1"}};
  return spec;
}

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The value after `flag` in `command`, "" when the flag is absent.
std::string FlagValue(const std::vector<std::string>& command, const std::string& flag) {
  auto it = std::find(command.begin(), command.end(), flag);
  return it == command.end() || std::next(it) == command.end() ? "" : *std::next(it);
}

TEST(NotebookEditorsTest, VscodeRunsCodeServerOnThePortWithThePlatformsTokenInItsEnvironment) {
  JobSpec job = EditorJobSpec("nb_1", Spec("vscode"), 41234, "s3cret", {"jupyter-notebook"},
                              {"/opt/cs/bin/code-server"}, false);
  ASSERT_FALSE(job.command.empty());
  EXPECT_EQ(job.command.front(), "/opt/cs/bin/code-server");
  EXPECT_EQ(FlagValue(job.command, "--bind-addr"), "127.0.0.1:41234");
  EXPECT_EQ(FlagValue(job.command, "--auth"), "password");
  EXPECT_EQ(FlagValue(job.command, "--abs-proxy-base-path"), "/notebooks/nb_1");
  EXPECT_TRUE(Has(job.command, "--disable-telemetry"));
  EXPECT_TRUE(Has(job.command, "--disable-update-check"));
  // The workspace is the volumes' root, the last argument.
  EXPECT_EQ(job.command.back(), "/workspace");
  // The token is never on the command line.
  for (const std::string& arg : job.command) EXPECT_EQ(arg.find("s3cret"), std::string::npos);
  EXPECT_EQ(job.env.at("HASHED_PASSWORD"), "s3cret");
  EXPECT_EQ(job.env.count("JUPYTER_TOKEN"), 0u);
  EXPECT_EQ(job.env.at("PORT"), "41234");
  EXPECT_EQ(job.env.at("SHELL"), "/bin/bash");
  EXPECT_EQ(job.env.at("HF_HUB_OFFLINE"), "1");
  // The rest is the notebook's job, as for Jupyter.
  EXPECT_EQ(job.labels.at(std::string(kNotebookLabel)), "nb_1");
  EXPECT_EQ(job.volumes, Spec("vscode").volumes);
  EXPECT_EQ(job.network, NetworkMode::kHost);
  EXPECT_EQ(job.timeout_s, kNotebookJobTimeoutS);

  JobSpec remote = EditorJobSpec("nb_1", Spec("vscode"), 41234, "s3cret", {"jupyter-notebook"},
                                 {"code-server"}, true);
  EXPECT_EQ(FlagValue(remote.command, "--bind-addr"), "0.0.0.0:41234");
  NotebookSpec scratch = Spec("vscode");
  scratch.volumes.clear();
  EXPECT_EQ(EditorJobSpec("nb_1", scratch, 1, "t", {}, {"code-server"}, false).command.back(),
            "/tmp");
}

TEST(NotebookEditorsTest, JupyterKeepsItsJob) {
  JobSpec job = EditorJobSpec("nb_1", Spec("jupyter"), 41234, "s3cret", {"jupyter-notebook"},
                              {"/opt/cs/bin/code-server"}, false);
  EXPECT_EQ(job.command, NotebookJobSpec("nb_1", Spec("jupyter"), 41234, "s3cret").command);
  EXPECT_EQ(job.env.at("JUPYTER_TOKEN"), "s3cret");
  EXPECT_EQ(job.env.count("HASHED_PASSWORD"), 0u);
}

TEST(NotebookEditorsTest, ProbesAndTargets) {
  EXPECT_EQ(EditorReadyPath("jupyter", "nb_1"), "/notebooks/nb_1/api/status?no_track_activity=1");
  EXPECT_EQ(EditorReadyPath("vscode", "nb_1"), "/healthz");
  EXPECT_EQ(EditorUpstreamTarget("jupyter", "nb_1", "/notebooks/nb_1/api/x?y=1"),
            "/notebooks/nb_1/api/x?y=1");
  EXPECT_EQ(EditorUpstreamTarget("vscode", "nb_1", "/notebooks/nb_1/stable-x/static/a.js?v=2"),
            "/stable-x/static/a.js?v=2");
  EXPECT_EQ(EditorUpstreamTarget("vscode", "nb_1", "/notebooks/nb_1/"), "/");
  EXPECT_EQ(EditorUpstreamTarget("vscode", "nb_1", "/notebooks/nb_1"), "/");
  EXPECT_EQ(EditorUpstreamTarget("vscode", "nb_1", "/notebooks/nb_1?folder=/w"), "/?folder=/w");
  EXPECT_EQ(EditorDisplayName("vscode"), "VS Code");
  EXPECT_EQ(EditorDisplayName("jupyter"), "Jupyter");
}

TEST(NotebookEditorsTest, CodeServerHealthIsItsLastHeartbeat) {
  auto alive = ParseCodeServerHealth(R"({"status":"alive","lastHeartbeat":1700000000123})");
  ASSERT_TRUE(alive.ok()) << alive.status();
  EXPECT_EQ(*alive, int64_t{1700000000123} * 1000);
  auto never = ParseCodeServerHealth(R"({"status":"expired","lastHeartbeat":0})");
  ASSERT_TRUE(never.ok()) << never.status();
  EXPECT_EQ(*never, 0);
}

TEST(NotebookEditorsTest, MalformedHealthAnswersAreErrors) {
  for (const char* body : {"", "null", "[]", "{", R"({"status":"alive"})",
                           R"({"lastHeartbeat":"soon"})", R"({"lastHeartbeat":-1})",
                           R"({"lastHeartbeat":1.5})", R"({"lastHeartbeat":9223372036854775807})",
                           R"({"lastHeartbeat":99999999999999999999999})"}) {
    auto parsed = ParseCodeServerHealth(body);
    EXPECT_FALSE(parsed.ok()) << body;
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), base::StatusCode::kInvalidArgument) << body;
    }
  }
  std::string big =
      R"({"lastHeartbeat":1,"pad":")" + std::string(kMaxEditorHealthBodyBytes, 'x') + "\"}";
  EXPECT_FALSE(ParseCodeServerHealth(big).ok());
}

TEST(NotebookEditorsTest, AMissingCodeServerSaysHowToInstallIt) {
  base::Env& env = base::Env::Default();
  std::string dir = ::testing::TempDir() + "editors_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string program = dir + "/code-server";
  base::Status missing = CheckEditorInstalled(env, "vscode", {program});
  EXPECT_EQ(missing.code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find("tools/install_code_server.sh"), std::string::npos) << missing;
  EXPECT_NE(missing.message().find("--code-server"), std::string::npos) << missing;
  ASSERT_TRUE(env.WriteFileAtomically(program, "#!/bin/sh\n").ok());
  ASSERT_EQ(::chmod(program.c_str(), 0644), 0);
  EXPECT_FALSE(CheckEditorInstalled(env, "vscode", {program}).ok()) << "not executable";
  ASSERT_EQ(::chmod(program.c_str(), 0755), 0);
  EXPECT_TRUE(CheckEditorInstalled(env, "vscode", {program}).ok());
  // A bare name is looked up in the sandbox: taken on trust.
  EXPECT_TRUE(CheckEditorInstalled(env, "vscode", {"python3", "-c", "..."}).ok());
  EXPECT_FALSE(CheckEditorInstalled(env, "vscode", {}).ok());
  ASSERT_TRUE(env.DeleteDirRecursive(dir).ok());
}

}  // namespace
}  // namespace sovai::control

namespace sovai::control {
namespace {

TEST(NotebookEditorsTest, InAnImageTheEditorIsTheImagesOwn) {
  const std::vector<std::string> host = {"/opt/jupyter/bin/jupyter-notebook"};
  NotebookSpec jupyter = Spec("jupyter");
  EXPECT_EQ(EditorCommandFor(jupyter, host), host);
  EXPECT_EQ(EditorInImageHint(jupyter), "");
  jupyter.image = "team/torch-notebook:2.4";
  EXPECT_EQ(EditorCommandFor(jupyter, host), std::vector<std::string>{"jupyter-notebook"});
  EXPECT_NE(EditorInImageHint(jupyter).find("'team/torch-notebook:2.4' must have jupyter-notebook"),
            std::string::npos)
      << EditorInImageHint(jupyter);
  NotebookSpec vscode = Spec("vscode");
  vscode.image = "oci:data@EU-WEST-LOCAL/code.tar";
  EXPECT_EQ(EditorCommandFor(vscode, {std::string(kCodeServerProgram)}),
            std::vector<std::string>{"code-server"});
  JobSpec job = EditorJobSpec("nb_1", vscode, 41234, "t", {}, EditorCommandFor(vscode, {}), false);
  EXPECT_EQ(job.image, vscode.image);
  EXPECT_EQ(job.command.front(), "code-server");
}

}  // namespace
}  // namespace sovai::control
